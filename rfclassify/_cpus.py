"""How many CPU cores this process may use (a container's or taskset's share, not the host's)."""

from __future__ import annotations

import os


def usable_cpu_count() -> int:
    """Cores in this process's affinity mask; os.cpu_count() where there is no such mask."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)
