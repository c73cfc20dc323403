"""The rule for device names ('cpu', 'cuda', 'cuda:N'), without numpy or any backend, so the
daemon's config can check model.device as it is read."""

from __future__ import annotations

from rfclassify._exceptions import ConfigError


def device_kind(device: str) -> str:
    """'cpu' or 'cuda' for a device string such as 'cpu', 'cuda', 'cuda:1'; ConfigError otherwise."""
    kind, sep, index = device.partition(":")
    if kind not in ("cpu", "cuda") or (sep and (kind == "cpu" or not index.isdigit())):
        raise ConfigError(f"unknown device {device!r}; use cpu, cuda or cuda:N")
    return kind


def device_index(device: str) -> int:
    """The GPU index of a 'cuda' / 'cuda:N' device name (0 when none is given)."""
    device_kind(device)
    return int(device.partition(":")[2] or 0)
