"""A refiner worker that dies while it is being spawned (the OOM killer, kill -9, a terminal's
hangup): the parent wrote the worker's start data for good into a pipe whose read end it still
held itself (CPython gh-118981), SIGINT and SIGTERM blocked, so `rfclassify serve` outlived
SIGTERM until systemd's SIGKILL; a restart hung the same way, and the daemon's stop joined it
without a bound. Now the start ends with one clear error (a restart is tried again), a group
SIGHUP while workers start kills none of them and reaches the daemon after the start, and
close() waits for a stuck restart at most CLOSE_WAIT_S (rfclassify.engine.refiner_pool)."""

from __future__ import annotations

import contextlib
import multiprocessing.util
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from functools import partial
from pathlib import Path

import pytest
from processes import held_worker_starts

import rfclassify.engine.refiner_pool as refiner_pool
from rfclassify._exceptions import InternalError
from rfclassify.engine.refiner import start_pool
from rfclassify.engine.refiner_pool import RefinerPool, starting_processes

ROOT = Path(__file__).resolve().parents[1]
LINUX = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="signals to process groups and /proc: Linux")

#: a worker `setup` whose arguments make its start data larger than a pipe holds (64 KB on
#: Linux; the shipped refiner's is 358 KB), so the parent is still writing when the worker dies
BIG_START = (len, (bytes(1 << 20),))


class SpawnKiller:
    """multiprocessing's spawn (util.spawnv_passfds) with the next `count` spawned workers
    killed (SIGKILL) as soon as they exist and before the parent writes their start data, as
    the OOM killer might; waits until each is dead, without reaping it (the parent must)."""

    def __init__(self, monkeypatch, count: int = 1) -> None:
        self.count = count
        self.killed: list[int] = []
        self._real = multiprocessing.util.spawnv_passfds
        monkeypatch.setattr(multiprocessing.util, "spawnv_passfds", self)

    def __call__(self, path, args, passfds):
        pid = self._real(path, args, passfds)
        if "--multiprocessing-fork" in args and len(self.killed) < self.count:
            os.kill(pid, signal.SIGKILL)
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
            self.killed.append(pid)
        return pid


def reaped(pid: int) -> bool:
    """Whether child `pid` was reaped already (else it is reaped here, if it has ended)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def wait_for(condition, seconds: float = 60.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


@LINUX
@pytest.mark.timeout(60)
def test_a_worker_killed_while_it_is_spawned_ends_the_pool_start_with_one_clear_error(monkeypatch):
    """The daemon's start hung in the spawn for good (1 of 1 with `serve --config` and a SIGKILL
    to the worker being spawned): now InternalError within moments, the worker reaped."""
    killer = SpawnKiller(monkeypatch)
    started = time.monotonic()
    with pytest.raises(InternalError, match=r"^a refiner worker died while starting \(process \d+ was killed "
                                            r"by SIGKILL before it had read its start data\)$"):
        start_pool(1, setup=BIG_START)
    assert time.monotonic() - started < 30
    (pid,) = killer.killed
    assert reaped(pid), "the dead worker was left a zombie"


@LINUX
@pytest.mark.timeout(60)
def test_a_worker_that_dies_once_it_has_its_start_data_ends_the_pool_start_with_the_same_error():
    """Dead in its initializer (here its `setup` ends the process): the pool broke before its
    warm-up, and BrokenProcessPool escaped the start."""
    with pytest.raises(InternalError, match=r"^a refiner worker died while starting \(its pool broke: "):
        start_pool(1, setup=(os._exit, (3,)))


@LINUX
@pytest.mark.timeout(120)
def test_a_restart_whose_worker_is_killed_while_it_is_spawned_is_tried_again(monkeypatch, caplog):
    """The restart thread hung in the spawn the same way, the pool never came back, and the
    daemon's stop (close) joined that thread for ever."""
    monkeypatch.setattr(refiner_pool, "FIRST_RESTART_DELAY_S", 0.01)
    monkeypatch.setattr(refiner_pool, "MAX_RESTART_DELAY_S", 0.04)
    pool = RefinerPool(partial(start_pool, 1, setup=BIG_START), workers=1)
    try:
        killer = SpawnKiller(monkeypatch)
        pool.broke(pool.executor)
        assert wait_for(lambda: pool.executor is not None), caplog.text
        assert pool.executor.submit(abs, -3).result(timeout=30) == 3
        assert pool.breaks == 2 and pool.restarts == 1 and len(killer.killed) == 1
        assert "failed to start (a refiner worker died while starting (process" in caplog.text
        assert "Traceback" not in caplog.text
    finally:
        pool.close()


@LINUX
def test_a_sighup_while_processes_start_is_held_and_its_handler_runs_after():
    """The daemon's SIGHUP means reload: in the middle of a spawn it is held (as SIGINT and
    SIGTERM are), and the handler runs once the spawn is done, not lost."""
    came: list[str] = []
    previous = signal.signal(signal.SIGHUP, lambda _s, _f: came.append("SIGHUP handled"))
    try:
        with starting_processes():
            signal.pthread_kill(threading.main_thread().ident, signal.SIGHUP)
            assert signal.SIGHUP in signal.sigpending()
            came.append("spawned")
        assert came == ["spawned", "SIGHUP handled"]
        assert signal.SIGHUP not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    finally:
        signal.signal(signal.SIGHUP, previous)


@contextlib.contextmanager
def _script_with_held_worker_starts(tmp_path, body: str):
    """`body` run by a Python process in a session of its own (its output in out.txt), each
    worker it spawns held for two seconds as its interpreter starts (a sitecustomize, after
    writing its pid into marks/): yields (process, output path, marks folder); everything it
    started is killed afterwards."""
    site, marks = held_worker_starts(tmp_path, 2.0)
    script = tmp_path / "script.py"     # under a main guard: a spawned worker imports it again
    script.write_text("import os, signal, sys\nif __name__ == '__main__':\n" + textwrap.indent(body, "    "))
    path = tmp_path / "out.txt"
    with open(path, "w") as out:
        proc = subprocess.Popen([sys.executable, str(script)], stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                                start_new_session=True,
                                env={**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])})
    try:
        yield proc, path, marks
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        for pid in map(int, os.listdir(marks)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@LINUX
@pytest.mark.timeout(180)
def test_a_hangup_to_the_process_group_while_workers_are_spawned_kills_none_of_them(tmp_path):
    """A terminal's hangup (a group SIGHUP) during the spawn killed the workers still starting,
    and the parent hung writing the start data of one (1 of 1 with `serve --config`). Now they
    ignore it, the pool starts, and the parent's SIGHUP handler (the daemon's reload) runs once,
    after the start."""
    body = ("from rfclassify.engine.refiner import start_pool\n"
            "hups = []\n"
            "signal.signal(signal.SIGHUP, lambda _s, _f: hups.append(1))\n"
            f"pool = start_pool(2, setup=(len, (bytes({1 << 20}),)))\n"
            "print('started', pool.submit(abs, -3).result(30), 'hangups', len(hups), flush=True)\n"
            "print('workers', *sorted(pool._processes), flush=True)\n"
            "pool.shutdown()\n")
    with _script_with_held_worker_starts(tmp_path, body) as (proc, path, marks):
        deadline = time.monotonic() + 120
        while len(os.listdir(marks)) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(os.listdir(marks)) == 2, path.read_text()       # the second is being spawned
        os.killpg(proc.pid, signal.SIGHUP)
        try:
            returncode = proc.wait(120)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the start hung after the hangup:\n{path.read_text()}")
        text = path.read_text()
        assert returncode == 0, text
        assert "started 3 hangups 1" in text and "Traceback" not in text, text
        assert f"workers {' '.join(sorted(os.listdir(marks), key=int))}" in text, text   # the same two, alive


class _Stuck:
    """A RefinerPool start: the first call gives a pool at once, the next ones wait for `go`."""

    def __init__(self) -> None:
        self.calls = 0
        self.entered = threading.Event()
        self.go = threading.Event()
        self.made: list[_Pool] = []

    def __call__(self) -> _Pool:
        self.calls += 1
        if self.calls > 1:
            self.entered.set()
            self.go.wait(60)
        self.made.append(_Pool())
        return self.made[-1]


class _Pool:
    def __init__(self) -> None:
        self.shut = threading.Event()

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        self.shut.set()


@pytest.mark.timeout(60)
def test_close_returns_within_its_bound_while_a_restart_is_stuck_in_its_start(monkeypatch, caplog):
    """close() joined the restart thread without a limit: one stuck in its start (a worker that
    died while it was spawned) held the daemon's stop for ever."""
    monkeypatch.setattr(refiner_pool, "FIRST_RESTART_DELAY_S", 0.01)
    monkeypatch.setattr(refiner_pool, "CLOSE_WAIT_S", 0.3)
    start = _Stuck()
    pool = RefinerPool(start, workers=1)
    pool.broke(pool.executor)
    assert start.entered.wait(30)
    began = time.monotonic()
    closer = threading.Thread(target=pool.close, daemon=True)
    closer.start()
    closer.join(20)
    try:
        assert not closer.is_alive(), "close() waited for the stuck restart without a bound"
        assert 0.3 <= time.monotonic() - began < 10
        assert "still starting after 0.3 s" in caplog.text
    finally:
        start.go.set()
    # the pool that started late is shut down by the restart, which finds the pool closed
    assert wait_for(lambda: len(start.made) == 2 and start.made[1].shut.is_set(), 30)
    assert pool.executor is None and pool.restarts == 0
