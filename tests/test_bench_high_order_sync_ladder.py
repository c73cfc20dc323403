"""The synchronization ladder of benchmarks/high_order_sync_ladder.py: the genie demodulator
inverts the real synthesizer, the blind estimators find rate, timing, carrier and noise, and the
decisions are right where they must be."""

from __future__ import annotations

import numpy as np

from rfclassify.dsp import measure
from rfclassify.dsp.constellations import constellation
from rfclassify.dsp.synth import ChannelConfig, synthesize
from rfclassify.labels import HIGH_ORDER_LABELS

from benchmark_modules import load_benchmark

lad = load_benchmark("high_order_sync_ladder")

CLOCK_AND_CARRIER = ChannelConfig.only("timing", "sro", "cfo", "phase", "gain", "dc_offset")


def test_genie_recovers_the_transmitted_constellation() -> None:
    # Noiseless bursts with timing, SRO, CFO + drift, phase, gain and a DC offset: the recorded
    # params must undo all of it (a wrong sign or a symbol off by one gives EVM near 0 dB).
    b = synthesize(["16QAM", "256QAM", "32PSK"] * 2, 1024, np.random.default_rng(5), None, CLOCK_AND_CARRIER)
    for x, p, label in zip(b.iq, b.params, ["16QAM", "256QAM", "32PSK"] * 2, strict=True):
        y, _ = lad.genie_symbols(x, p)
        assert y.size >= 1024 / p["samples_per_symbol"] - 2 * lad.EDGE_SYMBOLS - 2
        assert measure.evm_db(y, constellation(label)) < -25.0


def test_mean_removal_is_skipped_without_a_dc_line_and_done_with_one() -> None:
    b = synthesize(["64QAM"], 1024, np.random.default_rng(6), None, ChannelConfig.clean())
    x = b.iq[0].astype(np.complex128)
    assert np.allclose(lad.remove_dc_line(x), x / np.sqrt(np.mean(np.abs(x) ** 2)))
    leaky = lad.remove_dc_line(x + 0.3)
    assert abs(leaky.mean()) < 1e-9


def test_blind_symbol_rate_and_timing_on_clean_16qam() -> None:
    b = synthesize(["16QAM"] * 4, 1024, np.random.default_rng(7), 30.0, ChannelConfig.only("timing", "sro"))
    for x, p in zip(b.iq, b.params, strict=True):
        true_sps = float(p["samples_per_symbol"]) / (1 + 1e-6 * float(p["sro_ppm"]))
        sps, timing = lad.estimate_symbol_rate(lad.remove_dc_line(x), float(lad.estimate_sps(x[None])[0]))[0]
        assert abs(sps / true_sps - 1) < 0.005
        err = (timing - float(p["timing_offset_samples"]) + sps / 2) % sps - sps / 2
        assert abs(err) < 0.05 * sps


def test_blind_carrier_and_noise_estimates() -> None:
    b = synthesize(["64QAM"] * 4, 1024, np.random.default_rng(8), 15.0, ChannelConfig.only("cfo", "phase"))
    for x, p in zip(b.iq, b.params, strict=True):
        sps = float(p["samples_per_symbol"])
        f0, noise = lad.estimate_carrier_and_noise(lad.remove_dc_line(x), sps)
        # the spectral centroid: a small fraction of the symbol rate (the M-th power refines it)
        assert abs(f0 - float(p["cfo_cyc_per_sample"])) < 0.1 / sps
        assert abs(10 * np.log10((1 - noise) / noise) - 15.0) < 1.5


def test_decisions_at_high_snr() -> None:
    # One burst per class at 30 dB on the clean channel: the genie rung is right on all, and the
    # blind receiver on most (it is not perfect; see the .md), far above chance (1 in 12).
    dec = lad.LadderDecider()
    labels = list(HIGH_ORDER_LABELS)
    b = synthesize(labels, 1024, np.random.default_rng(9), 30.0, ChannelConfig.clean())
    genie = [dec.decide_known(*lad.genie_symbols(x, p)) for x, p in zip(b.iq, b.params, strict=True)]
    assert genie == list(range(len(labels)))
    blind = [dec.decide_blind(x, n_candidates=2)[0] for x in b.iq]
    assert np.mean(np.array(blind) == np.arange(len(labels))) >= 0.5


def test_carrier_features_use_a_moment_each_alphabet_has() -> None:
    dec = lad.LadderDecider()
    feat = dict(zip(HIGH_ORDER_LABELS, dec.feature, strict=True))
    orders = {k: [f[0] for f in v] for k, v in feat.items()}
    assert orders["8PSK"] == [8] and orders["16PSK"] == [16] and orders["32PSK"] == [32]
    assert orders["16QAM"] == [4, 12] and orders["32QAM"] == [4] and orders["256QAM"] == [4]
    # 64APSK's rings cancel every whole-alphabet moment up to 32: its inner 4-point ring is used
    assert orders["64APSK"] == [4] and feat["64APSK"][0][2] > 0


def _evm_after_phase_search_db(y: np.ndarray, alphabet: np.ndarray) -> float:
    y = y / np.sqrt(np.mean(np.abs(y) ** 2))
    return measure.evm_db(y * np.exp(-1j * lad.search_phase(y, alphabet, n_symbols=y.size)), alphabet)


def test_cma_equalizer_undoes_a_two_tap_isi_channel() -> None:
    # 16QAM at 30 dB through x[n] + 0.6j x[n - sps/2]: the plain matched filter is ISI-limited
    # (about -11 dB EVM); the T/2 CMA equalizer must take several dB of that off. A wrong tap
    # layout, sign of the gradient or regressor lag leaves it at -11 dB or diverges.
    b = synthesize(["16QAM"] * 3, 1024, np.random.default_rng(11), 30.0, ChannelConfig.only("timing"))
    alphabet = constellation("16QAM")
    for x, p in list(zip(b.iq, b.params, strict=True))[1:]:  # sps 3.1 and 5.8 (enough symbols)
        sps, rolloff, timing = float(p["samples_per_symbol"]), float(p["rolloff"]), float(p["timing_offset_samples"])
        d = int(round(sps / 2))
        xi = x.astype(np.complex128)
        xi[d:] += 0.6j * x[:-d]
        plain = lad.symbols_at(xi, sps, rolloff, timing)
        regressors = lad.half_symbol_regressors(xi, sps, rolloff, timing)
        assert np.allclose(regressors[:, lad.EQ_TAPS // 2], plain)  # the centre tap is the plain receiver
        isi_db = _evm_after_phase_search_db(plain, alphabet)
        cma_db = _evm_after_phase_search_db(regressors @ lad.cma_taps(regressors), alphabet)
        assert isi_db > -13.0
        assert cma_db < isi_db - 3.0


def test_phase_search_finds_a_qam_rotation() -> None:
    rng = np.random.default_rng(12)
    alphabet = constellation("64QAM")
    y = alphabet[rng.integers(0, alphabet.size, 400)] * np.exp(1j * 0.3)
    y = y + 0.05 * (rng.standard_normal(y.size) + 1j * rng.standard_normal(y.size))
    phi = lad.search_phase(y, alphabet)
    assert abs((phi - 0.3 + np.pi / 4) % (np.pi / 2) - np.pi / 4) < 0.02
