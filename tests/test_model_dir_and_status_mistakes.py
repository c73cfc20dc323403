"""A user's mistakes in a model directory or an engine cache, and a daemon's odd status reply:
each one line (exit 2), or shown plainly, never a traceback."""

from __future__ import annotations

import json
import math
import re
import shutil
import threading

import numpy as np
import pytest

import rfclassify
from rfclassify.cli import main
from rfclassify.model.meta import ModelMeta


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def _sigmf_burst(folder, n: int = 512) -> str:
    rng = np.random.default_rng(0)
    (folder / "x.sigmf-data").write_bytes((rng.standard_normal(n) + 1j * rng.standard_normal(n))
                                          .astype(np.complex64).tobytes())
    (folder / "x.sigmf-meta").write_text(json.dumps({"global": {"core:datatype": "cf32_le"}}))
    return str(folder / "x")


@pytest.mark.parametrize("edit,message", [
    (None, "model.json: model_id is missing"),                   # the shortest: {}
    ({}, "model.json: model_id is missing"),                      # a full model.json without it
    ({"model_id": ""}, 'model_id must be a non-empty string, got ""'),
    ({"model_id": None}, "model_id must be a non-empty string, got null"),
    ({"model_id": 7}, "model_id must be a non-empty string, got 7"),
])
def test_a_model_json_without_a_model_id_is_one_line_exit_2(tiny_model_dir, tmp_path, capsys, edit, message):
    """model_id is the one field without a default: missing, the constructor's TypeError was a
    traceback, exit 1, in every command that loads a model."""
    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    data = json.loads((model_dir / "model.json").read_text())
    data.pop("model_id")
    (model_dir / "model.json").write_text(json.dumps({} if edit is None else {**data, **edit}))
    with pytest.raises(rfclassify.ModelNotFoundError, match=re.escape(message)):
        ModelMeta.load(model_dir)
    burst = _sigmf_burst(tmp_path)
    for argv in (["classify", burst, "--model-dir", str(model_dir)],
                 ["engine", "build", "--plan", "--model-dir", str(model_dir), "--cache-dir", str(tmp_path / "c")]):
        assert main(argv) == 2
        assert message in _one_error_line(capsys)


def test_a_model_json_of_defaults_but_the_id_still_loads(tmp_path):
    """The other fields have defaults older model.json files rely on."""
    (tmp_path / "model.json").write_text(json.dumps({"model_id": "old"}))
    assert ModelMeta.load(tmp_path).model_id == "old"


@pytest.mark.parametrize("action", ["inspect", "prune"])
def test_an_engine_cache_dir_that_does_not_exist_or_is_a_file_is_one_line_exit_2(
        tiny_model_dir, tmp_path, capsys, action):
    """A typo in --cache-dir listed "0 engine(s)" (prune: "0 file(s) freed"), exit 0."""
    model = ["--model-dir", str(tiny_model_dir)] if action == "prune" else []
    a_file = tmp_path / "engines.txt"
    a_file.write_text("x")
    for cache, why in ((tmp_path / "enigines", "no such folder"), (a_file, "not a folder"),
                       (a_file / "engines", "not a folder")):
        assert main(["engine", action, "--cache-dir", str(cache), *model]) == 2
        err = _one_error_line(capsys)
        assert f"--cache-dir {cache}: {why}" in err and "0 engine" not in err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["engine", action, "--cache-dir", str(empty), *model]) == 0
    out = capsys.readouterr().out
    assert ("0 engine(s)" if action == "inspect" else "0 file(s)") in out and "not made yet" not in out


@pytest.mark.parametrize("action", ["inspect", "prune"])
def test_the_default_engine_cache_not_made_yet_is_no_mistake(tiny_model_dir, tmp_path, monkeypatch, capsys, action):
    monkeypatch.setenv("RFCLASSIFY_ENGINE_CACHE", str(tmp_path / "never-built"))
    model = ["--model-dir", str(tiny_model_dir)] if action == "prune" else []
    assert main(["engine", action, *model]) == 0
    out = capsys.readouterr().out
    assert "not made yet" in out and str(tmp_path / "never-built") in out
    assert not (tmp_path / "never-built").exists()
    if action == "inspect":
        assert main(["engine", "inspect", "--json"]) == 0
        assert json.loads(capsys.readouterr().out) == {"cache": str(tmp_path / "never-built"), "exists": False,
                                                       "engines": []}


def _status_of(reply: bytes, tmp_path, capsys, *options: str) -> tuple[int, str, str]:
    """`rfclassify status [options]` against a REP socket that answers `reply` once."""
    import zmq

    endpoint = f"ipc://{tmp_path}/ctl"
    ctx = zmq.Context()
    try:
        rep = ctx.socket(zmq.REP)
        rep.bind(endpoint)
        server = threading.Thread(target=lambda: (rep.recv(), rep.send(reply)), daemon=True)
        server.start()
        code = main(["status", "--control", endpoint, "--timeout", "5", *options])
        server.join(5)
        rep.close(0)
    finally:
        ctx.destroy(linger=0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_status_shows_an_odd_uptime_plainly(tmp_path, capsys):
    """Python's json (the daemon's too) reads Infinity: int() of it was an OverflowError traceback."""
    for uptime, shown in ((b"Infinity", "inf s"), (b"NaN", "nan s"), (b"-5", "-5 s"), (b"3725.5", "01:02:05")):
        code, out, err = _status_of(b'{"health": "ok", "counters": {}, "uptime_s": %s}' % uptime, tmp_path, capsys)
        assert code == 0 and err == "", err
        assert f"\nuptime      {shown}  (pid None" in out, out


def test_status_of_numbers_no_table_can_show_is_one_line_not_a_traceback(tmp_path, capsys):
    """A daemon of another version may send any number in any field the table formats: an
    integer past a float's range made the MB column's division raise OverflowError; non-finite
    floats print as inf and nan."""
    reply = {"health": "ok", "uptime_s": 1, "counters": {"received": 1},
             "queues": {"ingest": 1, "ingest_bytes": 10 ** 400, "batching": 0, "infer_batches": 0, "publish": 0}}
    code, out, err = _status_of(json.dumps(reply).encode(), tmp_path, capsys)
    assert code != 0 and out == "" and "Traceback" not in err
    assert err.count("\n") == 1 and "not a status this version reads" in err, err
    reply = {"health": "ok", "uptime_s": 1, "counters": {"received": 1}, "throughput_bursts_per_s": -math.inf,
             "heartbeat_age_s": math.nan, "accuracy": {"overall": math.inf, "n": 3}}
    code, out, err = _status_of(json.dumps(reply).encode(), tmp_path, capsys)
    assert code == 0 and err == "", err
    assert "throughput  -inf bursts/s" in out and "heartbeat   nan s ago" in out and "accuracy    inf% of 3" in out


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def test_status_json_of_a_reply_with_nan_and_infinity_is_strict_json(tmp_path, capsys):
    """A daemon before the seventy-first session sent NaN and Infinity (a tegrastats temperature
    past a float's range), which Python's json reads: `--json` wrote them out again, and jq and
    JSON.parse refused its output. Now each is null; the table still shows them as numbers."""
    reply = (b'{"health": "ok", "counters": {"received": 1}, "uptime_s": Infinity, '
             b'"throughput_bursts_per_s": -Infinity, "jetson": {"temps_c": {"CPU": NaN, "tj": 46.5}}, '
             b'"health_reasons": ["NaN", "Infinity"]}')
    code, out, err = _status_of(reply, tmp_path, capsys, "--json")
    assert code == 0 and err == "", err
    st = json.loads(out, parse_constant=_refuse_constant)
    assert st["uptime_s"] is None and st["throughput_bursts_per_s"] is None
    assert st["jetson"]["temps_c"] == {"CPU": None, "tj": 46.5}
    assert st["health_reasons"] == ["NaN", "Infinity"] and st["counters"] == {"received": 1}
    code, out, err = _status_of(reply, tmp_path, capsys)
    assert code == 0 and err == "", err
    assert "uptime      inf s" in out and "throughput  -inf bursts/s" in out and "CPU nanC, tj 46.5C" in out


def test_status_shows_the_nulls_a_daemon_sends_for_nan_and_infinity_as_question_marks(tmp_path, capsys):
    """The daemon writes a non-finite number as null (since the seventy-first session): the
    table's number formats raised TypeError on it, and the status was "not one this version reads"."""
    reply = {"health": "ok", "uptime_s": None, "counters": {"received": 3}, "throughput_bursts_per_s": None,
             "accuracy": {"overall": None, "best_guess": None, "n": 3,
                          "per_snr_db": {"0..10": {"accuracy": None, "n": 3}}},
             "jetson": {"power_mode": {"name": "MAXN", "id": 0}, "age_s": 0.5, "temps_c": {"CPU": None, "tj": 46.5}}}
    code, out, err = _status_of(json.dumps(reply).encode(), tmp_path, capsys)
    assert code == 0 and err == "", err
    for shown in ("uptime      ?  (pid", "throughput  ? bursts/s", "accuracy    ?% of 3 bursts with ground truth "
                  "(best guess ?%)", "by SNR dB 0..10: ?% (n=3)", "temps     CPU ?C, tj 46.5C"):
        assert shown in out, out


def test_a_model_pt_that_is_not_weights_is_one_line_without_torch_advice(tiny_model_dir, tmp_path, capsys):
    """torch's weights-only refusal advised loading with weights_only=False ("can result in
    arbitrary code execution"), and a file cut short read as "Invalid argument"."""
    pytest.importorskip("torch")
    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    weights = (model_dir / "model.pt").read_bytes()
    burst = _sigmf_burst(tmp_path)
    for content in (b"garbage\n", weights[:len(weights) // 2], b""):
        (model_dir / "model.pt").write_bytes(content)
        with pytest.raises(rfclassify.ModelNotFoundError, match="not a weights file of this model") as caught:
            rfclassify.Classifier.load(model_dir, backend="torch", device="cpu")
        assert "weights_only" not in str(caught.value) and "Invalid argument" not in str(caught.value)
        assert main(["classify", burst, "--backend", "torch", "--device", "cpu", "--model-dir", str(model_dir)]) == 2
        err = _one_error_line(capsys)
        assert f"{model_dir / 'model.pt'}: not a weights file of this model" in err
        assert "weights_only" not in err and "arbitrary code" not in err
