#!/usr/bin/python3
"""GNU Radio 3.10 flowgraphs that make labelled, impaired bursts with GNU Radio's own blocks.

STANDALONE: run by the system Python (`/usr/bin/python3 _gr_flowgraph.py SPEC.json OUT.npz`),
which has GNU Radio but not rfclassify; it needs only gnuradio and numpy (1.24 there).
`rfclassify.data.gnuradio_source` writes SPEC.json and converts OUT.npz into our HDF5 schema.

Per burst, two flowgraphs:
 1. source -> GNU Radio modulator -> phase rotation -> [channels.selective_fading_model]
    -> channels.channel_model(noise 0, frequency offset, epsilon = sample-clock ratio,
    static multipath taps) -> vector_sink. Multipath: a third of the bursts none, a third
    static taps, a third Rayleigh/Rician fading (see propagation()).
    The middle `length` samples (away from filter start-up) are the noise-free signal s,
    whose power P_s is measured here, before any noise.
 2. s -> channels.channel_model(noise_voltage = v, no other impairment) -> vector_sink,
    with v chosen so that the noise power is P_s / 10^(snr/10) (the noise power per unit
    noise_voltage is measured once at start-up rather than assumed).
So SNR = signal power / noise power over the whole sampled band, as rfclassify's synthesizer
defines it. NOISE bursts are flowgraph 2 on zeros with unit noise power.

Modulators: digital.generic_mod (RRC, pfb_arb_resampler, any sps >= 2) with GNU Radio's
constellations (bpsk, qpsk, 8psk, psk_constellation(16/32), 16qam, qam_constellation(64/256))
and constellation_calcdist for the layouts GNU Radio has no object for (OOK, 4ASK, 8ASK,
PAM4 levels and cross 32/128QAM, points as rfclassify defines them); OQPSK from generic_mod
QPSK with the Q rail through blocks.delay; 16/32/64/128APSK from gr-dtv's DVB-S2/S2X mapper
(dtv.dvbs2_modulator_bc) + the same RRC resampler; digital.gmsk_mod, digital.gfsk_mod,
analog.cpfsk_bc; AM and FM from analog/blocks/filter (noise_source_f or sig_source_f message,
hilbert_fc for SSB, frequency_modulator_fc for FM).
"""

import os
import sys

# This file sits next to rfclassify/data/inspect.py, which would shadow the standard
# library's `inspect` when the script's folder is sys.path[0]; drop that entry first.
# (rfclassify runs it with `python3 -I`, which already leaves it out.)
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

import json  # noqa: E402
import math  # noqa: E402

import numpy as np  # noqa: E402
from gnuradio import analog, blocks, channels, digital, dtv, filter, gr  # noqa: E402
from gnuradio.filter import firdes  # noqa: E402

LINEAR = ("OOK", "4ASK", "8ASK", "PAM4", "BPSK", "QPSK", "8PSK", "16PSK", "32PSK", "16QAM", "32QAM",
          "64QAM", "128QAM", "256QAM")
APSK = ("16APSK", "32APSK", "64APSK", "128APSK")
CPM = ("GMSK", "GFSK", "CPFSK")
ANALOG = ("AM-DSB-WC", "AM-DSB-SC", "AM-SSB-WC", "AM-SSB-SC", "FM")
SUPPORTED = LINEAR + ("OQPSK",) + APSK + CPM + ANALOG + ("NOISE",)
MARGIN_SAMPLES = 512  # dropped at the start: filter and resampler start-up
# Same names and units as rfclassify.dsp.synth.PARAM_DTYPE (the converter matches by name).
PARAM_NAMES = ("samples_per_symbol", "rolloff", "bt", "mod_index_h", "peak_deviation_cyc_per_sample",
               "apsk_ring_ratio_2", "apsk_ring_ratio_3",
               "mod_index", "message_type", "message_bandwidth_cyc_per_sample", "ssb_upper",
               "sro_ppm", "fading_type", "k_factor_db", "delay_spread_samples", "doppler_cyc_per_sample",
               "n_taps", "cfo_cyc_per_sample", "phase_offset_deg",
               "signal_power_db", "noise_power_db")
# Parameter ranges follow rfclassify's synthesizer (docs/synthesizer.md) so that the two
# sources differ in implementation (modulators, filters, channel), not in what they cover.
SPS_RANGE = (2.0, 16.0)          # log-uniform; integer for GNU Radio's CPM modulators
ROLLOFF_RANGE = (0.15, 0.5)
GMSK_BT_RANGE = (0.25, 0.4)
GFSK_BT_RANGE = (0.35, 0.6)
GFSK_H_RANGE = (0.5, 1.0)
CPFSK_H = 0.5
MESSAGE_BANDWIDTH_RANGE = (0.005, 0.1)
AM_INDEX_RANGE = (0.3, 1.0)
# SSB's Hilbert transformer (filter.hilbert_fc, Hamming window). Its gain falls off below about
# 2 / taps cycles/sample, and what it misses comes out as the other sideband: with 65 taps a
# noise message of 0.005 cycles/sample kept its unwanted sideband only 3.6 dB down (6.3 at 0.01,
# 15.9 at 0.05), so those bursts were double-sideband in all but name. With 1025 taps it is
# 37-48 dB down over MESSAGE_BANDWIDTH_RANGE, as a real SSB transmitter's (30 dB and more).
HILBERT_TAPS = 1025
FM_BETA_NARROW, FM_BETA_WIDE = (0.1, 1.0), (1.0, 8.0)
FM_MAX_CARSON_HALF = 0.4
CFO_MAX = 0.02                   # cycles/sample, uniform +-
DOPPLER_RANGE = (1e-6, 5e-4)     # cycles/sample, log-uniform maximum Doppler
K_FACTOR_DB_RANGE = (0.0, 15.0)
SRO_PPM_MAX = 100.0


def _unit(points):
    p = np.asarray(points, dtype=np.complex128)
    return list(p / np.sqrt(np.mean(np.abs(p) ** 2)))


def constellation(label):
    """A GNU Radio constellation object for a linear label."""
    if label == "BPSK":
        return digital.constellation_bpsk().base()
    if label == "QPSK":
        return digital.constellation_qpsk().base()
    if label == "8PSK":
        return digital.constellation_8psk().base()
    if label == "16QAM":
        return digital.constellation_16qam().base()
    if label in ("16PSK", "32PSK"):
        return digital.psk_constellation(int(label[:-3]), differential=False)
    if label in ("64QAM", "256QAM"):
        return digital.qam_constellation(int(label[:-3]), differential=False)
    if label in ("32QAM", "128QAM"):  # cross layouts (qam_constellation is square only)
        side, cut = {"32QAM": (6, 1), "128QAM": (12, 2)}[label]
        lv = np.arange(-(side - 1), side, 2, dtype=np.float64)
        sq = (lv[:, None] + 1j * lv[None, :]).ravel()
        lim = side - 1 - 2 * cut
        pts = _unit(sq[~((np.abs(sq.real) > lim) & (np.abs(sq.imag) > lim))])
        return digital.constellation_calcdist(pts, list(range(len(pts))), 4, 1).base()
    levels = {"OOK": [0.0, 1.0], "4ASK": [0.0, 1.0, 2.0, 3.0], "8ASK": list(range(8)),
              "PAM4": [-3.0, -1.0, 1.0, 3.0]}[label]
    pts = _unit(levels)
    return digital.constellation_calcdist(pts, list(range(len(pts))), 1, 1).base()


# DVB-S2 / S2X APSK from gr-dtv's own mapper: (constellation, [code rates]). The code rate sets
# the ring ratios, drawn per burst like the synthesizer does.
APSK_DTV = {
    "16APSK": ("MOD_16APSK", ("C2_3", "C3_4", "C4_5", "C5_6", "C8_9", "C9_10")),
    "32APSK": ("MOD_32APSK", ("C3_4", "C4_5", "C5_6", "C8_9", "C9_10")),
    "64APSK": ("MOD_4_12_20_28APSK", ("C132_180",)),
    "128APSK": ("MOD_128APSK", ("C135_180",)),
}


def rrc_resampler(sps, rolloff):
    """RRC pulse shaping at any rate, built exactly as digital.generic_mod builds it."""
    nfilts = 32
    taps = firdes.root_raised_cosine(nfilts, nfilts, 1.0, rolloff, nfilts * 11 * int(sps))
    return filter.pfb_arb_resampler_ccf(sps, taps)


def shaper_settle(sps):
    """Output samples to drop after an RRC shaper built as generic_mod builds it (rrc_resampler)
    before its output is steady. Its filter spans 11 * int(sps) symbols, so its output ramps
    out of silence for half of that (5.5 int(sps) sps samples: 1,400 at 16 samples a symbol,
    more than MARGIN_SAMPLES from about 10 up, which left the first part of such bursts
    empty) and carries an empty past for the other half; the whole span is dropped.
    modulated() records what its modulator needs dropped in p["_settle"], and clean_burst
    drops it from what the flowgraph made (a skiphead block in the flowgraph instead made the
    output differ by a float32 rounding now and then between runs of one seed under load)."""
    return int(math.ceil(11 * int(sps) * sps))


def _log_uniform(rng, lo_hi):
    return float(np.exp(rng.uniform(np.log(lo_hi[0]), np.log(lo_hi[1]))))


def _bytes(rng, n):
    return [int(b) for b in rng.integers(0, 256, size=n)]


def _message_source(tb, rng, p, n):
    """A real message, zero mean, |m| <= ~1, band-limited to p['message_bandwidth...']."""
    bw = p["message_bandwidth_cyc_per_sample"]
    if p["message_type"] == 1:  # 1..4 tones inside the bandwidth, amplitudes summing to 1
        k = int(rng.integers(1, 5))
        amps = rng.uniform(0.2, 1.0, size=k)
        amps /= amps.sum()
        adder = blocks.add_ff()
        for i in range(k):
            src = analog.sig_source_f(1.0, analog.GR_COS_WAVE, float(rng.uniform(0.05, 1.0) * bw),
                                      float(amps[i]), 0.0, float(rng.uniform(0, 2 * np.pi)))
            tb.connect(src, (adder, i))
        return adder
    taps = firdes.low_pass(1.0, 1.0, bw, bw * 0.3)
    std = 1.0 / 3.5 / math.sqrt(float(np.sum(np.square(taps))))  # ~peak 1
    src = analog.noise_source_f(analog.GR_GAUSSIAN, std, int(rng.integers(1, 2**31 - 1)))
    lp = filter.fir_filter_fff(1, taps)
    settle = blocks.skiphead(gr.sizeof_float, len(taps))  # until the filter's history is full
    tb.connect(src, lp, settle)
    return settle


def modulated(tb, label, rng, p, n_out):
    """Add the modulator of `label` to tb; returns its complex output block."""
    if label in LINEAR:
        c = constellation(label)
        p["samples_per_symbol"] = _log_uniform(rng, SPS_RANGE)
        p["rolloff"] = float(rng.uniform(*ROLLOFF_RANGE))
        bps = int(round(math.log2(len(c.points()))))
        p["_settle"] = shaper_settle(p["samples_per_symbol"])
        n_bytes = int(math.ceil(((n_out + p["_settle"]) / p["samples_per_symbol"] + 64) * bps / 8))
        src = blocks.vector_source_b(_bytes(rng, n_bytes), False)
        mod = digital.generic_mod(c, differential=False, samples_per_symbol=p["samples_per_symbol"],
                                  pre_diff_code=False, excess_bw=p["rolloff"])
        tb.connect(src, mod)
        return mod
    if label == "OQPSK":  # QPSK with the Q rail delayed by half a symbol (even integer sps)
        sps = max(2, 2 * int(round(_log_uniform(rng, SPS_RANGE) / 2)))
        p["samples_per_symbol"] = float(sps)
        p["rolloff"] = float(rng.uniform(*ROLLOFF_RANGE))
        p["_settle"] = shaper_settle(sps)
        src = blocks.vector_source_b(_bytes(rng, int(math.ceil(((n_out + p["_settle"]) / sps + 64) * 2 / 8))),
                                     False)
        mod = digital.generic_mod(constellation("QPSK"), differential=False, samples_per_symbol=sps,
                                  pre_diff_code=False, excess_bw=p["rolloff"])
        split, join = blocks.complex_to_float(), blocks.float_to_complex()
        delay = blocks.delay(gr.sizeof_float, sps // 2)
        tb.connect(src, mod, split)
        tb.connect((split, 0), (join, 0))
        tb.connect((split, 1), delay, (join, 1))
        return join
    if label in APSK:
        p["samples_per_symbol"] = _log_uniform(rng, SPS_RANGE)
        p["rolloff"] = float(rng.uniform(*ROLLOFF_RANGE))
        m = int(label[:-4])
        cname, rates = APSK_DTV[label]
        rate = rates[int(rng.integers(0, len(rates)))]
        p["_settle"] = shaper_settle(p["samples_per_symbol"])
        n_sym = int((n_out + p["_settle"]) / p["samples_per_symbol"]) + 64
        src = blocks.vector_source_b([int(v) for v in rng.integers(0, m, size=n_sym)], False)
        mapper = dtv.dvbs2_modulator_bc(dtv.FECFRAME_NORMAL, getattr(dtv, rate), getattr(dtv, cname),
                                        dtv.INTERPOLATION_OFF)
        shaper = rrc_resampler(p["samples_per_symbol"], p["rolloff"])
        symbols = blocks.vector_sink_c()
        tb.connect(src, mapper, shaper)
        tb.connect(mapper, symbols)
        p["_apsk_symbols"] = symbols  # ring ratios measured after the run (clean_burst)
        return shaper
    if label in CPM:
        sps = int(round(_log_uniform(rng, SPS_RANGE)))
        p["samples_per_symbol"] = float(sps)
        n_sym = n_out // sps + 64
        if label == "CPFSK":
            p["mod_index_h"] = CPFSK_H
            src = blocks.vector_source_b([int(b) for b in rng.integers(0, 2, size=n_sym)], False)
            mod = analog.cpfsk_bc(p["mod_index_h"], 1.0, sps)  # k = h: phase step k*pi per symbol
        elif label == "GMSK":
            p["bt"] = float(rng.uniform(*GMSK_BT_RANGE))
            p["mod_index_h"] = 0.5
            src = blocks.vector_source_b(_bytes(rng, n_sym // 8 + 1), False)
            mod = digital.gmsk_mod(samples_per_symbol=sps, bt=p["bt"])
        else:
            p["bt"] = float(rng.uniform(*GFSK_BT_RANGE))
            p["mod_index_h"] = float(rng.uniform(*GFSK_H_RANGE))
            src = blocks.vector_source_b(_bytes(rng, n_sym // 8 + 1), False)
            # frequency_modulator_fc: rad/sample per unit input; h/(2 sps) cycles per sample
            mod = digital.gfsk_mod(samples_per_symbol=sps, sensitivity=math.pi * p["mod_index_h"] / sps,
                                   bt=p["bt"])
        p["peak_deviation_cyc_per_sample"] = p["mod_index_h"] / (2 * sps)
        tb.connect(src, mod)
        return mod
    # analog
    p["message_type"] = float(rng.integers(0, 2))  # 0 band-limited noise, 1 tones (no speech-like)
    p["message_bandwidth_cyc_per_sample"] = _log_uniform(rng, MESSAGE_BANDWIDTH_RANGE)
    msg = _message_source(tb, rng, p, n_out)
    if label == "FM":
        bw = p["message_bandwidth_cyc_per_sample"]
        beta = float(rng.uniform(*(FM_BETA_WIDE if rng.random() < 0.5 else FM_BETA_NARROW)))
        beta = min(beta, FM_MAX_CARSON_HALF / bw - 1)
        p["mod_index"], p["peak_deviation_cyc_per_sample"] = beta, beta * bw
        mod = analog.frequency_modulator_fc(2 * math.pi * p["peak_deviation_cyc_per_sample"])
        tb.connect(msg, mod)
        return mod
    if label.startswith("AM-DSB"):
        f2c = blocks.float_to_complex()
        if label == "AM-DSB-WC":
            p["mod_index"] = float(rng.uniform(*AM_INDEX_RANGE))
            scale = blocks.multiply_const_ff(p["mod_index"])
            dc = blocks.add_const_ff(1.0)
            tb.connect(msg, scale, dc, f2c)
        else:
            tb.connect(msg, f2c)
        return f2c
    p["ssb_upper"] = float(rng.integers(0, 2))
    hil = filter.hilbert_fc(HILBERT_TAPS)
    p["_settle"] = HILBERT_TAPS     # until its history is full (clean_burst drops it)
    tb.connect(msg, hil)
    out = hil
    if not p["ssb_upper"]:
        conj = blocks.conjugate_cc()
        tb.connect(out, conj)
        out = conj
    if label == "AM-SSB-WC":
        p["mod_index"] = float(rng.uniform(*AM_INDEX_RANGE))
        scale = blocks.multiply_const_cc(p["mod_index"])
        dc = blocks.add_const_cc(1.0)
        tb.connect(out, scale, dc)
        out = dc
    return out


def _exp_profile(rng, n):
    """Power of n paths at 0..n-1 samples, exponentially decaying, sum 1; and its rms spread."""
    decay = float(rng.uniform(0.5, 3.0))
    power = np.exp(-np.arange(n) / decay)
    power /= power.sum()
    mean = np.sum(power * np.arange(n))
    return power, float(np.sqrt(np.sum(power * np.arange(n) ** 2) - mean ** 2))


def propagation(tb, rng, p):
    """The multipath part: a third each no multipath, static taps, or GNU Radio fading.

    Returns (taps for channel_model, fading block or None). Fading is
    channels.selective_fading_model (sum of sinusoids; Rayleigh, or Rician with a
    line-of-sight path), Doppler and K in the synthesizer's ranges."""
    kind = int(rng.integers(0, 3))
    n = 1 if kind == 0 else int(rng.integers(2, 5))
    p["n_taps"] = float(n)
    power, spread = _exp_profile(rng, n)
    p["delay_spread_samples"] = spread
    if kind == 0:
        p["fading_type"] = 0.0
        return [complex(1.0)], None
    if kind == 1:  # static: fixed complex taps, no fading (fading_type stays n/a)
        taps = np.sqrt(power) * np.exp(1j * rng.uniform(0, 2 * np.pi, size=n))
        return [complex(t) for t in taps], None
    rician = bool(rng.random() < 0.5)
    p["fading_type"] = 2.0 if rician else 1.0
    p["doppler_cyc_per_sample"] = _log_uniform(rng, DOPPLER_RANGE)
    k_db = float(rng.uniform(*K_FACTOR_DB_RANGE))
    if rician:
        p["k_factor_db"] = k_db
    fading = channels.selective_fading_model(
        8, p["doppler_cyc_per_sample"], rician, 10 ** (k_db / 10), int(rng.integers(1, 2**31 - 1)),
        [float(d) for d in range(n)], [float(m) for m in np.sqrt(power)], 8)
    return [complex(1.0)], fading


def clean_burst(label, rng, length, p):
    """Flowgraph 1: modulator + channel_model without noise; returns `length` samples."""
    n_out = length + 2 * MARGIN_SAMPLES  # the last margin also covers TAIL_SAMPLES
    tb = gr.top_block()
    p["cfo_cyc_per_sample"] = float(rng.uniform(-CFO_MAX, CFO_MAX))
    p["phase_offset_deg"] = float(rng.uniform(0.0, 360.0))
    p["sro_ppm"] = float(rng.uniform(-SRO_PPM_MAX, SRO_PPM_MAX))
    taps, fading = propagation(tb, rng, p)
    src = modulated(tb, label, rng, p, n_out)
    settle = p.pop("_settle", 0)    # the modulator's start-up (shaper_settle), dropped below
    rot = blocks.multiply_const_cc(complex(np.exp(1j * np.deg2rad(p["phase_offset_deg"]))))
    if fading is not None:
        tb.connect(rot, fading)
    ch = channels.channel_model(noise_voltage=0.0, frequency_offset=p["cfo_cyc_per_sample"],
                                epsilon=1.0 + 1e-6 * p["sro_ppm"], taps=taps,
                                noise_seed=int(rng.integers(1, 2**31 - 1)), block_tags=False)
    head = blocks.head(gr.sizeof_gr_complex, settle + n_out)
    sink = blocks.vector_sink_c()
    tb.connect(src, rot)
    tb.connect(fading if fading is not None else rot, ch, head, sink)
    tb.run()
    symbols = p.pop("_apsk_symbols", None)
    if symbols is not None:  # ring radii of the mapper's output, relative to the inner ring
        radii = np.unique(np.round(np.abs(np.asarray(symbols.data())), 4))
        p["apsk_ring_ratio_2"] = float(radii[1] / radii[0])
        p["apsk_ring_ratio_3"] = float(radii[2] / radii[0]) if radii.size > 2 else float("nan")
    x = np.asarray(sink.data(), dtype=np.complex64)[settle:]
    if x.size < MARGIN_SAMPLES + length:
        raise RuntimeError(f"{label}: flowgraph produced {x.size} samples after its start-up, "
                           f"need {MARGIN_SAMPLES + length}")
    return x[MARGIN_SAMPLES:MARGIN_SAMPLES + length]


TAIL_SAMPLES = 64  # flowgraph 2 keeps back a few samples (resampler look-ahead); feed extra


def add_noise(x, noise_voltage, seed):
    """Flowgraph 2: channel_model with noise only."""
    tb = gr.top_block()
    src = blocks.vector_source_c([complex(v) for v in x], False)
    ch = channels.channel_model(noise_voltage=float(noise_voltage), frequency_offset=0.0, epsilon=1.0,
                                taps=[complex(1.0)], noise_seed=int(seed), block_tags=False)
    sink = blocks.vector_sink_c()
    tb.connect(src, ch, sink)
    tb.run()
    return np.asarray(sink.data(), dtype=np.complex64)


def noise_pass_advance():
    """Samples flowgraph 2 drops at the start (channel_model's resampler output is ahead):
    output sample i is input sample i + advance, so the signal power is measured there."""
    x = np.zeros(256, np.complex64)
    x[100] = 1.0
    y = add_noise(x, 0.0, 1)
    return 100 - int(np.argmax(np.abs(y)))


def noise_power_per_volt2(seed):
    """Noise power channel_model adds per unit noise_voltage**2 (measured, not assumed)."""
    y = add_noise(np.zeros(1 << 16, np.complex64), 1.0, seed)
    return float(np.mean(np.abs(y) ** 2))


def main(spec_path, out_path):
    with open(spec_path) as fh:
        spec = json.load(fh)
    labels, snrs = spec["labels"], [float(s) for s in spec["snr_grid_db"]]
    length, per_cell = int(spec["length"]), int(spec["per_cell"])
    bad = [lb for lb in labels if lb not in SUPPORTED]
    if bad:
        raise SystemExit(f"labels GNU Radio cannot make here: {bad}")
    rng = np.random.default_rng(int(spec["seed"]))
    k = noise_power_per_volt2(int(rng.integers(1, 2**31 - 1)))
    advance = noise_pass_advance()
    if not 0 <= advance < TAIL_SAMPLES:
        raise RuntimeError(f"unexpected channel_model delay {advance}")
    n = len(labels) * len(snrs) * per_cell
    iq = np.zeros((n, length), np.complex64)
    out_labels, out_snr = [], np.zeros(n, np.float32)
    params = {name: np.full(n, np.nan, np.float64) for name in PARAM_NAMES}
    i = 0
    for label in labels:
        for snr in snrs:
            for _ in range(per_cell):
                p = {}
                if label == "NOISE":
                    s, p_sig, p_noise = np.zeros(length + TAIL_SAMPLES, np.complex64), 0.0, 1.0
                else:
                    s = clean_burst(label, rng, length + TAIL_SAMPLES, p)
                    p_sig = float(np.mean(np.abs(s[advance:advance + length]) ** 2))
                    p_noise = p_sig / 10 ** (snr / 10)
                y = add_noise(s, math.sqrt(p_noise / k), int(rng.integers(1, 2**31 - 1)))
                if y.size < length:
                    raise RuntimeError(f"{label}: noise flowgraph returned {y.size} samples, need {length}")
                iq[i] = y[:length]
                p["signal_power_db"] = 10 * math.log10(p_sig) if p_sig > 0 else float("nan")
                p["noise_power_db"] = 10 * math.log10(p_noise)
                for name, value in p.items():
                    params[name][i] = value
                out_labels.append(label)
                out_snr[i] = snr
                i += 1
        print(f"{label}: done", file=sys.stderr, flush=True)
    np.savez(out_path, iq=iq, labels=np.array(out_labels), snr_db=out_snr,
             gr_version=np.array(gr.version()), noise_power_per_volt2=np.array(k),
             noise_pass_advance=np.array(advance),
             **{f"param_{name}": v for name, v in params.items()})
    print(json.dumps({"n": n, "gr_version": gr.version()}))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: _gr_flowgraph.py SPEC.json OUT.npz")
    main(sys.argv[1], sys.argv[2])
