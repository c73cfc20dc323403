"""A slow DC blocker for continuous sample streams: removes a receiver's DC offset (LO leakage).

A zero-IF receiver adds a constant to everything it hands over. A model that keeps each
burst's mean (the ``keep_dc`` normalization, rfclassify.dsp.windows) would take a leak that is
strong relative to a weak burst for a carrier, so stream input subtracts a running estimate of
the stream's DC first.

The estimate learns from the quiet stream only. The stream is taken in blocks of BLOCK
samples, aligned to its first sample; a block whose power about the current estimate is more
than GATE_DB above the quiet power is busy (a burst) and leaves the estimate as it is. A burst
with a mean of its own (OOK, ASK, AM with carrier) therefore keeps all of its 0 Hz content and
leaves no trace: an estimate that averaged every sample took up part of such a burst's mean
and handed back a decaying offset after it, which the energy detector behind it cut into
spurious bursts and merged with the next (20 OOK or 4ASK bursts at 30 dB in a stream: 36 and
47 bursts). The quiet power drops at once to a quieter block and rises towards a louder one
with the time constant, so a lasting change (a new leak, a retune) is learned within about
one time constant rather than shut out for good. Quiet blocks move the estimate as a one-pole
average of time constant ``time_constant_samples``; over the first time constant of quiet
samples it is their plain mean, and over the stream's first block the running mean of every
sample so far, so a leak is removed from the first samples on. Within a later block the
estimate is held, so processing is sample-exact across chunks: how a stream is split into
messages does not change the output.
"""

from __future__ import annotations

import numpy as np

from rfclassify._exceptions import ConfigError

BLOCK = 256        # samples a gate decision covers
GATE_DB = 6.0      # a block this far above the quiet power is busy


class DcBlocker:
    """y[n] = x[n] - d, d learned from the quiet blocks of the stream (module docstring)."""

    def __init__(self, time_constant_samples: int) -> None:
        if int(time_constant_samples) < 1:
            raise ConfigError(f"the DC blocker's time constant must be >= 1 sample, got {time_constant_samples}")
        self.time_constant_samples = int(time_constant_samples)
        self._gate = 10.0 ** (GATE_DB / 10.0)
        self._partial = np.zeros(0, np.complex128)   # the samples of the block in progress
        self._quiet_power: float | None = None
        self._learned = 0    # quiet samples the estimate has taken in, while it is a plain mean
        self._sum = 0j       # their sum
        self.dc = 0j         # the current estimate of the stream's DC

    def process(self, x: np.ndarray) -> np.ndarray:
        """The next chunk of the stream with its DC estimate removed (complex64, same length)."""
        x = np.asarray(x)
        if x.size == 0:
            return np.zeros(0, np.complex64)
        with np.errstate(invalid="ignore", over="ignore"):
            xd = x.astype(np.complex128)
        finite = np.isfinite(xd)
        if not finite.all():  # a NaN or Inf would stay in the estimate forever: it counts as 0
            xd = np.where(finite, xd, 0.0)
        d = np.empty(xd.size, np.complex128)
        held = self._partial.size                      # samples of the open block seen before
        first = min(BLOCK - held, xd.size)             # this chunk's samples of that block
        if self._quiet_power is None:
            # the stream's first block: the running mean of everything so far, sample by sample
            # (a sequential sum, so every chunking adds in the same order), so a leak is removed
            # from the first samples on rather than from the second block
            sums = np.cumsum(np.concatenate((self._partial, xd[:first])))[held:]
            d[:first] = sums / np.arange(held + 1, held + first + 1)
        else:
            d[:first] = self.dc
        if held + first < BLOCK:                       # the block is still open
            self._partial = np.concatenate((self._partial, xd))
        else:
            full = (xd.size - first) // BLOCK
            blocks = np.concatenate((self._partial, xd[:first + full * BLOCK])).reshape(full + 1, BLOCK)
            means = blocks.mean(axis=1)
            powers = (blocks.real ** 2 + blocks.imag ** 2).mean(axis=1)
            for k in range(full + 1):
                self._learn(complex(means[k]), float(powers[k]))
                if k < full:                            # the estimate for the next block's samples
                    d[first + k * BLOCK:first + (k + 1) * BLOCK] = self.dc
            rest = first + full * BLOCK
            d[rest:] = self.dc
            self._partial = xd[rest:].copy()
        with np.errstate(invalid="ignore", over="ignore"):
            return (x - d).astype(np.complex64)  # non-finite samples stay so: the burst is rejected later

    def _learn(self, mean: complex, power: float) -> None:
        """Take in one block (its mean and mean power): update the estimate if it is quiet."""
        about_dc = max(power - 2.0 * (self.dc.conjugate() * mean).real + abs(self.dc) ** 2, 0.0)
        quiet = self._quiet_power is None or about_dc <= self._gate * self._quiet_power
        if self._quiet_power is None or about_dc < self._quiet_power:
            self._quiet_power = about_dc
        else:
            self._quiet_power += (about_dc - self._quiet_power) * BLOCK / self.time_constant_samples
        if not quiet:
            return
        if self._learned < self.time_constant_samples:
            self._sum += mean * BLOCK
            self._learned += BLOCK
            self.dc = self._sum / self._learned
        else:
            self.dc += (mean - self.dc) * min(1.0, BLOCK / self.time_constant_samples)
