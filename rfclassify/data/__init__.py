"""Dataset generation and the HDF5 schema."""
