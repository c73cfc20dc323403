"""SigMF recordings, archives and non-conforming datasets as `rfclassify classify` reads them,
checked against files written (and read back) by the official `sigmf` library."""

from __future__ import annotations

import io
import json
import re
import tarfile

import numpy as np
import pytest

from rfclassify._exceptions import InputError
from rfclassify.cli import main
from rfclassify.engine.file_bursts import Reading, unread
from rfclassify.engine.files import iter_file_bursts
from rfclassify.engine.sigmf import read_sigmf

sigmf = pytest.importorskip("sigmf", reason="the sigmf library is in the test extra: pip install -e '.[test]'")
from sigmf import SigMFFile, sigmffile  # noqa: E402  (the 1.14 API: keys at the top, autoscale on the file)

ANNOTATIONS = [(100, 1000, "QPSK"), (3000, 500, None), (4500, 500, "GMSK")]


def _samples(datatype: str, n: int, seed: int) -> np.ndarray:
    """n random samples of datatype as the bytes a recorder writes ((n, 2) components when complex)."""
    rng = np.random.default_rng(seed)
    kind, fmt, bits = datatype[0], datatype[1], int(datatype[2:].split("_")[0])
    order = ">" if datatype.endswith("_be") else "<"
    dtype = np.dtype(f"{order}{fmt}{bits // 8}")
    shape = (n, 2) if kind == "c" else (n,)
    if fmt == "f":
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)


def _library_recording(folder, name: str, datatype: str, n: int = 5000, seed: int = 0) -> SigMFFile:
    """A recording the sigmf library writes: NAME.sigmf-meta + NAME.sigmf-data and NAME.sigmf."""
    _samples(datatype, n, seed).tofile(folder / f"{name}.sigmf-data")
    rec = SigMFFile(data_file=str(folder / f"{name}.sigmf-data"), autoscale=False,
                    global_info={sigmf.DATATYPE_KEY: datatype, sigmf.SAMPLE_RATE_KEY: 2e6, sigmf.VERSION_KEY: "1.2.0"})
    rec.add_capture(0, metadata={sigmf.FREQUENCY_KEY: 915e6})
    for start, count, label in ANNOTATIONS:
        rec.add_annotation(start, count, metadata={sigmf.LABEL_KEY: label} if label else {})
    rec.tofile(str(folder / name))
    rec.tofile(str(folder / name), toarchive=True)
    return rec


def _library_baseband(rec: SigMFFile, start: int, count: int) -> np.ndarray:
    """A real recording's burst as ours should read it: the library's samples, 64 either side
    for the filter, less the burst's mean, made complex baseband at half the rate."""
    from rfclassify.dsp.channelize import real_to_baseband

    lo, hi = start - 64, min(rec.sample_count, start + count + 64)
    x = np.asarray(_library_read(rec, lo, hi - lo), np.float64)
    x = (x - x[64:64 + count].mean()).astype(np.float32)
    return real_to_baseband(x, lo)[32:32 + (count + 1) // 2]


def _library_read(rec: SigMFFile, start: int, count: int) -> np.ndarray:
    """What the library reads, unsigned types centred on zero as ours are (it scales nothing here)."""
    x = np.asarray(rec.read_samples(start, count))
    datatype = rec.get_global_field(sigmf.DATATYPE_KEY)
    if datatype[1] == "u":
        mid = 2.0 ** (int(datatype[2:].split("_")[0]) - 1)
        x = x - (mid * (1 + 1j) if np.iscomplexobj(x) else mid)
    return x


@pytest.mark.parametrize("datatype", ["cf32_le", "cf64_be", "ci16_le", "ci16_be", "ci8", "cu8", "ci32_le",
                                      "rf32_le", "ri16_be", "ru16_le"])
def test_recordings_and_archives_the_sigmf_library_writes_read_as_it_reads_them(tmp_path, datatype):
    rec = _library_recording(tmp_path, "rec", datatype)
    pair = read_sigmf(tmp_path / "rec")
    (archived,) = list(iter_file_bursts(tmp_path / "rec.sigmf"))
    assert [(b.start_sample, b.recording_samples, b.truth_label) for b in pair] == ANNOTATIONS
    real = datatype[0] == "r"   # made complex baseband at half the rate (sigmf.real_baseband)
    for ours, inside, (start, count, _) in zip(pair, archived, ANNOTATIONS, strict=True):
        np.testing.assert_allclose(ours.iq, _library_baseband(rec, start, count) if real
                                   else _library_read(rec, start, count), rtol=1e-6, atol=1e-6 * real)
        np.testing.assert_array_equal(inside.iq, ours.iq)
        assert inside.sample_rate_hz == ours.sample_rate_hz == (1e6 if real else 2e6)
    assert archived[0].source == f"{tmp_path}/rec.sigmf/rec/rec.sigmf-meta"
    for name in ("rec.sigmf-meta", "rec.sigmf-data"):   # NAME alone finds NAME.sigmf when no pair is there
        (tmp_path / name).unlink()
    (by_name,) = list(iter_file_bursts(tmp_path / "rec"))
    assert [b.source for b in by_name] == [b.source for b in archived]


def test_an_archive_of_several_recordings_gives_each_in_order_and_the_limit_counts_them_all(tmp_path):
    for name, datatype in (("b_first", "ci16_le"), ("a_second", "cf32_le")):
        _library_recording(tmp_path, name, datatype, seed=len(name))
    both = tmp_path / "both.sigmf"
    with tarfile.open(both, "w") as out:
        for name in ("b_first", "a_second"):
            with tarfile.open(tmp_path / f"{name}.sigmf") as one:
                for member in one.getmembers():
                    out.addfile(member, one.extractfile(member) if member.isfile() else None)
    with tarfile.open(both, "a") as out:   # what macOS's tar adds beside each file
        info = tarfile.TarInfo("a_second/._a_second.sigmf-meta")
        info.size = 4
        out.addfile(info, io.BytesIO(b"\x00\x05\x16\x07"))
    chunks = list(iter_file_bursts(both, chunk=2))
    assert [(c[0].source.rsplit("/", 1)[1], len(c)) for c in chunks] == [
        ("b_first.sigmf-meta", 2), ("b_first.sigmf-meta", 1), ("a_second.sigmf-meta", 2), ("a_second.sigmf-meta", 1)]
    np.testing.assert_array_equal(chunks[2][0].iq, read_sigmf(tmp_path / "a_second")[0].iq)
    assert sum(map(len, iter_file_bursts(both, limit=4))) == 4


def test_classify_reads_an_archive(tiny_model_dir, tmp_path, capsys):
    _library_recording(tmp_path, "rec", "ci16_le")
    assert main(["classify", str(tmp_path / "rec.sigmf"), "--model-dir", str(tiny_model_dir), "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert out.count("rec.sigmf-meta") == 3 and "3 classified" in out


def test_a_non_conforming_dataset_with_headers_and_trailing_bytes(tmp_path):
    """core:dataset names the file; each capture's header bytes and the trailing bytes are not samples."""
    x = _samples("ci16_le", 5000, 3)
    raw = b"H" * 64 + x[:2000].tobytes() + b"h" * 32 + x[2000:].tobytes() + b"T" * 12
    (tmp_path / "capture.bin").write_bytes(raw)
    meta = {"global": {"core:datatype": "ci16_le", "core:sample_rate": 1e6, "core:version": "1.2.0",
                       "core:dataset": "capture.bin", "core:trailing_bytes": 12},
            "captures": [{"core:sample_start": 0, "core:header_bytes": 64},
                         {"core:sample_start": 2000, "core:header_bytes": 32}],
            "annotations": [{"core:sample_start": 10, "core:sample_count": 490},
                            {"core:sample_start": 1900, "core:sample_count": 200},   # across the second header
                            {"core:sample_start": 4000}]}                           # to the end
    (tmp_path / "ncd.sigmf-meta").write_text(json.dumps(meta))
    first, across, tail = read_sigmf(tmp_path / "ncd")
    expect = (x[:, 0] + 1j * x[:, 1]).astype(np.complex64)
    np.testing.assert_array_equal(first.iq, expect[10:500])
    np.testing.assert_array_equal(across.iq, expect[1900:2100])
    np.testing.assert_array_equal(tail.iq, expect[4000:])
    # the library reads the first capture alike (its read_samples_in_capture counts the first
    # header twice in sigmf 1.14, so only read_samples within the first capture is compared)
    rec = sigmffile.fromfile(str(tmp_path / "ncd.sigmf-meta"), skip_checksum=True, autoscale=False)
    np.testing.assert_array_equal(np.asarray(rec.read_samples(10, 490)), first.iq)


def test_core_offset_makes_sample_indices_absolute(tmp_path):
    """A recording split over files: its dataset's first sample is core:offset."""
    x = _samples("cf32_le", 3000, 4)
    x.tofile(tmp_path / "part2.sigmf-data")
    meta = {"global": {"core:datatype": "cf32_le", "core:version": "1.2.0", "core:offset": 1_000_000},
            "captures": [{"core:sample_start": 1_000_000}],
            "annotations": [{"core:sample_start": 1_000_100, "core:sample_count": 50}]}
    (tmp_path / "part2.sigmf-meta").write_text(json.dumps(meta))
    (burst,) = read_sigmf(tmp_path / "part2")
    assert burst.start_sample == 1_000_100
    np.testing.assert_array_equal(burst.iq, (x[100:150, 0] + 1j * x[100:150, 1]).astype(np.complex64))
    meta["annotations"] = [{"core:sample_start": 100, "core:sample_count": 50}]   # a file index, not absolute
    (tmp_path / "part2.sigmf-meta").write_text(json.dumps(meta))
    (reject,) = read_sigmf(tmp_path / "part2")   # a bad_annotation reject (tests/test_sigmf_bad_annotations.py)
    assert re.search(r"lies outside the 3000 samples .*samples 1000000..1002999: core:offset", unread(reject).detail)


def test_an_annotation_that_cannot_be_read_is_named_by_its_place_in_the_file(tmp_path):
    """Bursts are numbered in time, but a mistake names the annotation as the file lists it
    (0-based, as in its annotations array): the fourth entry here, not the second burst in time,
    as before the sixty-sixth session. rfclassify's own entries (results) count as entries. The
    mistake is that burst's bad_annotation reject (a one-line error before the sixty-ninth)."""
    np.zeros(5000, np.complex64).tofile(tmp_path / "rec.sigmf-data")
    ours = {"core:sample_start": 0, "core:sample_count": 10, "core:generator": "rfclassify 0.1.0 m"}
    meta = {"global": {"core:datatype": "cf32_le", "core:version": "1.2.0"},
            "annotations": [{"core:sample_start": 0, "core:sample_count": 1000}, ours,
                            {"core:sample_start": 3000, "core:sample_count": 1000},
                            {"core:sample_start": 1000, "core:sample_count": 9000}]}
    (tmp_path / "rec.sigmf-meta").write_text(json.dumps(meta))
    bursts = read_sigmf(tmp_path / "rec")
    assert [(b.index, b.start_sample) for b in bursts] == [(0, 0), (1, 1000), (2, 3000)]
    assert [None if unread(b) is None else unread(b).detail for b in bursts] == [
        None, "annotation 3 (1000+9000) lies outside the 5000 samples of rec.sigmf-data", None]
    meta["annotations"][3]["core:sample_count"] = 500
    (tmp_path / "rec.sigmf-meta").write_text(json.dumps(meta))
    assert [(b.index, b.start_sample) for b in read_sigmf(tmp_path / "rec")] == [(0, 0), (1, 1000), (2, 3000)]


def _meta(tmp_path, name: str, **global_fields) -> None:
    glob = {"core:datatype": "cf32_le", "core:version": "1.2.0", **global_fields}
    (tmp_path / f"{name}.sigmf-meta").write_text(json.dumps({"global": glob}))


@pytest.mark.parametrize(
    ("setup", "match"),
    [
        (lambda p: _meta(p, "bad", **{"core:metadata_only": True}), "metadata-only SigMF recording"),
        (lambda p: _meta(p, "bad", **{"core:dataset": "../secret.bin"}), "core:dataset must be a file name"),
        (lambda p: _meta(p, "bad", **{"core:dataset": "gone.bin"}), "gone.bin: cannot read SigMF data"),
        (lambda p: (_meta(p, "bad", **{"core:trailing_bytes": 3}),
                    (p / "bad.sigmf-data").write_bytes(bytes(80))), "77 bytes is not a whole number of 8-byte"),
        (lambda p: ((p / "bad.sigmf-data").write_bytes(bytes(80)), (p / "bad.sigmf-meta").write_text(json.dumps(
            {"global": {"core:datatype": "cf32_le"}, "captures": [{"core:sample_start": 5}, {"core:sample_start": 2}]}))),
         "captures entry 1 .* out of order"),
        (lambda p: ((p / "bad.sigmf-data").write_bytes(bytes(80)), (p / "bad.sigmf-meta").write_text(json.dumps(
            {"global": {"core:datatype": "cf32_le"}, "captures": [{"core:sample_start": 0}, {"core:sample_start": 40}]}))),
         "the captures need more than the dataset's 80 bytes"),
    ],
)
def test_recordings_that_cannot_be_read_are_one_clear_error(tmp_path, setup, match):
    setup(tmp_path)
    with pytest.raises(InputError, match=match):
        read_sigmf(tmp_path / "bad")


def _tar(path, files: dict[str, bytes], mode: str = "w") -> None:
    with tarfile.open(path, mode) as out:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))


@pytest.mark.parametrize(
    ("files", "mode", "match"),
    [
        ({"r/r.sigmf-meta": b'{"global": {"core:datatype": "cf32_le"}}', "r/r.sigmf-data": bytes(80)}, "w:gz",
         "not a SigMF archive"),
        ({"r/r.sigmf-meta": b'{"global": {"core:datatype": "cf32_le"}}'}, "w", "r/r.sigmf-data is missing"),
        ({"r/readme.txt": b"hello"}, "w", "no .sigmf-meta file"),
        ({"r/r.sigmf-meta": b"{", "r/r.sigmf-data": bytes(80)}, "w", "r.sigmf-meta: cannot read SigMF metadata"),
    ],
)
def test_archives_that_cannot_be_read_are_one_clear_error(tmp_path, files, mode, match):
    _tar(tmp_path / "bad.sigmf", files, mode)
    with pytest.raises(InputError, match=match):
        list(iter_file_bursts(tmp_path / "bad.sigmf"))
    (tmp_path / "not.sigmf").write_bytes(b"not a tar at all" * 100)
    with pytest.raises(InputError, match="not a SigMF archive"):
        list(iter_file_bursts(tmp_path / "not.sigmf"))


def _wideband(tmp_path, annotations, capture=None, rate=8e6) -> np.ndarray:
    """A cf32 capture at 2.4 GHz: a tone 10 kHz above 2.4015 GHz and a louder one 300 kHz below it."""
    n = 80_000
    t = np.arange(n)
    x = (np.exp(2j * np.pi * 1.51e6 / rate * t) + 10 * np.exp(2j * np.pi * 1.2e6 / rate * t)).astype(np.complex64)
    x.tofile(tmp_path / "wide.sigmf-data")
    meta = {"global": {"core:datatype": "cf32_le", "core:sample_rate": rate, "core:version": "1.2.0"},
            "captures": [capture if capture is not None else {"core:sample_start": 0, "core:frequency": 2.4e9}],
            "annotations": annotations}
    (tmp_path / "wide.sigmf-meta").write_text(json.dumps(meta))
    return x


def test_an_annotation_that_gives_its_band_is_cut_to_it(tmp_path):
    from rfclassify.dsp.channelize import channelize

    band = {"core:freq_lower_edge": 2.4015e9 - 50e3, "core:freq_upper_edge": 2.4015e9 + 50e3}
    x = _wideband(tmp_path, [{"core:sample_start": 0, "core:sample_count": 40_000, **band},
                             {"core:sample_start": 40_000, "core:freq_lower_edge": 2.4e9}])   # one edge: whole band
    cut, whole = read_sigmf(tmp_path / "wide")
    assert cut.band_hz == (2.4015e9 - 50e3, 2.4015e9 + 50e3) and cut.sample_rate_hz == 8e6 / 20
    expect, _ = channelize(x[:40_000], 8e6, 1.5e6, 100e3)
    np.testing.assert_array_equal(cut.iq, expect)
    # what is left is the tone at +10 kHz: the louder one 300 kHz off is filtered out before decimating
    assert abs(np.mean(cut.iq[100:-100] * np.exp(-2j * np.pi * 10e3 / 4e5 * np.arange(100, cut.iq.size - 100)))) > 0.9
    assert whole.band_hz is None and whole.sample_rate_hz == 8e6 and whole.iq.size == 40_000
    raw, _ = read_sigmf(tmp_path / "wide", reading=Reading(full_band=True))
    assert raw.band_hz is None and raw.iq.size == 40_000


def test_classify_reports_the_band_and_its_rate(tiny_model_dir, tmp_path, capsys):
    _wideband(tmp_path, [{"core:sample_start": 0, "core:sample_count": 40_000,
                          "core:freq_lower_edge": 2.40145e9, "core:freq_upper_edge": 2.40155e9}])
    assert main(["classify", str(tmp_path / "wide"), "--json", "--model-dir", str(tiny_model_dir),
                 "--device", "cpu"]) == 0
    (record,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert record["band_hz"] == [2.40145e9, 2.40155e9] and record["sample_rate"] == 4e5
    assert record["n_samples"] == 2000
    assert main(["classify", str(tmp_path / "wide"), "--json", "--full-band", "--model-dir", str(tiny_model_dir),
                 "--device", "cpu"]) == 0
    (record,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert "band_hz" not in record and record["sample_rate"] == 8e6 and record["n_samples"] == 40_000


@pytest.mark.parametrize(
    ("annotation", "capture", "match"),
    [
        ({"core:freq_lower_edge": 2.4016e9, "core:freq_upper_edge": 2.4014e9}, None, "lower first"),
        ({"core:freq_lower_edge": "low", "core:freq_upper_edge": 2.4014e9}, None, "finite numbers of Hz"),
        ({"core:freq_lower_edge": 2.4014e9, "core:freq_upper_edge": 2.4016e9}, {"core:sample_start": 0},
         "no core:frequency in its capture to place it.*--full-band"),
        ({"core:freq_lower_edge": 2.5e9, "core:freq_upper_edge": 2.5001e9}, None, "centred outside its capture"),
    ],
)
def test_a_band_that_cannot_be_placed_is_a_reject_naming_it(tmp_path, annotation, capture, match):
    _wideband(tmp_path, [{"core:sample_start": 0, **annotation}], capture)
    (burst,) = read_sigmf(tmp_path / "wide")   # a one-line error for the whole run before the sixty-ninth session
    assert unread(burst).reason == "bad_annotation" and re.search(f"annotation 0.*{match}", unread(burst).detail)
    read_sigmf(tmp_path / "wide", reading=Reading(full_band=True))   # the whole band is still there to classify


def test_a_multichannel_recording_gives_each_annotation_once_per_channel(tmp_path, tiny_model_dir, capsys):
    """core:num_channels 2 (interleaved), written by the sigmf library: every annotation is a
    burst of each channel, read as the library reads that channel (it was refused)."""
    x = _samples("ci16_le", 5000 * 2, 9).reshape(5000, 2, 2)   # (sample, channel, I/Q)
    x.tofile(tmp_path / "two.sigmf-data")
    rec = SigMFFile(data_file=str(tmp_path / "two.sigmf-data"), autoscale=False,
                    global_info={sigmf.DATATYPE_KEY: "ci16_le", sigmf.SAMPLE_RATE_KEY: 1e6,
                                 sigmf.NUM_CHANNELS_KEY: 2, sigmf.VERSION_KEY: "1.2.0"})
    rec.add_capture(0)
    rec.add_annotation(100, 1000, metadata={sigmf.LABEL_KEY: "QPSK"})
    rec.add_annotation(3000, 500)
    rec.tofile(str(tmp_path / "two"))
    bursts = read_sigmf(tmp_path / "two")
    assert [(b.index, b.channel, b.start_sample, b.iq.size) for b in bursts] == [
        (0, 0, 100, 1000), (0, 1, 100, 1000), (1, 0, 3000, 500), (1, 1, 3000, 500)]
    both = np.asarray(rec.read_samples(100, 1000))              # the library's (samples, channels)
    np.testing.assert_array_equal(bursts[0].iq, both[:, 0])
    np.testing.assert_array_equal(bursts[1].iq, both[:, 1])
    assert [b.channel for b in read_sigmf(tmp_path / "two", limit=3)] == [0, 1, 0]
    assert main(["classify", str(tmp_path / "two"), "--json", "--model-dir", str(tiny_model_dir),
                 "--device", "cpu"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["burst"], r["channel"]) for r in records] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    meta = json.loads((tmp_path / "two.sigmf-meta").read_text())
    meta["annotations"] = []
    (tmp_path / "two.sigmf-meta").write_text(json.dumps(meta))   # no annotations: each channel whole
    assert [(b.channel, b.iq.size) for b in read_sigmf(tmp_path / "two")] == [(0, 5000), (1, 5000)]
