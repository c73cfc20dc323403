"""A slow DC blocker for continuous sample streams: removes a receiver's DC offset (LO leakage).

A zero-IF receiver adds a constant to everything it hands over. A model that keeps each
burst's mean (the ``keep_dc`` normalization, rfclassify.dsp.windows) would take a leak that is
strong relative to a weak burst for a carrier, so stream input subtracts a running estimate of
the stream's mean first. The estimate is a one-pole average with a time constant of
``time_constant_samples``: it follows a receiver's DC, which lasts for the whole stream, and
moves little during one burst, so a burst's own carrier at 0 Hz stays (a burst of n samples
loses on average about n / (2 time_constant) of it: 3 % for 4096 samples at the default
65,536). Over the first time constant of the stream the estimate is the plain mean of
everything so far, so a leak is removed from the start instead of decaying away over several
time constants (and a burst at the very start of the stream counts more). Processing is
sample-exact across chunks: how a stream is split into messages does not change the output.
"""

from __future__ import annotations

import numpy as np

from rfclassify._exceptions import ConfigError


class DcBlocker:
    """y[n] = x[n] - d[n]: d[n] is the mean of x[0..n] while n < T, then d[n-1] + (x[n] - d[n-1]) / T."""

    def __init__(self, time_constant_samples: int) -> None:
        if int(time_constant_samples) < 1:
            raise ConfigError(f"the DC blocker's time constant must be >= 1 sample, got {time_constant_samples}")
        self.time_constant_samples = int(time_constant_samples)
        alpha = 1.0 / self.time_constant_samples
        self._b = np.array([alpha])
        self._a = np.array([1.0, alpha - 1.0])
        self._state = np.zeros(1, np.complex128)
        self._seen = 0       # samples processed so far
        self._sum = 0j       # their sum, while the estimate is still a plain mean
        self.dc = 0j         # the current estimate of the stream's DC

    def process(self, x: np.ndarray) -> np.ndarray:
        """The next chunk of the stream with its DC estimate removed (complex64, same length)."""
        from scipy.signal import lfilter

        x = np.asarray(x)
        if x.size == 0:
            return np.zeros(0, np.complex64)
        with np.errstate(invalid="ignore", over="ignore"):
            xd = x.astype(np.complex128)
        finite = np.isfinite(xd)
        if not finite.all():  # a NaN or Inf would stay in the estimate forever: it counts as 0
            xd = np.where(finite, xd, 0.0)
        d = np.empty_like(xd)
        k = min(max(self.time_constant_samples - self._seen, 0), xd.size)  # samples still averaged plainly
        if k:
            # a sequential running sum, so every chunking adds in the same order
            sums = np.cumsum(np.concatenate(([self._sum], xd[:k])))[1:]
            d[:k] = sums / np.arange(self._seen + 1, self._seen + k + 1)
            self._sum = complex(sums[-1])
            self._state[0] = d[k - 1] * (1.0 - 1.0 / self.time_constant_samples)  # lfilter's state for d[k-1]
        if k < xd.size:
            d[k:], self._state = lfilter(self._b, self._a, xd[k:], zi=self._state)
        self._seen += xd.size
        self.dc = complex(d[-1])
        with np.errstate(invalid="ignore", over="ignore"):
            return (x - d).astype(np.complex64)  # non-finite samples stay so: the burst is rejected later
