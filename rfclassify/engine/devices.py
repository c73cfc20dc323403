"""The rule for device names ('cpu', 'cuda', 'cuda:N'), without numpy or any backend, so the
daemon's config can check model.device as it is read."""

from __future__ import annotations

import re

from rfclassify._exceptions import ConfigError

# N in ASCII digits without a leading zero: str.isdigit also took 'cuda:²' and 'cuda:١' (which
# int() or torch then refused with a traceback) and 'cuda:01' (which torch refuses)
_DEVICE = re.compile(r"cpu|cuda(?::(?:0|[1-9][0-9]*))?")


def device_kind(device: str) -> str:
    """'cpu' or 'cuda' for a device string such as 'cpu', 'cuda', 'cuda:1'; ConfigError otherwise."""
    if not isinstance(device, str) or not _DEVICE.fullmatch(device):
        raise ConfigError(f"unknown device {device!r}; use cpu, cuda or cuda:N")
    return device.partition(":")[0]


def device_index(device: str) -> int:
    """The GPU index of a 'cuda' / 'cuda:N' device name (0 when none is given)."""
    device_kind(device)
    return int(device.partition(":")[2] or 0)
