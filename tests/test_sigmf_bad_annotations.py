"""One annotation that cannot be read in a SigMF recording (an off-by-one of a labelling tool
past the end, a negative, fractional, textual or huge start or count, a band that cannot be
used) is that burst's `bad_annotation` reject, named by its place in the file's annotations:
the recording's other annotations, the archive's other recordings and the other files given
are still classified (`classify`, exit 0 as for any reject) and imported (`dataset import`).
Before, each was a one-line refusal of the whole run (exit 2). A recording that cannot be read
at all is still refused before any work. The recordings are written by the `sigmf` library."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from rfclassify.cli import main
from rfclassify.data.import_recordings import import_recordings
from rfclassify.data.reader import DatasetReader
from rfclassify.engine.file_bursts import Reading, unread
from rfclassify.engine.sigmf import BAD_ANNOTATION, read_sigmf


def rejected(burst) -> str | None:
    """Why the burst's annotation could not be read; None for a burst read."""
    bad = unread(burst)
    assert bad is None or bad.reason == BAD_ANNOTATION
    return None if bad is None else bad.detail


sigmf = pytest.importorskip("sigmf", reason="the sigmf library is in the test extra: pip install -e '.[test]'")
from sigmf import SigMFFile, sigmffile  # noqa: E402  (the 1.14 API: keys at the top, autoscale on the file)

N = 4000   # samples of each recording
GOOD = [(100, 1000, "QPSK"), (1500, 1000, "BPSK"), (2800, 1000, "FM")]   # (start, count, label)


def _recording(folder, name: str, seed: int = 0, bad: dict | None = None, archive: bool = False,
               capture: dict | None = None) -> np.ndarray:
    """NAME.sigmf-meta + NAME.sigmf-data as the sigmf library writes them, with GOOD annotated,
    and bad (an annotation as a labelling tool wrote it) added to the metadata after them, as
    the fourth annotation (index 3); the samples."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(N) + 1j * rng.standard_normal(N)).astype(np.complex64)
    x.tofile(folder / f"{name}.sigmf-data")
    rec = SigMFFile(data_file=str(folder / f"{name}.sigmf-data"),
                    global_info={sigmf.DATATYPE_KEY: "cf32_le", sigmf.SAMPLE_RATE_KEY: 1e6, sigmf.VERSION_KEY: "1.2.0"})
    rec.add_capture(0, metadata=capture if capture is not None else {sigmf.FREQUENCY_KEY: 915e6})
    for start, count, label in GOOD:
        rec.add_annotation(start, count, metadata={sigmf.LABEL_KEY: label})
    rec.tofile(str(folder / name))
    if bad is not None:   # the library checks what it writes: the tool's mistake goes in by hand
        path = folder / f"{name}.sigmf-meta"
        meta = json.loads(path.read_text())
        meta["annotations"].append(bad)
        path.write_text(json.dumps(meta))
    if archive:
        rec = sigmffile.fromfile(str(folder / f"{name}.sigmf-meta"), skip_checksum=True)
        rec.tofile(str(folder / name), toarchive=True)
    return x


PAST_THE_END = {"core:sample_start": N + 10, "core:sample_count": 100, "core:label": "GMSK"}

BAD = [   # (the annotation, what its reject says)
    (PAST_THE_END, rf"annotation 3 \({N + 10}\+100\) lies outside the {N} samples of rec.sigmf-data"),
    ({"core:sample_start": N - 100, "core:sample_count": 101}, rf"annotation 3 \({N - 100}\+101\) lies outside"),
    ({"core:sample_start": -5, "core:sample_count": 10}, r"annotation 3 \(-5\+10\) lies outside"),
    ({"core:sample_start": 0, "core:sample_count": -10}, r"annotation 3 \(0\+-10\) lies outside"),
    ({"core:sample_start": 2 ** 70, "core:sample_count": 10}, rf"annotation 3 \({2 ** 70}\+10\) lies outside"),
    ({"core:sample_start": 10, "core:sample_count": 1e30}, r"annotation 3 \(10\+1000000000000000019884624838656\)"),
    ({"core:sample_start": 10.5, "core:sample_count": 10}, r"annotation 3: core:sample_start must be an integer, "
                                                           r"got 10.5"),
    ({"core:sample_start": "10"}, r'annotation 3: core:sample_start must be an integer, got "10"'),
    ({"core:sample_start": True}, r"annotation 3: core:sample_start must be an integer, got true"),
    ({"core:sample_start": 10, "core:sample_count": 1.5}, r"annotation 3: core:sample_count must be an integer"),
    ({"core:sample_start": 10, "core:sample_count": 100, "core:freq_lower_edge": 915.2e6,
      "core:freq_upper_edge": 915.1e6}, r"annotation 3: core:freq_lower_edge and .* lower first"),
    ({"core:sample_start": 10, "core:sample_count": 100, "core:freq_lower_edge": 1e9,
      "core:freq_upper_edge": 1.1e9}, r"annotation 3's band \(1e\+09..1.1e\+09 Hz\) is centred outside"),
]


@pytest.mark.parametrize(("bad", "why"), BAD)
def test_the_annotation_is_a_reject_and_the_others_are_read(tmp_path, bad, why):
    x = _recording(tmp_path, "rec", bad=bad)
    bursts = read_sigmf(tmp_path / "rec")
    read = [b for b in bursts if rejected(b) is None]
    assert [(b.start_sample, b.truth_label) for b in read] == [(s, label) for s, _, label in GOOD]
    for b, (start, count, _) in zip(read, GOOD, strict=True):
        np.testing.assert_array_equal(b.iq, x[start:start + count])
    (reject,) = [b for b in bursts if rejected(b) is not None]
    assert re.search(why, rejected(reject)), rejected(reject)
    assert len(reject.iq) == 0 and reject.source == str(tmp_path / "rec.sigmf-meta")
    with pytest.raises(Exception, match=BAD_ANNOTATION):
        np.asarray(reject.iq)   # what Classifier.classify makes of it: the reject (below)


def test_json_nan_as_a_start_is_a_reject(tmp_path):
    """Python's json reads NaN; a start of NaN was 'must be an integer' for the whole file."""
    _recording(tmp_path, "rec", bad={"core:sample_start": float("nan")})   # NaN, as Python's json writes it
    assert '"core:sample_start": NaN' in (tmp_path / "rec.sigmf-meta").read_text()
    bursts = read_sigmf(tmp_path / "rec")
    assert [rejected(b) for b in bursts] == ["annotation 3: core:sample_start must be an integer, got NaN",
                                             None, None, None]
    assert bursts[0].start_sample == -1   # no start to give: first in time, as the file lists it


def test_a_band_that_cannot_be_placed_is_a_reject_unless_the_whole_band_is_read(tmp_path):
    banded = {"core:sample_start": 10, "core:sample_count": 100, "core:freq_lower_edge": 915.1e6,
              "core:freq_upper_edge": 915.2e6}
    _recording(tmp_path, "rec", bad=banded, capture={})
    bursts = read_sigmf(tmp_path / "rec")
    (reject,) = [b for b in bursts if rejected(b)]
    assert "no core:frequency in its capture to place it in the samples; add it, or classify the whole band " \
           "(--full-band)" in rejected(reject)
    assert len(bursts) == 4
    assert not any(rejected(b) for b in read_sigmf(tmp_path / "rec", reading=Reading(full_band=True)))


def test_limit_zero_checks_without_refusing(tmp_path):
    """The check every file gets before any work (limit 0) does not refuse it."""
    _recording(tmp_path, "rec", bad=PAST_THE_END)
    assert read_sigmf(tmp_path / "rec", limit=0) == []


def _classify(model_dir, *args: str) -> int:
    return main(["classify", *args, "--model-dir", str(model_dir), "--device", "cpu"])


def test_classify_counts_the_reject_and_classifies_the_rest_of_the_run(tiny_model_dir, tmp_path, capsys):
    _recording(tmp_path, "bad", seed=1, bad=PAST_THE_END)
    _recording(tmp_path, "good", seed=2)
    assert _classify(tiny_model_dir, str(tmp_path / "bad"), str(tmp_path / "good"), "--json") == 0
    captured = capsys.readouterr()
    records = [json.loads(line) for line in captured.out.splitlines()]
    assert [(r["file"].rsplit("/", 1)[1], r["start_sample"], r["ok"]) for r in records] == [
        ("bad.sigmf-meta", 100, True), ("bad.sigmf-meta", 1500, True), ("bad.sigmf-meta", 2800, True),
        ("bad.sigmf-meta", N + 10, False),
        ("good.sigmf-meta", 100, True), ("good.sigmf-meta", 1500, True), ("good.sigmf-meta", 2800, True)]
    reject = records[3]
    assert reject["reason"] == "bad_annotation" and reject["n_samples"] == 0 and reject["burst"] == 3
    assert reject["detail"] == f"annotation 3 ({N + 10}+100) lies outside the {N} samples of bad.sigmf-data"
    assert "6 classified; 1 rejected (bad_annotation 1)" in captured.err
    # the table says so too, as for every reject
    assert _classify(tiny_model_dir, str(tmp_path / "bad")) == 0
    out = capsys.readouterr().out
    assert re.search(rf"bad.sigmf-meta +3 +{N + 10} +0 \[bad_annotation\]", out), out
    assert "3 classified; 1 rejected (bad_annotation 1)" in out


def test_classify_an_archive_reads_its_other_recordings(tiny_model_dir, tmp_path, capsys):
    import tarfile

    _recording(tmp_path, "a", seed=1, bad=PAST_THE_END)
    _recording(tmp_path, "b", seed=2)
    with tarfile.open(tmp_path / "both.sigmf", "w") as tar:
        for name in ("a.sigmf-meta", "a.sigmf-data", "b.sigmf-meta", "b.sigmf-data"):
            tar.add(tmp_path / name, arcname=f"both/{name}")
    assert _classify(tiny_model_dir, str(tmp_path / "both.sigmf"), "--json") == 0
    captured = capsys.readouterr()
    records = [json.loads(line) for line in captured.out.splitlines()]
    assert [r["file"].rsplit("/", 1)[1] for r in records if r["ok"]] == ["a.sigmf-meta"] * 3 + ["b.sigmf-meta"] * 3
    (reject,) = [r for r in records if not r["ok"]]
    assert reject["file"] == f"{tmp_path / 'both.sigmf'}/both/a.sigmf-meta" and reject["reason"] == "bad_annotation"
    assert "6 classified; 1 rejected (bad_annotation 1)" in captured.err


def test_a_recording_that_cannot_be_read_is_still_refused_before_any_work(tiny_model_dir, tmp_path, capsys):
    """The rule's other half: a file that cannot be read at all (here, a datatype SigMF has not)
    stops the run before the first burst, so a typo does not cost a long run."""
    _recording(tmp_path, "good")
    _recording(tmp_path, "typo")
    path = tmp_path / "typo.sigmf-meta"
    path.write_text(path.read_text().replace('"cf32_le"', '"cf32_el"'))
    assert _classify(tiny_model_dir, str(tmp_path / "good"), str(tmp_path / "typo")) == 2
    captured = capsys.readouterr()
    assert "classified" not in captured.out and len(captured.err.strip().splitlines()) == 1
    assert "unsupported SigMF datatype 'cf32_el'" in captured.err


def test_a_multichannel_recording_rejects_the_annotation_once(tiny_model_dir, tmp_path, capsys):
    x = np.zeros((N, 2, 2), np.float32)
    x.tofile(tmp_path / "two.sigmf-data")
    meta = {"global": {"core:datatype": "cf32_le", "core:num_channels": 2, "core:version": "1.2.0"},
            "captures": [{"core:sample_start": 0}],
            "annotations": [{"core:sample_start": 0, "core:sample_count": 100}, PAST_THE_END]}
    (tmp_path / "two.sigmf-meta").write_text(json.dumps(meta))
    assert _classify(tiny_model_dir, str(tmp_path / "two"), "--json") == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r.get("channel"), r.get("reason")) for r in records] == [(0, "zero_power"), (1, "zero_power"),
                                                                      (None, "bad_annotation")]


def _annotated(meta_path) -> tuple[list[dict], list[dict]]:
    annotations = json.loads(meta_path.read_text())["annotations"]
    ours = [a for a in annotations if a.get("core:generator", "").startswith("rfclassify ")]
    return ours, [a for a in annotations if a not in ours]


def test_annotate_writes_nothing_for_the_rejected_annotation(tiny_model_dir, tmp_path, capsys):
    """--annotate writes one annotation a burst classified; the one that could not be read has
    no samples to mark (an annotation of ours at its start would lie past the data, or at -1),
    and the user's own stays as they wrote it. The sigmf library opens and checks the file."""
    x = _recording(tmp_path, "rec", bad=PAST_THE_END)
    assert _classify(tiny_model_dir, str(tmp_path / "rec"), "--annotate") == 0
    out = capsys.readouterr().out
    written = tmp_path / "rec.rfclassify.sigmf-meta"
    assert f"annotated 3 bursts: {written}" in out and "3 classified; 1 rejected (bad_annotation 1)" in out
    ours, users = _annotated(written)
    assert [(a["core:sample_start"], a["core:sample_count"]) for a in ours] == [(s, c) for s, c, _ in GOOD]
    assert users == json.loads((tmp_path / "rec.sigmf-meta").read_text())["annotations"]
    with pytest.warns(UserWarning, match="Data source ends before the final annotation"):   # the user's, as in theirs
        rec = sigmffile.fromfile(str(written))
    rec.validate()
    np.testing.assert_array_equal(rec.read_samples(0, N), x)


def test_annotate_keeps_an_annotation_with_a_nan_start_in_place(tiny_model_dir, tmp_path, capsys):
    """A start of NaN compares false both ways: sorted() left the written annotations in an
    arbitrary order around it. It is kept first, as other entries without a number are."""
    _recording(tmp_path, "rec")
    path = tmp_path / "rec.sigmf-meta"
    meta = json.loads(path.read_text())
    meta["annotations"].insert(1, {"core:sample_start": float("nan"), "core:label": "QPSK"})
    path.write_text(json.dumps(meta))   # NaN, as Python's json writes and reads it
    assert _classify(tiny_model_dir, str(tmp_path / "rec"), "--annotate") == 0
    assert "3 classified; 1 rejected (bad_annotation 1)" in capsys.readouterr().out
    annotations = json.loads((tmp_path / "rec.rfclassify.sigmf-meta").read_text())["annotations"]
    assert annotations[0]["core:sample_start"] == "nan"   # strict JSON names it
    starts = [a["core:sample_start"] for a in annotations[1:]]
    assert starts == sorted(starts) == [100, 100, 1500, 1500, 2800, 2800]


def test_import_skips_and_names_the_annotation_and_imports_the_rest(tmp_path, capsys):
    x = _recording(tmp_path, "bad", seed=1, bad=PAST_THE_END)
    y = _recording(tmp_path, "good", seed=2)
    out = tmp_path / "field.h5"
    assert main(["dataset", "import", str(tmp_path / "bad"), str(tmp_path / "good"), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert (f"skipped 1 with an annotation that cannot be read ({tmp_path / 'bad.sigmf-meta'}: annotation 3 "
            f"({N + 10}+100) lies outside the {N} samples of bad.sigmf-data)") in text, text
    with DatasetReader(out) as ds:
        assert [str(n) for n in ds.label_names] == [label for *_, label in GOOD] * 2
        iq = ds.read(np.arange(len(ds)))
    want = [s[start:start + count] for s in (x, y) for start, count, _ in GOOD]
    for got, expect in zip(iq, want, strict=True):
        np.testing.assert_array_equal(got, expect)


def test_import_names_the_first_few_bad_annotations_and_counts_the_rest(tmp_path):
    _recording(tmp_path, "rec", bad=PAST_THE_END)
    path = tmp_path / "rec.sigmf-meta"
    meta = json.loads(path.read_text())
    meta["annotations"] += [{"core:sample_start": -k, "core:sample_count": 10} for k in range(1, 5)]
    path.write_text(json.dumps(meta))
    report = import_recordings([str(tmp_path / "rec")], tmp_path / "rec.h5")
    assert report.n_examples == 3 and [(k, len(v)) for k, v in report.not_read.items()] == [(BAD_ANNOTATION, 5)]
    ((why, n),) = [(why, n) for why, n in report.skipped.items() if "cannot be read" in why]
    assert n == 5 and why.endswith("; and 2 more)") and why.count(": annotation ") == 3


def test_import_of_nothing_but_bad_annotations_is_one_error_naming_them(tmp_path, capsys):
    _recording(tmp_path, "rec")
    path = tmp_path / "rec.sigmf-meta"
    meta = json.loads(path.read_text())
    meta["annotations"] = [PAST_THE_END]
    path.write_text(json.dumps(meta))
    assert main(["dataset", "import", str(tmp_path / "rec"), "--out", str(tmp_path / "rec.h5")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no burst to import: 1 with an annotation that cannot be read" in err
    assert "annotation 0 (4010+100) lies outside" in err and not (tmp_path / "rec.h5").exists()
