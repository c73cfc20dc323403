"""The refiners' worker processes over a daemon's life: started, started again after they break.

A pool of spawned processes breaks for good when one of its workers dies (killed, out of
memory): every task on it then fails with BrokenExecutor. A daemon that runs for months
should not lose its refiner's parallelism to one such death. RefinerPool holds the pool in
use; whoever meets BrokenExecutor says so (`broke`), carries on without it (the statistics in
its own thread), and a background thread starts a new pool after a wait that doubles while
new pools keep breaking soon after they start (FIRST_RESTART_DELAY_S up to
MAX_RESTART_DELAY_S; a pool that ran STABLE_S resets it). A restart that fails (a worker that
died while it started: InternalError from start_pool, logged in one line) is waited out the same
way; the first start's failure is the caller's (the daemon's start fails with that line, and
systemd starts it again). map_chunksize says how finely a map over such a pool is cut.

Such a worker (and any helper process the daemon's commands spawn) ends with its parent:
`starting_processes` around the spawn and `become_child_worker` first thing in the child make it ignore
Ctrl-C, SIGTERM and SIGHUP from the first instruction of its interpreter (the parent stops it)
and exit by itself when the parent process is gone, killed or not (a SIGTERM or SIGKILL to `rfclassify
demo` left its two workers running under PID 1, blocked for ever on a queue no one would write
to again). Since such a worker outlives a SIGTERM, the pool's processes are ended here with
SIGKILL where they must be (`end_processes`; a pool used for one job: `pool_closed_after`):
ProcessPoolExecutor ends the rest of a broken pool with SIGTERM. Workers are spawned through
`spawn_context`, whose spawn no longer hangs for good on a worker that dies while it starts.
"""

from __future__ import annotations

import contextlib
import io
import logging
import multiprocessing.context
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from typing import Any

from rfclassify._exceptions import RfclassifyError

log = logging.getLogger("rfclassify.engine")

FIRST_RESTART_DELAY_S = 1.0
MAX_RESTART_DELAY_S = 300.0
#: a pool that ran this long before it broke restarts after FIRST_RESTART_DELAY_S again
STABLE_S = 600.0
#: a map over the pool is cut into up to this many tasks
MAP_TASKS = 256


#: the exit status of a worker that ended because its parent process did
PARENT_GONE_EXIT = 75
#: how long closing a pool waits for its workers to end by themselves before it kills them
CLOSE_WAIT_S = 5.0

#: what a child worker ignores: all reach the whole process group (Ctrl-C; `timeout`, `kill
#: -TERM -PGID`, supervisord's stopasgroup, a shell job's end; a terminal's hangup), and its
#: parent stops it (the daemon's SIGHUP means reload: a worker that died of it broke the pool)
_PARENTS_SIGNALS = (signal.SIGINT, signal.SIGTERM) + ((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ())


def _ensure_resource_tracker() -> None:
    """Start multiprocessing's resource tracker where it is not running, with SIGHUP blocked,
    which it keeps so for its life (it ignores SIGINT and SIGTERM itself): a group's hangup
    killed it ("resource_tracker: process died unexpectedly, relaunching", then a KeyError
    traceback from the new one for each lock it was told to forget)."""
    if not hasattr(signal, "pthread_sigmask"):
        return
    from multiprocessing import resource_tracker

    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    try:
        resource_tracker.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)


@contextlib.contextmanager
def starting_processes() -> Iterator[None]:
    """Around code that spawns processes (not around waiting for them: the parent must still
    hear a Ctrl-C):

    - SIGINT, SIGTERM and SIGHUP are blocked in the calling thread, so a process spawned
      meanwhile starts with them blocked (the mask survives fork and exec) until
      become_child_worker ignores them: a Ctrl-C to the process group during the seconds a
      spawned interpreter spends importing printed a KeyboardInterrupt traceback from each
      refiner worker still starting, and a SIGTERM or a terminal's SIGHUP to the group killed it;
    - in the main thread, such a signal that comes meanwhile is held and raised on leaving
      (its handler runs then: the daemon's SIGHUP reload comes after the start, not lost):
      Python raises KeyboardInterrupt in the main thread whichever thread the signal reached,
      and one raised in the middle of a spawn lost the process just started (its pool's other
      worker then waited for it for a minute) or cut the data being sent to it."""
    came: list[int] = []
    previous_handlers = {}
    if threading.current_thread() is threading.main_thread():
        for signum in _PARENTS_SIGNALS:
            previous_handlers[signum] = signal.signal(signum, lambda s, _frame: came.append(s))
    previous_mask = None
    try:
        if hasattr(signal, "pthread_sigmask"):      # not on Windows
            # multiprocessing starts its resource tracker with a spawn's first lock when it is
            # not running, and *unblocks* SIGINT after that start (its own mask, bpo-33613):
            # started before ours
            _ensure_resource_tracker()
            previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, set(_PARENTS_SIGNALS))
        yield
    finally:
        if previous_mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
        for signum, handler in previous_handlers.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        for signum in dict.fromkeys(came):
            signal.raise_signal(signum)     # its handler runs now: KeyboardInterrupt, say


def become_child_worker() -> None:
    """First thing in a spawned worker process: ignore SIGINT, SIGTERM and SIGHUP and let them
    through again (starting_processes blocked them), and end this process when its parent
    process ends.

    These signals reach the whole process group: Ctrl-C, SIGTERM from `timeout`, `kill -TERM
    -PGID`, supervisord's stopasgroup or a shell ending its job (systemd's KillMode=mixed
    signals the main process alone), SIGHUP from a terminal that hangs up. The parent drains
    on the first two and stops its workers, and the daemon reloads on SIGHUP; a refiner worker
    that died of the group's SIGTERM broke the daemon's pool in the middle of its drain before
    they ignored it (an ERROR line, the backlog's statistics in the inference thread, a new
    pool spawned while stopping, the drain's bound missed, bursts lost and exit 1), and one
    that died of a hangup while it started left the daemon hung in its spawn (spawn_context).
    A worker is ended with SIGKILL where it must be (end_processes).

    The parent's end is watched on multiprocessing's sentinel of it (a pipe the parent holds
    open until it exits, however it exits) by a daemon thread that ends the process then, in
    the middle of a task if need be: nobody is left to want its result. Not prctl's
    PR_SET_PDEATHSIG: that fires when the *thread* that spawned the worker ends, and a pool
    that broke is started again by a thread that ends right after (RefinerPool)."""
    import multiprocessing

    for signum in _PARENTS_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, set(_PARENTS_SIGNALS))
    parent = multiprocessing.parent_process()
    if parent is None:          # the main process: no parent to watch
        return

    def watch() -> None:
        parent.join()            # returns once the sentinel reads end of file: the parent is gone
        os._exit(PARENT_GONE_EXIT)
    threading.Thread(target=watch, name="rfclassify-parent-watch", daemon=True).start()


#: Python 3.10-3.13's spawn (popen_spawn_posix, the same code in all four) holds on to the
#: worker's end of the pipe that carries its start data while it writes that data (358 KB for
#: the shipped refiner: more than a pipe holds), so a worker that dies before it has read it all
#: (the OOM killer, kill -9, a terminal's hangup before SIGHUP was ignored) left the parent
#: writing for good, SIGINT and SIGTERM blocked (starting_processes): the daemon outlived
#: SIGTERM until systemd's SIGKILL, the worker a zombie (CPython gh-118981). Its fix, gh-118982
#: (merged in September 2025 for 3.14, with backports: where a 3.13 release has it, this copy
#: of it changes nothing), closes those ends right after the spawn; _SpawnPopen does that here.
_SPAWN_HOLDS_CHILD_ENDS = sys.platform != "win32" and sys.version_info < (3, 14)

if _SPAWN_HOLDS_CHILD_ENDS:
    from multiprocessing import popen_spawn_posix, reduction, spawn, util

    class _SpawnPopen(popen_spawn_posix.Popen):
        """multiprocessing's spawn Popen with gh-118982's _launch: the worker's pipe ends are
        closed here once it is spawned, so writing its start data fails with BrokenPipeError
        where it died instead of waiting for ever. The worker of a launch that failed is killed
        and reaped (no one else knows it: Process.start never returns it), and the error says
        how it ended."""

        def _launch(self, process_obj: Any) -> None:
            from multiprocessing import resource_tracker

            tracker_fd = resource_tracker.getfd()
            self._fds.append(tracker_fd)
            prep_data = spawn.get_preparation_data(process_obj._name)
            fp = io.BytesIO()
            multiprocessing.context.set_spawning_popen(self)
            try:
                reduction.dump(prep_data, fp)
                reduction.dump(process_obj, fp)
            finally:
                multiprocessing.context.set_spawning_popen(None)
            parent_r = child_w = child_r = parent_w = None
            try:
                parent_r, child_w = os.pipe()
                child_r, parent_w = os.pipe()
                cmd = spawn.get_command_line(tracker_fd=tracker_fd, pipe_handle=child_r)
                self._fds.extend([child_r, child_w])
                self.pid = util.spawnv_passfds(spawn.get_executable(), cmd, self._fds)
                os.close(child_r)           # the fix: from here only the worker holds them
                child_r = None
                os.close(child_w)
                child_w = None
                self.sentinel = parent_r
                with open(parent_w, "wb", closefd=False) as f:
                    f.write(fp.getbuffer())
            except BaseException as exc:
                if getattr(self, "pid", None) is None:
                    raise
                self.kill()                 # dead already, or half fed: it cannot start
                returncode = self.wait()
                if not isinstance(exc, BrokenPipeError):
                    raise
                how = (f"was killed by {signal.Signals(-returncode).name}" if returncode < 0
                       else f"exited with status {returncode}")
                raise BrokenPipeError(exc.errno, f"process {self.pid} {how} before it had read its start data"
                                      ) from exc
            finally:
                self.finalizer = util.Finalize(self, util.close_fds,
                                               [fd for fd in (parent_r, parent_w) if fd is not None])
                for fd in (child_r, child_w):
                    if fd is not None:
                        os.close(fd)

    class _SpawnProcess(multiprocessing.context.SpawnProcess):
        """A spawned Process launched by _SpawnPopen (pickled to the worker by this name)."""

        @staticmethod
        def _Popen(process_obj: Any) -> _SpawnPopen:
            return _SpawnPopen(process_obj)

    class _SpawnContext(multiprocessing.context.SpawnContext):
        Process = _SpawnProcess


def spawn_context() -> multiprocessing.context.BaseContext:
    """multiprocessing's spawn context, its spawn safe from a worker that dies while it starts:
    the spawn then raises BrokenPipeError ("process N was killed by SIGKILL before it had read
    its start data") where Python 3.10-3.13's waited for ever (see _SPAWN_HOLDS_CHILD_ENDS);
    Python's own where it has the fix. The resource tracker that the pool's locks need is
    started now where it is not running, deaf to a group's hangup (_ensure_resource_tracker)."""
    _ensure_resource_tracker()
    if _SPAWN_HOLDS_CHILD_ENDS:
        return _SpawnContext()
    return multiprocessing.get_context("spawn")


def end_processes(executor: Executor, wait_s: float, join: bool = True) -> None:
    """Shut `executor` down (its pending tasks cancelled) and end its worker processes: those
    still there after wait_s (0: at once) get SIGKILL, since they ignore SIGTERM
    (become_child_worker), which is how ProcessPoolExecutor ends the rest of a broken pool
    (terminate(), Python 3.11-3.13) and then waits for them: a worker killed while it held the
    task queue's lock left the others waiting on it for good, and the pool's manager thread,
    which the interpreter joins at exit, with them. `join`: wait for that manager thread too.
    Works through ProcessPoolExecutor's private `_processes` (no public way before Python
    3.14's kill_workers); any other executor is only shut down."""
    from multiprocessing.connection import wait

    processes = list((getattr(executor, "_processes", None) or {}).values())
    manager = getattr(executor, "_executor_manager_thread", None)
    executor.shutdown(wait=False, cancel_futures=True)
    running: dict[int, Any] = {}           # sentinel: process
    for process in processes:
        with contextlib.suppress(ValueError):       # not started, or closed
            running[process.sentinel] = process
    deadline = time.monotonic() + wait_s
    # their sentinels, not join(): the manager thread reaps them, and two reapers race
    while running and (left := deadline - time.monotonic()) > 0:
        for sentinel in wait(list(running), left):
            running.pop(sentinel)
    for process in running.values():
        with contextlib.suppress(OSError, ValueError):
            process.kill()
    if join and manager is not None and manager is not threading.current_thread():
        manager.join(CLOSE_WAIT_S)


@contextlib.contextmanager
def pool_closed_after(executor: Executor) -> Iterator[Executor]:
    """`executor` (a pool of child workers, start_pool's) ended with the block: its workers
    given CLOSE_WAIT_S to end where the block finished, killed at once where it raised (a
    broken pool's other workers too: ProcessPoolExecutor ends them with SIGTERM, which they
    ignore, and then waits for them). A refiner fit whose worker died (the OOM killer, kill
    -9) waited for the others for good, in shutdown() and again at the interpreter's exit."""
    try:
        yield executor
    except BaseException:
        end_processes(executor, 0.0)
        raise
    end_processes(executor, CLOSE_WAIT_S)


def map_chunksize(n: int) -> int:
    """The chunksize of a pool map over n bursts: one burst a task up to MAP_TASKS bursts (a
    serving batch of 64 shared by up to 16 workers as they come free: in 16 chunks of 4, as
    before the fifty-fifth session, 14 workers ran two rounds of them while 12 idled through the
    second), larger chunks only for a fit's thousands, where a task's message would otherwise
    cost more than its burst."""
    return max(1, n // MAP_TASKS)


class RefinerPool:
    """`workers` processes made by `start` (the refiner's start_pool), one pool at a time."""

    def __init__(self, start: Callable[[], Executor], workers: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._start = start
        self.workers = int(workers)
        self._clock = clock
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._restarter: threading.Thread | None = None
        self._delay = FIRST_RESTART_DELAY_S
        self.breaks = 0             # pools that broke (or failed to start) so far
        self.restarts = 0           # pools started again after one broke
        self._executor: Executor | None = start()
        self._started_at = clock()

    @property
    def executor(self) -> Executor | None:
        """The pool to submit to now; None while a broken one is being replaced."""
        return self._executor

    def broke(self, executor: Executor) -> None:
        """`executor` (what `executor` gave) raised BrokenExecutor: drop it and start a new pool
        in the background after the current wait. A second report of the same pool is ignored."""
        with self._lock:
            if executor is not self._executor or self._closing.is_set():
                return
            self._executor = None
            delay = self._next_delay()
            log.error("refiner: its worker pool broke (%d so far); its statistics run in the calling thread "
                      "until a new pool starts in %.3g s", self.breaks, delay)
            self._restarter = threading.Thread(target=self._restart_after, args=(delay,),
                                               name="rfclassify-refiner-pool", daemon=True)
            self._restarter.start()
        end_processes(executor, 0.0, join=False)    # its other workers too: a broken pool is done

    def _next_delay(self) -> float:
        """Count a break and give the wait before the next start (the lock held)."""
        self.breaks += 1
        if self._clock() - self._started_at >= STABLE_S:
            self._delay = FIRST_RESTART_DELAY_S
        delay = self._delay
        self._delay = min(2 * self._delay, MAX_RESTART_DELAY_S)
        return delay

    def _restart_after(self, delay: float) -> None:
        while not self._closing.wait(delay):
            try:
                new = self._start()
            except Exception as exc:  # noqa: BLE001 - a start that fails (no memory, say) is retried later
                with self._lock:
                    delay = self._next_delay()
                    self._started_at = self._clock()
                if isinstance(exc, RfclassifyError):    # says what happened: a worker died while starting
                    log.error("refiner: a new worker pool failed to start (%s); trying again in %.3g s", exc, delay)
                else:
                    log.exception("refiner: a new worker pool failed to start; trying again in %.3g s", delay)
                continue
            with self._lock:
                if not self._closing.is_set():
                    # counted and logged before it is published: `executor`, read without the
                    # lock, then never shows a pool that restarts and the log do not yet know
                    self.restarts += 1
                    log.warning("refiner: its worker pool runs again (%d process%s)", self.workers,
                                "" if self.workers == 1 else "es")
                    self._executor, self._started_at = new, self._clock()
                    return
            end_processes(new, CLOSE_WAIT_S)    # closed while it started
            return

    def close(self) -> None:
        """Shut the pool down and stop any restart; a restart already starting a pool is waited
        for, at most CLOSE_WAIT_S, and that pool shut down when its start ends (by the restart,
        which finds the pool closed). Its workers get CLOSE_WAIT_S to end (their tasks
        cancelled, a running one finished), then SIGKILL (end_processes): a stuck one, or one
        of a pool that broke with no task to tell, no longer holds the stop for ever; nor does
        a restart stuck in its start (a worker that died while it was spawned hung it for good
        before spawn_context, and the daemon's stop with it)."""
        with self._lock:
            self._closing.set()
            executor, self._executor = self._executor, None
            restarter = self._restarter
        if restarter is not None:
            restarter.join(CLOSE_WAIT_S)
            if restarter.is_alive():
                log.warning("refiner: a new worker pool still starting after %.3g s; left to be shut "
                            "down when its start ends", CLOSE_WAIT_S)
        if executor is not None:
            end_processes(executor, CLOSE_WAIT_S)
