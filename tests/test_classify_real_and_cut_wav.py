"""`rfclassify classify` on recordings that were read wrong before the seventy-first session:
real-valued ones (rf32_le, ri16_le: classified as I with Q = 0, nearly all BPSK), WAV files cut
short or never finalized (read whole into memory, or numpy's reshape error), and `dataset
import` of files that label nothing (read and cut whole, then "no burst to import")."""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.io import wavfile
from scipy.signal import resample_poly

from rfclassify.cli import main
from rfclassify.dsp.channel import ChannelConfig
from rfclassify.dsp.synth import synthesize

sigmf = pytest.importorskip("sigmf", reason="the sigmf library is in the test extra: pip install -e '.[test]'")
from sigmf import SigMFFile, sigmffile  # noqa: E402

SHIPPED = Path(__file__).resolve().parents[1] / "models"
CPU = ["--model-dir", str(SHIPPED), "--device", "cpu"]
# no impairment but timing and phase: the bursts the shipped model is sure of at 25 dB
CLEAN = ChannelConfig(**{f.name: 0.0 for f in dataclasses.fields(ChannelConfig)
                         if f.name.startswith("p_") and f.name not in ("p_timing", "p_phase")})
LABELS = ["QPSK", "16QAM", "8PSK", "GMSK", "FM", "CPFSK"]   # no BPSK: what Q = 0 made of them
N = 2048      # complex samples a burst
GAP = 3000    # real samples of quiet before each burst


def _real_recording() -> tuple[np.ndarray, list[tuple[int, int, str]], np.ndarray]:
    """(real samples at a rate twice the bursts', their (start, count, label), the bursts as
    complex baseband): each burst upsampled 2x and put at a real IF of a quarter of the rate,
    what a receiver sampling a real IF records; made complex baseband again at half the rate, it
    is the burst at its own samples per symbol."""
    bursts = synthesize(LABELS, N, np.random.default_rng(0), np.full(len(LABELS), 25.0), CLEAN).iq
    rng = np.random.default_rng(1)
    pieces, spans, pos = [], [], 0
    for label, x in zip(LABELS, bursts, strict=True):
        up = resample_poly(x, 2, 1)
        real = np.real(up * np.exp(2j * np.pi * 0.25 * np.arange(up.size)))
        pieces += [0.003 * rng.standard_normal(GAP), real + 0.003 * rng.standard_normal(up.size)]
        spans.append((pos + GAP, up.size, label))
        pos += GAP + up.size
    pieces.append(0.003 * rng.standard_normal(GAP))
    return np.concatenate(pieces), spans, bursts


def _records(capsys, args: list[str]) -> list[dict]:
    assert main(["classify", "--json", *CPU, *args]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def _records_of_bursts(bursts: np.ndarray) -> list[str]:
    from rfclassify import Classifier

    with Classifier.load(SHIPPED, device="cpu") as clf:
        return [r.label for r in clf.classify(list(bursts))]


def test_a_real_recording_classifies_as_its_complex_baseband(tmp_path, capsys):
    x, spans, bursts = _real_recording()
    base = _records_of_bursts(bursts)
    assert base == LABELS   # the bursts themselves, complex: the model is sure of each
    x.astype("<f4").tofile(tmp_path / "if.sigmf-data")
    rec = SigMFFile(data_file=str(tmp_path / "if.sigmf-data"),
                    global_info={sigmf.DATATYPE_KEY: "rf32_le", sigmf.SAMPLE_RATE_KEY: 4e6, sigmf.VERSION_KEY: "1.2.0"})
    rec.add_capture(0, metadata={sigmf.FREQUENCY_KEY: 100e6})
    for start, count, label in spans:
        rec.add_annotation(start, count, metadata={sigmf.LABEL_KEY: label})
    rec.tofile(str(tmp_path / "if"))

    records = _records(capsys, ["--annotate", str(tmp_path / "if")])
    labels = [r["label"] for r in records]
    assert sum(a == b for a, b in zip(labels, LABELS, strict=True)) >= 5, labels   # was 0 of 6: BPSK
    for r, (start, count, _) in zip(records, spans, strict=True):
        assert r["start_sample"] == start and r["n_samples"] == count // 2
        assert r["sample_rate"] == 2e6 and r["band_hz"] == [100e6, 102e6]   # 0..rate/2 of the real samples
    written = sigmffile.fromfile(str(tmp_path / "if.rfclassify.sigmf-meta"))
    ours = [a for a in written.get_annotations() if a.get("core:generator", "").startswith("rfclassify")]
    assert [(a["core:sample_start"], a["core:sample_count"]) for a in ours] == [s[:2] for s in spans]

    # a raw ri16_le file of the same samples, its bursts found by energy
    (np.round(x * 8000)).astype("<i2").tofile(tmp_path / "if.raw")
    records = _records(capsys, ["--raw", "ri16_le", "--sample-rate", "4e6", str(tmp_path / "if.raw")])
    assert len(records) == len(LABELS) and all(r["sample_rate"] == 2e6 for r in records)
    for r, (start, count, _) in zip(records, spans, strict=True):
        assert abs(r["start_sample"] - start) < 200 and abs(2 * r["n_samples"] - count) < 400
    labels = [r["label"] for r in records]
    assert sum(a == b for a, b in zip(labels, LABELS, strict=True)) >= 5, labels


def test_the_positive_half_of_the_spectrum_is_kept_and_a_long_burst_is_made_in_pieces(tmp_path, monkeypatch):
    """A tone at rate/4 + f comes out at +f alone (its mirror at -f filtered out), the same
    whether the burst is converted at once or in pieces, edges and all."""
    from rfclassify.engine import sigmf as ours

    rate, f, n = 1e6, 60e3, 40_000
    t = np.arange(n)
    x = np.cos(2 * np.pi * (rate / 4 + f) / rate * t) + 0.5   # and an ADC's offset
    x.astype("<f4").tofile(tmp_path / "tone.sigmf-data")
    meta = {"global": {"core:datatype": "rf32_le", "core:sample_rate": rate, "core:version": "1.2.0"},
            "captures": [{"core:sample_start": 0}],
            "annotations": [{"core:sample_start": 1001, "core:sample_count": 30_001}]}
    (tmp_path / "tone.sigmf-meta").write_text(json.dumps(meta))
    (burst,) = ours.read_sigmf(tmp_path / "tone")
    assert burst.sample_rate_hz == rate / 2 and burst.span == 30_001 and burst.start_sample == 1001
    assert burst.iq.dtype == np.complex64 and burst.iq.size == 15_001
    spectrum = np.abs(np.fft.fft(burst.iq * np.hanning(burst.iq.size)))
    freqs = np.fft.fftfreq(burst.iq.size, 2 / rate)
    assert abs(freqs[np.argmax(spectrum)] - f) < 100
    assert spectrum[np.argmin(np.abs(freqs + f))] < 1e-3 * spectrum.max()   # no mirror image
    assert spectrum[np.argmin(np.abs(freqs + rate / 4))] < 1e-3 * spectrum.max()   # the offset taken out
    monkeypatch.setattr(ours, "BASEBAND_PIECE", 4096)
    (pieced,) = ours.read_sigmf(tmp_path / "tone")
    np.testing.assert_allclose(pieced.iq, burst.iq, atol=1e-5)   # 0.26 off at the joins without the margin


def _wav(path: Path, n: int = 120_000, seed: int = 0) -> np.ndarray:
    """A 16-bit WAV IQ recording of three QPSK-ish bursts in noise; its (n, 2) samples."""
    rng = np.random.default_rng(seed)
    iq = 30 * rng.standard_normal((n, 2))
    for start in (10_000, 50_000, 90_000):
        iq[start:start + 8000] += 3000 * rng.choice([-1, 1], (8000, 2))
    data = np.round(iq).astype("<i2")
    wavfile.write(path, 250_000, data)
    return data


def test_a_wav_cut_short_is_read_as_far_as_it_goes_with_one_warning(tmp_path, capsys, caplog):
    whole = _wav(tmp_path / "whole.wav")
    raw = (tmp_path / "whole.wav").read_bytes()
    head = raw.index(b"data") + 8
    (tmp_path / "cut.wav").write_bytes(raw[:head + 4 * 70_000 + 2])   # inside a sample pair
    caplog.set_level(logging.WARNING)
    records = _records(capsys, ["--annotate", str(tmp_path / "cut.wav")])
    assert [r["start_sample"] < 70_000 for r in records] == [True, True]   # the two bursts it holds
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "cut.wav" in warned[0] and "120,000 IQ samples" in warned[0]
    assert "holds 70,000 (50,000 missing, 0.2 s), and 2 bytes" in warned[0]
    assert "reshape" not in capsys.readouterr().err
    written = sigmffile.fromfile(str(tmp_path / "cut.rfclassify.sigmf-meta"), autoscale=False)
    assert written.get_global_field(sigmf.DATATYPE_KEY) == "ci16_le"   # was "24-bit WAV", refused
    assert written.get_global_field("core:trailing_bytes") == 2
    read = written.read_samples()
    np.testing.assert_array_equal(read, whole[:70_000, 0] + 1j * whole[:70_000, 1])


def test_a_wav_whose_header_was_never_finalized_is_read_to_its_end(tmp_path, capsys, caplog):
    _wav(tmp_path / "rec.wav")
    raw = bytearray((tmp_path / "rec.wav").read_bytes())
    at = raw.index(b"data") + 4
    raw[4:8] = raw[at:at + 4] = bytes(4)   # the sizes a recorder writes first, killed before its close
    (tmp_path / "rec.wav").write_bytes(bytes(raw))
    caplog.set_level(logging.WARNING)
    records = _records(capsys, [str(tmp_path / "rec.wav")])
    assert len(records) == 3   # scipy's UnboundLocalError before
    assert any("never finalized" in r.getMessage() and "120,000 IQ samples" in r.getMessage() for r in caplog.records)


def test_a_24_bit_wav_cut_short_is_widened_as_far_as_it_goes(tmp_path):
    from rfclassify.engine.file_bursts import Reading
    from rfclassify.engine.files import iter_file_bursts

    values = np.random.default_rng(3).integers(-2 ** 23, 2 ** 23, (5000, 2), dtype=np.int32)
    body = b"".join(int(v).to_bytes(3, "little", signed=True) for v in values.ravel())
    fmt = (1).to_bytes(2, "little") + (2).to_bytes(2, "little") + (48_000).to_bytes(4, "little") \
        + (48_000 * 6).to_bytes(4, "little") + (6).to_bytes(2, "little") + (24).to_bytes(2, "little")
    head = b"RIFF" + (36 + len(body)).to_bytes(4, "little") + b"WAVEfmt " + (16).to_bytes(4, "little") + fmt \
        + b"data" + len(body).to_bytes(4, "little")
    (tmp_path / "deep.wav").write_bytes(head + body[:6 * 3000 + 4])
    (chunk,) = list(iter_file_bursts(tmp_path / "deep.wav", reading=Reading(cut="whole")))
    scale = 2.0 ** 8   # scipy widens 24 bits to the top of an int32
    want = (values[:3000, 0] + 1j * values[:3000, 1]) * scale
    np.testing.assert_array_equal(chunk[0].iq, want.astype(np.complex64))


_PEAK = """
import resource, sys
from rfclassify.engine.files import iter_file_bursts
list(iter_file_bursts(sys.argv[1], limit=0))   # opens and checks it, as classify does first
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
"""


def test_a_wav_cut_short_is_mapped_not_read_into_memory(tmp_path):
    """A 256 MB WAV whose header claims 384 MB costs what a right header does: its samples are
    mapped (it was read whole into memory before)."""
    have, claim = 256 << 20, 384 << 20
    for name, size in (("right.wav", have), ("cut.wav", claim)):
        head = b"RIFF" + (36 + size).to_bytes(4, "little") + b"WAVEfmt " + (16).to_bytes(4, "little") \
            + (1).to_bytes(2, "little") + (2).to_bytes(2, "little") + (1_000_000).to_bytes(4, "little") \
            + (4_000_000).to_bytes(4, "little") + (4).to_bytes(2, "little") + (16).to_bytes(2, "little") \
            + b"data" + size.to_bytes(4, "little")
        with open(tmp_path / name, "wb") as fh:   # sparse: zeros that cost no disk
            fh.write(head)
            fh.truncate(len(head) + have)
    peak = {}
    for name in ("right.wav", "cut.wav"):
        out = subprocess.run([sys.executable, "-c", _PEAK, str(tmp_path / name)], capture_output=True, text=True,
                             check=True, cwd=Path(__file__).resolve().parents[1]).stdout
        peak[name] = int(out)
    assert peak["cut.wav"] < peak["right.wav"] + 64, peak   # MiB; a whole read is 256 more


def test_import_refuses_files_that_label_nothing_before_reading_any(tmp_path, capsys, monkeypatch):
    import rfclassify.engine.files as files

    _wav(tmp_path / "w.wav")
    np.zeros(4096, np.complex64).tofile(tmp_path / "rec.cf32")
    np.save(tmp_path / "a.npy", np.zeros((2, 1024), np.complex64))
    monkeypatch.setattr(files, "iter_file_bursts", lambda *a, **k: pytest.fail("a file was read"))
    out = tmp_path / "out.h5"
    for args, what in (([tmp_path / "w.wav"], "a WAV IQ recording"),
                       (["--raw", "cf32_le", tmp_path / "rec.cf32"], "a raw recording"),
                       ([tmp_path / "a.npy"], "a NumPy array")):
        assert main(["dataset", "import", *map(str, args), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"{what} labels no burst, and import takes only labelled ones" in err and err.count("\n") == 1
        assert ("classify --annotate" in err) == (what != "a NumPy array")   # how to label it, where it can be
        assert not out.exists()
