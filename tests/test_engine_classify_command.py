"""`rfclassify classify` on SigMF recordings and an HDF5 dataset written here."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from rfclassify.cli import main
from rfclassify.engine.sigmf import read_sigmf, sigmf_dtype


def _iq(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np.complex64)


def _write_sigmf(base, iq, datatype, annotations=None, sample_rate=1e6):
    if datatype.startswith("cf32"):
        data = iq.astype(">c8" if datatype.endswith("_be") else "<c8")
    else:  # ci16_*
        pairs = np.stack([iq.real, iq.imag], axis=1) * 3000
        data = np.round(pairs).astype(">i2" if datatype.endswith("_be") else "<i2")
    base.with_name(base.name + ".sigmf-data").write_bytes(data.tobytes())
    meta = {"global": {"core:datatype": datatype, "core:sample_rate": sample_rate, "core:version": "1.0.0"},
            "captures": [{"core:sample_start": 0}], "annotations": annotations or []}
    base.with_name(base.name + ".sigmf-meta").write_text(json.dumps(meta))
    return base


@pytest.mark.parametrize("datatype", ["cf32_le", "ci16_le", "ci16_be"])
def test_sigmf_annotations_become_bursts_with_truth(tmp_path, datatype):
    iq = _iq(6000, seed=1)
    ann = [{"core:sample_start": 100, "core:sample_count": 1500, "core:label": "QPSK"},
           {"core:sample_start": 2000, "core:sample_count": 40},
           {"core:sample_start": 3000, "core:sample_count": 3000, "core:label": "not a label"}]
    base = _write_sigmf(tmp_path / "rec", iq, datatype, ann)
    bursts = read_sigmf(base.with_name("rec.sigmf-data"))
    assert [(b.start_sample, b.iq.size, b.truth_label) for b in bursts] == [
        (100, 1500, "QPSK"), (2000, 40, None), (3000, 3000, None)]
    assert bursts[0].sample_rate_hz == 1e6
    # ints are scaled, but the direction of every sample survives the round trip
    got = bursts[0].iq / np.abs(bursts[0].iq).max()
    want = iq[100:1600] / np.abs(iq[100:1600]).max()
    np.testing.assert_allclose(got, want, atol=1e-3)


def test_classify_sigmf_prints_a_table_and_accuracy(tiny_model_dir, tmp_path, capsys):
    ann = [{"core:sample_start": 0, "core:sample_count": 1024, "core:label": "BPSK"},
           {"core:sample_start": 1024, "core:sample_count": 10}]
    base = _write_sigmf(tmp_path / "a", _iq(2048, 2), "cf32_le", ann)
    whole = _write_sigmf(tmp_path / "b", _iq(700, 3), "ci16_le")
    rc = main(["classify", str(base), str(whole) + ".sigmf-meta",
               "--model-dir", str(tiny_model_dir), "--device", "cpu"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "[too_short]" in out and "BPSK" in out
    assert "2 classified; 1 rejected (too_short 1); accuracy" in out
    assert "on 1 labelled bursts" in out


def test_classify_json_lines(tiny_model_dir, tmp_path, capsys):
    base = _write_sigmf(tmp_path / "c", _iq(5000, 4), "cf32_le")
    rc = main(["classify", str(base), "--model-dir", str(tiny_model_dir), "--device", "cpu",
               "--json", "--top", "2"])
    captured = capsys.readouterr()
    (line,) = captured.out.strip().splitlines()
    rec = json.loads(line)
    assert rec["ok"] and rc == 0 and len(rec["top"]) == 2
    assert rec["n_samples"] == 5000 and rec["bucket"] == 4096 and rec["windows"] == 2
    assert rec["backend"] == "onnxruntime" and rec["sample_rate"] == 1e6
    assert "1 classified" in captured.err


def test_classify_hdf5_dataset_reports_accuracy(tiny_model_dir, tmp_path, capsys):
    schema = pytest.importorskip("rfclassify.data.schema")
    attrs = schema.DatasetAttrs(source="synth", seed=0, generator="test", classes=("QPSK", "FM"),
                                snr_grid_db=(10.0,), channel={"clean": {}}, lengths={"rule": "test"})
    params_dtype = np.dtype([("x", np.float32)])
    path = tmp_path / "d.h5"
    with schema.DatasetWriter(path, attrs, params_dtype) as w:
        w.append([_iq(n, n) for n in (64, 300, 2048)], np.array([4, 26, 4]),
                 np.array([10.0, 10.0, np.nan]), np.zeros(3, params_dtype))
        w.commit()
    rc = main(["classify", str(path), "--model-dir", str(tiny_model_dir), "--device", "cpu", "--json"])
    captured = capsys.readouterr()
    recs = [json.loads(x) for x in captured.out.strip().splitlines()]
    assert rc == 0 and len(recs) == 3
    assert [r["truth"]["label"] for r in recs] == ["QPSK", "FM", "QPSK"]
    assert recs[2]["truth"]["snr_db"] is None
    assert "accuracy" in captured.err and "on 3 labelled bursts" in captured.err
    assert "best guess right" in captured.err
    # a dataset whose labels the model does not classify: such a truth was counted wrong
    from rfclassify.labels import LABELS

    foreign = tmp_path / "foreign.h5"
    attrs = schema.DatasetAttrs(source="synth", seed=0, generator="test", classes=("QPSK", "WIFI"),
                                snr_grid_db=(10.0,), channel={"clean": {}}, lengths={"rule": "test"},
                                labels=("WIFI", *LABELS[1:]))
    with schema.DatasetWriter(foreign, attrs, params_dtype) as w:
        w.append([_iq(n, n) for n in (300, 2048, 512)], np.array([0, 4, 0]),
                 np.array([10.0, 10.0, 10.0]), np.zeros(3, params_dtype))
        w.commit()
    assert main(["classify", str(foreign), "--model-dir", str(tiny_model_dir), "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "on 1 labelled bursts" in out and "2 not scored (labelled WIFI: not a label this model classifies)" in out


@pytest.mark.parametrize(
    ("setup", "match"),
    [
        (lambda p: p, "no such file"),
        # a folder: '' and '/' raised Path's ValueError (empty name) out of the SigMF pairing
        (lambda p: (p.mkdir(), p)[1], "bad: a directory; name a SigMF recording or an HDF5 dataset"),
        (lambda p: "", "'': a directory"),
        (lambda p: "/", "/: a directory"),
        (lambda p: (p.write_text("hello"), p)[1], "neither SigMF"),
        (lambda p: _write_sigmf(p, _iq(100, 0), "cq16_le"), "unsupported SigMF datatype"),
        # metadata that once raised a traceback (OverflowError, ValueError, RecursionError) or was
        # taken as it came (a NaN rate, annotations that are not a list). One annotation that cannot
        # be read (outside the data, a start or count that is not an integer) is no longer a bad
        # file but that burst's bad_annotation reject: tests/test_sigmf_bad_annotations.py
        (lambda p: _write_sigmf(p, _iq(100, 0), "cf32_le", sample_rate=10 ** 400), "positive finite number"),
        (lambda p: _write_sigmf(p, _iq(100, 0), "cf32_le", sample_rate=float("nan")), "got NaN"),
        (lambda p: _write_sigmf(p, _iq(100, 0), "cf32_le", "all of it"), "'annotations' must be a list"),
        (lambda p: (_write_sigmf(p, _iq(100, 0), "cf32_le"),
                    p.with_name("bad.sigmf-meta").write_text('{"global": ' + "[" * 100_000 + "]" * 100_000 + "}"))[0],
         # RecursionError on Python 3.11; 3.12's parser reads deeper and may find a list
         "cannot read SigMF metadata|has no 'global' object"),
    ],
)
def test_bad_files_are_one_line_and_exit_2(tiny_model_dir, tmp_path, capsys, setup, match):
    path = setup(tmp_path / "bad")
    rc = main(["classify", str(path), "--model-dir", str(tiny_model_dir), "--device", "cpu"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and re.search(match, err), err


def test_sigmf_offsets_written_as_whole_floats_are_read(tmp_path):
    base = _write_sigmf(tmp_path / "f", _iq(100, 0), "cf32_le", [{"core:sample_start": 10.0, "core:sample_count": 80.0}])
    (burst,) = read_sigmf(base)
    assert (burst.start_sample, burst.iq.size) == (10, 80)


def test_samples_past_float32_are_a_non_finite_reject_not_a_warning(tiny_model_dir, tmp_path, capsys):
    """A cf64 recording whose values float32 cannot hold (warnings are errors in the tests)."""
    base = tmp_path / "loud"
    base.with_name("loud.sigmf-data").write_bytes(np.full(512, 1e300, "<f8").tobytes())
    base.with_name("loud.sigmf-meta").write_text(json.dumps({"global": {"core:datatype": "cf64_le",
                                                                        "core:sample_rate": 1e6}}))
    assert main(["classify", str(base), "--model-dir", str(tiny_model_dir), "--device", "cpu"]) == 0
    assert "1 rejected (non_finite 1)" in capsys.readouterr().out


def test_sigmf_datatypes():
    assert sigmf_dtype("cf32_le") == (np.dtype("<f4"), True)
    assert sigmf_dtype("ci16_be") == (np.dtype(">i2"), True)
    assert sigmf_dtype("ci8") == (np.dtype("i1"), True)
    assert sigmf_dtype("rf64_le") == (np.dtype("<f8"), False)
    with pytest.raises(Exception, match="endianness"):
        sigmf_dtype("ci16")


@pytest.mark.parametrize("command", ["classify", "serve", "bench", "export", "evaluate"])
def test_an_empty_model_dir_is_refused_not_read_as_the_current_directory(command, tmp_path, capsys):
    args = {"classify": ["classify", str(tmp_path / "x.sigmf-meta")], "serve": ["serve"], "bench": ["bench", "model"],
            "export": ["export"], "evaluate": ["evaluate", str(tmp_path / "x.h5")]}
    with pytest.raises(SystemExit) as exc:
        main([*args[command], "--model-dir", ""])
    assert exc.value.code == 2 and "--model-dir: must not be empty" in capsys.readouterr().err


def test_sigmf_metadata_with_awkward_fields_is_read_or_refused_never_raised(tmp_path):
    """Seeded: SigMF metadata whose fields are swapped for awkward values (wrong types, NaN,
    integers past float range, nesting) is read or refused with an InputError, nothing else."""
    from rfclassify._exceptions import InputError

    awkward = [None, True, -1, 0, 2.5, 10 ** 400, float("nan"), float("inf"), "x", [], {}, [1, [2]], {"a": None}]
    rng = np.random.default_rng(11)
    base = tmp_path / "rec"
    base.with_name("rec.sigmf-data").write_bytes(_iq(256, 1).tobytes())
    outcomes = {"read": 0, "refused": 0}
    for _ in range(400):
        meta = {"global": {"core:datatype": "cf32_le", "core:sample_rate": 1e6, "core:num_channels": 1},
                "captures": [{"core:sample_start": 0, "core:header_bytes": 0}],
                "annotations": [{"core:sample_start": 10, "core:sample_count": 100, "core:label": "QPSK"}]}
        for section, key in (("global", "core:datatype"), ("global", "core:sample_rate"),
                             ("global", "core:num_channels"), ("captures", "core:header_bytes"),
                             ("annotations", "core:sample_start"), ("annotations", "core:sample_count"),
                             ("annotations", "core:label")):
            if rng.random() < 0.2:
                value = awkward[int(rng.integers(0, len(awkward)))]
                target = meta[section] if section == "global" else meta[section][0]
                target[key] = value
        for section in ("captures", "annotations"):
            if rng.random() < 0.05:
                meta[section] = awkward[int(rng.integers(0, len(awkward)))]
        base.with_name("rec.sigmf-meta").write_text(json.dumps(meta))
        try:
            read_sigmf(base)
            outcomes["read"] += 1
        except InputError:
            outcomes["refused"] += 1
    assert outcomes["read"] > 0 and outcomes["refused"] > 0, outcomes


def test_a_reader_that_leaves_early_ends_the_command_quietly(tiny_model_dir, tmp_path):
    """`rfclassify classify FILE --json | head -1`: the closed pipe printed a BrokenPipeError
    traceback (and, after the fifty-eighth session's one-line OSError, 'error: Broken pipe')."""
    import subprocess
    import sys

    base = tmp_path / "rec"
    n = 1024                        # about 400 KB of JSON lines: more than a pipe holds
    _write_sigmf(base, _iq(n * 256, 5), "cf32_le",
                 [{"core:sample_start": 256 * i, "core:sample_count": 256} for i in range(n)])
    with subprocess.Popen([sys.executable, "-m", "rfclassify", "classify", str(base), "--json",
                           "--model-dir", str(tiny_model_dir)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0) as proc:
        assert json.loads(proc.stdout.readline())["burst"] == 0
        proc.stdout.close()                              # the reader leaves after one line
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=120) == 1
    assert "Traceback" not in err and "Broken pipe" not in err and "Exception ignored" not in err, err
