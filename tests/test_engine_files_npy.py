"""NumPy arrays (np.save's .npy) as `rfclassify classify` reads them: a recording or an array of
bursts, complex or real I/Q in the layouts ML code saves (RadioML 2016's (N, 2, L) among them)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rfclassify._exceptions import InputError
from rfclassify.cli import main
from rfclassify.engine.file_bursts import Reading
from rfclassify.engine.files import iter_file_bursts
from rfclassify.engine.sigmf_annotations import annotation_target
from test_engine_files_raw import _covers, _recording


def _bursts(path, **kw) -> list:
    return [b for chunk in iter_file_bursts(path, **kw) for b in chunk]


def _iq(n: int, rows: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((rows, n)) + 1j * rng.standard_normal((rows, n))).astype(np.complex64)


@pytest.mark.parametrize("layout", ["complex", "complex128", "last_axis", "radioml2016", "int16_last_axis"])
def test_an_array_of_bursts_gives_each_row(tmp_path, layout):
    x = _iq(128, 5)
    pairs = np.stack([x.real, x.imag], axis=-1)                 # (N, L, 2)
    saved = {"complex": x, "complex128": x.astype(np.complex128), "last_axis": pairs,
             "radioml2016": np.swapaxes(pairs, 1, 2),             # (N, 2, L)
             "int16_last_axis": np.round(pairs * 1000).astype(np.int16)}[layout]
    np.save(tmp_path / "bursts.npy", saved)
    bursts = _bursts(tmp_path / "bursts.npy", reading=Reading(sample_rate_hz=2e6))
    expect = np.round(x.real * 1000) + 1j * np.round(x.imag * 1000) if layout.startswith("int16") else x
    assert [(b.index, b.start_sample, b.sample_rate_hz) for b in bursts] == [(i, 0, 2e6) for i in range(5)]
    for b, row in zip(bursts, expect, strict=True):
        assert b.iq.dtype == np.complex64
        np.testing.assert_allclose(b.iq, row, rtol=1e-6)
    assert len(_bursts(tmp_path / "bursts.npy", limit=2, chunk=1)) == 2


@pytest.mark.parametrize("layout", ["complex", "last_axis", "first_axis", "uint8"])
def test_one_recording_is_one_burst_or_cut_by_energy_when_asked(tmp_path, layout):
    x = _recording(seed=2)
    saved = {"complex": x, "last_axis": np.stack([x.real, x.imag], axis=-1),
             "first_axis": np.stack([x.real, x.imag]),
             "uint8": np.clip(np.round(np.stack([x.real, x.imag], axis=-1) * 60 + 128), 0, 255).astype(np.uint8),
             }[layout]
    np.save(tmp_path / "capture.npy", saved)
    (whole,) = _bursts(tmp_path / "capture.npy")   # auto: an array is a burst, not a capture to cut
    assert whole.iq.size == x.size
    if layout != "uint8":
        np.testing.assert_allclose(whole.iq, x, rtol=1e-6)
    found = _bursts(tmp_path / "capture.npy", reading=Reading(cut="energy"))
    assert _covers([(b.start_sample, b.iq.size) for b in found]), found


def test_arrays_that_are_not_iq_are_one_clear_error(tmp_path, capsys):
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object))
    np.save(tmp_path / "cube.npy", np.zeros((2, 3, 4), np.float32))
    np.save(tmp_path / "flat.npy", np.zeros(100, np.float32))
    (tmp_path / "cut.npy").write_bytes((tmp_path / "flat.npy").read_bytes()[:200])   # truncated
    for name, match in (("objects", "cannot read it as a NumPy array"), ("cube", r"shape \(2, 3, 4\) .* not IQ"),
                        ("flat", r"shape \(100,\) and dtype float32 is not IQ"),
                        ("cut", "cannot read it as a NumPy array")):
        with pytest.raises(InputError, match=match):
            _bursts(tmp_path / f"{name}.npy")
    with pytest.raises(InputError, match="a NumPy array, not a recording"):
        annotation_target(tmp_path / "flat.npy")


def test_damaged_npy_headers_are_an_input_error_never_a_traceback(tmp_path):
    """numpy's header parser let tokenize.TokenError out of mutated headers (a fuzz of 400)."""
    import io

    rng = np.random.default_rng(0)
    buf = io.BytesIO()
    np.save(buf, _iq(64, 3))
    good = buf.getvalue()
    for i in range(300):
        raw = bytearray(good)
        for _ in range(int(rng.integers(1, 4))):
            raw[int(rng.integers(6, 128))] = int(rng.integers(0, 256))   # past the magic, in the header
        path = tmp_path / f"fuzz{i}.npy"
        path.write_bytes(raw[:int(rng.integers(8, len(raw)))] if rng.random() < 0.2 else raw)
        try:
            _bursts(path)
        except InputError:
            pass


def test_classify_reads_an_npy_file(tiny_model_dir, tmp_path, capsys):
    np.save(tmp_path / "bursts.npy", _iq(1024, 3))
    assert main(["classify", str(tmp_path / "bursts.npy"), "--sample-rate", "1e6", "--json",
                 "--model-dir", str(tiny_model_dir), "--device", "cpu"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["burst"], r["n_samples"], r["sample_rate"]) for r in records] == [(i, 1024, 1e6) for i in range(3)]
