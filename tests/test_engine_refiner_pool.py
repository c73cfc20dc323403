"""The refiners' worker pool over a daemon's life (rfclassify.engine.refiner_pool), with
stand-in pools: restarted after it breaks, the wait doubling while it keeps breaking, a start
that fails retried, close stopping it all; how finely a map over it is cut. The real pool's
kill-and-restart is in test_engine_refiner.py."""

from __future__ import annotations

import re
import threading
import time

import pytest

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


def test_a_refiner_worker_ignores_ctrl_c_which_the_daemon_handles():
    """Ctrl-C reaches the whole process group: each worker died with a KeyboardInterrupt
    traceback on the terminal while the daemon drained (sixty-sixth session)."""
    import os
    import signal
    import time

    from rfclassify.engine.refiner import start_pool

    pool = start_pool(1)
    try:
        (pid,) = [p.pid for p in pool._processes.values()]
        os.kill(pid, signal.SIGINT)
        time.sleep(0.5)
        assert pool.submit(abs, -3).result(timeout=30) == 3      # the worker lives and works
        assert pid in [p.pid for p in pool._processes.values()]
    finally:
        pool.shutdown()
