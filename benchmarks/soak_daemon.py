"""A long run of the real daemon on a steady stream with garbage in it: does anything grow?

Starts `rfclassify serve` (the shipped model unless --model-dir, the CPU default backend, its
refiner worker processes as the daemon picks them) on loopback ports, sends it labelled
bursts from the simulator (all 28 classes, 0..20 dB, 256..2,048 samples) at --rate a second
with every --garbage-every-th message a malformed one (ten kinds in turn: random bytes, a
truncated payload, invalid JSON, an unknown dtype, NaN samples, zero samples, a burst too
short, a message of one frame, a 400-digit sample rate, and a good burst with NaN in its
meta, which is classified), and every --every seconds records the daemon's resident
memory and that of its worker processes, its open file descriptors and threads (from
/proc), and its status counters. At the end it prints the samples, the memory slope over the
second half of the run (MB an hour, least squares; the first half holds the start-up's
growth), and whether every message sent was answered: classified + rejected + dropped =
sent, and a result published for each. Linux only (/proc). A measurement, not a test.
The daemon's config, control socket and log live in a temporary folder, removed after a run
that passed; kept after one that failed, and named on stderr, for its log (serve.log).

    PYTHONPATH=. python3 benchmarks/soak_daemon.py [--minutes 20] [--rate 20] [--garbage-every 10]
        [--every 30] [--json OUT.json] [--model-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import zmq  # noqa: E402

from rfclassify.serve.control import NoDaemonError, request  # noqa: E402
from rfclassify.serve.demo import ResultCollector  # noqa: E402
from rfclassify.serve.native import encode_native  # noqa: E402
from rfclassify.serve.simulate import BurstSource, SimulateOptions  # noqa: E402

GARBAGE = ("random bytes", "truncated payload", "invalid json", "unknown dtype", "nan samples", "zero samples",
           "too short", "one frame", "huge integer", "nan in meta")


def garbage(kind: str, iq: np.ndarray, n: int) -> list[bytes]:
    """One malformed message of `kind` made from a good burst iq (the n-th message sent)."""
    header = {"sample_rate": 1e6, "burst_id": f"bad-{n}"}
    if kind == "random bytes":
        return [np.random.default_rng(n).bytes(300)]
    if kind == "truncated payload":
        return [json.dumps(header).encode(), iq.astype(np.complex64).tobytes()[:-3]]
    if kind == "invalid json":
        return [b"{not json", iq.astype(np.complex64).tobytes()]
    if kind == "unknown dtype":
        return [json.dumps({**header, "dtype": "cf64_be"}).encode(), iq.astype(np.complex64).tobytes()]
    if kind == "nan samples":
        bad = iq.astype(np.complex64).copy()
        bad[len(bad) // 2] = complex(np.nan, 0)
        return encode_native(bad, header)
    if kind == "zero samples":
        return encode_native(np.zeros(len(iq), np.complex64), header)
    if kind == "too short":
        return encode_native(iq[:10].astype(np.complex64), header)
    if kind == "huge integer":        # past float range: once ended the ingest thread (fifty-seventh session)
        return [json.dumps({**header, "sample_rate": 10 ** 400}).encode(), iq.astype(np.complex64).tobytes()]
    if kind == "nan in meta":         # a valid burst whose echo JSON cannot hold as it is: classified
        return encode_native(iq.astype(np.complex64), {**header, "meta": {"x": float("nan")}})
    return [json.dumps(header).encode()]     # one frame


def proc_sample(pid: int) -> dict[str, Any]:
    """The daemon's resident memory (MB), threads and open descriptors, and its child processes'
    resident memory, from /proc."""
    def status(p: int) -> dict[str, str]:
        out = {}
        for line in Path(f"/proc/{p}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            out[key] = value.strip()
        return out
    main = status(pid)
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            st = status(int(entry.name))
        except OSError:
            continue
        if st.get("PPid") == str(pid):
            children.append(int(st.get("VmRSS", "0 kB").split()[0]) / 1024)
    return {"rss_mb": int(main["VmRSS"].split()[0]) / 1024, "threads": int(main["Threads"]),
            "fds": len(os.listdir(f"/proc/{pid}/fd")), "children": len(children),
            "children_rss_mb": round(sum(children), 1)}


def slope_mb_per_hour(t_s: list[float], mb: list[float]) -> float:
    """Least-squares slope of mb over t_s, in MB an hour (0 for fewer than two points)."""
    if len(t_s) < 2:
        return 0.0
    return float(np.polyfit(np.asarray(t_s) / 3600.0, np.asarray(mb), 1)[0])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=20.0)
    ap.add_argument("--rate", type=float, default=20.0, help="messages a second")
    ap.add_argument("--garbage-every", type=int, default=10, help="every N-th message is malformed (0: none)")
    ap.add_argument("--every", type=float, default=30.0, help="seconds between samples")
    ap.add_argument("--model-dir", default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="rfclassify-soak-"))
    rc = 1
    try:
        rc = soak(args, tmp)
    finally:
        if rc == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"the daemon's log is kept: {tmp / 'serve.log'}", file=sys.stderr)
    return rc


def soak(args: argparse.Namespace, tmp: Path) -> int:
    """The run of main's `args` with the daemon's files in `tmp`; 0 if every message was answered."""
    control = f"ipc://{tmp}/control"
    (tmp / "rfclassify.toml").write_text("")
    # ports the daemon picks; its status says which
    cmd = [sys.executable, "-m", "rfclassify", "serve", "--config", str(tmp / "rfclassify.toml"),
           "--input", "tcp://127.0.0.1:*", "--input-mode", "pull", "--input-bind", "--output", "tcp://127.0.0.1:*",
           "--control", control, "--backend", "onnxruntime"]
    if args.model_dir:
        cmd += ["--model-dir", args.model_dir]
    log = open(tmp / "serve.log", "w+")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    samples: list[dict[str, Any]] = []
    sent = {"good": 0, "garbage": 0}
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                print("the daemon did not start:\n" + log.read())
                return 1
            try:
                st = request(control, "status", timeout_s=0.5)
                if st["health"] != "starting":
                    break
            except NoDaemonError:
                pass
            time.sleep(0.2)
        inp, out = st["input"]["endpoint"], st["output"]["endpoint"]
        collector = ResultCollector(out).start()
        push = zmq.Context.instance().socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 0)
        push.connect(inp)
        source = iter(BurstSource(SimulateOptions(seed=56)))
        t0 = time.monotonic()
        next_sample, n = t0, 0
        while time.monotonic() - t0 < args.minutes * 60:
            iq, label, snr = next(source)
            n += 1
            if args.garbage_every and n % args.garbage_every == 0:
                push.send_multipart(garbage(GARBAGE[(n // args.garbage_every) % len(GARBAGE)], iq, n))
                sent["garbage"] += 1
            else:
                push.send_multipart(encode_native(iq, {"sample_rate": 1e6, "burst_id": n, "label": label,
                                                       "snr_db": snr}))
                sent["good"] += 1
            now = time.monotonic()
            if now >= next_sample:
                st = request(control, "status", timeout_s=5)
                c = st["counters"]
                samples.append({"t_s": round(now - t0, 1), **proc_sample(proc.pid), "health": st["health"],
                                "classified": c["classified"], "rejected": c["rejected_total"],
                                "dropped": c["dropped_total"], "sent": sent["good"] + sent["garbage"]})
                s = samples[-1]
                print(f"{s['t_s']:7.0f} s  rss {s['rss_mb']:6.1f} MB  workers {s['children']} "
                      f"{s['children_rss_mb']:6.1f} MB  threads {s['threads']}  fds {s['fds']}  sent {s['sent']}  "
                      f"classified {s['classified']}  rejected {s['rejected']}  dropped {s['dropped']}  {s['health']}",
                      flush=True)
                next_sample += args.every
            time.sleep(max(0.0, t0 + n / args.rate - time.monotonic()))
        time.sleep(5)    # let the last bursts through
        st = request(control, "status", timeout_s=5)
        collector.stop()
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
        log.close()
    c = st["counters"]
    total = sent["good"] + sent["garbage"]
    answered = c["classified"] + c["rejected_total"] + c["dropped_total"]
    half = [s for s in samples if s["t_s"] >= samples[-1]["t_s"] / 2]
    report = {
        "minutes": args.minutes, "rate": args.rate, "sent": sent, "counters": {k: c[k] for k in (
            "received", "classified", "rejected", "rejected_total", "dropped", "dropped_total", "published")},
        "results_received": len(collector.results), "rejects_received": len(collector.rejects),
        "every_message_answered": answered == total,
        "rss_slope_mb_per_hour_second_half": round(slope_mb_per_hour([s["t_s"] for s in half],
                                                                    [s["rss_mb"] for s in half]), 2),
        "workers_rss_slope_mb_per_hour_second_half": round(slope_mb_per_hour(
            [s["t_s"] for s in half], [s["children_rss_mb"] for s in half]), 2),
        "final_health": st["health"], "health_reasons": st.get("health_reasons"),
        "latency_ms": st.get("latency_ms"), "samples": samples,
    }
    print(f"sent {total} ({sent['garbage']} malformed); classified {c['classified']}, rejected {c['rejected_total']} "
          f"{c['rejected']}, dropped {c['dropped_total']}: every message answered: {report['every_message_answered']}; "
          f"results received {report['results_received']}, rejects received {report['rejects_received']}")
    print(f"memory over the second half: daemon {report['rss_slope_mb_per_hour_second_half']:+.2f} MB/h, "
          f"workers {report['workers_rss_slope_mb_per_hour_second_half']:+.2f} MB/h; first / last sample "
          f"{samples[0]['rss_mb']:.1f} / {samples[-1]['rss_mb']:.1f} MB (workers {samples[0]['children_rss_mb']:.1f} / "
          f"{samples[-1]['children_rss_mb']:.1f}); threads {samples[0]['threads']} / {samples[-1]['threads']}, "
          f"fds {samples[0]['fds']} / {samples[-1]['fds']}; health {st['health']}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0 if report["every_message_answered"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
