"""The readers at the edges of what a file can hold: unsigned samples of 32 and 64 bits, a WAV
of no samples, a band too narrow for a float ratio, and samples whose squares pass float32."""

from __future__ import annotations

import json

import numpy as np

from rfclassify.cli import main
from rfclassify.dsp.channelize import MIN_SAMPLES
from rfclassify.engine.dc_pass import offset_db, offsets_to_remove
from rfclassify.engine.files import iter_file_bursts
from rfclassify.engine.sigmf import read_sigmf


def _classify(model_dir, *args: str) -> int:
    return main(["classify", *args, "--json", "--model-dir", str(model_dir), "--device", "cpu"])


def _records(capsys) -> list[dict]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def _write_sigmf(base, data: np.ndarray, datatype: str, annotations=None, frequency=None) -> None:
    data.tofile(base.with_name(base.name + ".sigmf-data"))
    capture = {"core:sample_start": 0} if frequency is None else {"core:sample_start": 0, "core:frequency": frequency}
    meta = {"global": {"core:datatype": datatype, "core:sample_rate": 1e6, "core:version": "1.2.0"},
            "captures": [capture], "annotations": annotations or []}
    base.with_name(base.name + ".sigmf-meta").write_text(json.dumps(meta))


def _pairs(n: int, amplitude: int, seed: int = 0) -> np.ndarray:
    """(n, 2) int64 I/Q of a few hundred counts: what a quiet burst in a wide integer type holds."""
    return np.random.default_rng(seed).integers(-amplitude, amplitude, size=(n, 2), endpoint=True)


def test_unsigned_samples_read_exactly_as_the_signed_samples_they_hold(tmp_path):
    # cast to float32 before the midpoint was taken off, cu32 read in steps of 256 and cu64 in
    # steps of 2**40: a burst of a few hundred counts read as zeros and a few steps
    pairs = _pairs(3000, 500)
    mid32, mid64 = np.int64(2 ** 31), np.uint64(2 ** 63)
    stored = {"ci32_le": pairs.astype("<i4"), "cu32_le": (pairs + mid32).astype("<u4"),
              "ci64_be": pairs.astype(">i8"), "cu64_be": (pairs.astype(np.uint64) + mid64).astype(">u8"),
              "cu16_le": (pairs + 2 ** 15).astype("<u2"), "ru32_le": (pairs[:, 0] + mid32).astype("<u4")}
    for datatype, data in stored.items():
        _write_sigmf(tmp_path / datatype, data, datatype)
    want = (pairs[:, 0] + 1j * pairs[:, 1]).astype(np.complex64)
    for datatype in stored:
        (burst,) = read_sigmf(tmp_path / datatype)
        np.testing.assert_array_equal(burst.iq, want if datatype[0] == "c" else _baseband(want.real), err_msg=datatype)
    # the ends of the range: 0 is -2**63, the largest 2**63 - 1 (float32's 2**63), the midpoint 0
    ends = np.array([[0, 2 ** 64 - 1], [2 ** 63, 2 ** 63 - 1]], dtype=np.uint64)
    _write_sigmf(tmp_path / "ends", ends.astype("<u8"), "cu64_le")
    (burst,) = read_sigmf(tmp_path / "ends")
    np.testing.assert_array_equal(burst.iq, np.array([-(2.0 ** 63) + 2.0 ** 63 * 1j, -1j], dtype=np.complex64))


def _baseband(x: np.ndarray) -> np.ndarray:
    """A whole real recording as the SigMF reader makes it complex baseband (sigmf.real_baseband)."""
    from rfclassify.dsp.channelize import real_to_baseband

    return real_to_baseband(x - np.float32(x.mean(dtype=np.float64)))


def test_an_unsigned_npy_array_reads_as_the_signed_one(tmp_path):
    pairs = _pairs(2000, 300, seed=1)
    np.save(tmp_path / "signed.npy", pairs.astype(np.int32))
    np.save(tmp_path / "unsigned.npy", (pairs + 2 ** 31).astype(np.uint32))
    (signed,), (unsigned,) = (list(iter_file_bursts(tmp_path / f"{n}.npy")) for n in ("signed", "unsigned"))
    assert signed[0].iq.size == 2000
    np.testing.assert_array_equal(unsigned[0].iq, signed[0].iq)


def test_a_wav_of_no_samples_is_annotated_with_no_bursts(tiny_model_dir, tmp_path, capsys):
    from scipy.io import wavfile

    path = tmp_path / "empty.wav"
    wavfile.write(path, 1_000_000, np.zeros((0, 2), np.int16))
    trailer = b"LIST" + (12).to_bytes(4, "little") + b"INFOISFT\0\0\0\0"   # a chunk after the samples
    raw = path.read_bytes() + trailer
    path.write_bytes(raw[:4] + (len(raw) - 8).to_bytes(4, "little") + raw[8:])
    assert _classify(tiny_model_dir, str(path)) == 0   # as without --annotate: nothing to classify
    assert _records(capsys) == []
    assert _classify(tiny_model_dir, str(path), "--annotate") == 0
    assert _records(capsys) == []
    meta = json.loads((tmp_path / "empty.rfclassify.sigmf-meta").read_text())
    assert meta["global"]["core:datatype"] == "ci16_le" and meta["global"]["core:dataset"] == "empty.wav"
    assert meta["captures"][0]["core:header_bytes"] == 44   # RIFF, fmt and data chunk headers
    assert meta["global"]["core:trailing_bytes"] == len(trailer)
    assert meta["annotations"] == []


def test_a_band_too_narrow_for_a_float_ratio_is_decimated_only_to_min_samples(tiny_model_dir, tmp_path, capsys):
    """5e-324 Hz wide: rate / (4 x band) is inf, which math.floor raised OverflowError on,
    losing the rest of the run."""
    rng = np.random.default_rng(2)
    np.save(tmp_path / "first.npy", rng.standard_normal((5000, 2)).astype(np.float32))
    band = {"core:freq_lower_edge": 0.0, "core:freq_upper_edge": 5e-324}
    _write_sigmf(tmp_path / "rec", rng.standard_normal((10_000, 2)).astype(np.float32), "cf32_le",
                 [{"core:sample_start": 0, "core:sample_count": 5000, **band}], frequency=0.0)
    assert _classify(tiny_model_dir, str(tmp_path / "first.npy"), str(tmp_path / "rec")) == 0
    first, narrow = _records(capsys)
    assert first["ok"] and first["n_samples"] == 5000
    factor = 5000 // MIN_SAMPLES   # as narrow as a band can be: decimated down to MIN_SAMPLES
    assert narrow["ok"] and narrow["n_samples"] == 5000 // factor and narrow["sample_rate"] == 1e6 / factor


def test_a_complex128_npy_past_float32_is_a_non_finite_reject_not_a_warning(tiny_model_dir, tmp_path, capsys):
    rng = np.random.default_rng(3)
    z = rng.standard_normal(2000) + 1j * rng.standard_normal(2000)
    np.save(tmp_path / "loud.npy", z * 1e200)
    np.save(tmp_path / "fine.npy", z)
    assert _classify(tiny_model_dir, str(tmp_path / "loud.npy"), str(tmp_path / "fine.npy")) == 0
    loud, fine = _records(capsys)
    assert not loud["ok"] and loud["reason"] == "non_finite"
    assert fine["ok"]


def test_the_dc_pass_measures_an_offset_against_a_loud_burst_as_against_a_quiet_one():
    """Its power was squared in float32: inf past about 1e19, so the offset of a burst at 1e20
    was never taken out, and a RuntimeWarning reached the terminal."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal(2000) + 1j * rng.standard_normal(2000)
    offset = 0.1 * np.exp(1j)   # -23 dB of the burst's power
    quiet, loud = x.astype(np.complex64), (x * 1e20).astype(np.complex64)
    assert abs(offset_db(offset * 1e20, loud) - offset_db(offset, quiet)) < 1e-3
    assert -24 < offset_db(offset, quiet) < -22
    line = 0.3   # a leak line at 0 Hz, found in both
    bursts = [(quiet + line).astype(np.complex64), (loud + line * 1e20).astype(np.complex64)]
    probs = [np.full(28, 1 / 28)] * 2
    found = offsets_to_remove(probs, [20.0, 20.0], bursts)
    assert sorted(found) == [0, 1] and abs(found[1] / 1e20 - found[0]) < 1e-3 * abs(found[0])
