"""Per-burst normalization and the length-bucket rule, shared by training and serving (and
``central``, the central part of a burst or symbol sequence, for the DSP that judges only that).

The rule, for a burst of n complex samples and buckets B (ascending, default
128, 256, 512, 1024, 2048, 4096):

* n < min_samples (default 64): rejected, reason ``too_short``.
* min_samples <= n < B[0]: one window of B[0] samples, the burst followed by zeros.
* otherwise the bucket b is the largest bucket <= n; the burst is covered by windows of b
  samples, the first starting at 0 and the last ending at n, spaced evenly with a nominal
  hop of b/2 (so n == b gives exactly one window and nothing is cropped or padded). The
  count is ceil((n - b) / (b/2)) + 1, capped at max_windows by widening the hop: then the
  windows still span the whole burst but no longer overlap (and may leave gaps).

The classifier averages the windows' log-probabilities; the number of windows is reported.
Normalization happens once per burst, before windowing, in one of two ways (``NORMALIZATIONS``;
a model records the one it was trained with in model.json):

* ``remove_dc`` (every model before the sixth session): subtract the mean (DC) and scale to
  unit RMS power.
* ``keep_dc``: scale the burst so that its mean-free part has unit RMS power, and keep the
  mean in that scale, its magnitude capped at ``DC_CAP``. Removing the mean also removes a
  signal's own 0 Hz content (the carrier of AM with carrier at zero frequency offset, the mean
  of OOK and ASK), which a channelizer that centres each burst puts exactly there; keeping it
  relative to the rest lets the network tell a carrier from a small receiver DC offset.

Either way, a burst that is not finite or whose mean-free part has zero power cannot be
normalized and is rejected (``non_finite`` / ``zero_power``).

A policy with a symbol-rate normalizer (``rate``, from a model whose model.json asks for one;
see ``rfclassify.dsp.rate``) resamples the normalized burst to about its target samples per
symbol, and the rule above then applies to the resampled length n'. The minimum length is
checked on the burst as received; a resampled burst shorter than the smallest bucket is
zero-padded to it whatever n' is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rfclassify._exceptions import ConfigError, MessageError
from rfclassify.dsp.rate import SymbolRateNormalizer

DEFAULT_BUCKETS_SAMPLES: tuple[int, ...] = (128, 256, 512, 1024, 2048, 4096)
DEFAULT_MIN_SAMPLES = 64
DEFAULT_MAX_WINDOWS = 16
#: the largest bucket a policy takes (a million samples: far past any the network is trained on)
MAX_BUCKET_SAMPLES = 2 ** 20
NORMALIZATIONS: tuple[str, ...] = ("remove_dc", "keep_dc")
#: keep_dc: largest |mean| kept, relative to the RMS of the mean-free part (DC power 18 dB above it)
DC_CAP = 8.0
#: a mean-free part this far below the burst's total power is rounding residue of a constant
#: burst (float32 keeps ~1e-14 of it), not signal: such a burst has "no power after DC removal"
ZERO_POWER_RELATIVE = 1e-10


@dataclass(frozen=True)
class BucketPolicy:
    """How bursts of any length become fixed-length model windows."""

    buckets_samples: tuple[int, ...] = DEFAULT_BUCKETS_SAMPLES
    min_samples: int = DEFAULT_MIN_SAMPLES
    max_windows: int = DEFAULT_MAX_WINDOWS
    rate: SymbolRateNormalizer | None = None  # resample to a target samples/symbol first
    normalization: str = "remove_dc"          # one of NORMALIZATIONS

    def __post_init__(self) -> None:
        b = tuple(int(x) for x in self.buckets_samples)
        if not b:
            raise ConfigError("at least one length bucket is needed")
        if list(b) != sorted(set(b)):
            raise ConfigError(f"length buckets must be distinct and ascending, got {list(b)}")
        if b[0] < 8 or b[-1] > MAX_BUCKET_SAMPLES or any(x % 2 for x in b):
            # past the top, a bucket once ended in numpy's "high is out of bounds" in training
            raise ConfigError(f"length buckets must be even and 8..{MAX_BUCKET_SAMPLES} samples, got {list(b)}")
        if not 1 <= self.min_samples <= b[0]:
            raise ConfigError(f"min_samples must be in 1..{b[0]} (the smallest bucket), got {self.min_samples}")
        if self.max_windows < 1:
            raise ConfigError(f"max_windows must be >= 1, got {self.max_windows}")
        check_normalization(self.normalization)
        if self.rate is not None and self.normalization != "remove_dc":
            # the rate estimate would take the kept DC line for signal, and resampling rescales it
            raise ConfigError("a symbol-rate normalizer works with the remove_dc normalization only")
        object.__setattr__(self, "buckets_samples", b)

    def bucket_for(self, n_samples: int) -> int:
        """The bucket a burst of n_samples goes to; raises MessageError('too_short') below the minimum."""
        if n_samples < self.min_samples:
            raise MessageError(
                "too_short", f"{n_samples} samples; the minimum is {self.min_samples}")
        return self.bucket_for_length(n_samples)

    def bucket_for_length(self, n_samples: int) -> int:
        """The bucket rule without the minimum: for a resampled burst whose original passed it."""
        fitting = [b for b in self.buckets_samples if b <= n_samples]
        return fitting[-1] if fitting else self.buckets_samples[0]

    def window_starts(self, n_samples: int) -> np.ndarray:
        """Start offsets of the windows covering a burst (see module docstring)."""
        b = self.bucket_for(n_samples)
        if n_samples <= b:
            return np.zeros(1, dtype=np.int64)
        count = min(math.ceil((n_samples - b) / (b // 2)) + 1, self.max_windows)
        if count == 1:
            return np.array([(n_samples - b) // 2], dtype=np.int64)
        return np.round(np.linspace(0, n_samples - b, count)).astype(np.int64)


def central(x: np.ndarray, n: int) -> np.ndarray:
    """The central n entries of x (a view; all of x when it has no more than n), the earlier
    one of two equally central choices."""
    if x.size <= n:
        return x
    start = (x.size - n) // 2
    return x[start:start + n]


def check_normalization(name: str) -> str:
    """`name` if it is one of NORMALIZATIONS; ConfigError naming the choices otherwise."""
    if name not in NORMALIZATIONS:
        raise ConfigError(f"unknown normalization {name!r}; choose one of {', '.join(NORMALIZATIONS)}")
    return name


def _kept_dc(mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """The mean in the scaled burst's units, its magnitude capped at DC_CAP."""
    dc = mean * scale
    mag = np.abs(dc)
    return dc * np.minimum(1.0, DC_CAP / np.maximum(mag, 1e-30))


def _normalize_rows(x: np.ndarray, normalization: str) -> tuple[np.ndarray, np.ndarray]:
    """(normalized rows in x's precision, which rows had power to normalize) for a 2-D complex x.

    The one implementation of the rule in the module docstring; rows without power come back
    as zeros."""
    check_normalization(normalization)
    total = np.mean(x.real**2 + x.imag**2, axis=1, keepdims=True)
    mean = x.mean(axis=1, keepdims=True)
    x = x - mean
    power = np.mean(x.real**2 + x.imag**2, axis=1, keepdims=True)
    live = power > np.maximum(1e-30, ZERO_POWER_RELATIVE * total)
    scale = np.where(live, 1.0 / np.sqrt(np.maximum(power, 1e-30)), 0.0)
    x = x * scale
    if normalization == "keep_dc":
        x = x + _kept_dc(mean, scale)
    return x, live[:, 0]


# Bursts whose peak lies outside this range have powers (or statistics of higher powers) that
# float64 cannot hold or that fall under its floors; the rules applied to them are scale-free,
# so such a burst is read at unit peak instead (within_safe_peak).
SAFE_PEAK = (1e-10, 1e100)


def within_safe_peak(x: np.ndarray) -> np.ndarray:
    """Burst x as scale-free rules read it (the normalization's fallback, the DC pass, the
    refiners): x itself, unless its peak is finite, nonzero and outside SAFE_PEAK; then x scaled
    by a power of two to a peak in [0.5, 1), exactly and in its own dtype (np.ldexp: dividing by
    a subnormal peak overflowed through its reciprocal). A complex128 burst of 1e160 raised
    OverflowError in the DC pass and lost every burst of its call before the sixty-sixth
    session; until the sixty-seventh only complex128 was rescaled there, so a real float64 burst
    of 1e160 did the same, and complex64 or real bursts at 1e-20 got other answers than at unit
    scale."""
    with np.errstate(over="ignore", invalid="ignore"):
        peak = float(np.max(np.abs(x))) if x.size else 0.0
    if not (peak > 0 and math.isfinite(peak)) or SAFE_PEAK[0] < peak < SAFE_PEAK[1]:
        return x
    shift = -int(np.frexp(peak)[1])
    if not np.iscomplexobj(x):
        return np.ldexp(x, shift)
    y = np.empty_like(x)
    y.real, y.imag = np.ldexp(x.real, shift), np.ldexp(x.imag, shift)
    return y


def normalize_burst(iq: np.ndarray, normalization: str = "remove_dc") -> np.ndarray:
    """Normalized complex64 copy of a 1-D burst (module docstring); MessageError if it can't be normalized."""
    x = np.asarray(iq)
    if x.ndim != 1:
        raise MessageError("bad_shape", f"a burst must be 1-D, got shape {x.shape}")
    # quiet: a signalling NaN in the payload (its cast) is rejected just below, and magnitudes
    # whose squares float64 cannot hold are normalized again from their peak further down
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        x = x.astype(np.complex128, copy=False)
        if not np.all(np.isfinite(x)):
            raise MessageError("non_finite", "burst contains NaN or Inf samples")
        y, live = _normalize_rows(x[None, :], normalization) if x.size else (x[None, :], np.zeros(1, bool))
    scaled = within_safe_peak(x) if not live[0] and x.size else x
    if scaled is not x:
        # the rule is scale-free, so a burst whose power float64 cannot hold (|x| beyond about
        # 1e150, or power under its 1e-30 floor) is normalized again at unit peak (a subnormal
        # one was a RuntimeWarning and a zero_power reject before the sixty-seventh session)
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            y, live = _normalize_rows(scaled[None, :], normalization)
    if not live[0]:
        raise MessageError("zero_power", "burst has no power after DC removal")
    return y[0].astype(np.complex64)


def normalize_batch(iq: np.ndarray, normalization: str = "remove_dc") -> np.ndarray:
    """normalize_burst for a (batch, n) array of equal-length bursts, vectorized.

    Rows with zero power come back as zeros (training data never has them; the serving
    path uses normalize_burst, which rejects them)."""
    return _normalize_rows(np.asarray(iq, dtype=np.complex64), normalization)[0].astype(np.complex64)


def to_model_input(windows: np.ndarray) -> np.ndarray:
    """(batch, n) complex -> (batch, 2, 1, n) float32, the network's input layout (I, Q as channels)."""
    w = np.asarray(windows)
    out = np.empty((w.shape[0], 2, 1, w.shape[1]), dtype=np.float32)
    out[:, 0, 0, :] = w.real
    out[:, 1, 0, :] = w.imag
    return out


@dataclass(frozen=True)
class BurstWindows:
    """A normalized burst cut into model windows."""

    bucket_samples: int
    windows: np.ndarray  # (n_windows, bucket_samples) complex64
    n_samples: int       # as received, before any resampling
    snr_offset_db: float = 0.0  # subtract from the network's SNR estimate (rfclassify.dsp.rate)

    @property
    def n_windows(self) -> int:
        return int(self.windows.shape[0])


def burst_to_windows(iq: np.ndarray, policy: BucketPolicy) -> BurstWindows:
    """Normalize one burst and cut it into its bucket's windows; MessageError on a burst it must reject."""
    arr = np.asarray(iq)
    n = int(arr.shape[0]) if arr.ndim == 1 else -1
    if n >= 0:
        b = policy.bucket_for(n)  # too_short before paying for normalization
    x = normalize_burst(arr, policy.normalization)  # bad_shape for anything not 1-D, so b is set below
    offset_db = 0.0
    if policy.rate is not None:
        x, offset_db = policy.rate.apply(x)
        b = policy.bucket_for_length(x.shape[0])
    m = int(x.shape[0])
    if m < b:
        w = np.zeros((1, b), dtype=np.complex64)
        w[0, :m] = x
        return BurstWindows(b, w, n, offset_db)
    starts = policy.window_starts(m)
    idx = starts[:, None] + np.arange(b)[None, :]
    return BurstWindows(b, x[idx], n, offset_db)
