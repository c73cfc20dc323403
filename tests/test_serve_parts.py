"""The daemon's parts on their own: queues, batching, stats, config, notify, tegrastats, metrics, unit file."""

from __future__ import annotations

import configparser
import dataclasses
import logging
import math
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from rfclassify._exceptions import ConfigError
from rfclassify.dsp.windows import BucketPolicy, burst_to_windows
from rfclassify.serve.batching import BoundedQueue, BucketBatcher, Pending
from rfclassify.serve.bursts import Burst
from rfclassify.serve.config import (
    RELOADABLE,
    BatchingConfig,
    BucketBatching,
    DaemonConfig,
    apply_overrides,
    config_from_dict,
    load_config,
    reloadable_changes,
)
from rfclassify.serve.metrics import render_metrics
from rfclassify.serve.sdnotify import Notifier
from rfclassify.serve.stats import DaemonStats, percentile
from rfclassify.serve.status_view import render_status
from rfclassify.serve.tegrastats import parse_nvpmodel, parse_tegrastats

REPO = Path(__file__).resolve().parents[1]


# -- bounded queues ----------------------------------------------------------------------------
def _q(policy: str, items: int = 3, nbytes: int = 1000):
    dropped: list[object] = []
    return BoundedQueue("ingest", items, nbytes, policy, lambda stage, item: dropped.append(item)), dropped


def test_drop_oldest_keeps_the_newest_items_and_reports_each_drop():
    q, dropped = _q("drop_oldest")
    for i in range(5):
        assert q.put(i, 10)
    assert dropped == [0, 1] and [q.get(0) for _ in range(3)] == [2, 3, 4] and q.get(0) is None


def test_drop_newest_refuses_when_full():
    q, dropped = _q("drop_newest")
    assert [q.put(i, 10) for i in range(5)] == [True, True, True, False, False]
    assert dropped == [3, 4] and q.get(0) == 0


def test_byte_bound_applies_before_the_item_bound():
    q, dropped = _q("drop_oldest", items=100, nbytes=1000)
    for i in range(4):
        q.put(i, 400)
    assert len(q) == 2 and q.nbytes == 800 and dropped == [0, 1]
    assert not q.put("huge", 5000) and dropped[-1] == "huge"      # could never fit


def test_block_policy_times_out_without_dropping():
    q, dropped = _q("block", items=1)
    assert q.put("a", 1)
    t0 = time.monotonic()
    assert not q.put("b", 1, timeout=0.05)
    assert time.monotonic() - t0 >= 0.04 and dropped == [] and len(q) == 1


def test_a_get_waiting_with_until_returns_on_wake_once_until_holds_and_an_item_comes_first():
    import threading

    q, _ = _q("drop_oldest")
    ready = threading.Event()
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(q.get(timeout=30, until=ready.is_set)))
    waiter.start()
    time.sleep(0.05)
    q.wake()                                   # until() still false: it keeps waiting
    waiter.join(0.2)
    assert waiter.is_alive()
    ready.set()
    q.wake()
    waiter.join(10)                            # far sooner than its 30 s timeout, or it never looked again
    assert not waiter.is_alive() and got == [None]
    q.put("burst", 1)
    assert q.get(timeout=30, until=ready.is_set) == "burst"     # an item is taken whatever until() says
    assert q.get(timeout=0, until=ready.is_set) is None and len(q) == 0


def test_a_record_as_a_pmt_dict_holds_what_its_json_holds():
    """output.format gr-pmt: one frame, a PMT dict with the topic; what JSON names (a NaN),
    cuts (nesting past 64) or a PMT cannot hold (an integer past 64 bits) as encode has it."""
    import json

    from rfclassify.serve.pmt import deserialize
    from rfclassify.serve.results import encode, encode_pmt

    deep: object = 1
    for _ in range(100):
        deep = {"a": deep}
    record = {"burst_id": 2**64 - 1, "stream": None, "top": [{"label": "QPSK", "p": 0.5}],
              "meta": {"nan": float("nan"), "huge": 10**30, "deep": deep, "empty": []}, "truth": None,
              "beyond": -10**400}
    (frame,) = encode_pmt(b"result", record)
    got = deserialize(frame, max_depth=1000)   # past our reader's guard (32); GNU Radio's has none
    expect = {"topic": "result", **json.loads(encode(b"result", record)[1])}
    expect["meta"]["huge"] = 1e30                                      # past uint64: a double
    expect["beyond"] = "-1" + "0" * 400        # past a double too: its digits (OverflowError before)
    assert got == expect and got["burst_id"] == 2**64 - 1 and got["meta"]["nan"] == "nan"
    assert deserialize(encode_pmt(b"reject", {"burst_id": None, "reason": "too_short"})[0]) == {
        "topic": "reject", "burst_id": None, "reason": "too_short"}
    # a symbol holds 65,535 bytes: a longer echoed string or key raised struct.error in the inference thread
    long = deserialize(encode_pmt(b"result", {"meta": {"s": "é" * 40_000, "k" * 70_000: 1}})[0])["meta"]
    assert len(long["s"].encode()) <= 65535 and long["s"].endswith("...") and long["s"].startswith("éé")
    assert [len(k) for k in long] == [1, 65535]


def test_records_are_strict_json_whatever_their_echoed_values_hold():
    """encode sends a record as it is when JSON can hold it, and otherwise with non-finite
    floats named and nesting past 64 levels cut, never as invalid JSON or an exception."""
    import json

    from rfclassify.serve.results import encode

    def strict(frame: bytes):
        def refuse(constant):
            raise ValueError(f"{constant} is not JSON")
        return json.loads(frame, parse_constant=refuse)

    plain = {"burst_id": 3, "meta": {"k": [1, "x", 2.5]}, "time": 1.5}
    assert encode(b"result", plain) == [b"result", json.dumps(plain, separators=(",", ":")).encode()]
    odd = {"burst_id": 4, "meta": {"x": float("nan"), "y": [float("inf"), -float("inf")]}, "time": 2.0}
    assert strict(encode(b"result", odd)[1]) == {"burst_id": 4, "meta": {"x": "nan", "y": ["inf", "-inf"]},
                                                 "time": 2.0}
    deep: object = 1
    for _ in range(5000):                     # deeper than json.dumps goes on any thread
        deep = {"a": deep}
    got = strict(encode(b"result", {"burst_id": 5, "meta": deep})[1])
    level, depth = got["meta"], 1
    while isinstance(level, dict):
        level, depth = level["a"], depth + 1
    assert got["burst_id"] == 5 and level == "..." and depth == 64
    # 100 levels: any encoder writes them (3.11's failed past about 1,000, 3.12's goes far deeper, so
    # the 5,000 above went out whole there); cut at the same 64 whatever the Python
    shallow: object = 1
    for _ in range(100):
        shallow = {"a": shallow}
    got = strict(encode(b"result", {"burst_id": 6, "meta": shallow})[1])
    level, depth = got["meta"], 1
    while isinstance(level, dict):
        level, depth = level["a"], depth + 1
    assert level == "..." and depth == 64


# -- batching --------------------------------------------------------------------------------
def _pending(n_samples: int) -> Pending:
    rng = np.random.default_rng(n_samples)
    iq = (rng.standard_normal(n_samples) + 1j * rng.standard_normal(n_samples)).astype(np.complex64)
    return Pending(Burst(iq=iq), burst_to_windows(iq, BucketPolicy()))


def test_batcher_flushes_a_bucket_when_full_and_keeps_buckets_apart():
    b = BucketBatcher(BatchingConfig(max_batch=4, max_wait_ms=1000))
    assert b.add(_pending(1024), 0.0) is None
    assert b.add(_pending(256), 0.0) is None
    assert b.add(_pending(1024), 0.0) is None
    assert b.add(_pending(1024), 0.0) is None
    batch = b.add(_pending(1024), 0.0)
    assert batch is not None and batch.bucket_samples == 1024 and len(batch.items) == 4
    assert batch.windows().shape == (4, 1024) and batch.counts() == [1, 1, 1, 1]
    assert len(b) == 1                                   # the 256-sample burst still waits


def test_batcher_counts_windows_not_bursts():
    b = BucketBatcher(BatchingConfig(max_batch=4, max_wait_ms=1000))
    assert b.add(_pending(2047), 0.0) is None            # bucket 1024, 3 windows
    batch = b.add(_pending(1500), 0.0)                   # +2 windows >= 4
    assert batch is not None and batch.n_windows == 5 and batch.counts() == [3, 2]


def test_batcher_wait_deadline_and_per_bucket_override():
    cfg = BatchingConfig(max_batch=64, max_wait_ms=10, buckets={"256": BucketBatching(max_batch=64, max_wait_ms=1)})
    b = BucketBatcher(cfg)
    b.add(_pending(1024), 100.0)
    b.add(_pending(300), 100.0)
    assert b.next_due_s(100.0) == pytest.approx(0.001)
    assert [x.bucket_samples for x in b.due(100.002)] == [256]
    assert b.due(100.005) == [] and [x.bucket_samples for x in b.due(100.011)] == [1024]
    assert b.next_due_s(100.02) is None


# -- stats -----------------------------------------------------------------------------------
def test_ground_truth_labels_past_the_limit_share_one_row():
    """A sender whose label field varies (any string is a label) fills MAX_TRUTH_CLASSES rows;
    the rest are counted in one, and the overall accuracy still counts every burst. Each new
    label added a row forever before the sixty-sixth session."""
    from rfclassify.serve.stats import MAX_TRUTH_CLASSES, OTHER_TRUTH

    s = DaemonStats()
    s.add_result("QPSK", 0.0, 0.0, 0.0, truth_label="QPSK")
    for i in range(MAX_TRUTH_CLASSES + 500):
        s.add_result("QPSK", 0.0, 0.0, 0.0, truth_label=f"label-{i}")
    s.add_result("QPSK", 0.0, 0.0, 0.0, truth_label="QPSK")       # a row it already has: its own
    acc = s.snapshot()["accuracy"]
    assert len(acc["per_class"]) == MAX_TRUTH_CLASSES + 1 and acc["n"] == MAX_TRUTH_CLASSES + 502
    assert acc["per_class"][OTHER_TRUTH]["n"] == 501 and acc["per_class"][OTHER_TRUTH]["accuracy"] == 0
    assert acc["per_class"]["QPSK"] == {"accuracy": 1.0, "n": 2, "best_guess": 1.0}


def test_percentiles_and_live_accuracy():
    assert percentile([], 50) is None
    assert percentile(list(range(1, 101)), 99) == 99 and percentile(list(range(1, 101)), 50) == 50
    s = DaemonStats()
    for i in range(10):
        s.add_result("QPSK" if i < 7 else "FM", 0.001 * i, 0.002, 0.01, truth_label="QPSK", truth_snr_db=5.0)
    s.add_result("FM", 0.0, 0.0, 0.0)                      # no truth: not in accuracy
    s.add_drop("ingest", 3)
    s.add_reject("bad_json")
    snap = s.snapshot()
    assert snap["counters"]["classified"] == 11 and snap["counters"]["dropped"] == {"ingest": 3}
    assert snap["accuracy"]["overall"] == 0.7 and snap["accuracy"]["n"] == 10
    s.add_result("unknown", 0.0, 0.0, 0.0, truth_label="QPSK", truth_snr_db=5.0, best_guess="QPSK")
    assert s.snapshot()["accuracy"]["overall"] == pytest.approx(7 / 11, abs=1e-4)
    assert s.snapshot()["accuracy"]["best_guess"] == pytest.approx(8 / 11, abs=1e-4)
    # per class too: the burst called unknown had QPSK as its best guess
    assert s.snapshot()["accuracy"]["per_class"]["QPSK"] == {"accuracy": pytest.approx(7 / 11, abs=1e-4), "n": 11,
                                                            "best_guess": pytest.approx(8 / 11, abs=1e-4)}
    assert snap["accuracy"]["per_snr_db"]["0..10"] == {"accuracy": 0.7, "n": 10}
    assert s.snapshot()["per_class"] == {"QPSK": 7, "FM": 4, "unknown": 1}
    assert snap["latency_ms"]["total"]["p50"] == 10.0
    assert s.recent_drops(60) == 3


def test_throughput_keeps_only_the_bursts_of_its_window(monkeypatch):
    """A daemon up for months at a few bursts a second holds the timestamps of its last
    window, not of every burst since it started."""
    import rfclassify.serve.stats as stats_module

    clock = [1000.0]
    monkeypatch.setattr(stats_module.time, "monotonic", lambda: clock[0])
    s = DaemonStats(throughput_window_s=10.0)
    for _ in range(3000):                   # 50 minutes at one burst a second
        clock[0] += 1.0
        s.add_result("QPSK", 0.0, 0.0, 0.0)
    # the window is (now - 10 s, now]: the burst exactly 10 s ago is kept but not counted (it
    # once was, 1.1 bursts/s at one a second)
    assert len(s._done_times) == 11 and s.throughput() == 1.0
    for _ in range(40):                     # then 40 bursts in the same instant
        s.add_result("FM", 0.0, 0.0, 0.0)
    assert s.throughput() == 5.0
    clock[0] += 60.0                        # a quiet minute
    assert s.throughput() == 0.0 and s.snapshot()["counters"]["classified"] == 3040


# -- config ----------------------------------------------------------------------------------
def test_config_reports_every_mistake_on_its_own_line():
    with pytest.raises(ConfigError) as err:
        config_from_dict({"input": {"mode": "dealer", "bogus": 1}, "batching": {"max_wait_ms": "fast"},
                          "queues": {"ingest_max_bursts": 0}, "metrics": {"listen": "nohost"}})
    lines = str(err.value).splitlines()
    assert len(lines) == 4, lines
    assert any("input.mode" in ln and "sub, pull" in ln for ln in lines)
    assert any("input.bogus: unknown key" in ln for ln in lines)
    assert any("batching.max_wait_ms: expected a number" in ln for ln in lines)
    assert any("queues.ingest_max_bursts: must be in 1..10000000" in ln for ln in lines)


def test_config_refuses_nan_and_infinity_which_pass_every_range_check():
    """TOML writes nan and inf; a NaN max_wait_ms would never send a batch, a NaN heartbeat
    limit never report a hung backend (and never ping the watchdog)."""
    with pytest.raises(ConfigError) as err:
        config_from_dict({"batching": {"max_wait_ms": math.nan}, "health": {"heartbeat_stale_s": math.nan},
                          "model": {"unknown_threshold": math.inf}, "input": {"sample_rate_hz": math.inf}})
    lines = str(err.value).splitlines()
    assert len(lines) == 4, lines
    for key in ("batching.max_wait_ms", "health.heartbeat_stale_s", "model.unknown_threshold", "input.sample_rate_hz"):
        assert any(f"{key}: must be a finite number" in ln for ln in lines), key


def test_config_with_awkward_values_anywhere_is_a_config_error_never_another_exception():
    """Seeded: every key of every section, and whole sections and bucket tables, swapped for
    awkward values (wrong types, NaN, integers past float range or Python's digit limit as
    bucket names). A 400-digit max_wait_ms once raised OverflowError."""
    awkward = [None, True, -1, 0, 2.5, 10 ** 400, math.nan, math.inf, "x", "", [], {}, [1, [2]], {"a": None}, 2 ** 63]
    sections = {f.name: getattr(DaemonConfig(), f.name) for f in dataclasses.fields(DaemonConfig)}
    rng = np.random.default_rng(3)
    refused = 0
    for _ in range(2000):
        data: dict = {}
        for name, section in sections.items():
            for f in dataclasses.fields(section) if dataclasses.is_dataclass(section) else ():
                if rng.random() < 0.05:
                    data.setdefault(name, {})[f.name] = awkward[int(rng.integers(0, len(awkward)))]
        if rng.random() < 0.05:
            data[list(sections)[int(rng.integers(0, len(sections)))]] = awkward[int(rng.integers(0, len(awkward)))]
        if rng.random() < 0.05 and isinstance(data.setdefault("batching", {}), dict):
            data["batching"]["buckets"] = {"1" + "0" * 5000: {"max_batch": 8}, "x": 1}
        try:
            config_from_dict(data)
        except ConfigError:
            refused += 1
    assert refused > 1000


def test_a_tcp_port_out_of_range_is_a_config_error():
    """ZeroMQ binds some other port for 99999 or -1 and the daemon ran where no sender looked."""
    for bad in ("tcp://127.0.0.1:99999", "tcp://127.0.0.1:-1", "tcp://127.0.0.1:abc"):
        with pytest.raises(ConfigError, match="input.endpoint: the port must be 0..65535 or"):
            config_from_dict({"input": {"endpoint": bad}})
    for good in ("tcp://127.0.0.1:*", "tcp://[::1]:5555", "tcp://eth0:0", "ipc:///run/x"):
        assert config_from_dict({"output": {"endpoint": good}}).output.endpoint == good


def test_an_endpoint_no_other_process_can_reach_is_a_config_error():
    """inproc:// was accepted and the daemon ran where nothing could send to it; an unknown
    transport failed only at the bind, after the model had loaded."""
    with pytest.raises(ConfigError, match="input.endpoint: inproc:// is reachable only inside"):
        config_from_dict({"input": {"endpoint": "inproc://bursts"}})
    with pytest.raises(ConfigError, match="output.endpoint: unknown ZeroMQ transport 'foo'"):
        config_from_dict({"output": {"endpoint": "foo://x"}})
    for good in ("ipc:///tmp/rfc-in", "epgm://eth0;239.192.1.1:5555", "ws://127.0.0.1:8080/in"):
        assert config_from_dict({"input": {"endpoint": good}}).input.endpoint == good



def test_an_empty_data_endpoint_or_an_unknown_device_is_a_config_error():
    """Both passed --check-config and failed only after the model had loaded (the bind of an
    empty endpoint; the backend's choice of device); an empty control endpoint is the default."""
    for section in ("input", "output"):
        with pytest.raises(ConfigError, match=f"{section}.endpoint: expected a ZeroMQ endpoint"):
            config_from_dict({section: {"endpoint": ""}})
    assert config_from_dict({"control": {"endpoint": ""}}).control.endpoint == ""
    for bad in ("gpu", "cuda:x", "cpu:0", "xxxx"):
        with pytest.raises(ConfigError, match=f"model.device: unknown device '{bad}'; use cpu, cuda or cuda:N"):
            config_from_dict({"model": {"device": bad}})
    for good in ("", "cpu", "cuda", "cuda:1"):
        assert config_from_dict({"model": {"device": good}}).model.device == good
    # cutting at a tag with no key matched no tag: no burst was ever classified, without a word
    with pytest.raises(ConfigError, match="input.tag_key: must name the length tag"):
        config_from_dict({"input": {"cut_mode": "tags", "tag_key": ""}})
    with pytest.raises(ConfigError, match="input.start_tag: must name a tag when input.cut_mode is start_end"):
        config_from_dict({"input": {"cut_mode": "start_end", "start_tag": ""}})
    # a key its mode does not read may be empty, in the config and in the decoder it makes
    # (the decoder refused an empty tag_key whatever the mode: the check passed what the start refused)
    from rfclassify.serve.pipeline import make_input_decoder

    for cut_mode in ("energy", "tags", "start_end"):
        unused = {"energy": {"tag_key": "", "start_tag": ""}, "tags": {"end_tag": ""}, "start_end": {"tag_key": ""}}
        cfg = config_from_dict({"input": {"format": "gr-stream", "cut_mode": cut_mode, **unused[cut_mode]}})
        assert make_input_decoder(cfg).config.cut_mode == cut_mode


def test_the_energy_detector_is_set_in_the_cutter_table():
    """[cutter] reaches the gr-stream decoder (an operator could not lower threshold_db for weak
    bursts, which docs/ingest.md told them to do); its keys are checked alone and together."""
    import numpy as np

    from rfclassify.serve.bursts import Burst
    from rfclassify.serve.pipeline import make_input_decoder

    cfg = config_from_dict({"input": {"format": "gr-stream", "sample_rate_hz": 1e6},
                            "cutter": {"threshold_db": 3, "max_burst_samples": 5000}})
    dec = make_input_decoder(cfg)
    assert dec.config.cutter.threshold_db == 3.0 and dec.config.cutter.max_burst_samples == 5000
    rng = np.random.default_rng(0)
    x = (0.01 * (rng.standard_normal(60_000) + 1j * rng.standard_normal(60_000))).astype(np.complex64)
    x[20_000:32_000] += np.exp(2j * np.pi * rng.random(12_000)).astype(np.complex64)
    out = dec.decode([x.tobytes()], 0.0) + dec.flush(0.0)
    assert [b.n_samples for b in out if isinstance(b, Burst)] == [5000, 5000, 2064]   # pieces of 5000
    with pytest.raises(ConfigError, match=r"cutter: need 1 <= min_burst_samples <= max_burst_samples"):
        config_from_dict({"cutter": {"min_burst_samples": 500, "max_burst_samples": 100}})
    with pytest.raises(ConfigError, match=r"cutter.block_samples: must be in 1..65536"):
        config_from_dict({"cutter": {"block_samples": 0}})


def test_input_pass_tags_and_center_freq_hz_reach_the_decoder_and_are_checked():
    """The daemon could set neither: a tag cut behind a sink without pass_tags=True cut nothing
    without a word, and the centre frequency of GNU Radio bursts was always unknown."""
    from rfclassify.serve.pipeline import make_input_decoder

    for given, expected in ((None, None), ("auto", None), (True, True), (False, False)):
        table = {"format": "gr-stream", "center_freq_hz": 915e6}
        if given is not None:
            table["pass_tags"] = given
        dec = make_input_decoder(config_from_dict({"input": table}))
        assert (dec.config.pass_tags, dec.config.center_freq_hz) == (expected, 915e6)
    assert make_input_decoder(DaemonConfig()).config.center_freq_hz is None   # 0: unknown
    with pytest.raises(ConfigError) as err:
        config_from_dict({"input": {"pass_tags": "yes", "center_freq_hz": -1.0}})
    assert 'input.pass_tags: must be "auto", true or false; got "yes"' in str(err.value)
    assert "input.center_freq_hz: must be in 0.0..inf; got -1.0" in str(err.value)
    with pytest.raises(ConfigError, match="input.pass_tags: expected a boolean or a string, got int 1"):
        config_from_dict({"input": {"pass_tags": 1}})
    with pytest.raises(ConfigError, match="input.center_freq_hz: must be a finite number"):
        config_from_dict({"input": {"center_freq_hz": math.inf}})
    for cut_mode in ("tags", "start_end"):   # the cut would never see a tag
        with pytest.raises(ConfigError, match=f"input.pass_tags: must be true or \"auto\" when input.cut_mode is {cut_mode}"):
            config_from_dict({"input": {"cut_mode": cut_mode, "pass_tags": False}})
    # like sample_rate_hz, they need a restart
    applied, restart = reloadable_changes(DaemonConfig(), config_from_dict(
        {"input": {"center_freq_hz": 1e9, "pass_tags": True}}))
    assert applied == [] and sorted(restart) == ["input.center_freq_hz", "input.pass_tags"]


def test_input_pass_tags_errors_speak_toml_and_the_sink_hint_python(tmp_path):
    """The file is TOML, where the values are true and false: its errors said "True, False" and
    "bool | str", Python's words. GNU Radio's sink parameter is pass_tags=True (GRC, Python)."""
    path = tmp_path / "rfclassify.toml"
    cases = [('pass_tags = "yes"', 'input.pass_tags: must be "auto", true or false; got "yes"'),
             ('pass_tags = "True"', 'input.pass_tags: must be "auto", true or false; got "True" '
                                    '(a string: write true without quotes)'),
             ("pass_tags = 1", "input.pass_tags: expected a boolean or a string, got int 1"),
             ('cut_mode = "tags"\npass_tags = false', 'input.pass_tags: must be true or "auto" when input.cut_mode '
                                                      "is tags (the cut needs the stream's tags: set pass_tags=True "
                                                      "on the flowgraph's sink)")]
    for text, message in cases:
        path.write_text(f"[input]\n{text}\n")
        with pytest.raises(ConfigError) as err:
            load_config(path)
        assert str(err.value) == f"{path}: {message}"
    for text, value in (('pass_tags = "auto"', "auto"), ("pass_tags = true", True), ("pass_tags = false", False)):
        path.write_text(f"[input]\n{text}\n")
        got = load_config(path).input.pass_tags
        assert got == value and type(got) is type(value)


def test_config_types_are_strict_but_ints_are_fine_for_floats():
    assert config_from_dict({"shutdown": {"drain_timeout_s": 3}}).shutdown.drain_timeout_s == 3.0
    with pytest.raises(ConfigError, match="input.bind: expected a boolean"):
        config_from_dict({"input": {"bind": 1}})
    with pytest.raises(ConfigError, match="batching.max_batch: expected an integer"):
        config_from_dict({"batching": {"max_batch": True}})
    with pytest.raises(ConfigError, match="not valid TOML"):
        bad = REPO / "tests" / "_does_not_exist.toml"
        try:
            bad.write_text("[input\n")
            load_config(bad)
        finally:
            bad.unlink()


def test_command_line_overrides_win_and_are_validated():
    cfg = config_from_dict({"input": {"endpoint": "tcp://10.0.0.1:1"}, "model": {"backend": "torch"}})
    merged = apply_overrides(cfg, {"input.endpoint": "tcp://127.0.0.1:9", "model.backend": None})
    assert merged.input.endpoint == "tcp://127.0.0.1:9" and merged.model.backend == "torch"
    with pytest.raises(ConfigError, match="command line: batching.max_batch"):
        apply_overrides(cfg, {"batching.max_batch": 0})


def _check_config(argv: list[str], capsys) -> dict:
    """The merged config `rfclassify serve ... --check-config` prints (parsed like the CLI does)."""
    import json

    from rfclassify import cli
    from rfclassify.commands import serve

    argv = ["serve", *argv, "--check-config"]
    assert serve.run(cli.build_parser(argv).parse_args(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_serve_model_options_not_given_keep_the_config_file_values(tmp_path, monkeypatch, capsys, tiny_model_dir):
    import shutil

    monkeypatch.delenv("RFCLASSIFY_CONFIG", raising=False)
    other = shutil.copytree(tiny_model_dir, tmp_path / "other")
    path = tmp_path / "serve.toml"
    # a combination that runs here: --check-config refuses what the start would (torch fp16 on a CPU)
    path.write_text(f'[model]\nbackend = "torch"\nprecision = "fp32"\ndir = "{tiny_model_dir}"\nthreads = 3\n')
    model = _check_config(["--config", str(path)], capsys)["model"]
    assert (model["backend"], model["precision"], model["dir"], model["threads"]) == (
        "torch", "fp32", str(tiny_model_dir), 3)
    model = _check_config(["--config", str(path), "--backend", "onnxruntime", "--precision", "auto",
                           "--model-dir", str(other)], capsys)["model"]
    assert (model["backend"], model["precision"], model["dir"], model["threads"]) == (
        "onnxruntime", "auto", str(other), 3)



def test_a_bucket_override_the_model_has_no_bucket_for_is_named(tmp_path, capsys, caplog, tiny_model_dir):
    """[batching.buckets.1042] (a typo for 1024) was never read, without a word."""
    from rfclassify import cli
    from rfclassify.model.meta import ModelMeta

    cfg = config_from_dict({"batching": {"buckets": {"1042": {"max_batch": 8}, "1024": {"max_batch": 8}}}})
    buckets = ModelMeta.load(tiny_model_dir).buckets_samples
    assert 1024 in buckets and 1042 not in buckets
    (warning,) = cfg.batching.unused_overrides(buckets)
    assert warning.startswith("batching.buckets.1042: the model has no 1042-sample bucket (its buckets: ")
    path = tmp_path / "serve.toml"
    path.write_text('[batching.buckets.1042]\nmax_batch = 8\n')
    assert cli.main(["serve", "--config", str(path), "--model-dir", str(tiny_model_dir), "--check-config"]) == 0
    assert f"warning: {warning}" in capsys.readouterr().err
    from rfclassify.serve.daemon import load_engine      # and the daemon's start logs it

    started = config_from_dict({"batching": {"buckets": {"1042": {"max_batch": 8}}},
                                "model": {"dir": str(tiny_model_dir), "warmup": False, "refiner": False}})
    with caplog.at_level("WARNING", logger="rfclassify.serve.daemon"):
        load_engine(started).classifier.close()
    assert warning in caplog.text


def test_check_config_reads_the_models_description(tmp_path, capsys, tiny_model_dir):
    """A missing or damaged model.json passed --check-config and stopped the daemon's start."""
    from rfclassify import cli

    assert cli.main(["serve", "--check-config", "--model-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"rfclassify serve: error: no model in {tmp_path}: model.json is missing\n"
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "model.json").write_text('{"model_id": ')
    assert cli.main(["serve", "--check-config", "--model-dir", str(broken)]) == 2
    assert f"cannot read {broken / 'model.json'}" in capsys.readouterr().err
    assert cli.main(["serve", "--check-config", "--model-dir", str(tiny_model_dir)]) == 0
    assert capsys.readouterr().err.startswith("model ")


def test_example_config_documents_every_key_with_its_default():
    path = REPO / "systemd" / "rfclassify.toml"
    assert load_config(path) == DaemonConfig()
    text = path.read_text()
    for section in dataclasses.fields(DaemonConfig):
        assert f"[{section.name}]" in text, section.name
        for f in dataclasses.fields(getattr(DaemonConfig(), section.name)):
            if f.name == "buckets":                       # a table of tables, shown commented out
                assert "# [batching.buckets.4096]" in text
                continue
            assert re.search(rf"^#? ?{f.name} = ", text, re.M), f"{section.name}.{f.name} undocumented"
    for key in RELOADABLE:
        name = key.split(".")[1]
        if name == "buckets":
            assert "# [reload] Per length bucket overrides" in text
            continue
        assert re.search(rf"\[reload\][^\n]*\n(#[^\n]*\n)*#? ?{name} = ", text), f"{key} not marked [reload]"


def test_reload_splits_reloadable_from_restart_keys():
    old = DaemonConfig()
    new = config_from_dict({"batching": {"max_wait_ms": 7.0}, "queues": {"overload": "drop_newest"},
                            "input": {"endpoint": "tcp://127.0.0.1:1"}, "logging": {"level": "debug"}})
    applied, restart = reloadable_changes(old, new)
    assert sorted(applied) == ["batching.max_wait_ms", "logging.level", "queues.overload"]
    assert restart == ["input.endpoint"]


@pytest.mark.parametrize("content", [b"\xff\xfe not utf-8", b"a = " + b"[" * 5000 + b"]" * 5000,
                                     b"[batching]\nmax_batch = 1" + b"0" * 5000])
def test_a_config_file_tomllib_cannot_read_is_a_config_error(tmp_path, content):
    """Not UTF-8, nested past the parser's depth, an integer too long for Python: each was a
    traceback at start-up, and on SIGHUP it would have stopped the running daemon."""
    path = tmp_path / "bad.toml"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(path)


def test_a_reload_that_fails_keeps_the_running_config(tmp_path, caplog, monkeypatch):
    import rfclassify.serve.daemon as daemon_module
    from rfclassify.serve.daemon import Daemon

    path = tmp_path / "rfclassify.toml"
    path.write_text("[batching]\nmax_wait_ms = 7.0\n")
    d = Daemon(DaemonConfig(), config_path=str(path))
    try:
        assert d.reload() == ["batching.max_wait_ms"] and d.config.batching.max_wait_ms == 7.0
        path.write_bytes(b"\xff\xfe[batching]\nmax_wait_ms = 9.0\n")
        assert d.reload() == [] and d.config.batching.max_wait_ms == 7.0
        assert "config not reloaded, it has errors" in caplog.text

        def broken(path):
            raise RuntimeError("a reader bug")
        monkeypatch.setattr(daemon_module, "load_config", broken)
        assert d.reload() == [] and d.config.batching.max_wait_ms == 7.0
        assert "config not reloaded, reading it failed" in caplog.text
    finally:
        d.context.term()


# -- sd_notify -------------------------------------------------------------------------------
def test_notify_to_an_abstract_socket_and_watchdog_interval():
    name = f"rfclassify-test-{os.getpid()}"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    srv.bind("\0" + name)
    srv.settimeout(2)
    try:
        n = Notifier({"NOTIFY_SOCKET": "@" + name, "WATCHDOG_USEC": "3000000"})
        assert n.enabled and n.watchdog_interval_s == 1.5
        assert n.ready("warm")
        assert srv.recv(100) == b"READY=1\nSTATUS=warm"
        assert n.watchdog() and srv.recv(100) == b"WATCHDOG=1"
        n.close()
    finally:
        srv.close()
    assert Notifier({}).notify("READY=1") is False
    other_pid = Notifier({"NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "1000", "WATCHDOG_PID": "1"})
    assert other_pid.watchdog_interval_s is None          # the watchdog is meant for another process
    other_pid.close()


# -- tegrastats ------------------------------------------------------------------------------
ORIN_LINE = ("11-30-2026 10:00:00 RAM 3456/30536MB (lfb 6000x4MB) SWAP 0/15268MB (cached 0MB) "
             "CPU [2%@729,1%@729,off,off] EMC_FREQ 0%@2133 GR3D_FREQ 37%@[305,305] VIC_FREQ 729 APE 174 "
             "CV0@-256C CPU@46.5C Tboard@33C SOC2@43.781C tj@46.5C GPU@-256C "
             "VDD_GPU_SOC 2003mW/1990mW VDD_CPU_CV 400mW/410mW VIN_SYS_5V0 2924mW/2924mW")


def test_tegrastats_orin_line():
    t = parse_tegrastats(ORIN_LINE)
    assert (t["ram_used_mb"], t["ram_total_mb"]) == (3456, 30536)
    assert t["gpu_load_pct"] == 37 and t["gpu_freq_mhz"] == [305, 305]
    assert t["temps_c"] == {"CPU": 46.5, "Tboard": 33.0, "SOC2": 43.781, "tj": 46.5}   # -256C = off
    assert t["power_mw"]["VDD_GPU_SOC"] == {"cur_mw": 2003, "avg_mw": 1990}
    assert set(t["power_mw"]) == {"VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0"}


def test_tegrastats_older_format_and_nvpmodel():
    t = parse_tegrastats("RAM 1500/3964MB CPU [10%@1479] GR3D_FREQ 0%@76 PLL@33C GPU@31.5C "
                         "POM_5V_IN 2000/2100 POM_5V_GPU 0/10")
    assert t["gpu_load_pct"] == 0 and t["gpu_freq_mhz"] == [76]
    assert t["power_mw"] == {"POM_5V_IN": {"cur_mw": 2000, "avg_mw": 2100}, "POM_5V_GPU": {"cur_mw": 0, "avg_mw": 10}}
    assert parse_nvpmodel("NV Power Mode: MAXN\n0\n") == {"name": "MAXN", "id": 0}
    assert parse_nvpmodel("nvpmodel: command not found") is None


# -- rendering -------------------------------------------------------------------------------
def _status_sample() -> dict:
    s = DaemonStats()
    s.add_result("QPSK", 0.001, 0.002, 0.003, "QPSK", 12.0)
    s.add_drop("ingest")
    s.add_reject("bad_json")
    snap = s.snapshot()
    return {"health": "degraded", "health_reasons": ["1 drop(s) in the last 60 s"], "version": "0.1.0",
            "pid": 1, "uptime_s": 3725.0,
            "engine": {"backend": "tensorrt", "precision": "int8", "device": "cuda:0", "dla_core": 1,
                       "model": "m1", "unknown_threshold": 0.5,
                       "refiner": {"classes": ["8PSK", "16PSK", "32PSK", "16APSK", "32APSK", "64APSK", "128APSK",
                                               "16QAM", "32QAM", "64QAM", "128QAM", "256QAM"], "min_samples": 128}},
            "input": {"endpoint": "tcp://127.0.0.1:5555", "mode": "sub", "bind": False, "format": "native"},
            "output": {"endpoint": "tcp://127.0.0.1:5556"}, "overload_policy": "drop_oldest",
            "heartbeat_age_s": 0.1, "queues": {"ingest": 2, "ingest_bytes": 16384, "batching": 0,
                                               "infer_batches": 0, "publish": 0},
            "jetson": {"power_mode": {"name": "MAXN", "id": 0}, **parse_tegrastats(ORIN_LINE)}, **snap}


def test_status_table_shows_health_engine_counters_and_jetson():
    text = render_status(_status_sample())
    assert "DEGRADED" in text and "1 drop(s)" in text
    assert "tensorrt int8 on cuda:0, DLA core 1" in text
    assert "input       tcp://127.0.0.1:5555 (native, sub connect)\n" in text
    assert "output      tcp://127.0.0.1:5556\n" in text
    stream = _status_sample()   # how a gr-stream is cut, and an output that is not JSON, are shown
    stream["input"].update(format="gr-stream", cut_mode="start_end")
    stream["output"]["format"] = "gr-pmt"
    assert "(gr-stream, sub connect, cut by start_end)\n" in render_status(stream)
    assert "output      tcp://127.0.0.1:5556 (gr-pmt)\n" in render_status(stream)
    assert "refiner     on: re-decides 12 high-order classes, bursts of >= 128 samples\n" in text
    assert "dc pass" not in text
    assert "128 samples\n            its statistics in the inference thread\n" in text
    sample = _status_sample()
    sample["engine"]["refiner"]["sequence_net_params"] = 88028
    assert "bursts of >= 128 samples, with its sequence network\n" in render_status(sample)
    sample["engine"]["refiner"].update(sequence_net_front="equalized", equalizer_classes=12)
    assert "with its sequence network (equalized front), equalized scores\n" in render_status(sample)
    sample["engine"]["refiner"]["sequence_net_carrier"] = "fit"
    assert "with its sequence network (equalized front, fitted carrier), equalized scores\n" in render_status(sample)
    sample["engine"]["refiner"]["rate_rule"] = "alphabet_fit"
    assert "fitted carrier), equalized scores, alphabet-fit clock\n" in render_status(sample)
    sample["engine"]["low_order_refiner"] = {"classes": ["4ASK"] * 16, "min_samples": 256}
    assert "alphabet-fit clock\n            and 16 low-order classes from their invariants, bursts of >= 256 " \
        "samples\n" in render_status(sample)
    sample["engine"]["refiner"] = None
    assert "refiner     on: re-decides 16 low-order classes from their invariants, bursts of >= 256 samples\n" \
        in render_status(sample)
    sample["engine"]["refiner_workers"] = 10
    assert "256 samples\n            its statistics in 10 worker processes\n" in render_status(sample)
    sample["engine"]["refiner_pool_breaks"] = 2
    assert "its statistics in 10 worker processes (worker pool broke 2 times)\n" in render_status(sample)
    assert "keeps its answer" not in render_status(sample)
    sample["engine"]["refiner_skip_above"] = 1.0    # none skips: nothing to say
    assert "keeps its answer" not in render_status(sample)
    sample["engine"]["refiner_skip_above"] = 0.9
    assert "(worker pool broke 2 times)\n            a burst the network puts above p=0.9 keeps its answer " \
        "(no refiner, no dc pass)\n" in render_status(sample)
    sample["engine"]["refiner_skip_min_samples"] = 512
    assert "a burst of >= 512 samples the network puts above p=0.9 keeps its answer" in render_status(sample)
    assert "so far" not in render_status(sample)       # an older daemon's reply: no counts
    sample["engine"]["refiner_skip_counts"] = {"long_enough": 0, "skipped": 0}
    assert "so far" not in render_status(sample)       # none yet: no share of nothing
    sample["engine"]["refiner_skip_counts"] = {"long_enough": 800, "skipped": 300}
    assert "(no refiner, no dc pass)\n            so far 300 of 800 bursts of >= 512 samples (37.5%)\n" \
        in render_status(sample)
    sample["engine"]["low_order_refiner"] = None
    assert "refiner     off" in render_status(sample) and "low-order" not in render_status(sample)
    assert "its statistics" not in render_status(sample)
    sample["engine"]["dc_pass"] = True
    assert "dc pass     on: receiver DC offsets found and taken out before the refiners\n" in render_status(sample)
    assert "01:02:05" in text
    assert "bad_json 1" in text and "ingest 1" in text
    assert "accuracy    100.0% of 1" in text
    assert "power mode MAXN" in text and "VDD_GPU_SOC 2003 mW" in text and "tj 46.5C" in text


def test_prometheus_text_has_counters_histograms_and_gauges():
    s = DaemonStats()
    s.add_result("QPSK", 0.0004, 0.003, 0.004)
    s.add_result("FM", 0.3, 0.003, 0.4)
    st = _status_sample()
    st["counters"] = s.snapshot()["counters"]
    text = render_metrics(st, s.histograms())
    assert "# TYPE rfclassify_latency_seconds histogram" in text
    assert 'rfclassify_latency_seconds_bucket{stage="total",le="0.005"} 1' in text
    assert 'rfclassify_latency_seconds_bucket{stage="total",le="0.5"} 2' in text
    assert 'rfclassify_latency_seconds_bucket{stage="total",le="+Inf"} 2' in text
    assert 'rfclassify_latency_seconds_count{stage="queue"} 2' in text
    assert "rfclassify_bursts_classified_total 2" in text
    assert 'rfclassify_health{state="degraded"} 1' in text and 'rfclassify_health{state="ok"} 0' in text
    assert 'rfclassify_jetson_temperature_celsius{zone="tj"} 46.5' in text
    assert "rfclassify_jetson_telemetry_age_seconds" not in text    # a daemon before age_s
    st["jetson"]["age_s"] = 42.0
    text = render_metrics(st, s.histograms())
    assert "rfclassify_jetson_telemetry_age_seconds 42\n" in text  # a stale line can be alerted on
    for line in text.splitlines():                       # every sample line: name{labels} number
        if not line.startswith("#"):
            assert re.fullmatch(r'[a-z_]+(\{[^}]*\})? [-0-9.e+]+', line), line


# -- the status command stays light ----------------------------------------------------------
def test_status_imports_no_numpy_or_inference_runtime():
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "rfclassify", "status", "--help"],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    imported = {ln.split("|")[-1].strip().split(".")[0] for ln in proc.stderr.splitlines() if "|" in ln}
    for heavy in ("numpy", "torch", "onnxruntime", "onnx", "tensorrt", "scipy", "h5py"):
        assert heavy not in imported, f"`rfclassify status` imports {heavy}"


def test_status_client_modules_import_only_stdlib_and_zmq():
    code = ("import sys; import rfclassify.commands.status, rfclassify.serve.control, "
            "rfclassify.serve.status_view; "
            "print(sorted(m for m in ('numpy','torch','onnxruntime','scipy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# -- control socket --------------------------------------------------------------------------
def test_control_socket_file_is_private_in_the_fallback_dir(tmp_path):
    import zmq

    from rfclassify.serve.control import ControlServer, request

    ctx = zmq.Context()
    srv = ControlServer(ctx, f"ipc://{tmp_path}/ctl", lambda req: {"echo": req.get("command")})
    srv.start()
    try:
        mode = stat.S_IMODE(os.stat(tmp_path / "ctl").st_mode)
        assert mode == 0o600, oct(mode)
        assert request(srv.endpoint, "hello", timeout_s=5) == {"echo": "hello"}
        with pytest.raises(ConfigError, match="already answers"):
            ControlServer(ctx, f"ipc://{tmp_path}/ctl", lambda req: {}).start()
    finally:
        srv.stop()
        ctx.term()
    assert not (tmp_path / "ctl").exists()



def test_a_control_endpoint_naming_a_file_is_refused_and_the_file_kept(tmp_path):
    """A mistyped control endpoint naming an existing file replaced it with the socket, which the
    stop then removed: the file was lost (sixty-sixth session)."""
    import zmq

    from rfclassify.serve.control import ControlServer

    notes = tmp_path / "notes.txt"
    notes.write_text("keep me")
    ctx = zmq.Context()
    try:
        with pytest.raises(ConfigError, match="exists and is not a socket"):
            ControlServer(ctx, f"ipc://{notes}", lambda req: {}).start()
    finally:
        ctx.term()
    assert notes.read_text() == "keep me"


def test_a_malformed_control_request_gets_an_error_reply_and_the_socket_answers_on(tmp_path):
    """A request of several frames, JSON nested past the parser's depth, or not an object:
    each is answered with an error, and the next status request is answered (either of the
    first two once ended the control thread, so `rfclassify status` found no daemon)."""
    import json

    import zmq

    from rfclassify.serve.control import ControlServer, request

    ctx = zmq.Context()
    srv = ControlServer(ctx, f"ipc://{tmp_path}/ctl", lambda req: {"echo": req.get("command")})
    srv.start()
    try:
        # past the parser's depth: RecursionError on Python 3.11; Python 3.12's parser reads
        # deeper and may find a list instead (fifty-eighth session): an error reply either way
        deep = b"[" * 30000 + b"]" * 30000
        for frames, needle in (([b'{"command": "status"}', b"more"], "one frame, got 2"),
                               ([deep], "nested too deeply|must be a JSON object"),
                               ([b'"status"'], "JSON object")):
            req = ctx.socket(zmq.REQ)
            req.setsockopt(zmq.LINGER, 0)
            req.setsockopt(zmq.RCVTIMEO, 10000)
            req.connect(srv.endpoint)
            try:
                req.send_multipart(frames)
                assert re.search(needle, json.loads(req.recv())["error"])
            finally:
                req.close(0)
            assert request(srv.endpoint, "status", timeout_s=5) == {"echo": "status"}
    finally:
        srv.stop()
        ctx.term()


def test_status_request_to_a_malformed_endpoint_is_a_config_error():
    from rfclassify.serve.control import request

    with pytest.raises(ConfigError, match="control bogus"):
        request("bogus", timeout_s=0.2)

# -- the systemd unit ------------------------------------------------------------------------
def test_unit_file_has_the_service_contract():
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str
    unit.read(REPO / "systemd" / "rfclassify.service")
    svc = unit["Service"]
    expected = {"Type": "notify", "NotifyAccess": "main", "Restart": "on-failure", "DynamicUser": "yes",
                "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes", "NoNewPrivileges": "yes",
                "StateDirectory": "rfclassify", "RuntimeDirectory": "rfclassify", "CapabilityBoundingSet": "",
                "SupplementaryGroups": "video", "ExecReload": "/bin/kill -HUP $MAINPID"}
    for key, value in expected.items():
        assert svc.get(key) == value, key
    # a start failing fast (exit 2 for a config mistake, or a port in use, which exits 2 too) is
    # given up after a while: RestartSec=5 never reached the default 5 starts in 10 s
    limit = unit["Unit"]
    assert int(limit["StartLimitBurst"]) * int(svc["RestartSec"]) < int(limit["StartLimitIntervalSec"])
    assert "RestartPreventExitStatus" not in svc
    text = (REPO / "systemd" / "rfclassify.service").read_text()   # repeated keys: configparser keeps one
    assert "rfclassify serve --config ${RFCLASSIFY_CONFIG}" in svc["ExecStart"]
    assert re.search(r"^Environment=RFCLASSIFY_CONFIG=/etc/rfclassify/rfclassify.toml$", text, re.M)
    assert int(svc["WatchdogSec"]) > 0 and int(svc["RestartSec"]) > 0
    drain = DaemonConfig().shutdown.drain_timeout_s
    assert drain < int(svc["TimeoutStopSec"]) <= drain + 10    # the stop timeout covers the drain bound


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_unit_file_verifies_with_systemd_analyze(tmp_path):
    exe = shutil.which("rfclassify") or sys.executable
    text = (REPO / "systemd" / "rfclassify.service").read_text().replace("/usr/local/bin/rfclassify", exe)
    unit = tmp_path / "rfclassify.service"
    unit.write_text(text)
    proc = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "rfclassify.service" not in proc.stderr, proc.stderr


def test_bucket_overrides_inherit_what_they_do_not_set():
    cfg = config_from_dict({"batching": {"max_batch": 16, "max_wait_ms": 7, "buckets": {"4096": {"max_batch": 4}}}})
    assert cfg.batching.for_bucket(4096) == BucketBatching(max_batch=4, max_wait_ms=7.0)
    assert cfg.batching.for_bucket(128) == BucketBatching(max_batch=16, max_wait_ms=7.0)


# -- the simulator ---------------------------------------------------------------------------
def test_simulate_command_sends_labelled_native_bursts():
    import zmq

    from rfclassify.cli import main
    from rfclassify.serve.decoders import make_decoder

    ctx = zmq.Context.instance()
    pull = ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.LINGER, 0)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    try:
        assert main(["simulate", "--endpoint", f"tcp://127.0.0.1:{port}", "--connect", "--socket", "push",
                     "--count", "6", "--rate", "0", "--quiet", "--classes", "QPSK,FM", "--pattern", "cycle",
                     "--length-min", "100", "--length-max", "300", "--snr-min", "5", "--snr-max", "6",
                     "--dtype", "ci16_le"]) == 0
        decoder = make_decoder("native")
        bursts = []
        for _ in range(6):
            assert pull.poll(5000)
            bursts += decoder.decode(pull.recv_multipart(), 0.0)
    finally:
        pull.close()
    assert [b.burst_id for b in bursts] == list(range(6))
    assert [b.truth.label for b in bursts] == ["QPSK", "FM"] * 3                 # --pattern cycle
    assert all(100 <= b.n_samples <= 300 and 5 <= b.truth.snr_db <= 6 for b in bursts)
    assert all(b.stream == "sim0" and b.sample_rate_hz == 1e6 for b in bursts)


def test_simulate_rejects_unknown_classes(capsys):
    from rfclassify.cli import main

    assert main(["simulate", "--classes", "QPSK,NOPE", "--count", "1"]) == 2
    assert "unknown label 'NOPE'" in capsys.readouterr().err
    for rate in ("0", "-1"):   # every burst would be a bad_header reject (sent, exit 0, before the 66th session)
        assert main(["simulate", "--sample-rate", rate, "--count", "1"]) == 2
        assert "sample rate must be > 0 Hz" in capsys.readouterr().err


def test_config_strings_with_a_nul_are_refused_on_one_line():
    """TOML writes "\\u0000"; no path, endpoint or label holds one. capture.dir with one passed
    --check-config and ended the start in a ValueError traceback before the sixty-sixth session."""
    with pytest.raises(ConfigError) as err:
        config_from_dict({"capture": {"dir": "/tmp/\0x"}, "model": {"dir": "a\0"}})
    lines = str(err.value).splitlines()
    assert sorted(lines) == ["config: capture.dir: must not contain a NUL character",
                             "config: model.dir: must not contain a NUL character"], lines


def test_default_control_endpoint_falls_back_to_the_user_runtime_dir(tmp_path, monkeypatch):
    import zmq

    from rfclassify.serve import control

    monkeypatch.setattr(control, "SYSTEM_RUNTIME_DIR", Path("/proc/rfclassify-not-writable"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert control.client_endpoint() == "ipc:///proc/rfclassify-not-writable/control"   # nothing yet
    ctx = zmq.Context()
    srv = control.ControlServer(ctx, "", lambda req: {"ok": True})
    srv.start()
    try:
        sock = tmp_path / "rfclassify" / "control"
        assert srv.endpoint == f"ipc://{sock}"
        assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(sock.parent).st_mode) == 0o700
        assert control.client_endpoint() == srv.endpoint            # status finds it
        assert control.request(control.client_endpoint(), timeout_s=5) == {"ok": True}
    finally:
        srv.stop()
        ctx.term()


def test_blocking_put_of_an_item_larger_than_the_queue_drops_it_once_and_returns():
    import threading
    import types

    from rfclassify.serve.pipeline import Pipeline

    drops = []
    q = BoundedQueue("ingest", max_items=4, max_bytes=100, policy="block",
                     on_drop=lambda stage, item: drops.append(item))
    owner = types.SimpleNamespace(_abort=threading.Event())
    done = []
    t = threading.Thread(target=lambda: done.append(Pipeline._put_blocking(owner, q, "huge", 101)))
    t.start()
    t.join(timeout=5)
    alive = t.is_alive()
    owner._abort.set()  # release a spinning thread so the test itself ends
    t.join(timeout=5)
    assert not alive, "a blocking put of an item that can never fit must not retry forever"
    assert done == [True] and drops == ["huge"] and len(q) == 0
    assert Pipeline._put_blocking(owner, q, "small", 10) and len(q) == 1


def test_status_against_something_that_is_not_a_daemon_is_one_line_never_a_traceback(tmp_path, capsys):
    """A REP socket of another service (or a daemon of another version) at the control endpoint:
    a reply that is not JSON, not UTF-8, nested past the parser, or a JSON object of the wrong
    shape each ended in a traceback from `rfclassify status`; and the daemon took such a socket
    for a free one at start-up."""
    import json
    import threading

    import zmq

    from rfclassify.cli import main
    from rfclassify.serve.control import _refuse_if_served

    deep = b'{"a": ' * 3000 + b"1" + b"}" * 3000
    cases = [(b"hello", "5 bytes that are not JSON"), (b"\xff\xfe", "2 bytes that are not JSON"),
             # 3.11's parser gives up at this depth; 3.12's (JetPack 7's) reads it, and finds no status
             (deep, "bytes that are not JSON|not a status this version reads"),
             (b'{"health": 5, "counters": "x"}', "not a status this version reads"),
             (json.dumps({"health": "ok", "counters": {}, "latency_ms": {"total": 5}}).encode(),
              "not a status this version reads"),
             (b'{"error": "unknown command"}', "answered with an error: unknown command")]
    ctx = zmq.Context()
    try:
        for i, (reply, needle) in enumerate(cases + [(b"hello", "")]):
            endpoint = f"ipc://{tmp_path}/ctl{i}"
            rep = ctx.socket(zmq.REP)
            rep.bind(endpoint)
            server = threading.Thread(target=lambda s=rep, r=reply: (s.recv(), s.send(r)), daemon=True)
            server.start()
            if needle:
                assert main(["status", "--control", endpoint, "--timeout", "5"]) == 1
                err = capsys.readouterr().err
                assert re.search(needle, err) and "Traceback" not in err and err.count("\n") == 1, err
            else:
                with pytest.raises(ConfigError, match="not an rfclassify daemon answers"):
                    _refuse_if_served(endpoint)
            server.join(5)
            rep.close(0)
    finally:
        ctx.destroy(linger=0)  # closes a socket a failed case left open (term() would wait for it)


def test_tegrastats_that_exits_is_started_again_and_bad_lines_are_skipped(tmp_path, monkeypatch):
    """A stand-in `tegrastats` on PATH (there is no Jetson here) prints a line that is not
    UTF-8, one with a number past int()'s digit limit, one good line, and exits: the reader
    keeps the good line, starts it again, and the snapshot says how old its line is. Before the
    fifty-eighth session the first line ended the reader and an exit was never noticed."""
    import rfclassify.serve.tegrastats as tegra

    runs = tmp_path / "runs"
    script = tmp_path / "tegrastats"
    script.write_text("#!/bin/sh\n"
                      f"echo run >> {runs}\n"
                      "printf 'RAM \\377\\376/5MB\\n'\n"
                      "printf 'RAM 1/5MB GR3D_FREQ 1%s%%\\n' \"$(head -c 5000 /dev/zero | tr '\\0' 7)\"\n"
                      f"echo '{ORIN_LINE}'\n")
    script.chmod(0o755)
    nvpmodel = tmp_path / "nvpmodel"        # its bytes that were not UTF-8 raised out of start()
    nvpmodel.write_text("#!/bin/sh\nprintf 'NV Power Mode: MAXN\\377\\n0\\n'\n")
    nvpmodel.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(tegra, "RESTART_MIN_S", 0.2)
    t = tegra.TegraStats()
    assert t.start() and t.available
    assert t.mode is not None and t.mode["name"].startswith("MAXN") and t.mode["id"] == 0
    try:
        # the restart count moves before the third run's shell has written its line (3 of 40 under load)
        def started() -> tuple[int, int]:
            return t.restarts, runs.read_text().count("run") if runs.exists() else 0

        deadline = time.monotonic() + 20
        while (started()[0] < 2 or started()[1] < 3) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert started()[0] >= 2 and started()[1] >= 3, started()
        snap = t.snapshot()
        assert snap["ram_used_mb"] == 3456 and snap["gpu_load_pct"] == 37 and 0 <= snap["age_s"] < 5
    finally:
        t.stop()
    with_age = {"power_mode": {"name": "MAXN", "id": 0}, **parse_tegrastats(ORIN_LINE)}
    text = render_status({**_status_sample(), "jetson": {**with_age, "age_s": 42.0}})
    assert "RAM 3456/30536 MB  (its last line 42 s old)" in text
    assert "(no tegrastats line yet)" in render_status({**_status_sample(), "jetson": {**with_age, "age_s": None}})


def test_a_tegrastats_line_with_none_of_its_fields_keeps_the_last_good_one(tmp_path, monkeypatch, caplog):
    """A garbled line (bytes that are not UTF-8 where RAM's numbers go) or a message line after a
    good one leaves the good one in the snapshot, and only good lines count as lines. Before the
    sixty-sixth session such a line replaced it with nothing, and `status` lost RAM, GPU load,
    temperatures and power until the next line (seen on the GPU host as a race in the test above)."""
    import rfclassify.serve.tegrastats as tegra

    script = tmp_path / "tegrastats"
    script.write_text("#!/bin/sh\n"
                      f"echo '{ORIN_LINE}'\n"
                      "printf 'RAM \\377\\376/5MB\\n'\n"
                      "echo 'tegrastats: could not read a sensor'\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(tegra, "RESTART_MIN_S", 60.0)       # no restart while the test looks
    t = tegra.TegraStats()
    caplog.set_level(logging.WARNING, logger=tegra.__name__)
    assert t.start()
    try:
        deadline = time.monotonic() + 20
        while "tegrastats exited" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "after 1 lines" in caplog.text, caplog.text    # all three read, one of them good
        snap = t.snapshot()
        assert snap["ram_used_mb"] == 3456 and snap["gpu_load_pct"] == 37 and snap["age_s"] is not None
    finally:
        t.stop()


def test_tegrastats_stop_ends_the_process_and_the_reader(tmp_path, monkeypatch):
    """stop() ends a tegrastats that keeps printing, and the reader thread with it (a restart
    that races stop() is ended too: stop() looks at the process again after the reader ends)."""
    import rfclassify.serve.tegrastats as tegra

    script = tmp_path / "tegrastats"
    script.write_text(f"#!/bin/sh\nwhile true; do echo '{ORIN_LINE}'; sleep 0.05; done\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    t = tegra.TegraStats()
    assert t.start()
    deadline = time.monotonic() + 20
    while t.latest is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert t.latest is not None and t.latest["gpu_load_pct"] == 37
    proc = t._proc
    t.stop()
    assert proc is not None and proc.poll() is not None and not t._thread.is_alive() and t.restarts == 0


def test_status_watch_keeps_trying_through_a_reply_it_cannot_read(tmp_path):
    """--watch keeps asking while no daemon answers; a reply of another shape (a daemon being
    upgraded under the watch, say) is one line each time too, and the watch goes on."""
    import subprocess
    import threading

    import zmq

    endpoint = f"ipc://{tmp_path}/ctl"
    ctx = zmq.Context()
    rep = ctx.socket(zmq.REP)
    rep.bind(endpoint)
    rep.setsockopt(zmq.RCVTIMEO, 200)
    done = threading.Event()

    def answer() -> None:
        while not done.is_set():
            try:
                rep.recv()
            except zmq.Again:
                continue
            rep.send(b'{"health": 5, "counters": {}}')

    server = threading.Thread(target=answer, daemon=True)
    server.start()
    try:
        with subprocess.Popen([sys.executable, "-m", "rfclassify", "status", "--control", endpoint,
                               "--watch", "0.2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
            time.sleep(4)
            alive = proc.poll() is None
            proc.terminate()
            _, err = proc.communicate(timeout=10)
    finally:
        done.set()
        server.join(5)
        ctx.destroy(linger=0)
    text = err.decode()
    assert alive and text.count("is not a status this version reads") >= 2 and "Traceback" not in text, text


def test_sockets_bind_and_connect_ipv6_literals():
    """tcp://[::1]:5555 passed the config and failed at the bind ("No such device"): ZeroMQ's
    sockets are IPv4-only unless told otherwise. Every socket of the daemon, the simulator and
    `status` is made by open_socket."""
    import socket

    import zmq

    from rfclassify.serve.control import open_socket

    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback here: {exc}")
    ctx = zmq.Context()
    try:
        pull = open_socket(ctx, zmq.PULL, "input", "tcp://[::1]:*", True)
        endpoint = pull.getsockopt_string(zmq.LAST_ENDPOINT)
        unbracketed = endpoint.replace("[", "").replace("]", "")        # tcp://::1:PORT
        for connect_to in (endpoint, unbracketed):
            push = open_socket(ctx, zmq.PUSH, "simulate", connect_to, False)
            push.send(b"burst")
            assert pull.poll(5000) and pull.recv() == b"burst"
            push.close(0)
        pull.close(0)
    finally:
        ctx.destroy(linger=0)


# -- stats: throughput's span, a benchmark window's percentiles --------------------------------
class _Clock:
    """A stand-in for the time module stats reads (monotonic, set by hand)."""

    def __init__(self, now: float) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return 1.8e9 + self.now


def test_throughput_counts_from_the_first_burst_not_from_the_model_load(monkeypatch):
    """The stats are made before the model loads (about 10 s on a CPU): counted from then, the
    demo's live line read 5/s while 50 bursts a second were classified."""
    import rfclassify.serve.stats as stats_module

    clock = _Clock(1000.0)
    monkeypatch.setattr(stats_module, "time", clock)
    s = DaemonStats(throughput_window_s=10.0)
    clock.now += 10.0                        # the model loads
    assert s.throughput() == 0.0             # no burst yet
    for _ in range(50):                      # then 50 bursts a second for a second
        s.add_received()
        clock.now += 0.02
        s.add_result("QPSK", 0.0, 0.0, 0.0)
    assert s.throughput() == pytest.approx(50.0)
    assert s.snapshot()["throughput_bursts_per_s"] == pytest.approx(50.0)
    for _ in range(1000):                    # 20 s more: the last 10 s are the window
        s.add_received()
        clock.now += 0.02
        s.add_result("QPSK", 0.0, 0.0, 0.0)
    assert s.throughput() == pytest.approx(50.0, abs=0.2)    # 500 or 501 (where 0.02 s steps round)
    s2 = DaemonStats(throughput_window_s=10.0)
    s2.add_received()
    s2.add_result("QPSK", 0.0, 0.0, 0.0)     # one answered at once: not a thousand a second
    assert s2.throughput() == 1.0


def test_a_benchmark_window_has_percentiles_over_all_of_its_results():
    """bench daemon's window at a GPU's 3,000 bursts/s for 5 s: the percentiles were over the
    last 4,096 results (the status's ring), so a slow first two thirds read as fast."""
    s = DaemonStats()
    s.reset_latency(whole_window=True)
    for i in range(15000):
        s.add_result("QPSK", 0.0, 0.0, 0.5 if i < 10000 else 0.01)
    assert s.snapshot()["latency_ms"]["total"] == {"p50": 500.0, "p90": 500.0, "p99": 500.0}
    assert s.latency_coverage()["total"] == (15000, 15000)
    s.reset_latency()                         # the status's kind: the most recent 4,096
    for i in range(15000):
        s.add_result("QPSK", 0.0, 0.0, 0.5 if i < 10000 else 0.01)
    assert s.snapshot()["latency_ms"]["total"]["p99"] == 10.0 and s.latency_coverage()["total"] == (4096, 15000)


def test_a_benchmark_window_past_its_sample_keeps_a_uniform_sample_of_it(monkeypatch):
    import rfclassify.serve.stats as stats_module

    monkeypatch.setattr(stats_module, "WINDOW_SAMPLE", 1000)
    s = DaemonStats()
    s.reset_latency(whole_window=True, seed=3)
    for i in range(30000):                    # two thirds slow, first; a sample of the last ones would be fast
        s.add_result("QPSK", 0.0, 0.0, 0.5 if i < 20000 else 0.01)
    assert s.latency_coverage()["total"] == (1000, 30000)
    total = s.snapshot()["latency_ms"]["total"]
    assert total["p50"] == 500.0 and total["p99"] == 500.0
    slow = sum(v == 0.5 for v in s.latency["total"].recent)
    assert 600 < slow < 730                   # about 2/3 of the sample (667 expected)
