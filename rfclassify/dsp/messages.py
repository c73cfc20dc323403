"""Random baseband messages for the analog modulators, real, zero-mean, peak |m| == 1.

Three kinds (``message_type`` codes): 0 band-limited noise (flat low-pass spectrum up to the
message bandwidth), 1 a mix of 1-4 tones inside the bandwidth, 2 speech-like: formant-like
noise bands (three bands at ~15 %, 40 % and 75 % of the bandwidth, falling in level) under a
syllabic envelope. Real syllables (4-8 Hz) are far longer than a burst, so the syllabic rate is
compressed to 1/2000..1/200 cycles/sample to make the envelope visible within a burst.
All three are generated in the frequency domain, vectorized over the batch.
"""

from __future__ import annotations

import numpy as np

MESSAGE_NOISE, MESSAGE_TONES, MESSAGE_SPEECH = 0, 1, 2
MESSAGE_TYPES = (MESSAGE_NOISE, MESSAGE_TONES, MESSAGE_SPEECH)
SYLLABIC_RATE_CYC_PER_SAMPLE = (1 / 2000, 1 / 200)


def _shaped_noise(gain: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Real noise of length n with amplitude spectrum gain (B, n // 2 + 1)."""
    spec = rng.standard_normal(gain.shape) + 1j * rng.standard_normal(gain.shape)
    return np.fft.irfft(spec * gain, n=n, axis=1)


def _normalize(m: np.ndarray, pad: int) -> np.ndarray:
    # Peak 1 over the part the receiver sees (after `pad` lead-in samples that only feed
    # multipath echoes), so the recorded modulation index is exact; the lead-in is clipped.
    m = m - m.mean(axis=1, keepdims=True)
    peak = np.max(np.abs(m[:, pad:]), axis=1, keepdims=True)
    return np.clip(m / np.where(peak > 0, peak, 1.0), -1.0, 1.0)


def messages(kind: np.ndarray, bandwidth_cyc_per_sample: np.ndarray, n: int,
             rng: np.random.Generator, pad: int = 0) -> np.ndarray:
    """(B, n) float64 messages; kind (B,) int codes, bandwidth (B,) in cycles/sample.

    Peak |m| is 1 over samples pad..n-1. A bandwidth below the FFT resolution 1/n is
    raised to it, so a short burst still carries a (slow) message instead of none.
    """
    b = kind.shape[0]
    f = np.fft.rfftfreq(n)[None, :]
    bw = np.maximum(bandwidth_cyc_per_sample, 1.0 / n)[:, None]
    out = np.empty((b, n))

    rows = kind == MESSAGE_NOISE
    if rows.any():
        gain = ((f > 0) & (f <= bw[rows])).astype(np.float64)
        out[rows] = _shaped_noise(gain, n, rng)

    rows = kind == MESSAGE_TONES
    if rows.any():
        nr = int(rows.sum())
        n_tones = rng.integers(1, 5, size=nr)
        freqs = rng.uniform(0.05, 1.0, size=(nr, 4)) * bw[rows]
        amps = rng.uniform(0.2, 1.0, size=(nr, 4)) * (np.arange(4)[None, :] < n_tones[:, None])
        phases = rng.uniform(0, 2 * np.pi, size=(nr, 4))
        t = np.arange(n)[None, :, None]
        out[rows] = np.sum(amps[:, None, :] * np.cos(2 * np.pi * freqs[:, None, :] * t
                                                      + phases[:, None, :]), axis=2)

    rows = kind == MESSAGE_SPEECH
    if rows.any():
        nr = int(rows.sum())
        centres = np.array([0.15, 0.40, 0.75])[None, :] * rng.uniform(0.85, 1.15, size=(nr, 3))
        levels = np.array([1.0, 0.5, 0.25])
        width = 0.08
        fb = f[:, :, None] / bw[rows][:, :, None]  # frequency in units of the bandwidth
        bands = np.exp(-0.5 * ((fb - centres[:, None, :]) / width) ** 2) * levels
        gain = bands.sum(axis=2) * (f > 0)
        carrier = _shaped_noise(gain, n, rng)
        syl = np.exp(rng.uniform(*np.log(SYLLABIC_RATE_CYC_PER_SAMPLE), size=(nr, 1)))
        syl = np.maximum(syl, 1.0 / n)
        env = np.abs(_shaped_noise(((f > 0) & (f <= syl)).astype(np.float64), n, rng))
        env /= np.max(env, axis=1, keepdims=True) + 1e-30
        out[rows] = carrier * (0.1 + env)
    return _normalize(out, pad)
