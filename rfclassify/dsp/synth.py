"""The RF burst synthesizer: every label's modulator plus the impairment chain, batch-vectorized.

    batch = synthesize(["QPSK", "FM", "NOISE"], 1024, np.random.default_rng(0), snr_db=[10, 5, 0])

Definitions, ranges and the chain order are documented in docs/synthesizer.md. The SNR of a
burst is (mean signal power over the burst after all channel effects, before the receiver's
DC offset, gain and quantization) / (complex AWGN power over the whole sampled band), and the
noise realization is scaled so that the realized SNR equals the request exactly.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rfclassify._exceptions import InputError, quoted
from rfclassify.dsp import analog, channel as ch, cpm, linear, messages, pulses
from rfclassify.dsp.channel import ChannelConfig
from rfclassify.labels import LABELS, NOISE_LABEL, label_index

__all__ = ["PARAM_DTYPE", "SNR_LIMIT_DB", "ChannelConfig", "SynthBatch", "benchmark", "synthesize"]

#: One record per burst; NaN (floats) or -1 (ints) where a parameter does not apply.
#: Field names are a stored contract (HDF5 compound dataset): add fields, never rename.
PARAM_DTYPE = np.dtype([
    # modulation
    ("samples_per_symbol", "f4"),              # digital: symbol period in samples (2..16)
    ("rolloff", "f4"),                         # linear: RRC roll-off
    ("bt", "f4"),                              # GMSK/GFSK: Gaussian bandwidth-time product
    ("mod_index_h", "f4"),                     # CPM modulation index h
    ("peak_deviation_cyc_per_sample", "f4"),   # CPM h/(2 sps); FM peak deviation
    ("apsk_ring_ratio_2", "f4"),               # APSK radius ring 2 / ring 1
    ("apsk_ring_ratio_3", "f4"),               # APSK radius ring 3 / ring 1
    ("mod_index", "f4"),                       # AM-WC: m; FM: beta = deviation / bandwidth
    ("message_type", "i1"),                    # analog: 0 noise, 1 tones, 2 speech-like
    ("message_bandwidth_cyc_per_sample", "f4"),
    ("ssb_upper", "i1"),                       # SSB: 1 upper, 0 lower sideband
    # sample clock (digital labels; the modulators run on the receiver's clock)
    ("timing_offset_samples", "f4"),           # symbol 0 centred at this sample
    ("sro_ppm", "f4"),                         # receiver clock offset
    # propagation
    ("fading_type", "i1"),                     # 0 none, 1 Rayleigh, 2 Rician
    ("k_factor_db", "f4"),
    ("delay_spread_samples", "f4"),            # rms of the exponential power delay profile
    ("doppler_cyc_per_sample", "f4"),          # maximum Doppler shift
    ("n_taps", "i2"),
    # local oscillator
    ("cfo_cyc_per_sample", "f4"),
    ("cfo_drift_cyc_per_sample2", "f4"),
    ("phase_offset_deg", "f4"),
    ("phase_noise_deg_per_sqrt_sample", "f4"),  # Wiener increment std per sample
    # receiver front end
    ("iq_gain_imbalance_db", "f4"),
    ("iq_phase_imbalance_deg", "f4"),
    ("signal_power_db", "f4"),                 # at the noise insertion point
    ("noise_power_db", "f4"),
    ("dc_offset_db", "f4"),                    # relative to signal power (NOISE: noise power)
    ("dc_offset_deg", "f4"),
    ("receiver_gain_db", "f4"),
    ("quant_dtype_code", "i1"),                # 0 float (none), 1 ci16, 2 ci8
    ("quant_rms_dbfs", "f4"),
    ("clipped_fraction", "f4"),
    # transmitter power amplifier
    ("pa_backoff_db", "f4"),                   # saturation amplitude re input rms
    ("pa_smoothness", "f4"),                   # Rapp p
    ("pa_am_pm_deg", "f4"),                    # AM/PM phase shift at saturation
])

SPS_RANGE = (2.0, 16.0)                 # log-uniform, any real value
ROLLOFF_RANGE = (0.15, 0.5)
GMSK_BT_RANGE = (0.25, 0.4)
GFSK_BT_RANGE = (0.35, 0.6)
GFSK_H_RANGE = (0.5, 1.0)
MESSAGE_BANDWIDTH_RANGE = (0.005, 0.1)  # cycles/sample, log-uniform
AM_INDEX_RANGE = (0.3, 1.0)
FM_BETA_NARROW, FM_BETA_WIDE = (0.1, 1.0), (1.0, 8.0)
FM_MAX_CARSON_HALF = 0.4                # deviation + bandwidth <= 0.4 cycles/sample
#: |snr_db| at most this: past about 385 dB the float32 noise scale overflowed into non-finite
#: bursts (the CLI's SNR options share the bound: rfclassify.commands.dataset.SNR_LIMIT_DB)
SNR_LIMIT_DB = 200.0
CHUNK_SAMPLES = 1 << 18                 # bursts x samples per chunk: bounds peak memory (~100 MB)
CHUNK_BURSTS_MAX = 256


@dataclass(frozen=True)
class SynthBatch:
    """B synthesized bursts: iq complex64 (B, n), label_index int16 (B,), snr_db float32 (B,)
    (NaN where no noise was added), params PARAM_DTYPE (B,)."""

    iq: np.ndarray
    label_index: np.ndarray
    snr_db: np.ndarray
    params: np.ndarray

    def __len__(self) -> int:
        return int(self.iq.shape[0])


def _empty_params(b: int) -> np.ndarray:
    p = np.zeros(b, PARAM_DTYPE)
    for name in PARAM_DTYPE.names:
        p[name] = -1 if PARAM_DTYPE[name].kind == "i" else np.nan
    return p


def _modulate(label: str, n_gen: int, pad: int, cfg: ChannelConfig, rng: np.random.Generator,
              b: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """b bursts of one label, n_gen samples (pad of them before sample 0) and their params."""
    if label == NOISE_LABEL:
        return np.zeros((b, n_gen), np.complex64), {}
    if label in analog.ANALOG_MOD_LABELS:
        kind = rng.integers(0, len(messages.MESSAGE_TYPES), size=b)
        bw = np.maximum(ch.log_uniform(MESSAGE_BANDWIDTH_RANGE, b, rng), 1.0 / n_gen)
        msg = messages.messages(kind, bw, n_gen, rng, pad)
        p = {"message_type": kind, "message_bandwidth_cyc_per_sample": bw}
        if label == "FM":
            wide = rng.random(b) < 0.5
            beta = np.where(wide, rng.uniform(*FM_BETA_WIDE, size=b), rng.uniform(*FM_BETA_NARROW, size=b))
            # At least the narrow band's floor: bursts of 1-2 generated samples have W = 1/n above
            # 0.36, where the Carson cap went negative (a negative deviation recorded).
            beta = np.maximum(np.minimum(beta, FM_MAX_CARSON_HALF / bw - 1), FM_BETA_NARROW[0])
            dev = beta * bw
            return analog.fm(msg, dev), p | {"mod_index": beta, "peak_deviation_cyc_per_sample": dev}
        m = rng.uniform(*AM_INDEX_RANGE, size=b)
        upper = rng.random(b) < 0.5
        if label.endswith("-WC"):
            p["mod_index"] = m
        if "SSB" in label:
            p["ssb_upper"] = upper
        return analog.am(label, msg, m, upper), p
    # Digital: the symbol clock, seen through the receiver's sample clock.
    sps = ch.log_uniform(SPS_RANGE, b, rng)
    timing = np.where(rng.random(b) < cfg.p_timing, rng.random(b) * sps, 0.0)
    sro = np.where(rng.random(b) < cfg.p_sro, rng.uniform(-1, 1, b) * cfg.sro_ppm_max, 0.0)
    t = (np.arange(n_gen) - pad)[None, :] * (1 + 1e-6 * sro)[:, None]
    p = {"samples_per_symbol": sps, "timing_offset_samples": timing, "sro_ppm": sro}
    if label in cpm.CPM_LABELS:
        h = rng.uniform(*GFSK_H_RANGE, size=b) if label == "GFSK" else np.full(b, 0.5)
        bt = {"GMSK": lambda: rng.uniform(*GMSK_BT_RANGE, size=b),
              "GFSK": lambda: rng.uniform(*GFSK_BT_RANGE, size=b),
              "CPFSK": lambda: np.full(b, np.nan)}[label]()
        iq = cpm.modulate_cpm(label, t, sps, h, bt, timing, sro, rng)
        return iq, p | {"mod_index_h": h, "bt": bt, "peak_deviation_cyc_per_sample": h / (2 * sps)}
    # On the table-cache grid, so the recorded value is the one applied.
    rolloff = np.round(rng.uniform(*ROLLOFF_RANGE, size=b) / pulses.ROLLOFF_STEP) * pulses.ROLLOFF_STEP
    iq, extra = linear.modulate_linear(label, t, sps, rolloff, timing, rng)
    return iq, p | extra | {"rolloff": rolloff}


def _validate(labels: Sequence[str], n_samples: int, snr_db: object) -> tuple[np.ndarray, np.ndarray | None]:
    if isinstance(labels, str):
        raise InputError("labels must be a sequence of label names, not one string")
    if len(labels) == 0:
        raise InputError("labels is empty: nothing to synthesize")
    idx = np.array([label_index(name) for name in labels], dtype=np.int16)
    if isinstance(n_samples, bool) or not isinstance(n_samples, (int, np.integer)) or n_samples < 1:
        raise InputError(f"n_samples must be an integer >= 1, got {n_samples!r}")
    if snr_db is None:
        return idx, None
    try:
        snr = np.asarray(snr_db, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise InputError(f"snr_db must be numbers in dB, got {quoted(snr_db)}") from None
    if snr.size == 0:
        raise InputError("snr_db is empty; pass one value per label, one value for all, or None")
    if snr.size == 1:
        snr = np.full(idx.size, snr[0])
    if snr.size != idx.size:
        raise InputError(f"snr_db has {snr.size} values for {idx.size} labels")
    if not np.all(np.isfinite(snr)):
        raise InputError("snr_db must be finite (NaN or inf given); pass None for no noise")
    if np.any(np.abs(snr) > SNR_LIMIT_DB):
        raise InputError(f"snr_db must lie in -{SNR_LIMIT_DB:g}..{SNR_LIMIT_DB:g} dB, "
                         f"got {snr[np.argmax(np.abs(snr))]:g}")
    return idx, snr


def _validate_kept(kept_samples: object, n_bursts: int, n_samples: int) -> np.ndarray | None:
    if kept_samples is None:
        return None
    kept = np.asarray(kept_samples).reshape(-1)
    if kept.size != n_bursts or kept.dtype.kind not in "iu" or not np.all((kept >= 1) & (kept <= n_samples)):
        raise InputError(f"kept_samples must be {n_bursts} integers in 1..{n_samples}, one per label")
    return kept.astype(np.int64)


def _synthesize_chunk(idx: np.ndarray, n: int, snr: np.ndarray | None, cfg: ChannelConfig,
                      rng: np.random.Generator, kept: np.ndarray | None
                      ) -> tuple[np.ndarray, np.ndarray]:
    b = idx.size
    # Independent streams, so that adding noise changes nothing but the noise.
    rng_sig, rng_chan, rng_noise = (np.random.default_rng(s) for s in rng.integers(0, 2**63 - 1, 3))
    pad = cfg.max_taps - 1
    params = _empty_params(b)
    x = np.zeros((b, n + pad), np.complex64)
    for li in np.unique(idx):
        rows = np.flatnonzero(idx == li)
        iq, p = _modulate(LABELS[li], n + pad, pad, cfg, rng_sig, rows.size)
        x[rows] = iq
        for k, v in p.items():
            params[k][rows] = v
    x, p_pa = ch.power_amplifier(x, pad, cfg, rng_chan)
    y, p_mp = ch.multipath(x, pad, cfg, rng_chan)
    y, p_lo = ch.carrier(y, cfg, rng_chan)
    y, p_iq = ch.iq_imbalance(y, cfg, rng_chan)
    noise_only = idx == LABELS.index(NOISE_LABEL)
    noisy = noise_only if snr is None else np.ones(b, bool)
    p_sig = ch.mean_power(y, kept)
    p_noise = np.zeros(b)
    if noisy.any():
        y[noisy], p_sig[noisy], p_noise[noisy] = ch.awgn(
            y[noisy], (np.zeros(b) if snr is None else snr)[noisy], rng_noise, noise_only[noisy],
            None if kept is None else kept[noisy])
    y, p_dc = ch.dc_offset(y, np.where(noise_only, p_noise, p_sig), cfg, rng_chan)
    y, p_rx = ch.receiver(y, cfg, rng_chan, kept)
    with np.errstate(divide="ignore"):
        params["signal_power_db"] = np.where(noise_only, np.nan, 10 * np.log10(p_sig))
        params["noise_power_db"] = np.where(noisy, 10 * np.log10(np.where(noisy, p_noise, 1.0)), np.nan)
    for p in (p_pa, p_mp, p_lo, p_iq, p_dc, p_rx):
        for k, v in p.items():
            params[k] = v
    return y.astype(np.complex64), params


def synthesize(labels: Sequence[str], n_samples: int, rng: np.random.Generator,
               snr_db: np.ndarray | None = None, channel: ChannelConfig = ChannelConfig(), *,
               kept_samples: np.ndarray | None = None) -> SynthBatch:
    """Synthesize one burst per label (mixed labels allowed), n_samples complex samples each.

    snr_db: one value per label (or one for all) in dB, at most SNR_LIMIT_DB either way, or
    None for no noise (NOISE bursts then still get unit-power noise, and report NaN).
    kept_samples: for a caller that crops burst i to its first kept_samples[i] samples, one
    integer per label: the realized SNR, the recorded signal and noise powers, the DC offset's
    reference and the quantizer's level then refer to those samples. Deterministic for a given
    rng state.
    """
    idx, snr = _validate(labels, n_samples, snr_db)
    kept = _validate_kept(kept_samples, idx.size, n_samples)
    n = int(n_samples)
    iq = np.empty((idx.size, n), np.complex64)
    params = np.empty(idx.size, PARAM_DTYPE)
    chunk = max(1, min(CHUNK_BURSTS_MAX, CHUNK_SAMPLES // n))
    for start in range(0, idx.size, chunk):
        sl = slice(start, start + chunk)
        iq[sl], params[sl] = _synthesize_chunk(idx[sl], n, None if snr is None else snr[sl],
                                               channel, rng, None if kept is None else kept[sl])
    out_snr = np.full(idx.size, np.nan, np.float32) if snr is None else snr.astype(np.float32)
    return SynthBatch(iq=iq, label_index=idx, snr_db=out_snr, params=params)


def benchmark(n_bursts: int = 2000, n_samples: int = 1024, seed: int = 0) -> float:
    """Bursts per second, single process, all labels mixed, full default channel, SNR -5..25 dB.

    A small warm-up call runs first (first-use costs: caches, FFT plans, page faults).
    """
    rng = np.random.default_rng(seed)
    synthesize(list(LABELS), n_samples, rng, snr_db=10.0)
    labels = [LABELS[i] for i in rng.integers(0, len(LABELS), n_bursts)]
    snr = rng.uniform(-5, 25, n_bursts)
    t0 = time.perf_counter()
    synthesize(labels, n_samples, rng, snr_db=snr)
    return n_bursts / (time.perf_counter() - t0)


if __name__ == "__main__":
    print(f"{benchmark():.0f} bursts/s (1024 samples, full channel, one process)")
