"""The GNU Radio evaluation source: a tiny file made by real GNU Radio 3.10 flowgraphs, read back."""

from __future__ import annotations

import ast

import numpy as np
import pytest

from rfclassify._exceptions import InputError, MissingDependencyError
from rfclassify.cli import main
from rfclassify.data import gnuradio_source as grs
from rfclassify.data.reader import DatasetReader

_OK, _WHY = grs.gnuradio_available()
needs_gr = pytest.mark.skipif(not _OK, reason=f"GNU Radio not importable by {grs.SYSTEM_PYTHON}: {_WHY}")


def test_label_list_matches_the_flowgraph_script():
    tree = ast.parse(grs.FLOWGRAPH.read_text())
    consts = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
              for t in node.targets if isinstance(t, ast.Name)}
    script = (ast.literal_eval(consts["LINEAR"]) + ("OQPSK",) + ast.literal_eval(consts["APSK"])
              + ast.literal_eval(consts["CPM"]) + ast.literal_eval(consts["ANALOG"]) + ("NOISE",))
    assert sorted(script) == sorted(grs.GNURADIO_LABELS)
    assert "SUPPORTED = LINEAR + (\"OQPSK\",) + APSK + CPM + ANALOG + (\"NOISE\",)" in grs.FLOWGRAPH.read_text()


def test_spec_validates_its_arguments():
    with pytest.raises(InputError, match="unknown label"):
        grs.GnuRadioSpec(classes=("QPSK", "64QAMX"))
    with pytest.raises(InputError, match="--length"):
        grs.GnuRadioSpec(length_samples=32)
    with pytest.raises(InputError, match="SNR grid"):
        grs.GnuRadioSpec(snr_grid_db=())


def test_missing_gnu_radio_is_a_clear_error(tmp_path, capsys):
    code = main(["dataset", "gnuradio", "--out", str(tmp_path / "g.h5"), "--python", "/nonexistent/python3"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "GNU Radio 3.10 is needed" in err
    with pytest.raises(MissingDependencyError):
        grs.run_flowgraph(grs.GnuRadioSpec(), tmp_path, python="/nonexistent/python3")


@pytest.mark.gnuradio
@needs_gr
def test_tiny_gnuradio_file_round_trips(tmp_path, capsys):
    out = tmp_path / "gr.h5"
    code = main(["dataset", "gnuradio", "--out", str(out), "--classes", "QPSK,GMSK,FM,NOISE",
                 "--snr", "0,30", "--per-cell", "2", "--length", "256", "--seed", "3"])
    capsys.readouterr()
    assert code == 0, capsys.readouterr().err
    with DatasetReader(out) as ds:
        assert ds.attrs.source == "gnuradio" and "GNU Radio 3.10" in ds.attrs.generator
        assert len(ds) == 4 * 2 * 2 and set(ds.lengths.tolist()) == {256}
        for name in ("QPSK", "GMSK", "FM", "NOISE"):
            for snr in (0.0, 30.0):
                assert ((ds.label_names == name) & (ds.snr_db == snr)).sum() == 2
        bursts = np.stack(ds.read(range(len(ds))))
        assert np.isfinite(bursts).all() and (np.abs(bursts) > 0).any(axis=1).all()
        p = ds.params
        # the SNR is signal power over noise power, both measured/set in the flowgraph
        sig = ds.label_names != "NOISE"
        np.testing.assert_allclose(p["signal_power_db"][sig] - p["noise_power_db"][sig], ds.snr_db[sig], atol=1e-3)
        # total power = signal + noise, as the definition implies (30 dB: ~ signal power)
        power_db = 10 * np.log10(np.mean(np.abs(bursts) ** 2, axis=1))
        hi = sig & (ds.snr_db == 30.0)
        np.testing.assert_allclose(power_db[hi], p["signal_power_db"][hi], atol=0.1)
        assert np.all(p["samples_per_symbol"][ds.label_names == "QPSK"] >= 2)
        assert np.all(np.isnan(p["apsk_ring_ratio_2"]))
    # same seed, same bursts
    again = tmp_path / "gr2.h5"
    assert main(["dataset", "gnuradio", "--out", str(again), "--classes", "QPSK,GMSK,FM,NOISE",
                 "--snr", "0,30", "--per-cell", "2", "--length", "256", "--seed", "3"]) == 0
    with DatasetReader(out) as a, DatasetReader(again) as b:
        np.testing.assert_array_equal(np.stack(a.read(range(len(a)))), np.stack(b.read(range(len(b)))))


@pytest.mark.gnuradio
@needs_gr
def test_every_label_comes_out_of_gnu_radio(tmp_path):
    """One short burst of each of the 28 labels; APSK ring ratios are GNU Radio's DVB-S2 ones."""
    path = grs.generate_gnuradio_dataset(
        grs.GnuRadioSpec(snr_grid_db=(30.0,), per_cell=1, length_samples=128, seed=1), tmp_path / "all.h5").path
    with DatasetReader(path) as ds:
        assert sorted(ds.label_names) == sorted(grs.GNURADIO_LABELS)
        ratio = dict(zip(ds.label_names, ds.params["apsk_ring_ratio_2"]))
        assert ratio["64APSK"] == pytest.approx(2.4, abs=0.01)      # DVB-S2X 4+12+20+28, rate 132/180
        assert ratio["128APSK"] == pytest.approx(1.715, abs=0.01)
        assert 2.5 < ratio["16APSK"] < 3.2 and np.isnan(ratio["QPSK"])
        assert all(np.isfinite(b).all() for b in ds.read(range(len(ds))))
