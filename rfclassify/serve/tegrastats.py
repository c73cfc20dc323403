"""Jetson telemetry for `rfclassify status`: tegrastats lines and the nvpmodel power mode.

tegrastats prints one line a period, e.g. (AGX Orin, JetPack 6)

    RAM 3456/30536MB (lfb 6000x4MB) SWAP 0/15268MB (cached 0MB) CPU [2%@729,...]
    EMC_FREQ 0%@2133 GR3D_FREQ 0%@[305,305] CPU@46.5C tj@46.5C GPU@-256C
    VDD_GPU_SOC 2003mW/2003mW VDD_CPU_CV 400mW/400mW VIN_SYS_5V0 2924mW/2924mW

temperatures are `<zone>@<T>C` (-256C marks a powered-off sensor), power rails
`<RAIL> <current>mW/<average>mW` (older releases omit the unit: `POM_5V_IN 3000/3000`).
Nothing here runs on a machine without tegrastats: `TegraStats.start()` then does nothing and
`status` shows no Jetson section. A tegrastats that exits is started again (after 1 s,
doubling to RESTART_MAX_S while it keeps exiting without a line); a line it cannot parse, or
with none of the fields read here, is skipped (before the sixty-sixth session such a line
blanked the last good one); the snapshot says how old its line is (`age_s`). Parsing and the restarts are tested
here, the latter with a stand-in script on PATH; the binaries were not run (no Jetson).
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

_TEMP = re.compile(r"\b([A-Za-z][\w]*)@(-?\d+(?:\.\d+)?)C\b")
_RAIL_MW = re.compile(r"\b([A-Z][A-Z0-9_]*) (\d+)mW/(\d+)mW\b")
_RAIL_OLD = re.compile(r"\b((?:VDD|POM|VIN)_[A-Z0-9_]*) (\d+)/(\d+)\b")
_RAM = re.compile(r"\bRAM (\d+)/(\d+)MB\b")
_GR3D = re.compile(r"\bGR3D_FREQ (\d+)%(?:@\[?([\d,]+)\]?)?")
_SENSOR_OFF_C = -200.0
RESTART_MIN_S = 1.0
RESTART_MAX_S = 300.0


def parse_tegrastats(line: str) -> dict[str, Any]:
    """The fields of one tegrastats line: ram_mb, gpu_load_pct, gpu_freq_mhz, temps_c, power_mw."""
    out: dict[str, Any] = {}
    m = _RAM.search(line)
    if m:
        out["ram_used_mb"], out["ram_total_mb"] = int(m.group(1)), int(m.group(2))
    m = _GR3D.search(line)
    if m:
        out["gpu_load_pct"] = int(m.group(1))
        if m.group(2):
            out["gpu_freq_mhz"] = [int(f) for f in m.group(2).split(",") if f]
    temps = {zone: float(t) for zone, t in _TEMP.findall(line) if float(t) > _SENSOR_OFF_C}
    if temps:
        out["temps_c"] = temps
    rails = {name: {"cur_mw": int(cur), "avg_mw": int(avg)} for name, cur, avg in _RAIL_MW.findall(line)}
    if not rails:
        rails = {name: {"cur_mw": int(cur), "avg_mw": int(avg)} for name, cur, avg in _RAIL_OLD.findall(line)}
    if rails:
        out["power_mw"] = rails
    return out


def parse_nvpmodel(text: str) -> dict[str, Any] | None:
    """`nvpmodel -q` output ('NV Power Mode: MAXN' then the mode id) -> {name, id}."""
    name, mode_id = None, None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("NV Power Mode:"):
            name = line.split(":", 1)[1].strip()
        elif line.isdigit() and mode_id is None:
            mode_id = int(line)
    return None if name is None else {"name": name, "id": mode_id}


def power_mode() -> dict[str, Any] | None:
    """The current nvpmodel mode, or None where nvpmodel is absent or fails."""
    exe = shutil.which("nvpmodel")
    if exe is None:
        return None
    try:
        # bytes that are not UTF-8 would raise out of run() and stop the daemon's start
        proc = subprocess.run([exe, "-q"], capture_output=True, text=True, encoding="utf-8", errors="replace",
                              timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_nvpmodel(proc.stdout)


class TegraStats:
    """Runs `tegrastats --interval MS` in the background and keeps the latest parsed line.

    Before the fifty-eighth session a tegrastats that exited (or one line that was not UTF-8)
    ended the reader for good, and `status` went on showing its last line as if current."""

    def __init__(self, interval_ms: int = 1000) -> None:
        self.interval_ms = interval_ms
        self.latest: dict[str, Any] | None = None
        self.latest_at: float | None = None     # time.monotonic() of the latest line
        self.mode: dict[str, Any] | None = None
        self.restarts = 0                       # tegrastats processes started again after one exited
        self._exe: str | None = None
        self._proc: subprocess.Popen[str] | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    @property
    def available(self) -> bool:
        return self._exe is not None

    def start(self) -> bool:
        self._exe = shutil.which("tegrastats")
        if self._exe is None:
            return False
        if not self._spawn():
            self._exe = None
            return False
        self.mode = power_mode()
        self._thread = threading.Thread(target=self._read, name="tegrastats", daemon=True)
        self._thread.start()
        return True

    def _spawn(self) -> bool:
        assert self._exe is not None
        try:
            self._proc = subprocess.Popen([self._exe, "--interval", str(self.interval_ms)], stdout=subprocess.PIPE,
                                          stderr=subprocess.DEVNULL, text=True, encoding="utf-8", errors="replace")
        except OSError as exc:
            log.warning("tegrastats did not start: %s", exc)
            return False
        return True

    def _read(self) -> None:
        try:
            self._read_and_restart()
        finally:                # the pipe of a process started as stop() began
            if self._proc is not None and self._proc.stdout is not None:
                self._proc.stdout.close()

    def _read_and_restart(self) -> None:
        delay = RESTART_MIN_S
        while not self._stopping.is_set():
            proc = self._proc
            lines = 0
            if proc is not None and proc.stdout is not None:
                for line in proc.stdout:
                    try:
                        parsed = parse_tegrastats(line)
                    except ValueError:          # a number past int()'s digit limit, say
                        continue
                    if not parsed:              # none of its fields (garbled, or a message): the
                        continue                # last good line stays
                    self.latest, self.latest_at = parsed, time.monotonic()
                    lines += 1
                proc.stdout.close()
                code = proc.wait()
            else:
                code = None
            if self._stopping.is_set():
                return
            delay = RESTART_MIN_S if lines else min(delay * 2, RESTART_MAX_S)
            log.warning("tegrastats exited (code %s) after %d lines; starting it again in %.0f s",
                        code, lines, delay)
            if self._stopping.wait(delay):
                return
            self.restarts += 1
            if not self._spawn():
                self._proc = None

    def snapshot(self) -> dict[str, Any] | None:
        if self._exe is None:
            return None
        age = None if self.latest_at is None else round(time.monotonic() - self.latest_at, 1)
        return {"power_mode": self.mode, "age_s": age, **(self.latest or {})}

    def stop(self) -> None:
        self._stopping.set()
        _terminate(self._proc)
        if self._thread is not None and self._thread.ident is not None:
            self._thread.join(2)
        _terminate(self._proc)  # one the reader started as stop() began (its restart raced it)


def _terminate(proc: subprocess.Popen[str] | None) -> None:
    """Terminate `proc`, killing it after 2 s (its pipe is the reader thread's to close)."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=2)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
