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


def _unwanted_sideband_db(x: np.ndarray, cfo: float, upper: bool) -> float:
    """How far (dB) a burst's unwanted sideband lies below its wanted one: the carrier offset
    and the carrier itself (the mean) taken out, energy within 0.12 cycles/sample either side
    of 0 Hz, the 3 bins nearest it left out."""
    n = x.size
    x = x * np.exp(-2j * np.pi * cfo * np.arange(n))
    power = np.abs(np.fft.fft((x - x.mean()) * np.hanning(n))) ** 2
    f = np.fft.fftfreq(n)
    up, low = power[(f > 3 / n) & (f <= 0.12)].sum(), power[(f < -3 / n) & (f >= -0.12)].sum()
    return float(10 * np.log10(up / low if upper else low / up))


@pytest.mark.gnuradio
@needs_gr
def test_gnu_radio_ssb_suppresses_the_other_sideband(tmp_path):
    """GNU Radio's SSB bursts are single-sideband at every message bandwidth we draw: with the
    65-tap Hilbert transformer of earlier versions the other sideband was 2-19 dB down (3-6 dB
    for messages of 0.005-0.01 cycles/sample), and the model rightly called many of them DSB."""
    path = grs.generate_gnuradio_dataset(
        grs.GnuRadioSpec(classes=("AM-SSB-SC", "AM-SSB-WC"), snr_grid_db=(30.0,), per_cell=12, length_samples=1024,
                         seed=12), tmp_path / "ssb.h5").path
    with DatasetReader(path) as ds:
        p = ds.params
        down = np.array([_unwanted_sideband_db(x, p["cfo_cyc_per_sample"][i], bool(p["ssb_upper"][i]))
                         for i, x in enumerate(ds.read(range(len(ds))))])
        narrow = p["message_bandwidth_cyc_per_sample"] < 0.02
    # a few bursts carry a tone slower than the burst resolves (the tones start at 0.05 of the
    # bandwidth), which no filter can put on one side; the rest are well down
    assert np.median(down) > 25 and np.mean(down > 20) >= 0.75
    assert narrow.sum() >= 4 and np.median(down[narrow]) > 25


@pytest.mark.gnuradio
@needs_gr
def test_gnu_radio_pulse_shaped_bursts_carry_signal_from_their_first_sample(tmp_path):
    """The RRC shapers (generic_mod's, and ours built the same way for APSK) start up for about
    5.5 sps^2 samples; earlier versions kept only MARGIN_SAMPLES of it out, so bursts above about
    10 samples a symbol began with up to 900 samples of silence (-22 dB at 30 dB SNR)."""
    path = grs.generate_gnuradio_dataset(
        grs.GnuRadioSpec(classes=("8PSK", "OQPSK", "16APSK"), snr_grid_db=(30.0,), per_cell=10, length_samples=1024,
                         seed=5), tmp_path / "slow.h5").path
    with DatasetReader(path) as ds:
        p = ds.params
        steady = p["fading_type"] <= 0     # no time-varying fading: the power is the signal's own
        slow = steady & (p["samples_per_symbol"] > 10)
        eighths = np.stack([np.mean(np.abs(x.reshape(8, -1)) ** 2, axis=1) / np.mean(np.abs(x) ** 2)
                            for x in ds.read(range(len(ds)))])
    assert np.all(10 * np.log10(eighths[steady]) > -3)
    assert slow.sum() >= 3
