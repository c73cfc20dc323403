"""The refiners' worker pool over a daemon's life (rfclassify.engine.refiner_pool), with
stand-in pools: restarted after it breaks, the wait doubling while it keeps breaking, a start
that fails retried, close stopping it all; how finely a map over it is cut. With real workers:
deaf to Ctrl-C and SIGTERM (which reach the whole process group), ended with their parent, and
killed where a broken pool or a stop needs them gone. The real pool's kill-and-restart is in
test_engine_refiner.py; a daemon's drain under a group's SIGTERM in test_serve_group_sigterm.py."""

from __future__ import annotations

import contextlib
import re
import threading
import time

import pytest
from processes import held_worker_starts

import rfclassify.engine.refiner_pool as refiner_pool
from rfclassify.engine.refiner_pool import RefinerPool, map_chunksize


class StandIn:
    """What RefinerPool needs of an executor: shutdown."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.shut = False

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        self.shut = True


class Starts:
    """start() for a RefinerPool: a new StandIn each call, or an error where `fail` says so."""

    def __init__(self, fail: tuple[int, ...] = ()) -> None:
        self.made: list[StandIn] = []
        self.calls = 0
        self.fail = fail
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self) -> StandIn:
        self.calls += 1
        self.gate.wait(10)
        if self.calls in self.fail:
            raise OSError("no memory for another process")
        self.made.append(StandIn(len(self.made)))
        return self.made[-1]


@pytest.fixture(autouse=True)
def short_waits(monkeypatch):
    monkeypatch.setattr(refiner_pool, "FIRST_RESTART_DELAY_S", 0.01)
    monkeypatch.setattr(refiner_pool, "MAX_RESTART_DELAY_S", 0.04)


def wait_for(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)
    return condition()


def logged_waits(text: str) -> list[float]:
    return [float(w) for w in re.findall(r"(?:starts in|trying again in) ([0-9.e-]+) s", text)]


def test_a_broken_pool_is_dropped_at_once_and_a_new_one_starts_after_the_wait(caplog):
    starts = Starts()
    pool = RefinerPool(starts, workers=3)
    first = pool.executor
    assert first is starts.made[0] and pool.workers == 3
    pool.broke(first)
    assert first.shut and pool.breaks == 1
    pool.broke(first)                       # a second report of the same pool: nothing more
    assert pool.breaks == 1
    assert wait_for(lambda: pool.executor is not None)
    assert pool.executor is starts.made[1] and pool.restarts == 1 and starts.calls == 2
    assert "worker pool broke (1 so far)" in caplog.text and "runs again (3 processes)" in caplog.text
    pool.close()
    assert starts.made[1].shut and pool.executor is None


def test_the_wait_doubles_while_pools_keep_breaking_and_resets_after_a_stable_run(caplog):
    now = [0.0]
    starts = Starts()
    pool = RefinerPool(starts, workers=1, clock=lambda: now[0])
    for _ in range(4):
        broken = pool.executor
        pool.broke(broken)
        assert wait_for(lambda: pool.executor not in (None, broken))
    assert logged_waits(caplog.text) == [0.01, 0.02, 0.04, 0.04]      # capped at MAX_RESTART_DELAY_S
    now[0] += refiner_pool.STABLE_S                                     # this one ran long enough
    pool.broke(pool.executor)
    assert logged_waits(caplog.text)[-1] == 0.01
    assert wait_for(lambda: pool.executor is not None) and pool.breaks == 5 and pool.restarts == 5
    pool.close()


def test_a_start_that_fails_is_tried_again_later(caplog):
    starts = Starts(fail=(2,))              # the first restart raises, the next one works
    pool = RefinerPool(starts, workers=2)
    pool.broke(pool.executor)
    assert wait_for(lambda: pool.executor is not None)
    assert starts.calls == 3 and pool.breaks == 2 and pool.restarts == 1
    assert "failed to start" in caplog.text and "no memory" in caplog.text
    assert logged_waits(caplog.text) == [0.01, 0.02]
    pool.close()


def test_close_stops_a_waiting_restart_and_shuts_down_a_pool_that_was_starting():
    starts = Starts()
    pool = RefinerPool(starts, workers=1)
    pool.close()
    assert starts.made[0].shut and starts.calls == 1
    pool.broke(starts.made[0])              # after close: ignored, nothing started
    time.sleep(0.05)
    assert starts.calls == 1

    starts = Starts()
    pool = RefinerPool(starts, workers=1)
    starts.gate.clear()                     # the restart will hang in start() until let go
    pool.broke(pool.executor)
    assert wait_for(lambda: starts.calls == 2)
    closer = threading.Thread(target=pool.close)
    closer.start()
    time.sleep(0.05)
    assert closer.is_alive()                # close waits for the start under way
    starts.gate.set()
    closer.join(10)
    assert not closer.is_alive() and len(starts.made) == 2 and starts.made[1].shut
    assert pool.executor is None and pool.restarts == 0


def test_a_serving_batch_goes_to_the_pool_one_burst_a_task_and_a_fits_thousands_in_chunks():
    assert [map_chunksize(n) for n in (0, 1, 64, 255, 256, 1_000, 60_000)] == [1, 1, 1, 1, 1, 3, 234]


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_a_refiner_worker_outlives_the_signals_its_process_group_gets(signame):
    """Ctrl-C reaches the whole process group: each worker died with a KeyboardInterrupt
    traceback on the terminal while the daemon drained (sixty-sixth session). So does SIGTERM
    from `timeout`, `kill -TERM -PGID`, supervisord's stopasgroup or a shell's job control:
    each worker died of it, and the daemon's pool broke in the middle of its drain
    (test_serve_group_sigterm.py has the daemon)."""
    import os
    import signal
    import time

    from rfclassify.engine.refiner import start_pool

    pool = start_pool(1)
    try:
        (pid,) = [p.pid for p in pool._processes.values()]
        os.kill(pid, getattr(signal, signame))
        time.sleep(0.5)
        assert pool.submit(abs, -3).result(timeout=30) == 3      # the worker lives and works
        assert pid in [p.pid for p in pool._processes.values()]
    finally:
        pool.shutdown()


_ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]
needs_proc = pytest.mark.skipif(not hasattr(__import__("os"), "sched_getaffinity"),
                                reason="signals to process groups and /proc: Linux")


def _script(tmp_path, body: str, path_first: str = ""):
    """A Python process running `body` in a process group of its own, with SIGINT at its
    default (a background job's would be ignored), stdout and stderr into a file; `path_first`
    ahead of the project on its PYTHONPATH."""
    import os
    import subprocess
    import sys

    import textwrap

    script = tmp_path / "script.py"     # under a main guard: a spawned child runs the main module again
    script.write_text("import signal, sys, time\nif __name__ == '__main__':\n"
                      "    signal.signal(signal.SIGINT, signal.default_int_handler)\n" + textwrap.indent(body, "    "))
    out = open(tmp_path / "out.txt", "w")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=out, stderr=subprocess.STDOUT, cwd=_ROOT,
                            start_new_session=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [path_first, str(_ROOT)]))})
    return proc, out, tmp_path / "out.txt"


def _gone(pid: int) -> bool:
    import os

    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return not os.path.exists(f"/proc/{pid}")


@contextlib.contextmanager
def _workers_held_while_starting(tmp_path, body: str):
    """_script(body) with each spawned worker's start held for two seconds (a sitecustomize)
    once it has begun: yields (process, its output file, the workers' pids) when both of
    start_pool(2)'s workers are in that hold; everything it started is killed afterwards."""
    import os
    import signal

    site, marks = held_worker_starts(tmp_path, 2.0)
    proc, out, path = _script(tmp_path, body, path_first=str(site))
    try:
        deadline = time.monotonic() + 120
        while len(os.listdir(marks)) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert len(os.listdir(marks)) == 2, path.read_text()     # both workers are starting
        yield proc, path, list(map(int, os.listdir(marks)))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        for pid in map(int, os.listdir(marks)):
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)
        out.close()


@needs_proc
def test_a_refiner_worker_ends_when_its_parent_process_is_killed(tmp_path):
    """A SIGKILL to a daemon (or a demo's SIGTERM, before it was taken as Ctrl-C) left its
    workers running under PID 1 for ever, waiting on a queue no one would write to again."""
    import os
    import signal

    proc, out, path = _script(tmp_path, "from rfclassify.engine.refiner import start_pool\n"
                                        "pool = start_pool(1)\n"
                                        "print(*pool._processes, flush=True)\n"
                                        "time.sleep(300)\n")
    worker = None
    try:
        deadline = time.monotonic() + 120
        while not path.read_text().strip() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        (worker,) = map(int, path.read_text().split())
        assert not _gone(worker)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + 20
        while not _gone(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _gone(worker), "the worker outlived its parent"
    finally:
        if worker is not None and not _gone(worker):
            os.kill(worker, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        out.close()


@needs_proc
def test_refiner_workers_ignore_a_ctrl_c_that_comes_while_their_interpreters_start(tmp_path):
    """A spawned worker imports for a second or more before its initializer could ignore
    SIGINT: a Ctrl-C then (during a demo's model load) printed its KeyboardInterrupt
    traceback. Here each worker's start is held for two seconds (a sitecustomize), and the
    Ctrl-C comes meanwhile."""
    import os
    import signal

    body = ("from rfclassify.engine.refiner import start_pool\n"
            "try:\n"
            "    pool = start_pool(2)\n"
            "except KeyboardInterrupt:\n"
            "    print('parent interrupted', flush=True)\n"
            "    sys.exit(130)\n"
            "pool.shutdown()\n")
    with _workers_held_while_starting(tmp_path, body) as (proc, path, workers):
        os.killpg(proc.pid, signal.SIGINT)                          # Ctrl-C
        assert proc.wait(60) == 130, path.read_text()
        text = path.read_text()
        assert "parent interrupted" in text and "KeyboardInterrupt" not in text and "Traceback" not in text, text
        for pid in workers:
            deadline = time.monotonic() + 20
            while not _gone(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert _gone(pid)


@needs_proc
def test_a_ctrl_c_or_sigterm_while_processes_start_is_raised_once_they_have():
    """Python raises KeyboardInterrupt in the main thread whichever thread the signal reaches:
    in the middle of a spawn it lost the process just started (its pool's other worker then
    waited a minute for it). starting_processes holds SIGINT and SIGTERM until its end."""
    import os
    import signal

    from rfclassify.engine.refiner_pool import starting_processes

    class Term(Exception):
        pass

    def on_term(_signum, _frame):
        raise Term
    previous = signal.signal(signal.SIGTERM, on_term)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        reached = []
        with pytest.raises(Term):
            with starting_processes():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)
                reached.append("after SIGTERM")
        with pytest.raises(KeyboardInterrupt):
            with starting_processes():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
                reached.append("after SIGINT")
        assert reached == ["after SIGTERM", "after SIGINT"]
        assert signal.getsignal(signal.SIGTERM) is on_term
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
        assert signal.SIGINT not in blocked and signal.SIGTERM not in blocked
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


@needs_proc
def test_refiner_workers_outlive_a_sigterm_that_comes_while_their_interpreters_start(tmp_path):
    """A spawned interpreter imports for a second or more before its initializer runs; a
    SIGTERM to the group then killed the worker and the pool's start failed. Here each
    worker's start is held for two seconds (a sitecustomize) and gets SIGTERM meanwhile."""
    import os
    import signal

    body = ("from rfclassify.engine.refiner import start_pool\n"
            "pool = start_pool(2)\n"
            "print('started', pool.submit(abs, -3).result(30), flush=True)\n"
            "pool.shutdown()\n")
    with _workers_held_while_starting(tmp_path, body) as (proc, path, workers):
        for pid in workers:
            os.kill(pid, signal.SIGTERM)
        assert proc.wait(120) == 0, path.read_text()
        text = path.read_text()
        assert "started 3" in text and "Traceback" not in text, text


def _queue_lock_holder(pids: list[int]) -> int | None:
    """Of idle pool workers, the one reading the task queue (in a pipe read, holding its lock;
    the others wait for the lock in a futex), where /proc/PID/wchan tells."""
    from pathlib import Path

    try:
        waits = {pid: Path(f"/proc/{pid}/wchan").read_text() for pid in pids}
    except OSError:
        return None
    readers = [pid for pid, w in waits.items() if w not in ("", "0") and "futex" not in w]
    return readers[0] if len(readers) == 1 and all("futex" in waits[p] for p in pids if p != readers[0]) else None


def _kill_queue_lock_holder(pids: list[int]) -> int:
    """SIGKILL to the idle pool worker holding the task queue's lock (as the OOM killer might
    pick it); its pid. The test is skipped where /proc/PID/wchan does not tell which it is."""
    import os
    import signal

    deadline = time.monotonic() + 10
    while (holder := _queue_lock_holder(pids)) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if holder is None:
        pytest.skip("/proc/PID/wchan does not tell which worker holds the task queue's lock")
    os.kill(holder, signal.SIGKILL)
    return holder


@needs_proc
def test_the_other_workers_of_a_broken_pool_are_killed_since_they_ignore_sigterm(caplog):
    """ProcessPoolExecutor ends the rest of a broken pool with SIGTERM (Python 3.11-3.13) and
    waits for them. A worker killed while it held the task queue's lock left the others
    waiting for it for good; ignoring SIGTERM, they outlived that, and so did the pool's manager
    thread, which the interpreter joins at exit. RefinerPool.broke kills them."""
    from concurrent.futures import BrokenExecutor
    from functools import partial

    from rfclassify.engine.refiner import start_pool

    pool = RefinerPool(partial(start_pool, 3), workers=3)
    try:
        first = pool.executor
        manager = first._executor_manager_thread
        pids = list(first._processes)
        holder = _kill_queue_lock_holder(pids)
        with pytest.raises(BrokenExecutor):
            first.submit(abs, -3).result(timeout=30)
        pool.broke(first)
        others = [pid for pid in pids if pid != holder]
        assert wait_for(lambda: all(_gone(pid) for pid in others), 10), "the broken pool's workers live on"
        manager.join(10)
        assert not manager.is_alive(), "the broken pool's manager thread waits for ever"
    finally:
        pool.close()


def test_close_kills_a_worker_that_does_not_end_in_time(monkeypatch):
    """A worker stuck in a task held close() (and so the daemon's stop) for ever; SIGTERM, its
    old way out, no longer ends it. close() waits CLOSE_WAIT_S, then kills it."""
    from functools import partial

    from rfclassify.engine.refiner import start_pool

    monkeypatch.setattr(refiner_pool, "CLOSE_WAIT_S", 0.5)
    pool = RefinerPool(partial(start_pool, 1), workers=1)
    (pid,) = list(pool.executor._processes)
    stuck = pool.executor.submit(time.sleep, 60)
    assert wait_for(stuck.running)
    t0 = time.monotonic()
    pool.close()
    assert time.monotonic() - t0 < 10 and _gone(pid)


@needs_proc
@pytest.mark.timeout(180)
def test_a_pool_closed_after_a_job_that_broke_it_ends_its_other_workers():
    """`fit-refiner --workers N` closed its pool with shutdown(): when a worker died (the OOM
    killer, kill -9) ProcessPoolExecutor ended the others with SIGTERM, which they ignore, and
    the fit waited for them for good, in shutdown() and again at the interpreter's exit."""
    import os
    import signal
    from concurrent.futures import BrokenExecutor

    from rfclassify.engine.refiner import start_pool
    from rfclassify.engine.refiner_pool import pool_closed_after

    executor = start_pool(3)
    pids, manager = list(executor._processes), executor._executor_manager_thread
    try:
        _kill_queue_lock_holder(pids)
        with pytest.raises(BrokenExecutor):
            with pool_closed_after(executor):
                executor.submit(abs, -3).result(timeout=30)
        assert wait_for(lambda: all(_gone(pid) for pid in pids), 10), "the broken pool's workers live on"
        manager.join(10)
        assert not manager.is_alive(), "the broken pool's manager thread waits for ever"
    finally:
        for pid in pids:
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)
