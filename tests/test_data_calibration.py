"""The shipped INT8 calibration set covers what calibration_data/README.md promises."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rfclassify.data.reader import DatasetReader
from rfclassify.dsp.channel import FAMILIES
from rfclassify.labels import LABELS

CAL = Path(__file__).resolve().parents[1] / "calibration_data" / "calibration.h5"
README = CAL.with_name("README.md")


def test_calibration_set_covers_labels_snrs_buckets_and_impairments():
    assert CAL.is_file(), "calibration_data/calibration.h5 is shipped with the package"
    assert CAL.stat().st_size <= 20 * 1024 * 1024
    with DatasetReader(CAL) as ds:
        assert set(ds.label_names) == set(LABELS)
        snrs = set(np.unique(ds.snr_db).tolist())
        assert snrs == {float(s) for s in range(-10, 31, 5)}
        # every label at every SNR
        for li in range(len(LABELS)):
            assert set(ds.snr_db[ds.label_index == li].tolist()) == snrs, LABELS[li]
        # every serving bucket 128..4096, for every label
        for li in range(len(LABELS)):
            assert set(ds.buckets()[ds.label_index == li].tolist()) == {128, 256, 512, 1024, 2048, 4096}
        # the full chain, the clean channel and every impairment family alone
        assert set(ds.channel_names) == {"full", "clean", *FAMILIES}
        assert np.all(np.bincount(ds.channel_index, minlength=len(ds.channel_names)) > 0)
        assert ds.attrs.source == "synth" and ds.attrs.seed is not None
        # the command that made it is the one the README documents
        assert f"--seed {ds.attrs.seed}" in README.read_text()


def test_calibration_set_matches_the_installed_synthesizer():
    from rfclassify.data.generate import made_by_current_synth

    with DatasetReader(CAL) as ds:
        assert made_by_current_synth(ds.attrs.generator), (
            "rfclassify/dsp changed since calibration_data/calibration.h5 was made: regenerate it "
            "with the command in calibration_data/README.md (and refresh COVERAGE.md)")
