"""Cut a continuous complex stream into bursts (energy detector placeholder; full version follows)."""

from __future__ import annotations

from dataclasses import dataclass

from rfclassify._exceptions import ConfigError


@dataclass(frozen=True, kw_only=True)
class CutterConfig:
    """Energy detector and burst-length limits for gr-stream input (see docs/ingest.md)."""

    block_samples: int = 32
    threshold_db: float = 6.0
    floor_percentile: float = 10.0
    epoch_blocks: int = 64
    history_blocks: int = 4096
    floor_min_db: float = -120.0
    hangover_samples: int = 256
    min_burst_samples: int = 64
    max_burst_samples: int = 1 << 20
    pad_samples: int = 32

    def __post_init__(self) -> None:
        if self.block_samples < 1:
            raise ConfigError(f"block_samples must be >= 1, got {self.block_samples}")
        if not 0.0 <= self.floor_percentile <= 100.0:
            raise ConfigError(f"floor_percentile must be in 0..100, got {self.floor_percentile}")
        if self.epoch_blocks < 1 or self.history_blocks < self.epoch_blocks:
            raise ConfigError("need epoch_blocks >= 1 and history_blocks >= epoch_blocks")
        if self.hangover_samples < 0 or self.pad_samples < 0:
            raise ConfigError("hangover_samples and pad_samples must be >= 0")
        if not 1 <= self.min_burst_samples <= self.max_burst_samples:
            raise ConfigError("need 1 <= min_burst_samples <= max_burst_samples")
