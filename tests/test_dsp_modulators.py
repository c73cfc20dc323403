"""Physics of the modulators, on an ideal channel (ChannelConfig.clean(), no noise)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from rfclassify.dsp import linear, measure
from rfclassify.dsp.constellations import apsk, constellation
from rfclassify.dsp.synth import ChannelConfig, synthesize

CLEAN = ChannelConfig.clean()
EVM_BOUND_DB = -35.0  # random points inside 256QAM decision cells would score ~ -24 dB


def _alphabet(label: str, params: np.void) -> np.ndarray:
    if label == "16APSK":
        return apsk((4, 12), (1.0, float(params["apsk_ring_ratio_2"])))
    if label == "32APSK":
        return apsk((4, 12, 16), (1.0, float(params["apsk_ring_ratio_2"]),
                                  float(params["apsk_ring_ratio_3"])))
    return constellation("QPSK" if label == "OQPSK" else label)


@pytest.mark.parametrize("label", [lb for lb in linear.LINEAR_LABELS if lb != "OQPSK"])
def test_matched_filter_lands_on_constellation_at_random_fractional_rates(label: str) -> None:
    batch = synthesize([label] * 3, 1024, np.random.default_rng(11), channel=CLEAN)
    for iq, p in zip(batch.iq, batch.params, strict=True):
        sps = float(p["samples_per_symbol"])
        assert 2 <= sps <= 16 and 0.15 <= p["rolloff"] <= 0.5
        y = measure.matched_filter(iq, sps, float(p["rolloff"]))
        alphabet = _alphabet(label, p)
        assert measure.evm_db(y, alphabet) < EVM_BOUND_DB, (label, sps)
        # The symbols must spread over the alphabet, not sit on one point.
        assert np.unique(np.argmin(np.abs(y[:, None] - alphabet), axis=1)).size >= min(
            alphabet.size, y.size) // 3


@pytest.mark.parametrize("sps", [2.0, 4.0, 7.0, 3.37, 11.81])
@pytest.mark.parametrize("rolloff", [0.15, 0.5])
def test_linear_evm_integer_and_fractional_sps(sps: float, rolloff: float) -> None:
    rng = np.random.default_rng(5)
    t = np.arange(2048.0)[None, :]
    iq, _ = linear.modulate_linear("16QAM", t, np.array([sps]), np.array([rolloff]),
                                   np.array([0.0]), rng)
    y = measure.matched_filter(iq[0], sps, rolloff)
    assert measure.evm_db(y, constellation("16QAM")) < EVM_BOUND_DB
    # Half a symbol off the right instant must be far worse: the test can see timing.
    y_off = measure.matched_filter(iq[0], sps, rolloff, symbol_shift=0.5)
    assert measure.evm_db(y_off, constellation("16QAM")) > -15


def test_constellations_have_unit_energy_and_right_size() -> None:
    for label in linear.LINEAR_LABELS:
        if label in ("16APSK", "32APSK"):
            continue
        c = constellation(label)
        m = {"OOK": 2, "BPSK": 2, "QPSK": 4, "OQPSK": 4, "PAM4": 4}.get(label) or int(
            "".join(ch for ch in label if ch.isdigit()))
        assert c.size == m and np.unique(np.round(c, 5)).size == m, label
        assert np.mean(np.abs(c) ** 2) == pytest.approx(1.0, rel=1e-5), label
    cross32 = constellation("32QAM") * np.sqrt(20)  # 32-cross: levels +-1,3,5 minus corners
    assert np.max(np.abs(cross32.real) + np.abs(cross32.imag)) < 9.5


def test_oqpsk_q_rail_is_half_a_symbol_after_i() -> None:
    batch = synthesize(["OQPSK"], 2048, np.random.default_rng(2), channel=CLEAN)
    iq = batch.iq[0]
    sps, beta = float(batch.params["samples_per_symbol"][0]), float(batch.params["rolloff"][0])
    rail = np.array([-1.0, 1.0]) / np.sqrt(2)

    def evm(x: np.ndarray, shift: float) -> float:
        return measure.evm_db(measure.matched_filter(x, sps, beta, symbol_shift=shift).real, rail)

    assert evm(iq.real, 0.0) < EVM_BOUND_DB and evm(iq.real, 0.5) > -15
    q = (-1j * iq).real.astype(np.complex64)  # the Q rail, as a real signal
    assert evm(q, 0.5) < EVM_BOUND_DB and evm(q, 0.0) > -15


@pytest.mark.parametrize("label", ["GMSK", "CPFSK", "GFSK"])
def test_fsk_deviation_matches_h_and_phase_is_continuous(label: str) -> None:
    batch = synthesize([label] * 4, 4096, np.random.default_rng(8), channel=CLEAN)
    for iq, p in zip(batch.iq, batch.params, strict=True):
        sps, h = float(p["samples_per_symbol"]), float(p["mod_index_h"])
        dev = h / (2 * sps)
        assert p["peak_deviation_cyc_per_sample"] == pytest.approx(dev, rel=1e-5)
        assert np.allclose(np.abs(iq), 1.0, atol=1e-5)  # constant envelope
        f = measure.instantaneous_frequency(iq)
        # Phase continuity: no step larger than the deviation allows; runs reach it.
        assert np.max(np.abs(f)) <= dev * 1.01
        assert np.max(np.abs(f)) >= dev * 0.97
        # Rectangular pulse: the frequency sits at +-h/(2T) almost everywhere.
        if label == "CPFSK":
            assert np.mean(np.abs(np.abs(f) - dev) < 0.02 * dev) > 0.8
    if label == "GMSK":
        assert np.all(batch.params["mod_index_h"] == 0.5)
        assert np.all((0.25 <= batch.params["bt"]) & (batch.params["bt"] <= 0.4))


def test_am_envelope_follows_one_plus_m_message_and_carrier_line() -> None:
    labels = ["AM-DSB-WC"] * 6 + ["AM-DSB-SC"] * 6
    batch = synthesize(labels, 4096, np.random.default_rng(4), channel=CLEAN)
    for iq, p, label in zip(batch.iq, batch.params, labels, strict=True):
        carrier_fraction = np.abs(iq.mean()) ** 2 / np.mean(np.abs(iq) ** 2)
        assert np.max(np.abs(iq.imag)) < 1e-6  # DSB at zero phase is real
        if label == "AM-DSB-WC":
            m = float(p["mod_index"])
            assert 0.3 <= m <= 1.0
            env = np.abs(iq)
            assert np.max(np.abs(env - 1.0)) / m == pytest.approx(1.0, abs=1e-3)
            assert np.all(iq.real >= -1e-6)
            assert carrier_fraction > 0.5
        else:
            assert np.isnan(p["mod_index"])
            assert carrier_fraction < 0.02


def test_ssb_occupies_one_sideband() -> None:
    labels = ["AM-SSB-SC"] * 6 + ["AM-SSB-WC"] * 6
    batch = synthesize(labels, 4096, np.random.default_rng(6), channel=CLEAN)
    seen = set()
    for iq, p in zip(batch.iq, batch.params, strict=True):
        ratio = measure.sideband_ratio_db(iq)
        upper = int(p["ssb_upper"])
        seen.add(upper)
        assert (ratio if upper == 1 else -ratio) > 25, (upper, ratio)
    assert seen == {0, 1}


def test_fm_deviation_matches_parameter() -> None:
    batch = synthesize(["FM"] * 8, 4096, np.random.default_rng(9), channel=CLEAN)
    betas = batch.params["mod_index"]
    assert betas.min() < 1.0 < betas.max()  # narrow and wide deviation both drawn
    for iq, p in zip(batch.iq, batch.params, strict=True):
        f = measure.instantaneous_frequency(iq)
        dev = float(p["peak_deviation_cyc_per_sample"])
        assert np.max(np.abs(f)) == pytest.approx(dev, rel=2e-3)
        assert dev == pytest.approx(float(p["mod_index"] * p["message_bandwidth_cyc_per_sample"]),
                                    rel=1e-4)
        assert dev + p["message_bandwidth_cyc_per_sample"] <= 0.4 + 1e-6


def test_fm_on_one_or_two_generated_samples_keeps_a_positive_deviation() -> None:
    """With max_taps <= 2 a one- or two-sample burst has W = 1/n above 0.36, where the Carson
    cap 0.4 / W - 1 is negative: the recorded beta and deviation were negative (before the
    sixty-seventh session). The floor is the narrow band's 0.1; longer bursts never reach it."""
    for max_taps, n in ((1, 1), (1, 2), (2, 1)):
        cfg = dataclasses.replace(CLEAN, max_taps=max_taps)
        p = synthesize(["FM"] * 4, n, np.random.default_rng(0), channel=cfg).params
        assert np.all(p["mod_index"] == np.float32(0.1))
        assert np.allclose(p["peak_deviation_cyc_per_sample"], 0.1 * p["message_bandwidth_cyc_per_sample"])
    p = synthesize(["FM"] * 64, 3, np.random.default_rng(0), channel=ChannelConfig(max_taps=1)).params
    carson = p["peak_deviation_cyc_per_sample"] + p["message_bandwidth_cyc_per_sample"]
    assert np.all(p["mod_index"] >= np.float32(0.1)) and np.all(carson <= 0.4 + 1e-6)


def test_occupied_bandwidth_scales_with_symbol_rate_and_rolloff() -> None:
    rng = np.random.default_rng(3)
    t = np.arange(8192.0)[None, :].repeat(4, axis=0)
    bw = {}
    for sps in (4.0, 8.0):
        for beta in (0.2, 0.5):
            iq, _ = linear.modulate_linear("QPSK", t, np.full(4, sps), np.full(4, beta),
                                           np.zeros(4), rng)
            f, p = measure.power_spectrum(iq)
            p = p / p.sum()
            # RRC-shaped symbols have a raised-cosine power spectrum: flat to (1-b)/2T holding
            # a fraction 1-b of the power, nothing beyond (1+b)/2T.
            assert p[np.abs(f) < (1 - beta) / (2 * sps)].sum() == pytest.approx(1 - beta, abs=0.02)
            assert p[np.abs(f) > (1 + beta) / (2 * sps) + 2 / f.size].sum() < 2e-3
            bw[sps, beta] = measure.occupied_bandwidth(iq)
    for beta in (0.2, 0.5):
        assert bw[4.0, beta] / bw[8.0, beta] == pytest.approx(2.0, rel=0.04)
    assert bw[8.0, 0.5] > bw[8.0, 0.2] * 1.1


def test_analog_messages_cover_every_type_and_bandwidth_is_recorded() -> None:
    batch = synthesize(["AM-DSB-SC"] * 30, 2048, np.random.default_rng(1), channel=CLEAN)
    assert set(batch.params["message_type"]) == {0, 1, 2}
    for iq, p in zip(batch.iq, batch.params, strict=True):
        # DSB-SC of a message of bandwidth W occupies +-W around the carrier.
        assert measure.occupied_bandwidth(iq, 0.95) <= 2 * p["message_bandwidth_cyc_per_sample"] + 2e-3
