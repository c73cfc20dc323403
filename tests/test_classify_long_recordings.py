"""`rfclassify classify` on recordings longer than the longest burst classified whole (2**20
samples, rfclassify.data.reader.MAX_READ_SAMPLES): taken whole they are classified in pieces,
with memory bounded whatever the file's length; an energy cut that finds nothing, or cuts a
continuous signal into fragments, says so on stderr; a bad core:datatype names its file. The
shipped model on the CPU."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest

from rfclassify.cli import main
from rfclassify.data.reader import MAX_READ_SAMPLES
from rfclassify.engine.file_bursts import Reading
from rfclassify.engine.files import iter_file_bursts
from rfclassify.engine.sigmf import read_sigmf

CAP = MAX_READ_SAMPLES
LONG = 12 * CAP - 7   # a sparse recording of 96 MiB: the old code held it whole, about 5x that again
BURSTS = (3 * CAP + 1000, 7 * CAP - 6000, 11 * CAP + 5)   # where a 4096-sample QPSK burst lies


def _qpsk(n: int, seed: int = 0) -> np.ndarray:
    from rfclassify.dsp.channel import ChannelConfig
    from rfclassify.dsp.synth import synthesize

    return synthesize(["QPSK"], n, np.random.default_rng(seed), 20.0, ChannelConfig.clean()).iq[0]


def _sparse_cf32(path, n: int) -> None:
    """n cf32_le samples, zeros (a sparse file) but for a QPSK burst at each of BURSTS."""
    with open(path, "wb") as fh:
        fh.truncate(8 * n)
        for i, at in enumerate(b for b in BURSTS if b + 4096 <= n):
            fh.seek(8 * at)
            fh.write(_qpsk(4096, seed=i).astype("<c8").tobytes())


def _sigmf_meta(base, annotations=(), datatype="cf32_le", **extra) -> None:
    meta = {"global": {"core:datatype": datatype, "core:sample_rate": 1e6, "core:version": "1.2.0", **extra},
            "captures": [{"core:sample_start": 0}], "annotations": list(annotations)}
    base.with_name(base.name + ".sigmf-meta").write_text(json.dumps(meta))


def _classify(*args: str) -> int:
    return main(["classify", "--json", "--device", "cpu", *map(str, args)])


def _records(capsys) -> tuple[list[dict], str]:
    out = capsys.readouterr()
    return [json.loads(line) for line in out.out.splitlines()], out.err


def _tiles(records: list[dict], first: int, n: int) -> bool:
    """The results are consecutive pieces of at most CAP samples covering first..first+n."""
    spans = [(r["start_sample"], r["n_samples"]) for r in records]
    return (spans[0][0] == first and sum(k for _, k in spans) == n and max(k for _, k in spans) <= CAP
            and all(a + k == b for (a, k), (b, _) in zip(spans, spans[1:])))


def _peak_bytes(*args: str) -> int:
    tracemalloc.start()
    try:
        assert _classify(*args) == 0
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("kind", ["sigmf", "npy", "raw"])
def test_a_recording_taken_whole_is_classified_in_pieces_in_memory_bounded_by_a_piece(tmp_path, capsys, kind):
    """A SigMF recording without annotations (auto takes it whole), a 1-D .npy (whole by
    default) and `--cut whole` on a raw file: one burst of any length before, whose
    normalization held several times the file (a 256 MB recording peaked at 2.4 GiB)."""
    def make(name: str, n: int) -> list[str]:
        if kind == "npy":
            data = np.lib.format.open_memmap(tmp_path / f"{name}.npy", mode="w+", dtype=np.complex64, shape=(n,))
            for i, at in enumerate(b for b in BURSTS if b + 4096 <= n):
                data[at:at + 4096] = _qpsk(4096, seed=i)
            data.flush()
            del data
            return [tmp_path / f"{name}.npy"]
        data = tmp_path / (f"{name}.sigmf-data" if kind == "sigmf" else f"{name}.cf32")
        _sparse_cf32(data, n)
        if kind == "sigmf":
            _sigmf_meta(tmp_path / name)
            return [tmp_path / name]
        return [data, "--raw", "cf32_le", "--cut", "whole"]

    _peak_bytes(*make("tiny", 5000))   # the imports and the model's first load, out of the way
    one = _peak_bytes(*make("one", CAP))   # a recording of one piece
    capsys.readouterr()
    big = _peak_bytes(*make("big", LONG))
    records, _ = _records(capsys)
    assert len(records) == 12 and _tiles(records, 0, LONG)
    assert [r["burst"] for r in records] == list(range(12))
    # each burst lies in a piece of its own, classified there; the rest is zeros, rejected
    assert sorted(r["start_sample"] // (LONG // 12) for r in records if r["ok"]) == [3, 6, 11]
    assert {r["reason"] for r in records if not r["ok"]} == {"zero_power"}
    # one piece at a time: 12 pieces peak 16 MiB over one piece (the next piece read while one
    # is classified), where the old code's peak grew with all 12, by about 500 MiB
    assert big - one < 8 * LONG / 3, f"{(big - one) / 2**20:.0f} MiB over a one-piece recording's peak"


def test_a_continuous_signal_is_found_by_no_energy_cut_says_so_and_cut_whole_classifies_it(tmp_path, capsys):
    """A QPSK signal filling the recording is the noise floor the energy cut measures against:
    "0 classified", exit 0, nothing said, before. Now a line on stderr names the file and
    --cut whole; and --cut whole classifies it in pieces, each QPSK, --annotate marking each."""
    n = 3 * CAP + 5
    path = tmp_path / "downlink.cf32"
    _qpsk(n, seed=4).astype("<c8").tofile(path)
    assert _classify(path, "--raw", "cf32_le") == 0
    records, err = _records(capsys)
    assert records == []
    (line,) = [e for e in err.splitlines() if str(path) in e]
    assert "found no burst" in line and "--cut whole" in line

    assert _classify(path, "--raw", "cf32_le", "--sample-rate", "1e6", "--cut", "whole", "--annotate") == 0
    records, err = _records(capsys)
    assert len(records) == 4 and _tiles(records, 0, n)
    assert [r["label"] for r in records] == ["QPSK"] * 4
    sigmf = pytest.importorskip("sigmf", reason="the sigmf library is in the test extra: pip install -e '.[test]'")
    rec = sigmf.sigmffile.fromfile(str(tmp_path / "downlink.rfclassify.sigmf-meta"), skip_checksum=True)
    rec.validate()
    assert [(a["core:sample_start"], a["core:sample_count"], a["core:label"]) for a in rec.get_annotations()] == [
        (r["start_sample"], r["n_samples"], r["label"]) for r in records]


def test_a_continuous_signal_cut_into_fragments_says_so(tmp_path, capsys):
    """A tone-modulated AM signal on throughout: the quiet tenth of each tone period is the
    floor, and every period a burst (hundreds of fragments, nothing said before); a recording
    of noise and a burst gets no such line."""
    n = 300_000
    t = np.arange(n)
    rng = np.random.default_rng(1)
    x = (1 + 0.9 * np.sin(2 * np.pi * t / 1500)) * np.exp(2j * np.pi * 0.01 * t)
    x = x + 0.001 * (rng.standard_normal(n) + 1j * rng.standard_normal(n))
    path = tmp_path / "am.cf32"
    x.astype("<c8").tofile(path)
    assert _classify(path, "--raw", "cf32_le") == 0
    records, err = _records(capsys)
    assert len(records) > 100
    (line,) = [e for e in err.splitlines() if str(path) in e]
    assert f"found {len(records)} bursts covering" in line and "--cut whole" in line

    x = 0.01 * (rng.standard_normal(n) + 1j * rng.standard_normal(n))   # noise and a burst: nothing to say
    x[100_000:104_096] += _qpsk(4096)
    x.astype("<c8").tofile(path)
    assert _classify(path, "--raw", "cf32_le") == 0
    records, err = _records(capsys)
    assert len(records) == 1 and str(path) not in err


def test_an_annotation_longer_than_the_cap_is_classified_in_pieces_with_its_label(tmp_path, capsys):
    """Split, not refused: each piece carries the annotation's label as truth and its burst
    number (`dataset import` splits a long labelled burst into examples as ever), and a line
    on stderr names the annotation."""
    n = 3 * CAP + 5000
    _qpsk(n, seed=5).astype("<c8").tofile(tmp_path / "rec.sigmf-data")
    _sigmf_meta(tmp_path / "rec", [{"core:sample_start": 0, "core:sample_count": 2000, "core:label": "QPSK"},
                                   {"core:sample_start": 2000, "core:sample_count": n - 2000, "core:label": "QPSK"}])
    assert _classify(tmp_path / "rec") == 0
    records, err = _records(capsys)
    assert len(records) == 5 and _tiles(records, 0, n)
    assert [r["burst"] for r in records] == [0, 1, 1, 1, 1]
    assert all(r["truth"]["label"] == "QPSK" and r["label"] == "QPSK" for r in records)
    (line,) = [e for e in err.splitlines() if "rec.sigmf-meta" in e]
    assert f"annotation 1 (2000+{n - 2000})" in line and "4 consecutive pieces" in line
    assert "accuracy 100.0% on 5 labelled bursts" in err


def test_pieces_of_a_multichannel_recording_and_of_long_npy_rows(tmp_path):
    n = CAP + 100
    rng = np.random.default_rng(3)
    data = rng.integers(-100, 100, size=(n, 2, 2), dtype=np.int8)   # two channels of ci8
    data.tofile(tmp_path / "two.sigmf-data")
    _sigmf_meta(tmp_path / "two", datatype="ci8", **{"core:num_channels": 2})
    half = n // 2
    bursts = read_sigmf(tmp_path / "two")
    assert [(b.index, b.start_sample, b.iq.size, b.channel) for b in bursts] == [
        (0, 0, half, 0), (0, 0, half, 1), (1, half, n - half, 0), (1, half, n - half, 1)]
    np.testing.assert_array_equal(bursts[3].iq, (data[half:, 1, 0] + 1j * data[half:, 1, 1]).astype(np.complex64))

    rows = (rng.standard_normal((2, n)) + 1j * rng.standard_normal((2, n))).astype(np.complex64)
    np.save(tmp_path / "rows.npy", rows)
    notes: list[str] = []
    found = [b for chunk in iter_file_bursts(tmp_path / "rows.npy", reading=Reading(note=notes.append))
             for b in chunk]
    assert [(b.index, b.start_sample, b.iq.size) for b in found] == [
        (0, 0, half), (0, half, n - half), (1, 0, half), (1, half, n - half)]
    np.testing.assert_array_equal(found[3].iq, rows[1, half:])
    assert len(notes) == 1 and "each of its 2 rows spans" in notes[0]


def test_a_chunk_of_bursts_holds_at_most_the_cap_in_samples(tmp_path):
    """Classifier.classify normalizes a chunk's bursts together: 4096 bursts of a million
    samples were one chunk of 32 GiB."""
    rows = np.ones((8, 300_000), np.complex64)
    np.save(tmp_path / "rows.npy", rows)
    chunks = list(iter_file_bursts(tmp_path / "rows.npy"))
    assert [len(c) for c in chunks] == [3, 3, 2]
    assert [b.index for c in chunks for b in c] == list(range(8))
    assert [len(c) for c in iter_file_bursts(tmp_path / "rows.npy", limit=5)] == [3, 2]


@pytest.mark.parametrize(("value", "shown"), [(5, "got 5"), (["cf32_le"], 'got ["cf32_le"]'),
                                              ("CF32_LE", "unsupported SigMF datatype 'CF32_LE'")])
def test_an_unsupported_datatype_names_the_metadata_file_and_shows_the_value_as_it_is(tmp_path, capsys, value, shown):
    (tmp_path / "rec.sigmf-data").write_bytes(bytes(800))
    _sigmf_meta(tmp_path / "rec", datatype=value)
    assert _classify(tmp_path / "rec") == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'rec.sigmf-meta'}: " in err and shown in err
    assert "'5'" not in err
