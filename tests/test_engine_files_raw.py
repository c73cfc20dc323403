"""Raw recordings (samples and nothing else) and unannotated SigMF recordings cut into bursts
by the daemon's energy detector, as `rfclassify classify --raw/--cut` reads them."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from rfclassify._exceptions import InputError
from rfclassify.cli import main
from rfclassify.engine import file_bursts
from rfclassify.engine.file_bursts import Reading
from rfclassify.engine.files import iter_file_bursts
from rfclassify.engine.sigmf import read_sigmf
from rfclassify.serve.burst_cutter import EnergyCutter

BURSTS = [(20_000, 3_000), (60_000, 1_500), (150_000, 5_000)]


def _recording(n: int = 200_000, seed: int = 0) -> np.ndarray:
    """Noise 30 dB under unit-power bursts at BURSTS, and a receiver DC offset."""
    rng = np.random.default_rng(seed)
    x = 0.02 * (rng.standard_normal(n) + 1j * rng.standard_normal(n)) + (0.05 - 0.03j)
    for start, length in BURSTS:
        x[start:start + length] += np.exp(2j * np.pi * rng.random(length))
    return x.astype(np.complex64)


def _cu8(x: np.ndarray) -> np.ndarray:
    """What rtl_sdr writes: interleaved unsigned bytes centred on 127.5."""
    pairs = np.stack([x.real, x.imag], axis=1) * 60 + 127.5
    return np.clip(np.round(pairs), 0, 255).astype(np.uint8)


def _found(bursts) -> list[tuple[int, int]]:
    return [(b.start_sample, b.iq.size) for chunk in bursts for b in chunk]


def _covers(found: list[tuple[int, int]]) -> bool:
    """Each burst found once, its span covering the sent one plus at most the detector's padding."""
    return len(found) == len(BURSTS) and all(
        s <= start and s + n >= start + length and n <= length + 200
        for (s, n), (start, length) in zip(found, BURSTS, strict=True))


@pytest.mark.parametrize("datatype", ["cf32_le", "cu8"])
def test_a_raw_recording_is_cut_by_the_daemons_energy_detector(tmp_path, datatype):
    x = _recording()
    path = tmp_path / "capture.bin"
    (x if datatype == "cf32_le" else _cu8(x)).tofile(path)
    found = _found(iter_file_bursts(path, reading=Reading(raw=datatype, sample_rate_hz=2.4e6)))
    assert _covers(found), found
    (whole,) = _found(iter_file_bursts(path, reading=Reading(raw=datatype, cut="whole")))
    assert whole == (0, x.size)
    assert len(_found(iter_file_bursts(path, limit=2, chunk=1, reading=Reading(raw=datatype)))) == 2
    assert _found(iter_file_bursts(path, limit=0, reading=Reading(raw=datatype))) == []


def test_reading_in_pieces_finds_what_one_pass_of_the_detector_finds(tmp_path, monkeypatch):
    from rfclassify.dsp.dc_block import DcBlocker

    x = _recording(seed=1)
    x.tofile(tmp_path / "capture.cfile")
    cutter = EnergyCutter()
    one_pass = [(s.start_sample, s.n_samples) for s in cutter.feed(DcBlocker(65536).process(x)) + cutter.flush()]
    monkeypatch.setattr(file_bursts, "READ_SAMPLES", 7_777)   # bursts and detector epochs across the reads
    assert _found(iter_file_bursts(tmp_path / "capture.cfile", reading=Reading(raw="cf32_le"))) == one_pass
    assert _covers(one_pass)


def test_an_unannotated_sigmf_recording_is_cut_by_energy_when_asked(tmp_path):
    x = _recording(seed=2)
    x.tofile(tmp_path / "rec.sigmf-data")
    meta = {"global": {"core:datatype": "cf32_le", "core:sample_rate": 1e6, "core:offset": 1000}}
    (tmp_path / "rec.sigmf-meta").write_text(json.dumps(meta))
    (whole,) = read_sigmf(tmp_path / "rec")
    assert (whole.start_sample, whole.iq.size) == (1000, x.size)
    cut = read_sigmf(tmp_path / "rec", reading=Reading(cut="energy"))
    assert [b.index for b in cut] == [0, 1, 2] and all(b.sample_rate_hz == 1e6 for b in cut)
    assert _covers([(b.start_sample - 1000, b.iq.size) for b in cut])   # indices are absolute


def test_classify_reads_a_raw_file_only_when_told_its_datatype(tiny_model_dir, tmp_path, capsys):
    path = tmp_path / "capture.iq"
    _recording().tofile(path)
    model = ["--model-dir", str(tiny_model_dir), "--device", "cpu"]
    assert main(["classify", str(path), *model]) == 2
    assert "a raw recording needs --raw DATATYPE" in capsys.readouterr().err
    assert main(["classify", str(path), "--raw", "cf32_le", "--sample-rate", "2e6", "--json", *model]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["burst"] for r in records] == [0, 1, 2] and {r["sample_rate"] for r in records} == {2e6}
    path.write_bytes(bytes(12))   # not a whole number of 8-byte samples
    assert main(["classify", str(path), "--raw", "cf32_le", *model]) == 2
    assert "12 bytes is not a whole number of 8-byte samples" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["classify", str(path), "--raw", "cf32", *model])
    assert re.search(r"--raw: SigMF datatype 'cf32' needs an endianness suffix", capsys.readouterr().err)


def test_an_unknown_cut_is_refused():
    with pytest.raises(InputError, match="cut must be one of auto, energy, whole"):
        Reading(cut="tags")


def test_the_cut_option_offers_the_readers_cuts():
    """The option spells CUTS out (importing it would pull numpy into every command's start)."""
    import argparse

    from rfclassify.commands._reading import add_reading_arguments

    parser = argparse.ArgumentParser()
    add_reading_arguments(parser)
    (cut,) = [a for a in parser._actions if a.dest == "cut"]
    assert tuple(cut.choices) == file_bursts.CUTS and cut.default == file_bursts.Reading().cut


def _wav(path, x: np.ndarray, rate: int, kind: str, extra_chunk: bytes = b"") -> None:
    """A stereo WAV IQ file (I left, Q right), optionally with a vendor chunk before its data."""
    import io

    from scipy.io import wavfile

    pairs = np.stack([x.real, x.imag], axis=1)
    data = {"int16": np.round(pairs * 8000).astype(np.int16), "uint8": _cu8(x).reshape(-1, 2),
            "float32": pairs.astype(np.float32)}[kind]
    buf = io.BytesIO()
    wavfile.write(buf, rate, data)
    raw = buf.getvalue()
    if extra_chunk:   # a chunk of SDRuno's kind ('auxi') between 'fmt ' and 'data'
        at = raw.index(b"data")
        raw = raw[:at] + b"auxi" + len(extra_chunk).to_bytes(4, "little") + extra_chunk + raw[at:]
        raw = raw[:4] + (len(raw) - 8).to_bytes(4, "little") + raw[8:]
    path.write_bytes(raw)


@pytest.mark.parametrize("kind", ["int16", "uint8", "float32"])
def test_a_wav_iq_recording_is_read_with_its_rate_and_cut_by_energy(tmp_path, kind):
    x = _recording(seed=3)
    _wav(tmp_path / "sdr.wav", x, 2_048_000, kind, extra_chunk=b"\0" * 16 if kind == "int16" else b"")
    bursts = [b for chunk in iter_file_bursts(tmp_path / "sdr.wav") for b in chunk]
    assert _covers([(b.start_sample, b.iq.size) for b in bursts])
    assert {b.sample_rate_hz for b in bursts} == {2_048_000.0}
    (whole,) = _found(iter_file_bursts(tmp_path / "sdr.wav", reading=Reading(cut="whole")))
    assert whole == (0, x.size)


def test_a_wav_that_is_not_iq_is_one_clear_error(tmp_path):
    from scipy.io import wavfile

    wavfile.write(tmp_path / "mono.wav", 48_000, np.zeros(1000, np.int16))
    with pytest.raises(InputError, match="a WAV IQ recording has two channels .I, Q.; this one has 1"):
        next(iter_file_bursts(tmp_path / "mono.wav"))
    (tmp_path / "cut.wav").write_bytes((tmp_path / "mono.wav").read_bytes()[:30])
    with pytest.raises(InputError, match="cannot read it as WAV"):
        next(iter_file_bursts(tmp_path / "cut.wav"))


def test_damaged_wav_headers_are_an_input_error_never_a_traceback(tmp_path):
    """Seeded: scipy's WAV parser let struct.error, ZeroDivisionError and UnboundLocalError out
    of mutated headers."""
    import io

    from scipy.io import wavfile

    rng = np.random.default_rng(4)
    buf = io.BytesIO()
    wavfile.write(buf, 48_000, np.round(rng.standard_normal((3000, 2)) * 100).astype(np.int16))
    path, outcomes = tmp_path / "damaged.wav", {"read": 0, "refused": 0}
    for _ in range(400):
        raw = bytearray(buf.getvalue())
        for _ in range(int(rng.integers(1, 6))):
            raw[int(rng.integers(4, 60))] = int(rng.integers(0, 256))   # past 'RIFF', in the headers
        path.write_bytes(raw[:int(rng.integers(12, len(raw)))] if rng.random() < 0.2 else raw)
        try:
            sum(map(len, iter_file_bursts(path)))
            outcomes["read"] += 1
        except InputError:
            outcomes["refused"] += 1
    assert outcomes["read"] > 0 and outcomes["refused"] > 0, outcomes


def test_a_lower_threshold_finds_weaker_bursts(tiny_model_dir, tmp_path, capsys):
    """Bursts 1 dB over the noise (per sample): the default 6 dB threshold finds none, 4 dB
    (classify --threshold-db, the daemon's [cutter] threshold_db) each of them once."""
    from rfclassify.serve.config import CutterConfig

    rng = np.random.default_rng(0)
    x = (np.sqrt(0.5) * (rng.standard_normal(200_000) + 1j * rng.standard_normal(200_000))).astype(np.complex64)
    for start in (20_000, 80_000, 150_000):
        x[start:start + 4000] += (10 ** (1 / 20) * np.exp(2j * np.pi * rng.random(4000))).astype(np.complex64)
    path = tmp_path / "weak.cf32"
    x.tofile(path)
    assert _found(iter_file_bursts(path, reading=Reading(raw="cf32_le"))) == []
    found = _found(iter_file_bursts(path, reading=Reading(raw="cf32_le", cutter=CutterConfig(threshold_db=4.0))))
    assert [round(s / 1000) for s, _ in found] == [20, 80, 150] and all(4000 <= n <= 4100 for _, n in found)
    model = ["--model-dir", str(tiny_model_dir), "--device", "cpu"]
    assert main(["classify", str(path), "--raw", "cf32_le", "--threshold-db", "4", "--quiet", *model]) == 0
    assert "3 classified" in capsys.readouterr().out
