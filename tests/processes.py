"""A command run as a user runs it (Command: `python -m rfclassify ARGS` in a process group of its
own) and the processes it started, read from /proc (Linux): the tests that check a command
leaves none behind use these (the demo, the daemon benchmark, the commands Ctrl-C and SIGTERM
stop)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINUX = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc (Linux)")


def stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), or None."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def descendants(pid: int) -> dict[int, str]:
    """pid -> start time of every process under `pid` (its children, theirs, ...)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (st := stat_fields(int(entry.name))) is not None:
            parents.setdefault(int(st[1]), []).append(int(entry.name))
    found: dict[int, str] = {}
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in found and (st := stat_fields(child)) is not None:
                found[child] = st[19]
                todo.append(child)
    return found


def running(processes: dict[int, str]) -> list[int]:
    """Those of `processes` (pid -> start time) still running: not ended, not a zombie, not
    another process that took the number since."""
    return [pid for pid, started in processes.items()
            if (st := stat_fields(pid)) is not None and st[0] != "Z" and st[19] == started]


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def held_worker_starts(tmp_path: Path, hold_s: float) -> tuple[Path, Path]:
    """(site, marks): a folder whose sitecustomize holds each spawned worker's interpreter for
    `hold_s` seconds as it starts, after writing its pid into the folder `marks` (put `site`
    first on PYTHONPATH), so a test acts while the workers start."""
    site, marks = tmp_path / "site", tmp_path / "marks"
    site.mkdir()
    marks.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os, sys, time\n"
        "if '--multiprocessing-fork' in sys.argv:\n"
        f"    open(os.path.join({str(marks)!r}, str(os.getpid())), 'w').close()\n"
        f"    time.sleep({hold_s!r})\n")
    return site, marks


def _exec_rfclassify(cores: int | None) -> str:
    """`python -c` code: SIGINT at its default (a shell's background job would have it ignored),
    the first `cores` cores only where given, then `python -m rfclassify ARGS`."""
    pin = ("if hasattr(os, 'sched_setaffinity'):\n"
           f"    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:{cores}])\n") if cores else ""
    return ("import os, signal, sys\n"
            "signal.signal(signal.SIGINT, signal.SIG_DFL)\n"
            + pin +
            "os.execv(sys.executable, [sys.executable, '-m', 'rfclassify', *sys.argv[1:]])\n")


class Command:
    """`python -m rfclassify ARGS` in a process group of its own, SIGINT at its default, its
    temporary folders in `tmp` (TMPDIR; its output beside it, TMP.log), on at most `cores` cores
    where given."""

    def __init__(self, args: list[str], tmp: Path, cores: int | None = None) -> None:
        self.tmp = tmp
        self.log_path = tmp.parent / f"{tmp.name}.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([sys.executable, "-c", _exec_rfclassify(cores), *args], stdout=self.log,
                                     stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True,
                                     env={**os.environ, "TMPDIR": str(tmp)})
        self.started: dict[int, str] = {}

    def output(self) -> str:
        return self.log_path.read_text()

    def wait_for(self, condition, timeout_s: float = 180.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            assert self.proc.poll() is None, f"ended early ({self.proc.returncode}):\n{self.output()}"
            assert time.monotonic() < deadline, f"timed out waiting:\n{self.output()}"
            time.sleep(0.02)

    def note_processes(self) -> dict[int, str]:
        self.started.update(descendants(self.proc.pid))
        return self.started

    def signal(self, signum: int, group: bool = False) -> int:
        """Send `signum` to the command (group: to its whole process group, as Ctrl-C, `timeout`
        and systemd do) and return its exit status."""
        if group:
            os.killpg(self.proc.pid, signum)
        else:
            os.kill(self.proc.pid, signum)
        return self.proc.wait(120)

    def still_running(self, timeout_s: float = 20.0) -> list[int]:
        """Processes it started that still run `timeout_s` after it ended (waiting for them: a
        worker notices its parent's end within moments, the resource tracker after them)."""
        deadline = time.monotonic() + timeout_s
        while (left := running(self.started)) and time.monotonic() < deadline:
            time.sleep(0.1)
        return left

    def kill_all(self) -> None:
        for pid in running(self.started):
            os.kill(pid, signal.SIGKILL)
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.log.close()
