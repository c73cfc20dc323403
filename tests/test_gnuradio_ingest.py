"""Ingest against REAL GNU Radio 3.10 flowgraphs (tests/gr/burst_source.py, run by /usr/bin/python3).

Unit level: a SUB socket here receives the bytes GNU Radio's zeromq sinks publish and feeds
them to our decoders. End to end: `rfclassify serve` as a subprocess consumes the flowgraph
and we count its published results. Each flowgraph binds a fresh loopback port (port 0) and
every subprocess is killed when its test ends.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zmq

from rfclassify.serve.bursts import Burst, Reject, Truth
from rfclassify.serve.decoders import IngestConfig, make_decoder
from rfclassify.serve.gr_pdu import to_jsonable

GR_PYTHON = "/usr/bin/python3"
SCRIPT = Path(__file__).parent / "gr" / "burst_source.py"
REPO = Path(__file__).resolve().parents[1]


def _gnuradio_missing() -> str:
    try:
        proc = subprocess.run([GR_PYTHON, "-c", "import gnuradio, pmt"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{GR_PYTHON} cannot run: {exc}"
    return "" if proc.returncode == 0 else f"{GR_PYTHON} -c 'import gnuradio' failed (apt-get install gnuradio)"


_MISSING = _gnuradio_missing()
pytestmark = [pytest.mark.gnuradio, pytest.mark.skipif(bool(_MISSING), reason=_MISSING or "GNU Radio present")]

PAD, BLOCK = 32, 32  # CutterConfig defaults


class Flowgraph:
    """tests/gr/burst_source.py as a subprocess: bound endpoint first, samples after go()."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([GR_PYTHON, str(SCRIPT), *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen = []   # GNU Radio's own log lines (tags_to_pdu's :info:) may come first
        while not (line := self.proc.stdout.readline()).startswith("ENDPOINT ") and line and len(seen) < 50:
            seen.append(line)
        if not line.startswith("ENDPOINT "):
            err = self.proc.stderr.read()[-2000:]
            self.kill()
            raise RuntimeError(f"flowgraph did not start: {seen[-5:]!r} {err}")
        self.endpoint = line.split()[1]

    def go(self) -> None:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def truth(self, timeout_s: float = 20.0) -> list[dict]:
        out, err = self.proc.communicate(timeout=timeout_s)
        assert self.proc.returncode == 0, err[-2000:]
        line = [ln for ln in out.splitlines() if ln.startswith("TRUTH ")][-1]
        return json.loads(line[len("TRUTH "):])

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(5)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None and not pipe.closed:
                pipe.close()


@pytest.fixture()
def flowgraph():
    started: list[Flowgraph] = []

    def start(*args: str) -> Flowgraph:
        fg = Flowgraph(*args)
        started.append(fg)
        return fg

    yield start
    for fg in started:
        fg.kill()


def receive_all(fg: Flowgraph, settle_s: float = 0.3, kind: int = zmq.SUB) -> list[list[bytes]]:
    """Subscribe (or PULL), start the flowgraph, collect messages until it has exited and gone quiet."""
    ctx = zmq.Context.instance()
    sub = ctx.socket(kind)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.RCVHWM, 0)
    if kind == zmq.SUB:
        sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(fg.endpoint)
    try:
        time.sleep(settle_s)  # the subscription must reach the PUB socket before data flows
        fg.go()
        msgs, deadline = [], time.monotonic() + 20
        while time.monotonic() < deadline:
            if sub.poll(500):
                msgs.append(sub.recv_multipart())
            elif fg.proc.poll() is not None:
                break
        return msgs
    finally:
        sub.close()


def _decode(fmt: str, cfg: IngestConfig, msgs: list[list[bytes]]) -> list[Burst | Reject]:
    dec = make_decoder(fmt, cfg)
    out = [o for m in msgs for o in dec.decode(m, time.monotonic())]
    return out + dec.flush(time.monotonic())


def _bursts(out: list) -> list[Burst]:
    rejects = [o for o in out if isinstance(o, Reject)]
    assert not rejects, rejects
    return out


@pytest.mark.parametrize("mod,extra", [
    ("qpsk", []),                                  # plain stream, no key
    ("gmsk", ["--pass-tags", "--key", "sdr1"]),    # tag headers and a key frame
    ("fm", ["--key", "fm"]),
    ("bpsk", ["--sink", "push", "--pass-tags"]),   # push_sink -> PULL
])
def test_energy_cutter_finds_each_burst_of_a_real_stream(flowgraph, mod, extra) -> None:
    fg = flowgraph("--sink", "stream", "--mod", mod, "--noise", "0.05", "--seed", "3", *extra)
    msgs = receive_all(fg, kind=zmq.PULL if "push" in extra else zmq.SUB)
    truth = fg.truth()
    assert len(msgs) > 1 and all(len(m) == (2 if "--key" in extra else 1) for m in msgs)
    bursts = _bursts(_decode("gr-stream", IngestConfig(sample_rate_hz=1e6), msgs))
    assert len(bursts) == len(truth)
    for b, t in zip(bursts, truth):
        start = b.meta["offset_samples"]
        # the cut covers the sent burst plus its padding, give or take a block (and the
        # few samples channel_model's resampler delays the signal by)
        assert start <= t["offset"] and start + b.n_samples >= t["offset"] + t["length"]
        assert b.n_samples <= t["length"] + 2 * PAD + 2 * BLOCK + 16
        assert b.sample_rate_hz == 1e6
    if "--pass-tags" in extra:  # the flowgraph's burst_id tags reach the bursts
        assert [b.burst_id for b in bursts] == [t["burst_id"] for t in truth]


def test_a_stream_of_vectors_is_read_as_its_samples(flowgraph) -> None:
    """pub_sink(vlen=64) behind stream_to_vector: its tag header counts vectors. Read as samples
    (vlen 1, all there was) the offset went back every message: a stream_gap reject each and any
    open burst abandoned there."""
    fg = flowgraph("--sink", "stream", "--mod", "qpsk", "--noise", "0.05", "--seed", "13", "--pass-tags",
                   "--vlen", "64")
    msgs = receive_all(fg)
    truth = fg.truth()
    as_samples = _decode("gr-stream", IngestConfig(sample_rate_hz=1e6), msgs)
    assert sum(isinstance(o, Reject) and o.reason == "stream_gap" for o in as_samples) == len(msgs) - 1
    bursts = _bursts(_decode("gr-stream", IngestConfig(sample_rate_hz=1e6, vlen=64), msgs))
    assert len(bursts) == len(truth)
    for b, t in zip(bursts, truth, strict=True):
        start = b.meta["offset_samples"]
        assert start <= t["offset"] and start + b.n_samples >= t["offset"] + t["length"]
    # the flowgraph's burst_id tags, placed to the vector, still land in their bursts
    assert [b.burst_id for b in bursts] == [t["burst_id"] for t in truth]


def test_a_receivers_dc_offset_is_removed_from_a_real_stream(flowgraph) -> None:
    # LO leakage of 0.3 - 0.15j (about -9 dB re the unit-power bursts, 16 dB above the noise)
    fg = flowgraph("--sink", "stream", "--mod", "qpsk", "--noise", "0.05", "--dc", "0.3", "--seed", "5")
    msgs = receive_all(fg)
    truth = fg.truth()
    leak = complex(0.3, -0.15)
    blocked = _bursts(_decode("gr-stream", IngestConfig(sample_rate_hz=1e6), msgs))
    raw = _bursts(_decode("gr-stream", IngestConfig(sample_rate_hz=1e6, dc_block_samples=0), msgs))
    assert len(blocked) == len(raw) == len(truth)
    assert all(abs(complex(b.iq.mean()) - leak) < 0.1 for b in raw)   # every cut burst carries it ...
    assert all(abs(complex(b.iq.mean())) < 0.1 for b in blocked)      # ... unless the blocker is on


def test_length_tags_cut_exactly(flowgraph) -> None:
    fg = flowgraph("--sink", "stream", "--mod", "bpsk", "--pass-tags", "--noise", "0.1", "--seed", "4")
    msgs = receive_all(fg)
    truth = fg.truth()
    bursts = _bursts(_decode("gr-stream", IngestConfig(cut_mode="tags", pass_tags=True), msgs))
    assert [(b.meta["offset_samples"], b.n_samples, b.burst_id) for b in bursts] == [
        (t["offset"], t["length"], t["burst_id"]) for t in truth]
    for b in bursts:  # signal (unit power) inside, not noise (0.01)
        assert np.mean(np.abs(b.iq[16:]) ** 2) > 0.5


def test_pass_tags_auto_is_decided_by_a_clean_frame_not_by_a_corrupt_first_header(flowgraph) -> None:
    """A real pub_sink(pass_tags=True) stream whose first frame is damaged. pass_tags auto latched
    "no header" on it (its header cut short, or a tag count that does not fit): every good frame
    after it was a bad_payload_size, no burst came out. It now decides nothing, and each later
    frame is decoded as with pass_tags true."""
    fg = flowgraph("--sink", "stream", "--mod", "bpsk", "--pass-tags", "--noise", "0.1", "--seed", "4")
    msgs = receive_all(fg)
    truth = fg.truth()
    # joined at the first frame with tags (a burst's packet_len and burst_id), as a daemon started
    # while the flowgraph runs joins it; that frame is the one damaged
    k = next(k for k, m in enumerate(msgs) if struct.unpack_from("=HBQQ", m[-1])[3] >= 1)
    first, msgs = msgs[k][-1], msgs[k:]
    assert len(msgs) > 4 and first[:3] == b"\xf0\x5f\x01"
    reference = _bursts(_decode("gr-stream", IngestConfig(sample_rate_hz=1e6, pass_tags=True), msgs[1:]))
    assert len(reference) >= 3 and {b.burst_id for b in reference} <= {t["burst_id"] for t in truth}
    for broken in (first[:16],                                              # cut inside the header
                   first[:40],                                              # cut inside its tags
                   first[:27] + b"\xff" + first[28:],                        # its first tag's key PMT garbled
                   first[:11] + struct.pack("=Q", 2**40) + first[19:]):     # its tag count garbled
        out = _decode("gr-stream", IngestConfig(sample_rate_hz=1e6), [[broken], *msgs[1:]])
        assert [o.reason for o in out if isinstance(o, Reject)] == ["bad_tag_header"], out[:3]
        assert [(b.meta["offset_samples"], b.n_samples, b.burst_id) for b in out if isinstance(b, Burst)] == [
            (b.meta["offset_samples"], b.n_samples, b.burst_id) for b in reference]


def test_start_and_end_tags_of_a_squelch_or_burst_tagger_cut_each_burst(flowgraph) -> None:
    fg = flowgraph("--sink", "stream", "--mod", "qpsk", "--pass-tags", "--noise", "0.05", "--seed", "6",
                   "--marker", "squelch")
    msgs, truth = receive_all(fg), fg.truth()
    bursts = _bursts(_decode("gr-stream", IngestConfig(cut_mode="start_end", pass_tags=True), msgs))
    assert [b.burst_id for b in bursts] == [t["burst_id"] for t in truth]
    for b, t in zip(bursts, truth, strict=True):
        # the squelch opens within a few samples of the burst (channel_model's interpolator
        # spreads its edge a sample or two early; here -2..-1) and closes some samples after it
        # (its power average must fall 10 dB; here 18..20)
        start = b.meta["offset_samples"]
        assert abs(start - t["offset"]) <= 4 and 0 <= start + b.n_samples - (t["offset"] + t["length"]) <= 40
    fg = flowgraph("--sink", "stream", "--mod", "bpsk", "--pass-tags", "--noise", "0.05", "--seed", "7",
                   "--marker", "burst_tagger")
    msgs, truth = receive_all(fg), fg.truth()
    bursts = _bursts(_decode("gr-stream", IngestConfig(cut_mode="start_end", start_tag="burst", end_tag="burst",
                                                       pass_tags=True), msgs))
    assert [(b.meta["offset_samples"], b.n_samples, b.burst_id) for b in bursts] == [
        (t["offset"], t["length"], t["burst_id"]) for t in truth]


def test_pdus_a_squelch_cuts_with_tags_to_pdu_are_bursts_numbered_and_timed(flowgraph) -> None:
    fg = flowgraph("--sink", "pdu-squelch", "--mod", "gmsk", "--noise", "0.05", "--seed", "8")
    msgs, truth = receive_all(fg), fg.truth()
    bursts = _bursts(_decode("gr-pdu", IngestConfig(), msgs))
    # tags_to_pdu numbers its PDUs (pdu_num, the burst id when there is no burst_id) and stamps
    # each with its sample rate and rx_time, the start's offset over the rate
    assert [b.burst_id for b in bursts] == list(range(len(truth)))
    for b, t in zip(bursts, truth, strict=True):
        assert b.sample_rate_hz == 1e6 and abs(b.time - t["offset"] / 1e6) <= 4e-6
        assert 0 <= b.n_samples - t["length"] <= 40 and b.meta["pdu_num"] == b.burst_id


def test_classify_finds_the_bursts_of_a_gnuradio_file_sink_recording(flowgraph, tmp_path, tiny_model_dir,
                                                                      capsys) -> None:
    from rfclassify.cli import main

    rec = tmp_path / "capture.cfile"   # what blocks.file_sink of gr_complex writes: raw cf32_le
    fg = flowgraph("--sink", "file", "--dump", str(rec), "--mod", "qpsk", "--noise", "0.05", "--seed", "9",
                   "--no-wait")
    truth = fg.truth()
    model = [] if _shipped_model() else ["--model-dir", str(tiny_model_dir)]
    assert main(["classify", str(rec), "--raw", "cf32_le", "--sample-rate", "1e6", "--json", "--device", "cpu",
                 *model]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(records) == len(truth)
    for r, t in zip(records, truth, strict=True):   # each burst found, within the detector's padding
        assert r["start_sample"] <= t["offset"] and r["start_sample"] + r["n_samples"] >= t["offset"] + t["length"]
        assert r["n_samples"] <= t["length"] + 2 * PAD + 2 * BLOCK + 16 and r["sample_rate"] == 1e6
    if _shipped_model():
        assert sum(r["label"] == "QPSK" for r in records) >= 6, [r["label"] for r in records]


def test_pdus_decode_to_exactly_the_samples_sent(flowgraph, tmp_path) -> None:
    dump = tmp_path / "sent.c64"
    fg = flowgraph("--sink", "pdu", "--mod", "qpsk", "--noise", "0.05", "--seed", "5", "--dump", str(dump))
    msgs = receive_all(fg)
    truth = fg.truth()
    bursts = _bursts(_decode("gr-pdu", IngestConfig(sample_rate_hz=2e6, stream="gr"), msgs))
    assert [(b.burst_id, b.n_samples) for b in bursts] == [(t["burst_id"], t["length"]) for t in truth]
    sent = np.fromfile(dump, dtype=np.complex64)
    np.testing.assert_array_equal(np.concatenate([b.iq for b in bursts]), sent)
    assert all(b.truth == Truth("QPSK", None) and b.sample_rate_hz == 2e6 and b.stream == "gr" for b in bursts)


GR_PDUS = r"""
import json, sys, numpy as np, pmt
rng = np.random.default_rng(int(sys.argv[1]))
out = []
for i in range(20):
    iq = (rng.standard_normal(int(rng.integers(1, 300))) + 1j * rng.standard_normal(1)).astype(np.complex64)
    meta = pmt.make_dict()
    expect = {}
    for k in range(int(rng.integers(0, 6))):
        kind = int(rng.integers(0, 7))
        key = "k%d_%d" % (k, kind)
        if kind == 0:
            v = int(rng.integers(-2**40, 2**40)); p = pmt.from_long(v)
        elif kind == 1:
            v = float(rng.standard_normal()); p = pmt.from_double(v)
        elif kind == 2:
            v = "sym%d" % rng.integers(1000); p = pmt.intern(v)
        elif kind == 3:
            v = int(rng.integers(0, 2**63)); p = pmt.from_uint64(v)
        elif kind == 4:
            v = bool(rng.integers(0, 2)); p = pmt.from_bool(v)
        elif kind == 5:
            c = complex(rng.standard_normal(), rng.standard_normal()); v = [c.real, c.imag]; p = pmt.from_complex(c)
        else:
            f = rng.standard_normal(3).astype(np.float32); v = [float(x) for x in f]; p = pmt.init_f32vector(3, f.tolist())
        meta = pmt.dict_add(meta, pmt.intern(key), p)
        expect[key] = v
    meta = pmt.dict_add(meta, pmt.intern("burst_id"), pmt.from_long(i))
    meta = pmt.dict_add(meta, pmt.intern("rx_time"), pmt.make_tuple(pmt.from_uint64(1000 + i), pmt.from_double(0.25)))
    data = pmt.serialize_str(pmt.cons(meta, pmt.init_c32vector(len(iq), iq.tolist())))
    out.append({"hex": data.hex(), "iq": iq.view(np.float32).tolist(), "meta": expect, "id": i})
print(json.dumps(out))
"""


def test_pmt_decoder_agrees_with_gnuradio_serializer() -> None:
    proc = subprocess.run([GR_PYTHON, "-c", GR_PDUS, "7"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dec = make_decoder("gr-pdu")
    for case in json.loads(proc.stdout):
        (b,) = dec.decode([bytes.fromhex(case["hex"])], 0.0)
        assert isinstance(b, Burst), b
        np.testing.assert_array_equal(b.iq.view(np.float32), np.asarray(case["iq"], np.float32))
        assert b.burst_id == case["id"] and b.time == 1000 + case["id"] + 0.25
        assert b.meta == to_jsonable(case["meta"])


# Random nested PMTs of every type GNU Radio serializes, built by its own pmt library; each
# line: the bytes and what they hold, written by the generator from the tree it built.
GR_RANDOM_PMTS = r"""
import json, random, sys, pmt
rng = random.Random(int(sys.argv[1]))
def num(f): return ["float", repr(float(f))]
UNIFORM = [(pmt.init_u8vector, 0, lambda: rng.randrange(256)), (pmt.init_s8vector, 1, lambda: rng.randrange(-128, 128)),
           (pmt.init_u16vector, 2, lambda: rng.randrange(2**16)), (pmt.init_s16vector, 3, lambda: rng.randrange(-2**15, 2**15)),
           (pmt.init_u32vector, 4, lambda: rng.randrange(2**32)), (pmt.init_s32vector, 5, lambda: rng.randrange(-2**31, 2**31)),
           (pmt.init_u64vector, 6, lambda: rng.randrange(2**64)), (pmt.init_s64vector, 7, lambda: rng.randrange(-2**63, 2**63)),
           (pmt.init_f32vector, 8, lambda: rng.choice([0.5, -3.25, 2.0**100, float("inf")])),
           (pmt.init_f64vector, 9, lambda: rng.choice([rng.uniform(-1e300, 1e300), -0.0, 5e-324])),
           (pmt.init_c32vector, 10, lambda: complex(rng.choice([1.5, -2.0]), rng.choice([0.25, 7.0]))),
           (pmt.init_c64vector, 11, lambda: complex(rng.uniform(-9, 9), rng.uniform(-9, 9)))]
def text():
    return "".join(chr(rng.choice([rng.randrange(32, 127), rng.randrange(0xa0, 0x3000), 0]))
                   for _ in range(rng.choice([0, 1, 5, 300])))
def scalar():
    k = rng.randrange(8)
    if k < 2: return (pmt.PMT_T, ["bool", True]) if k else (pmt.PMT_F, ["bool", False])
    if k == 2: return pmt.PMT_NIL, ["nil"]
    if k == 3: s = text(); return pmt.intern(s), ["str", s]
    if k == 4: v = rng.choice([rng.randrange(-2**31, 2**31), rng.randrange(-2**63, 2**63)]); return pmt.from_long(v), ["int", v]
    if k == 5: v = rng.randrange(2**64); return pmt.from_uint64(v), ["int", v]
    if k == 6: v = rng.choice([rng.uniform(-1e9, 1e9), float("-inf"), -0.0]); return pmt.from_double(v), num(v)
    v = complex(rng.uniform(-9, 9), rng.uniform(-9, 9)); return pmt.from_complex(v), ["complex", num(v.real), num(v.imag)]
def value(depth):
    k = rng.randrange(9 if depth < 4 else 2)
    if k == 0: return scalar()
    if k == 1:
        init, code, item = rng.choice(UNIFORM); items = [item() for _ in range(rng.choice([0, 1, 7]))]
        return init(len(items), items), ["uniform", code, [repr(v) for v in items]]
    if k == 2: (a, ca), (b, cb) = value(depth + 1), value(depth + 1); return pmt.cons(a, b), ["pair", ca, cb]
    if k == 3:
        out, canon = pmt.PMT_NIL, ["nil"]
        for v, c in [value(depth + 1) for _ in range(rng.randrange(1, 5))][::-1]:
            out, canon = pmt.cons(v, out), ["pair", c, canon]
        return out, canon
    if k in (4, 5):
        items = [value(depth + 1) for _ in range(rng.randrange(1 if k == 5 else 0, 5))]
        if k == 5: return pmt.make_tuple(*[v for v, _ in items]), ["tuple", [c for _, c in items]]
        vec = pmt.make_vector(len(items), pmt.PMT_NIL)
        for i, (v, _) in enumerate(items): pmt.vector_set(vec, i, v)
        return vec, ["vector", [c for _, c in items]]
    d, canon = pmt.make_dict(), {}
    for _ in range(rng.randrange(0, 4)):
        # keys Python tells apart (False, 0 and -0.0 are one key to a dict there)
        s, n = text(), rng.randrange(-2**63, 2**64)
        key, ck = rng.choice([(pmt.intern(s), ["str", s]), (pmt.from_long(n) if n < 2**63 else pmt.from_uint64(n), ["int", n]),
                              (pmt.make_tuple(pmt.intern(s), pmt.from_long(n % 2**31)), ["tuple", [["str", s], ["int", n % 2**31]]])])
        v, cv = value(depth + 1); d = pmt.dict_add(d, key, v); canon[json.dumps(ck)] = cv
    return d, ["dict", sorted([json.loads(k), v] for k, v in canon.items())] if canon else ["nil"]
for _ in range(int(sys.argv[2])):
    v, canon = value(0)
    print(json.dumps({"hex": pmt.serialize_str(v).hex(), "canon": canon}))
"""


def _canon(value) -> list:
    """A decoded PMT in the generator's canonical form (an empty dict is nil on the wire)."""
    from rfclassify.serve.pmt import _UNIFORM_CODE, Pair

    if value is None or (isinstance(value, dict) and not value):
        return ["nil"]
    if isinstance(value, bool):
        return ["bool", value]
    if isinstance(value, int):
        return ["int", value]
    if isinstance(value, float):
        return ["float", repr(value)]
    if isinstance(value, complex):
        return ["complex", _canon(value.real), _canon(value.imag)]
    if isinstance(value, str):
        return ["str", value]
    if isinstance(value, Pair):
        return ["pair", _canon(value.car), _canon(value.cdr)]
    if isinstance(value, dict):
        return ["dict", sorted([_canon(k), _canon(v)] for k, v in value.items())]
    if isinstance(value, (list, tuple)):
        return ["vector" if isinstance(value, list) else "tuple", [_canon(v) for v in value]]
    assert isinstance(value, np.ndarray) and value.ndim == 1, type(value)
    return ["uniform", _UNIFORM_CODE[value.dtype], [repr(v) for v in value.tolist()]]


def test_pmt_reader_agrees_with_gnuradio_on_random_values_of_every_type() -> None:
    from rfclassify.serve.pmt import deserialize, serialize

    proc = subprocess.run([GR_PYTHON, "-c", GR_RANDOM_PMTS, "60", "1500"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    cases = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(cases) == 1500
    for case in cases:
        value = deserialize(bytes.fromhex(case["hex"]))
        assert _canon(value) == case["canon"], case["hex"][:200]
        assert _canon(deserialize(serialize(value))) == case["canon"], case["hex"][:200]


# ---------------------------------------------------------------------------------------------
# End to end: `rfclassify serve` consuming a GNU Radio flowgraph


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _shipped_model() -> bool:
    return (REPO / "models" / "model.json").exists() and (REPO / "models" / "model.onnx").exists()


@pytest.fixture()
def serve(tmp_path, tiny_model_dir):
    """Start `rfclassify serve` against an input endpoint; yields (output endpoint, control endpoint)."""
    procs: list[subprocess.Popen] = []

    def start(input_endpoint: str, input_format: str, config_toml: str = "") -> tuple[str, str]:
        pytest.importorskip("onnxruntime")
        from rfclassify.serve.control import NoDaemonError, request

        output = f"tcp://127.0.0.1:{_free_port()}"
        control = f"ipc://{tmp_path / 'control'}"
        model = [] if _shipped_model() else ["--model-dir", str(tiny_model_dir)]
        config = []
        if config_toml:
            (tmp_path / "serve.toml").write_text(config_toml)
            config = ["--config", str(tmp_path / "serve.toml")]
        cmd = [sys.executable, "-m", "rfclassify", "serve", *config, "--input", input_endpoint,
               "--input-format", input_format, "--sample-rate", "1e6", "--output", output,
               "--control", control, "--backend", "onnxruntime", "--precision", "fp32", *model]
        log = tmp_path / "serve.log"
        with open(log, "w") as fh:
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        procs.append(proc)
        # the shipped model and its refiner workers load in the subprocess, where conftest's
        # one-thread settings do not reach: 12 s on a busy 2-core box, over 30 s under more load
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, f"rfclassify serve exited: {log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"rfclassify serve did not come up: {log.read_text()[-3000:]}"
            try:
                health = request(control, "status", timeout_s=0.5)["health"]
            except NoDaemonError:
                continue
            assert health != "failed", log.read_text()[-3000:]
            if health != "starting":  # the model is loaded and the pipeline runs
                return output, control
            time.sleep(0.1)

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def _collect(output: str, fg: Flowgraph, expected: int) -> tuple[list[dict], list[dict]]:
    from rfclassify.serve.demo import ResultCollector

    col = ResultCollector(output).start()
    try:
        time.sleep(0.7)  # the daemon's SUB subscription must reach the flowgraph's PUB
        fg.go()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(col.results) + len(col.rejects) < expected:
            time.sleep(0.1)
        time.sleep(1.0 if len(col.results) >= expected else 0.0)  # nothing extra should follow
        return list(col.results), list(col.rejects)
    finally:
        col.stop()


RESULT_FIELDS = {"burst_id", "stream", "label", "confidence", "top", "snr_db", "n_samples", "bucket",
                 "windows", "backend", "precision", "model", "latency_ms"}


@pytest.mark.parametrize("input_format", ["gr-stream", "gr-pdu", "gr-stream squelch"])
def test_daemon_classifies_every_burst_of_a_gnuradio_flowgraph(flowgraph, serve, input_format) -> None:
    squelch = input_format.endswith(" squelch")   # the flowgraph's squelch tags cut the bursts
    sink = "stream" if input_format.startswith("gr-stream") else "pdu"
    extra = ["--pass-tags", "--marker", "squelch"] if squelch else []
    fg = flowgraph("--sink", sink, "--mod", "qpsk", "--noise", "0.03", "--seed", "11", "--bursts", "10", *extra)
    config = '[input]\ncut_mode = "start_end"\n' if squelch else ""
    output, control = serve(fg.endpoint, input_format.split()[0], config)
    results, rejects = _collect(output, fg, expected=10)
    truth = fg.truth()
    assert rejects == []
    assert len(results) == len(truth) == 10
    by_id = {r["burst_id"]: r for r in results}
    assert sorted(by_id) == [t["burst_id"] for t in truth]
    for t in truth:
        r = by_id[t["burst_id"]]
        assert RESULT_FIELDS <= set(r), RESULT_FIELDS - set(r)
        if input_format == "gr-pdu":
            assert r["n_samples"] == t["length"] and r["truth"]["label"] == "QPSK"
        elif squelch:   # from where the squelch opens (a sample or two early) to where it closes
            assert t["length"] <= r["n_samples"] <= t["length"] + 40
        else:
            assert t["length"] <= r["n_samples"] <= t["length"] + 2 * PAD + 2 * BLOCK + 16
    if _shipped_model():
        # a clean, high-SNR QPSK flowgraph: most bursts should be called QPSK by a trained model
        qpsk = sum(r["label"] == "QPSK" or r["top"][0]["label"] == "QPSK" for r in results)
        assert qpsk >= 6, [r["label"] for r in results]


def test_a_gnuradio_flowgraph_reads_the_results_published_as_pmt(flowgraph, serve) -> None:
    """output.format = "gr-pmt": zeromq.sub_msg_source hands each record to the flowgraph as a
    PMT dict, read here by GNU Radio's own pmt.to_python."""
    fg = flowgraph("--sink", "pdu", "--mod", "qpsk", "--noise", "0.03", "--seed", "12", "--bursts", "10")
    output, _ = serve(fg.endpoint, "gr-pdu", '[output]\nformat = "gr-pmt"\n')
    sink = subprocess.Popen([GR_PYTHON, str(SCRIPT.with_name("result_sink.py")), "--endpoint", output,
                             "--count", "10"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert sink.stdout.readline().strip() == "READY", sink.stderr.read()[-2000:]
        time.sleep(0.7)   # the flowgraph's SUB subscription must reach the daemon's PUB
        fg.go()
        truth = fg.truth()
        out, err = sink.communicate(timeout=60)
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait(5)
    assert sink.returncode == 0, err[-2000:]
    records = json.loads([line for line in out.splitlines() if line.startswith("RESULTS ")][-1][len("RESULTS "):])
    assert len(records) == len(truth) == 10
    assert {r["topic"] for r in records} == {"result"}
    assert sorted(r["burst_id"] for r in records) == [t["burst_id"] for t in truth]
    for r in records:
        assert RESULT_FIELDS <= set(r) and r["truth"]["label"] == "QPSK" and {"label", "p"} == set(r["top"][0])
        assert set(r["latency_ms"]) == {"queue", "infer", "total"} and isinstance(r["confidence"], float)


# A USRP's stream tags, rx_time, rx_rate and rx_freq, at the start and again at a retune, through
# pub_sink(pass_tags=True) and through tagged_stream_to_pdu -> pub_msg_sink; each sink's messages
# caught here by a SUB socket in the same process and printed as hex.
GR_UHD_TAGS = r"""
import json, sys, time
import numpy as np, pmt, zmq
from gnuradio import blocks, gr, pdu, zeromq

def tag(offset, key, value):
    return gr.tag_utils.python_to_tag((offset, pmt.intern(key), value, pmt.intern("uhd")))

def uhd(offset, secs, frac, rate, freq):
    return [tag(offset, "rx_time", pmt.make_tuple(pmt.from_uint64(secs), pmt.from_double(frac))),
            tag(offset, "rx_rate", pmt.from_double(rate)), tag(offset, "rx_freq", pmt.from_double(freq))]

def capture(connect, sink):
    ctx = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.setsockopt(zmq.RCVHWM, 0)
    sub.connect(sink.last_endpoint())
    time.sleep(1.0)   # the subscription must reach the PUB socket before data flows
    tb = gr.top_block()
    connect(tb)
    tb.start()
    # until the sink has been quiet for 2 s: a message sink hands its last PDUs on from its own
    # thread, which a tb.wait() first could end before they were sent
    msgs = []
    while sub.poll(2000):
        msgs.append([f.hex() for f in sub.recv_multipart()])
    tb.stop()
    tb.wait()
    sub.close()
    return msgs

rng = np.random.default_rng(1)
n = 30000
x = (0.01 * (rng.standard_normal(n) + 1j * rng.standard_normal(n))).astype(np.complex64)
for start in (4000, 12000, 22000):
    x[start:start + 2000] += np.exp(2j * np.pi * rng.random(2000)).astype(np.complex64)
# retuned at 18000: the UHD source writes all three tags again
tags = uhd(0, 1700000000, 0.5, 2e6, 915e6) + uhd(18000, 1700000000, 0.5 + 18000 / 2e6, 4e6, 868e6)
src = blocks.vector_source_c(x.tolist(), False, 1, tags)
stream_sink = zeromq.pub_sink(gr.sizeof_gr_complex, 1, "tcp://127.0.0.1:0", 100, True, -1)
stream = capture(lambda tb: tb.connect(src, stream_sink), stream_sink)

ones = np.ones(2000, np.complex64)
tags = ([tag(0, "packet_len", pmt.from_long(1000)), tag(1000, "packet_len", pmt.from_long(1000))]
        + uhd(0, 1700000000, 0.5, 2e6, 915e6) + uhd(1000, 1700000000, 0.75, 4e6, 868e6))
src = blocks.vector_source_c(ones.tolist(), False, 1, tags)
to_pdu = pdu.tagged_stream_to_pdu(gr.types.complex_t, "packet_len")
pdu_sink = zeromq.pub_msg_sink("tcp://127.0.0.1:0", 100, True)

def pdus(tb):
    tb.connect(src, to_pdu)
    tb.msg_connect(to_pdu, "pdus", pdu_sink, "in")

pdu_msgs = capture(pdus, pdu_sink)

# length tags, and a sink left at pass_tags=False (its default)
src = blocks.vector_source_c(x[:6000].tolist(), False)
lengths = blocks.stream_to_tagged_stream(gr.sizeof_gr_complex, 1, 1500, "packet_len")
plain_sink = zeromq.pub_sink(gr.sizeof_gr_complex, 1, "tcp://127.0.0.1:0", 100, False, -1)
plain = capture(lambda tb: tb.connect(src, lengths, plain_sink), plain_sink)
print(json.dumps({"stream": stream, "pdu": pdu_msgs, "plain": plain}))
"""


@pytest.fixture(scope="module")
def uhd_messages() -> dict[str, list[list[bytes]]]:
    """GR_UHD_TAGS's messages by sink ("stream", "pdu", "plain"), its flowgraphs run once."""
    proc = subprocess.run([GR_PYTHON, "-c", GR_UHD_TAGS], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    captured = json.loads(proc.stdout.splitlines()[-1])
    return {kind: [[bytes.fromhex(f) for f in m] for m in found] for kind, found in captured.items()}


def test_a_usrps_rx_rate_and_rx_freq_tags_give_each_burst_its_rate_and_frequency(uhd_messages) -> None:
    """UHD tags rx_rate and rx_freq with rx_time; both ingest paths ignored them (the rate and the
    frequency came from the config, and a stream burst had no time without a configured rate)."""
    msgs = uhd_messages
    assert msgs["stream"] and len(msgs["pdu"]) == 2
    # the stream: no rate or frequency configured; each burst has the tags' in force where it starts
    bursts = _bursts(_decode("gr-stream", IngestConfig(), msgs["stream"]))
    assert [(b.sample_rate_hz, b.center_freq_hz) for b in bursts] == [(2e6, 915e6), (2e6, 915e6), (4e6, 868e6)]
    for b, sent in zip(bursts, (4000, 12000, 22000), strict=True):
        start = b.meta["offset_samples"]
        assert start <= sent < start + 2 * PAD + BLOCK
        expected = 1700000000.5 + (start / 2e6 if start < 18000 else 18000 / 2e6 + (start - 18000) / 4e6)
        assert b.time == pytest.approx(expected, abs=1e-9)
    # PDUs: the metadata's rx_rate and rx_freq beat the config, as sample_rate and center_freq do
    pdus = _bursts(_decode("gr-pdu", IngestConfig(sample_rate_hz=1e6, center_freq_hz=1e8), msgs["pdu"]))
    assert [(b.sample_rate_hz, b.center_freq_hz, b.time) for b in pdus] == [
        (2e6, 915e6, 1700000000.5), (4e6, 868e6, 1700000000.75)]
    assert all(b.meta == {} for b in pdus)


def test_a_tag_cut_behind_a_sink_without_pass_tags_says_so(uhd_messages) -> None:
    """The daemon's decoder (cut_mode tags from its config, pass_tags auto) behind a real sink
    left at pass_tags=False: it cut nothing and said nothing; now each frame is a reject telling
    the operator what to set."""
    from rfclassify.serve.config import config_from_dict
    from rfclassify.serve.pipeline import make_input_decoder

    plain = uhd_messages["plain"]
    assert plain and all(len(m) == 1 for m in plain)
    dec = make_input_decoder(config_from_dict({"input": {"format": "gr-stream", "cut_mode": "tags"}}))
    out = [o for m in plain for o in dec.decode(m, 0.0)] + dec.flush(0.0)
    assert len(out) == len(plain) and {o.reason for o in out} == {"bad_tag_header"}
    assert all(o.detail.endswith("set pass_tags=True on the flowgraph's zeromq sink") for o in out)
