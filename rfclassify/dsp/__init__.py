"""Signal processing: modulators, channel impairments, burst normalization and windowing, SNR."""
