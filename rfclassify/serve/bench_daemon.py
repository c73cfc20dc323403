"""`rfclassify bench daemon`: the whole daemon under load, against the bare backend, in one run.

1. bare: `Classifier.classify` on the same 1,024-sample bursts, in batches of the daemon's
   max_batch (normalization, windowing, inference, results: the work the daemon does minus the
   sockets and threads) for --seconds; a batch larger than the pool of bursts repeats them.
2. max: a load generator (another process, PUSH over loopback TCP) sends as fast as the daemon
   takes them (PULL, overload policy "block": lossless backpressure); sustained throughput is
   the classified count over the measuring window.
3. half: the generator at half the measured max rate; latency percentiles (arrival to
   result, from the daemon's own stats) and drops.
A rate phase reports the rate asked of the generator (offered_rate) and what it sent in the
window (sent, sent_rate_bursts_per_s): past what it can send here they part.
Both daemons share one loaded Classifier with the bare run, so only the daemon differs.
Reported as ratios to the bare backend, measured in the same process, with the CPU the
daemon's process spent in each phase (its threads; not the load generator's process or the
refiners' worker processes), in cores and per classified burst. --no-refiner,
--refiner-workers and --refiner-skip-above choose how a model's refiners run, in both.
pyzmq is imported only where it is used: the options parse on a box without it, which is
then told so.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import multiprocessing
import platform
import sys
import tempfile
import time
from typing import Any

import numpy as np

from rfclassify._argtypes import finite_float, float_range, int_range, output_file, refiner_worker_count
from rfclassify._cpus import cpu_description, usable_cpu_count
from rfclassify.engine.options import add_model_arguments

BURST_SAMPLES = 1024
POOL = 256


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float_range(0.1, 86400.0), default=5.0, help="seconds per phase (default 5)")
    parser.add_argument("--rate", type=_rate, default="max", metavar="R|max",
                        help="'max' (default): measure max then half of it; a number: only that rate")
    parser.add_argument("--json", type=output_file, default=None, metavar="FILE",
                        help="also write the report as JSON to FILE ('-': to stdout, the running lines to stderr)")
    add_model_arguments(parser)
    parser.add_argument("--max-batch", type=int_range(1, 4096), default=64, help="windows per batch (default 64)")
    parser.add_argument("--max-wait-ms", type=float_range(0.0, 60_000.0), default=2.0,
                        help="batch wait (default 2 ms; 0..60000 as the daemon's batching.max_wait_ms)")
    parser.add_argument("--no-refiner", action="store_true",
                        help="leave the model's constellation refiner out (the network alone)")
    parser.add_argument("--light-refiner", action="store_true",
                        help="the refiner's light variant (invariants only, no sequence network)")
    parser.add_argument("--refiner-workers", type=refiner_worker_count, default=-1, metavar="N",
                        help="processes for the refiner's statistics (0: in the inference thread; default -1: "
                             "the daemon's default, all cores but two, at least two)")
    parser.add_argument("--capture", default=None, metavar="LABELS",
                        help="the daemons keep the bursts of these result labels on disk ([capture] labels; "
                             "'*': every burst), in a temporary folder: what keeping costs")
    parser.add_argument("--refiner-skip-above", type=finite_float, default=None, metavar="P",
                        help="a burst whose network top probability is above P skips the DC pass and the "
                             "refiners (default: the model's, model.json refiner_skip_above; 1: none skips them)")


_FIXED_RATE = float_range(0.001, 1e6)   # bursts/s; NaN was "offered", 1e-300 overflowed a wait


def _rate(text: str) -> str | float:
    """--rate: 'max', or a rate in bursts/s."""
    return text if text == "max" else _FIXED_RATE(text)


def _bursts(n: int, seed: int = 0) -> list[np.ndarray]:
    from rfclassify.dsp.synth import synthesize
    from rfclassify.labels import LABELS

    rng = np.random.default_rng(seed)
    labels = [LABELS[i % len(LABELS)] for i in range(n)]
    batch = synthesize(labels, BURST_SAMPLES, rng, snr_db=rng.uniform(0, 20, n))
    return list(batch.iq)


def bare_throughput(clf: Any, bursts: list[np.ndarray], batch: int, seconds: float) -> float:
    """Bursts/s of Classifier.classify on batches of `batch` bursts, taken from `bursts` in turn
    and round again where `batch` is more than there are (it took at most len(bursts), so with
    --max-batch 1024 the "batch 1024" baseline classified batches of 256)."""
    def chunk(start: int) -> list[np.ndarray]:
        return [bursts[(start + k) % len(bursts)] for k in range(batch)]

    clf.classify(chunk(0))
    n, i, t0 = 0, 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        clf.classify(chunk(i))
        n += batch
        i = (i + batch) % len(bursts)
    return n / (time.perf_counter() - t0)


def _load(endpoint: str, frames: list[list[bytes]], rate: float | None, stop: Any, sent: Any = None) -> None:
    """Send frames round-robin at `rate` per second (None: as fast as the socket accepts), in
    the load generator's process until `stop` is set or its parent process ends (a killed
    bench left it sending under PID 1). `sent` (a shared integer): the count sent so far, for
    the parent to read (a rate past what this process can send was reported as offered)."""
    import zmq

    from rfclassify.engine.refiner_pool import become_child_worker
    from rfclassify.serve.control import open_socket

    become_child_worker()

    def setup(sock: zmq.Socket) -> None:
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 1000)
        sock.setsockopt(zmq.SNDTIMEO, 100)     # a full pipe blocks in ZeroMQ, not in a polling loop

    sock = open_socket(zmq.Context.instance(), zmq.PUSH, "load", endpoint, False, setup)
    try:
        i, t0 = 0, time.monotonic()
        while not stop.is_set():
            if rate is not None:
                delay = t0 + i / rate - time.monotonic()
                if delay > 0 and stop.wait(delay):
                    break
            try:
                sock.send_multipart(frames[i % len(frames)])
            except zmq.Again:              # backpressure from the daemon for 100 ms: look at stop
                continue
            i += 1
            if sent is not None:
                sent.value = i
    finally:
        sock.close()


def run_phase(engine: Any, frames: list[list[bytes]], rate: float | None, seconds: float,
              max_batch: int, max_wait_ms: float, warmup_s: float = 1.0,
              capture: str | None = None) -> dict[str, Any]:
    """One daemon under load; counts only what happens after warmup_s. capture: the result
    labels it keeps on disk ([capture] labels), in a folder of its own; None keeps none."""
    from rfclassify._exceptions import InternalError
    from rfclassify.engine.refiner_pool import starting_processes
    from rfclassify.serve.daemon import Daemon
    from rfclassify.serve.demo import local_config

    with tempfile.TemporaryDirectory(prefix="rfclassify-bench-") as tmp:
        cfg = local_config(tmp, overload="block" if rate is None else "drop_oldest",
                           max_batch=max_batch, max_wait_ms=max_wait_ms)
        if capture is not None:
            cfg = with_capture(cfg, f"{tmp}/capture", capture)
        daemon = Daemon(cfg, engine=engine)
        # the load generator is another process, like a real front end: it shares the CPU
        # cores with the daemon but not its interpreter lock
        mp = multiprocessing.get_context("spawn")
        stop = mp.Event()
        sent = mp.RawValue("q", 0)    # written by the generator alone; an aligned 8-byte store
        gen = None
        try:
            daemon.start()
            gen = mp.Process(target=_load, args=(daemon.pipeline.input_endpoint, frames, rate, stop, sent),
                             name="rfclassify-bench-load", daemon=True)
            with starting_processes():            # deaf to Ctrl-C from its first line: stop ends it
                gen.start()
            deadline = time.monotonic() + 30
            while daemon.stats.snapshot()["counters"]["received"] == 0 and time.monotonic() < deadline:
                if not gen.is_alive():            # it failed: said so on stderr; not 30 s of waiting
                    raise InternalError(f"the load generator ended before sending (exit status {gen.exitcode})")
                time.sleep(0.05)                  # the generator process is starting
            time.sleep(warmup_s)
            s0, t0, cpu0, sent0 = daemon.stats.snapshot()["counters"], time.monotonic(), time.process_time(), sent.value
            daemon.stats.reset_latency(whole_window=True)   # percentiles of the measuring window only, all of it
            time.sleep(seconds)
            snap, t1, cpu1, sent1 = daemon.stats.snapshot(), time.monotonic(), time.process_time(), sent.value
            covered = daemon.stats.latency_coverage()["total"]
            kept = daemon.capture.snapshot() if daemon.capture is not None else None
        finally:
            stop.set()
            if gen is not None and gen.pid is not None:
                gen.join(5)
                if gen.is_alive():
                    gen.kill()
                    gen.join(5)
            daemon.stop(drain=False)
    c = snap["counters"]
    classified = c["classified"] - s0["classified"]
    return {
        # the rate asked of the load generator (None: as fast as the daemon takes them), and
        # what it sent in the window: past what its process can send here the two part
        "offered_rate": rate,
        "sent": sent1 - sent0,
        "sent_rate_bursts_per_s": (sent1 - sent0) / (t1 - t0),
        "window_s": t1 - t0,
        "throughput_bursts_per_s": classified / (t1 - t0),
        # the CPU of this process's threads (the daemon's; the load generator is another
        # process, and so are the refiners' workers, which this leaves out)
        "process_cpu_cores": (cpu1 - cpu0) / (t1 - t0),
        "process_cpu_ms_per_burst": (cpu1 - cpu0) * 1e3 / classified if classified else None,
        "received": c["received"] - s0["received"],
        "classified": classified,
        "dropped": c["dropped_total"] - s0["dropped_total"],
        "latency_ms": snap["latency_ms"],
        # the window's results whose latencies were recorded, and how many of them the
        # percentiles are over: all up to stats.WINDOW_SAMPLE, a uniform sample past it (before,
        # the last 4,096 only: a second or two of a GPU's window)
        "latency_results": covered[1], "latency_percentiles_over": covered[0],
        # the whole phase's, warmup included: kept and skipped bursts
        "capture": None if kept is None else {k: kept[k] for k in ("kept", "skipped", "failed", "deleted")},
    }


def with_capture(cfg: Any, folder: str, labels: str) -> Any:
    """`cfg` with [capture] keeping the bursts of `labels` in `folder`, checked as `serve`
    checks a config (ConfigError: 'NOTALABEL' was taken and kept nothing)."""
    from rfclassify.serve.config import apply_overrides

    return apply_overrides(cfg, {"capture.dir": folder, "capture.labels": labels})


def run(args: argparse.Namespace) -> int:
    from rfclassify._atomic import write_atomic
    from rfclassify._exceptions import ConfigError

    # the daemon's sockets need pyzmq, which this module does not import at its top: a box
    # without it is told what is missing instead of "unrecognized arguments" for every option
    if importlib.util.find_spec("zmq") is None:
        raise ConfigError("the daemon benchmark needs pyzmq (`pip install pyzmq`)")
    from rfclassify._signals import EXIT_STATUS, Terminated, sigterm_as_interrupt

    to_stdout = args.json is not None and str(args.json) == "-"
    if args.json is not None and not to_stdout:
        # made before the run, not after it (the run measured for minutes, then failed to write)
        args.json.parent.mkdir(parents=True, exist_ok=True)
    # SIGTERM takes Ctrl-C's way out: the daemons stopped, the load generator and the refiners'
    # workers ended (it left them running)
    with sigterm_as_interrupt():
        try:
            if to_stdout:
                # the report alone on stdout, as `bench --json -` gives it; the running lines go to
                # stderr (a file named "-" was written before)
                with contextlib.redirect_stdout(sys.stderr):
                    report = _measure(args)
            else:
                report = _measure(args)
        except Terminated:
            print("rfclassify bench: stopped by SIGTERM", file=sys.stderr)
            return EXIT_STATUS["SIGTERM"]
    if to_stdout:
        print(json.dumps(report, indent=2))
    elif args.json:
        # in one step (a failed write, a full disk, left a valid earlier report cut short); an
        # error names the file, exit 2
        write_atomic(args.json, json.dumps(report, indent=2) + "\n")
    return 0


def _measure(args: argparse.Namespace) -> dict[str, Any]:
    """Run the phases, printing a line each; the report."""
    from rfclassify._exceptions import InputError
    from rfclassify.engine.classifier import Classifier
    from rfclassify.serve.config import check_option

    fixed_rate = None if args.rate == "max" else float(args.rate)
    if args.seconds <= 0 or args.max_batch < 1:     # --refiner-workers: Classifier.load checks it
        raise InputError("--seconds and --max-batch must be positive")
    if args.capture is not None:     # before the model loads
        check_option("--capture", "capture.labels", args.capture, {"capture.dir": "capture"})
    clf = Classifier.load(args.model_dir or None, backend=args.backend, precision=args.precision,
                          device=args.device, threads=args.threads, refiner=not args.no_refiner,
                          refiner_workers=args.refiner_workers, refiner_sequence=not args.light_refiner,
                          refiner_skip_above=args.refiner_skip_above,
                          warmup=True)     # as the daemon loads it: no first-use costs in the phases
    try:
        return _phases(args, clf, fixed_rate)
    finally:
        clf.close()     # its refiners' worker processes too, on an error or Ctrl-C as well


def _phases(args: argparse.Namespace, clf: Any, fixed_rate: float | None) -> dict[str, Any]:
    """_measure's phases on the loaded Classifier `clf`; the report."""
    from rfclassify._exceptions import InputError
    from rfclassify.serve.native import encode_native
    from rfclassify.serve.pipeline import EngineAdapter

    engine = EngineAdapter(clf)
    bursts = _bursts(POOL)
    frames = [encode_native(b, {"sample_rate": 1e6, "burst_id": i}) for i, b in enumerate(bursts)]
    cpu = cpu_description()
    report: dict[str, Any] = {
        "machine": f"{platform.machine()}, {cpu['model']}, {usable_cpu_count()} CPUs",
        "cpu_int8_features": cpu["int8_features"],
        "model": clf.model_id, "backend": clf.backend, "precision": clf.precision, "device": clf.device,
        "burst_samples": BURST_SAMPLES, "max_batch": args.max_batch, "max_wait_ms": args.max_wait_ms,
        "seconds": args.seconds, "refiner": clf.refiner is not None, "refiner_workers": clf.refiner_workers,
        "refiner_sequence_net": clf.refiner is not None and clf.refiner.sequence is not None,
        "low_order_refiner": clf.low_order_refiner is not None,
        "refiner_skip_above": clf.refiner_skip_above if clf.refiners else None,
        "capture": args.capture,
    }
    refiner = ("no refiner" if clf.refiner is None else
               f"{'light ' if args.light_refiner else ''}refiner "
               f"{'in the inference thread' if not clf.refiner_workers else f'in {clf.refiner_workers} processes'}")
    print(f"model {clf.model_id}: {clf.backend} {clf.precision} on {clf.device}, {refiner}; {BURST_SAMPLES}-sample "
          f"bursts, batch {args.max_batch}, {args.seconds:g} s per phase", flush=True)
    # the bare backend is measured before and after the daemon (half the time each) and
    # averaged, so a change in the machine's load during the run biases the ratio less
    bare_before = bare_throughput(clf, bursts, args.max_batch, args.seconds / 2)
    phases: dict[str, dict[str, Any]] = {}
    if args.rate == "max":
        phases["max"] = run_phase(engine, frames, None, args.seconds, args.max_batch, args.max_wait_ms,
                                  capture=args.capture)
        if not phases["max"]["classified"]:
            # no half of nothing to offer (a load generator at 0/s divided by zero, and the
            # half phase then waited 30 s for a first burst)
            raise InputError(f"the max phase classified no burst in its {args.seconds:g} s window: give a longer "
                             "--seconds (one batch may take longer than that here)")
        half = phases["max"]["throughput_bursts_per_s"] / 2
        phases["half"] = run_phase(engine, frames, half, args.seconds, args.max_batch, args.max_wait_ms,
                                   capture=args.capture)
    else:
        phases["fixed"] = run_phase(engine, frames, fixed_rate, args.seconds, args.max_batch, args.max_wait_ms,
                                    capture=args.capture)
    bare_after = bare_throughput(clf, bursts, args.max_batch, args.seconds / 2)
    bare = (bare_before + bare_after) / 2
    report.update(bare_bursts_per_s=bare, bare_before_after=[bare_before, bare_after], phases=phases)
    print(f"bare backend (Classifier.classify, batch {args.max_batch}): {bare:8.0f} bursts/s "
          f"(before {bare_before:.0f}, after {bare_after:.0f})", flush=True)
    for name, p in phases.items():
        _print_phase(name, p, bare)
    if "max" in phases:
        report["max_vs_bare"] = phases["max"]["throughput_bursts_per_s"] / bare
        print(f"daemon max / bare = {report['max_vs_bare']:.2f} (goal >= 0.80); half-load p99 total "
              f"{phases['half']['latency_ms']['total']['p99']} ms ({latency_goal_words(bool(clf.refiners))})")
    if clf.refiners and clf.refiner_skip_above < 1:
        # over every phase, bare loops included (the same bursts): how much of the refiners' work the skip saved
        counts = report["refiner_skip_counts"] = clf.refiner_skip_counts
        print(f"skipped the refiners: {counts['skipped']} of {counts['long_enough']} bursts "
              f"(network top probability above {clf.refiner_skip_above:g})", flush=True)
    return report


def latency_goal_words(refined: bool) -> str:
    """What the half-load p99 is measured against: the daemon's 20 ms goal, which was set for
    the network alone; with refiners a batch's statistics alone take longer (about 17 ms of
    x86 CPU a burst, docs/daemon.md), so it has no goal there."""
    if not refined:
        return "goal <= 20 ms"
    return "no goal with the refiners: the 20 ms goal is the network alone's, --no-refiner"


def rate_text(rate: float) -> str:
    """A rate in bursts/s for a line: whole numbers from 100 up, three figures below (a rate
    under 1 was printed as "0/s offered")."""
    return f"{rate:.0f}" if rate >= 100 else f"{rate:.3g}"


#: a rate phase whose generator sent less than this part of the rate asked (and two bursts
#: fewer at least: a slow rate in a short window sends a whole burst or none) says so
SENT_SHORT = 0.95


def sent_short(p: dict[str, Any]) -> bool:
    """Whether a rate phase's load generator sent clearly less than it was asked."""
    if p["offered_rate"] is None:
        return False
    asked = p["offered_rate"] * p["window_s"]
    return asked - p["sent"] > max(2.0, (1 - SENT_SHORT) * asked)


def _print_phase(name: str, p: dict[str, Any], bare: float) -> None:
    lat = p["latency_ms"]["total"]
    if p["offered_rate"] is not None:
        name += f" ({rate_text(p['offered_rate'])}/s asked, {rate_text(p['sent_rate_bursts_per_s'])}/s sent)"
    thr = p["throughput_bursts_per_s"]
    print(f"daemon, {name:<28} {thr:8.0f} bursts/s ({thr / bare:.2f} x bare), "
          f"dropped {p['dropped']}{_of_sent(p)}, "
          f"latency total p50 {lat['p50']} / p90 {lat['p90']} / p99 {lat['p99']} ms "
          f"({_latency_results(p)}), "
          f"daemon process CPU {p['process_cpu_cores']:.2f} cores"
          + (f" ({p['process_cpu_ms_per_burst']:.2f} ms a burst)" if p["process_cpu_ms_per_burst"] else "")
          + (f"; capture kept {p['capture']['kept']}, skipped {p['capture']['skipped']}" if p.get("capture") else ""),
          flush=True)
    if sent_short(p):
        print(f"  the load generator sent {rate_text(p['sent_rate_bursts_per_s'])} bursts/s of the "
              f"{rate_text(p['offered_rate'])} asked (as many as its process could here): the phase measures "
              "what was sent", flush=True)


def _of_sent(p: dict[str, Any]) -> str:
    """' of N sent' for a rate phase; nothing at max, where the daemon's queue and the sockets'
    buffers hold thousands of bursts sent before the window (and "block" drops none)."""
    return "" if p["offered_rate"] is None else f" of {p['sent']} sent"


def _latency_results(p: dict[str, Any]) -> str:
    """What a phase's percentiles are over: 'N results', or 'a sample of N of M results'."""
    over, of = p["latency_percentiles_over"], p["latency_results"]
    return f"{of} results" if over == of else f"a sample of {over} of {of} results"
