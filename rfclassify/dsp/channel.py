"""The propagation and receiver impairment chain, and its configuration.

Order (see docs/synthesizer.md): the modulators already run on the receiver's sample clock
(fractional timing offset, sample-rate offset); then the transmitter's power amplifier
(AM/AM + AM/PM compression) -> multipath fading -> carrier frequency
offset + drift + phase offset -> phase noise -> IQ imbalance -> [signal power measured here]
-> AWGN at exact SNR -> DC offset -> receiver gain -> integer quantization (ci16 / ci8).
Every function draws from the generator it is given and returns what it drew.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from rfclassify._exceptions import ConfigError

#: Impairment families that can be switched on and off independently.
FAMILIES: tuple[str, ...] = ("timing", "sro", "pa", "multipath", "cfo", "phase", "phase_noise",
                             "iq_imbalance", "dc_offset", "gain", "quantization")
FADING_NONE, FADING_RAYLEIGH, FADING_RICIAN = 0, 1, 2
QUANT_NONE, QUANT_CI16, QUANT_CI8 = 0, 1, 2
QUANT_FULL_SCALE = {QUANT_CI16: 32767.0, QUANT_CI8: 127.0}
FADING_SINUSOIDS = 8      # sum-of-sinusoids terms per tap
FADING_GRID_SAMPLES = 16  # fading evaluated every 16 samples, linearly interpolated between


#: Values past these made non-finite bursts or numpy's errors (a training run's
#: --channel-overrides of 1e300 dB gain, a -1e300 dB PA backoff, 1e300 ppm of clock offset);
#: generous beside the defaults, which the shipped recipe keeps (its DC offset reaches +6 dB).
_PHYSICAL_BOUNDS: dict[str, tuple[float, float]] = {
    "sro_ppm_max": (0.0, 1e5),
    "pa_backoff_db_range": (-20.0, 60.0),
    "pa_smoothness_range": (0.1, 100.0),
    "pa_am_pm_deg_range": (-180.0, 180.0),
    "k_factor_db_range": (-60.0, 60.0),
    "delay_spread_samples_range": (0.0, 1000.0),
    # The fading is evaluated every FADING_GRID_SAMPLES samples and interpolated: past 1/64
    # cycles/sample (four grid points a Doppler period) it no longer has the Clarke spectrum, and
    # past 1/32 it aliased (before the sixty-seventh session the bound was 0.5).
    "doppler_cyc_per_sample_range": (0.0, 1 / (4 * FADING_GRID_SAMPLES)),
    "cfo_drift_cyc_per_sample2_max": (0.0, 1e-3),
    "phase_noise_deg_per_sqrt_sample_range": (0.0, 180.0),
    "iq_gain_imbalance_db_max": (0.0, 20.0),
    "iq_phase_imbalance_deg_max": (0.0, 45.0),
    "dc_offset_db_range": (-200.0, 40.0),
    "gain_db_range": (-200.0, 200.0),
    "quant_rms_dbfs_range": (-200.0, 0.0),
}


@dataclass(frozen=True)
class ChannelConfig:
    """Probability and range of each impairment family; ChannelConfig() is the training chain.

    ``p_<family>`` is the probability a burst gets that family. Ranges are (low, high);
    log-uniform where noted (quantities spanning decades), uniform otherwise.
    """

    p_timing: float = 1.0          # symbol-clock phase uniform in [0, sps) samples
    p_sro: float = 0.8
    sro_ppm_max: float = 100.0     # uniform +-
    p_pa: float = 0.3              # transmitter power-amplifier compression (Rapp + AM/PM)
    pa_backoff_db_range: tuple[float, float] = (1.0, 12.0)  # saturation re input rms
    pa_smoothness_range: tuple[float, float] = (1.0, 3.0)   # Rapp p: ~1 TWTA .. 3 solid state
    pa_am_pm_deg_range: tuple[float, float] = (0.0, 10.0)   # phase shift at saturation
    p_multipath: float = 0.6
    p_rician: float = 0.5          # given multipath; otherwise Rayleigh
    k_factor_db_range: tuple[float, float] = (0.0, 15.0)
    delay_spread_samples_range: tuple[float, float] = (0.1, 3.0)           # log-uniform, rms
    doppler_cyc_per_sample_range: tuple[float, float] = (1e-6, 5e-4)      # log-uniform, max
    max_taps: int = 16
    p_cfo: float = 0.9
    cfo_cyc_per_sample_max: float = 0.02             # uniform +-
    cfo_drift_cyc_per_sample2_max: float = 1e-7      # uniform +-; LO/Doppler-rate drift
    p_phase: float = 1.0           # uniform phase in [0, 360) deg
    p_phase_noise: float = 0.4
    phase_noise_deg_per_sqrt_sample_range: tuple[float, float] = (0.01, 0.5)  # log-uniform
    p_iq_imbalance: float = 0.5
    iq_gain_imbalance_db_max: float = 1.0            # uniform +-
    iq_phase_imbalance_deg_max: float = 5.0          # uniform +-
    p_dc_offset: float = 0.4
    dc_offset_db_range: tuple[float, float] = (-40.0, -10.0)  # dB relative to signal power
    p_gain: float = 1.0
    gain_db_range: tuple[float, float] = (-20.0, 20.0)
    p_quantization: float = 0.5
    p_ci8: float = 0.4             # given quantization; otherwise ci16
    quant_rms_dbfs_range: tuple[float, float] = (-30.0, -5.0)

    def __post_init__(self) -> None:
        # Kinds first: a bare number for a range, a string or a list for a number raised
        # TypeError / ValueError from numpy, and True passed as max_taps 1 (before the
        # sixty-seventh session).
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name.startswith("p_"):
                if not (_is_real(v) and 0.0 <= v <= 1.0):
                    raise ConfigError(f"ChannelConfig.{f.name} must be a probability in [0, 1], got {v!r}")
                object.__setattr__(self, f.name, float(v))
            if f.name.endswith("_range"):
                if not (isinstance(v, (tuple, list, np.ndarray)) and len(v) == 2
                        and all(_is_real(x) and np.isfinite(x) for x in v) and v[0] <= v[1]):
                    raise ConfigError(f"ChannelConfig.{f.name} must be (low, high) with low <= high, got {v!r}")
                object.__setattr__(self, f.name, (float(v[0]), float(v[1])))
            if f.name.endswith("_max") and not (_is_real(v) and np.isfinite(v) and v >= 0):
                raise ConfigError(f"ChannelConfig.{f.name} must be a finite number >= 0, got {v!r}")
        for name in ("delay_spread_samples_range", "doppler_cyc_per_sample_range",
                     "phase_noise_deg_per_sqrt_sample_range"):
            if getattr(self, name)[0] <= 0:
                raise ConfigError(f"ChannelConfig.{name} is log-uniform and must be > 0")
        if self.quant_rms_dbfs_range[1] > 0:
            raise ConfigError("ChannelConfig.quant_rms_dbfs_range must be <= 0 dBFS")
        if not (isinstance(self.max_taps, (int, np.integer)) and not isinstance(self.max_taps, bool)
                and 1 <= self.max_taps <= 64):
            raise ConfigError(f"ChannelConfig.max_taps must be in 1..64, got {self.max_taps}")
        if self.cfo_cyc_per_sample_max >= 0.5:
            raise ConfigError("ChannelConfig.cfo_cyc_per_sample_max must be < 0.5 (Nyquist)")
        for name, (lo, hi) in _PHYSICAL_BOUNDS.items():
            v = getattr(self, name)
            if not all(lo <= x <= hi for x in (v if isinstance(v, tuple) else (v,))):
                raise ConfigError(f"ChannelConfig.{name} must lie in {lo:g}..{hi:g}, got {v!r}")

    @classmethod
    def clean(cls) -> ChannelConfig:
        """No impairment at all: ideal channel, symbol 0 at sample 0, exact clocks."""
        return cls.only()

    @classmethod
    def only(cls, *families: str, probability: float = 1.0) -> ChannelConfig:
        """Default ranges, the named families applied with `probability`, all others off."""
        _check_families(families)
        return cls(**{f"p_{f}": (probability if f in families else 0.0) for f in FAMILIES})

    def without(self, *families: str) -> ChannelConfig:
        """This configuration with the named families switched off."""
        _check_families(families)
        return dataclasses.replace(self, **{f"p_{f}": 0.0 for f in families})


def _is_real(v: object) -> bool:
    """A real number (Python or numpy), not a bool, a string or a sequence."""
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def _check_families(families: tuple[str, ...]) -> None:
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        raise ConfigError(f"unknown impairment families {unknown}; known: {', '.join(FAMILIES)}")


def _on(p: float, b: int, rng: np.random.Generator) -> np.ndarray:
    return rng.random(b) < p


def log_uniform(lo_hi: tuple[float, float], b: int, rng: np.random.Generator) -> np.ndarray:
    """b draws whose logarithm is uniform between log(lo) and log(hi)."""
    return np.exp(rng.uniform(np.log(lo_hi[0]), np.log(lo_hi[1]), size=b))


def power_amplifier(x: np.ndarray, pad: int, cfg: ChannelConfig, rng: np.random.Generator
                    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Memoryless PA: Rapp AM/AM |y| = A / (1 + (A/A_sat)^2p)^(1/2p) and AM/PM phase
    2 phi_sat r^2 / (1 + r^2) (r = A/A_sat, phi_sat at saturation); A_sat sits backoff dB above
    the input rms (measured over the visible burst). Small signals pass with gain 1."""
    b = x.shape[0]
    on = _on(cfg.p_pa, b, rng)
    backoff_db = rng.uniform(*cfg.pa_backoff_db_range, size=b)
    smooth = rng.uniform(*cfg.pa_smoothness_range, size=b)
    am_pm_deg = rng.uniform(*cfg.pa_am_pm_deg_range, size=b)
    y = x.copy()
    rows = np.flatnonzero(on)
    if rows.size:
        xs = x[rows].astype(np.complex128)
        rms = np.sqrt(np.mean(np.abs(xs[:, pad:]) ** 2, axis=1))
        a_sat = np.where(rms > 0, rms, 1.0) * 10 ** (backoff_db[rows] / 20)
        r = np.abs(xs) / a_sat[:, None]
        p2 = 2 * smooth[rows, None]
        gain = (1 + r ** p2) ** (-1 / p2)
        phase = np.deg2rad(2 * am_pm_deg[rows, None]) * r * r / (1 + r * r)
        y[rows] = (xs * gain * np.exp(1j * phase)).astype(np.complex64)
    nan = np.float32(np.nan)
    return y, {"pa_backoff_db": np.where(on, backoff_db, nan).astype(np.float32),
               "pa_smoothness": np.where(on, smooth, nan).astype(np.float32),
               "pa_am_pm_deg": np.where(on, am_pm_deg, nan).astype(np.float32)}


def multipath(x: np.ndarray, pad: int, cfg: ChannelConfig, rng: np.random.Generator
              ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Tapped-delay-line fading on x (B, pad + N) -> (B, N).

    Taps at integer sample delays 0..n_taps-1 with an exponential power delay profile of rms
    delay spread tau (p_l ~ exp(-l / tau), normalized to total power 1). Each tap fades with a
    sum of FADING_SINUSOIDS sinusoids at Doppler shifts fd*cos(alpha) (Clarke/Jakes
    spectrum). On Rician bursts every scattered tap carries p_l / (K+1) and tap 0 adds a
    line-of-sight ray of power p_0 K/(K+1): K is tap 0's own LOS-to-scattered ratio, the LOS
    against all scattered power is p_0 K, and the mean channel power (p_0 K + 1)/(K+1), below 1
    (docs/synthesizer.md; the SNR is measured after the channel, so it is unaffected).
    """
    b, n = x.shape[0], x.shape[1] - pad
    on = _on(cfg.p_multipath, b, rng)
    rician = on & _on(cfg.p_rician, b, rng)
    tau = log_uniform(cfg.delay_spread_samples_range, b, rng)
    fd = log_uniform(cfg.doppler_cyc_per_sample_range, b, rng)
    k_db = rng.uniform(*cfg.k_factor_db_range, size=b)
    # Taps out to where the profile is e^-5 (-22 dB) below tap 0.
    n_taps = np.clip(np.floor(5 * tau).astype(int) + 1, 1, min(cfg.max_taps, pad + 1))
    l = np.arange(n_taps.max())[None, :]
    pdp = np.exp(-l / tau[:, None]) * (l < n_taps[:, None])
    pdp /= pdp.sum(axis=1, keepdims=True)
    k_lin = np.where(rician, 10 ** (k_db / 10), 0.0)
    # Fading on a coarse time grid: Doppler <= 5e-4 cycles/sample (default; the bound is 1/64)
    # varies little over 16 samples.
    # Sample 16 i + k lies between grid points i and i + 1 at fraction k / 16, so the linear
    # interpolation is a broadcast over (k, block) rather than a gather per sample.
    grid = np.arange(0, n + FADING_GRID_SAMPLES, FADING_GRID_SAMPLES)
    n_blocks = grid.size - 1
    frac = np.arange(FADING_GRID_SAMPLES) / FADING_GRID_SAMPLES
    los_angle = rng.uniform(0, 2 * np.pi, size=b)
    los_phase = rng.uniform(0, 2 * np.pi, size=b)
    y = x[:, pad:].copy()
    idx = np.flatnonzero(on)
    faded = np.zeros((idx.size, n), np.complex64)
    for lag in range(int(n_taps[idx].max()) if idx.size else 0):
        sel = idx[n_taps[idx] > lag]
        rows = np.flatnonzero(n_taps[idx] > lag)
        alpha = rng.uniform(0, 2 * np.pi, size=(sel.size, FADING_SINUSOIDS, 1))
        phi = rng.uniform(0, 2 * np.pi, size=(sel.size, FADING_SINUSOIDS, 1))
        w = 2 * np.pi * fd[sel, None, None] * np.cos(alpha)
        # exp(j (w t + phi)) on the grid as a running product of the per-step rotation
        # exp(j w 16): two complex exps per sinusoid instead of one per grid point. The
        # float64 product drifts by ~1e-14 over a burst, far below the complex64 output.
        rot = np.empty((sel.size, FADING_SINUSOIDS, grid.size), np.complex128)
        rot[:, :, :1] = np.exp(1j * phi)
        rot[:, :, 1:] = np.exp(1j * w * FADING_GRID_SAMPLES)
        tap = np.cumprod(rot, axis=2).sum(axis=1) / np.sqrt(FADING_SINUSOIDS)
        tap *= np.sqrt(1 / (k_lin[sel] + 1))[:, None]
        if lag == 0:
            tap += np.sqrt(k_lin[sel] / (k_lin[sel] + 1))[:, None] * np.exp(1j * (
                2 * np.pi * fd[sel, None] * np.cos(los_angle[sel])[:, None] * grid
                + los_phase[sel, None]))
        tap *= np.sqrt(pdp[sel, lag])[:, None]
        # Real and imaginary parts apart (a real weight costs half a complex multiply), laid
        # out (k, block) so the arithmetic runs along the long axis, then transposed.
        h = np.empty((sel.size, n_blocks, FADING_GRID_SAMPLES), np.complex64)
        lo = np.empty((sel.size, FADING_GRID_SAMPLES, n_blocks))
        hi = np.empty_like(lo)
        for part, t in ((h.real, tap.real), (h.imag, tap.imag)):
            np.multiply(t[:, None, :-1], (1 - frac)[:, None], out=lo)
            np.multiply(t[:, None, 1:], frac[:, None], out=hi)
            lo += hi
            part[...] = lo.transpose(0, 2, 1)
        h = h.reshape(sel.size, n_blocks * FADING_GRID_SAMPLES)[:, :n]
        if rows.size == idx.size:
            faded += h * x[sel, pad - lag: pad - lag + n]
        else:
            faded[rows] += h * x[sel, pad - lag: pad - lag + n]
    y[idx] = faded
    nan = np.float32(np.nan)
    return y, {
        "fading_type": np.where(on, np.where(rician, FADING_RICIAN, FADING_RAYLEIGH),
                                FADING_NONE).astype(np.int8),
        "k_factor_db": np.where(rician, k_db, nan).astype(np.float32),
        "delay_spread_samples": np.where(on, tau, nan).astype(np.float32),
        "doppler_cyc_per_sample": np.where(on, fd, nan).astype(np.float32),
        "n_taps": np.where(on, n_taps, -1).astype(np.int16),
    }


def carrier(x: np.ndarray, cfg: ChannelConfig, rng: np.random.Generator
            ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Frequency offset f0, linear drift d, phase offset and Wiener phase noise.

    phase(n) = phi0 + 2 pi (f0 n + d n^2 / 2) + sum of N(0, sigma^2) increments.
    """
    b, n = x.shape
    cfo_on, ph_on, pn_on = (_on(p, b, rng) for p in (cfg.p_cfo, cfg.p_phase, cfg.p_phase_noise))
    f0 = np.where(cfo_on, rng.uniform(-1, 1, b) * cfg.cfo_cyc_per_sample_max, 0.0)
    drift = np.where(cfo_on, rng.uniform(-1, 1, b) * cfg.cfo_drift_cyc_per_sample2_max, 0.0)
    phi0_deg = np.where(ph_on, rng.uniform(0, 360, b), 0.0)
    sigma_deg = np.where(pn_on, log_uniform(cfg.phase_noise_deg_per_sqrt_sample_range, b, rng), 0.0)
    t = np.arange(n)[None, :]
    # In place, one (B, N) float64 buffer: the same operations as the formula above.
    phase = f0[:, None] * t
    quad = 0.5 * drift[:, None] * t
    quad *= t
    phase += quad
    phase *= 2 * np.pi
    phase += np.deg2rad(phi0_deg)[:, None]
    if pn_on.any():
        steps = rng.standard_normal((b, n))
        steps *= np.deg2rad(sigma_deg)[:, None]
        phase += np.cumsum(steps, axis=1, out=steps)
    # Wrap in float64 (n^2 terms grow), rotate in float32: the burst is complex64 anyway.
    phase32 = np.mod(phase, 2 * np.pi, out=phase).astype(np.float32)
    rot = np.empty((b, n), np.complex64)
    np.cos(phase32, out=rot.real)
    np.sin(phase32, out=rot.imag)
    return np.multiply(x, rot, out=rot), {
        "cfo_cyc_per_sample": f0.astype(np.float32),
        "cfo_drift_cyc_per_sample2": drift.astype(np.float32),
        "phase_offset_deg": phi0_deg.astype(np.float32),
        "phase_noise_deg_per_sqrt_sample": sigma_deg.astype(np.float32),
    }


def iq_imbalance(x: np.ndarray, cfg: ChannelConfig, rng: np.random.Generator
                 ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Q branch with gain g (dB) and LO phase error phi: Q' = g (Q cos phi - I sin phi), I' = I."""
    b = x.shape[0]
    on = _on(cfg.p_iq_imbalance, b, rng)
    g_db = np.where(on, rng.uniform(-1, 1, b) * cfg.iq_gain_imbalance_db_max, 0.0)
    phi_deg = np.where(on, rng.uniform(-1, 1, b) * cfg.iq_phase_imbalance_deg_max, 0.0)
    g = (10 ** (g_db / 20)).astype(np.float32)[:, None]
    phi = np.deg2rad(phi_deg).astype(np.float32)[:, None]
    q = g * (x.imag * np.cos(phi) - x.real * np.sin(phi))
    return x.real + 1j * q, {"iq_gain_imbalance_db": g_db.astype(np.float32),
                             "iq_phase_imbalance_deg": phi_deg.astype(np.float32)}


def mean_power(x: np.ndarray, kept: np.ndarray | None = None) -> np.ndarray:
    """Mean |x|^2 per row, float64; over each row's first kept[i] samples where kept is given."""
    return row_mean(np.abs(x) ** 2, kept)


def row_mean(v: np.ndarray, kept: np.ndarray | None = None) -> np.ndarray:
    """Mean of each row of v, float64; over each row's first kept[i] values where kept is given."""
    if kept is None:
        return np.mean(v, axis=1, dtype=np.float64)
    return np.cumsum(v, axis=1, dtype=np.float64)[np.arange(v.shape[0]), kept - 1] / kept


def awgn(x: np.ndarray, snr_db: np.ndarray, rng: np.random.Generator, noise_only: np.ndarray,
         kept: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Add complex white Gaussian noise whose realized power makes the per-burst SNR exact.

    SNR = mean |x|^2 over the burst / mean |n|^2 over the burst (over its first kept[i]
    samples where kept is given: the part a caller keeps). Bursts in noise_only (the NOISE
    label, x == 0) get unit-power noise. Returns (y, signal power, noise power).
    """
    b, n = x.shape
    p_sig = mean_power(x, kept)
    w = np.empty((b, n), np.complex64)
    w.real = rng.standard_normal((b, n), dtype=np.float32)
    w.imag = rng.standard_normal((b, n), dtype=np.float32)
    p_target = np.where(noise_only, 1.0, p_sig * 10 ** (-np.asarray(snr_db, np.float64) / 10))
    p_w = row_mean(w.real.astype(np.float64) ** 2 + w.imag.astype(np.float64) ** 2, kept)
    w *= np.sqrt(p_target / p_w).astype(np.float32)[:, None]
    return x + w, p_sig, p_target


def dc_offset(x: np.ndarray, ref_power: np.ndarray, cfg: ChannelConfig, rng: np.random.Generator
              ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Add a constant (LO leakage) of power dc_offset_db relative to ref_power, at a random angle."""
    b = x.shape[0]
    on = _on(cfg.p_dc_offset, b, rng)
    level_db = rng.uniform(*cfg.dc_offset_db_range, size=b)
    angle_deg = rng.uniform(0, 360, size=b)
    amp = np.where(on, np.sqrt(ref_power * 10 ** (level_db / 10)), 0.0)
    dc = amp * np.exp(1j * np.deg2rad(angle_deg))
    nan = np.float32(np.nan)
    return x + dc.astype(np.complex64)[:, None], {"dc_offset_db": np.where(on, level_db, nan).astype(np.float32),
                             "dc_offset_deg": np.where(on, angle_deg, nan).astype(np.float32)}


def receiver(x: np.ndarray, cfg: ChannelConfig, rng: np.random.Generator,
             kept: np.ndarray | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Receiver gain, then (optionally) quantization to ci16/ci8 and back to float.

    Unquantized bursts get a gain drawn from gain_db_range. Quantized bursts are scaled, as an
    AGC would, to an rms level drawn from quant_rms_dbfs_range (full scale = 1.0), rounded to
    the integer grid of the format (x * 32767 or x * 127), clipped at full scale and divided
    back, so the returned values lie on the grid k / full_scale. With kept, the rms level and
    the clipped fraction refer to each burst's first kept[i] samples.
    """
    b = x.shape[0]
    gain_on = _on(cfg.p_gain, b, rng)
    gain_db = np.where(gain_on, rng.uniform(*cfg.gain_db_range, size=b), 0.0)
    q_on = _on(cfg.p_quantization, b, rng)
    code = np.where(q_on, np.where(_on(cfg.p_ci8, b, rng), QUANT_CI8, QUANT_CI16), QUANT_NONE)
    rms_dbfs = rng.uniform(*cfg.quant_rms_dbfs_range, size=b)
    p = mean_power(x, kept)
    agc_db = rms_dbfs - 10 * np.log10(np.where(p > 0, p, 1.0))
    gain_db = np.where(q_on, agc_db, gain_db)
    y = x * (10 ** (gain_db / 20)).astype(np.float32)[:, None]
    clipped = np.full(b, np.nan)
    for c, full in QUANT_FULL_SCALE.items():
        rows = code == c
        if rows.any():
            re = np.rint(y[rows].real * full)
            im = np.rint(y[rows].imag * full)
            over = (np.abs(re) > full) | (np.abs(im) > full)
            clipped[rows] = row_mean(over, None if kept is None else kept[rows])
            y[rows] = (np.clip(re, -full, full) + 1j * np.clip(im, -full, full)) / full
    nan = np.float32(np.nan)
    return y, {"receiver_gain_db": gain_db.astype(np.float32),
               "quant_dtype_code": code.astype(np.int8),
               "quant_rms_dbfs": np.where(q_on, rms_dbfs, nan).astype(np.float32),
               "clipped_fraction": clipped.astype(np.float32)}
