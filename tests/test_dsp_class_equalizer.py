"""The per-class equalized scores: table decisions and likelihoods against brute force, the
carrier fit against a known residual carrier, the equalizer (hard and soft fits) against a
multipath channel, and which class the scores prefer."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rfclassify.dsp import class_equalizer as ce
from rfclassify.labels import HIGH_ORDER_LABELS


def _bank(labels: tuple[str, ...]) -> ce.AlphabetBank:
    return ce.alphabet_bank(labels)


def test_the_tables_decide_as_a_brute_force_nearest_point_search():
    bank = _bank(("16QAM", "32QAM", "256QAM", "16APSK", "32PSK"))
    rng = np.random.default_rng(0)
    z = 1.2 * (rng.standard_normal(4000) + 1j * rng.standard_normal(4000)) / math.sqrt(2)
    for j in range(len(bank.sizes)):
        alphabet = bank.points[j, :bank.sizes[j]]
        brute = alphabet[np.argmin(np.abs(z[:, None] - alphabet[None, :]), axis=1)]
        exact = bank.decide_exactly(z[None, :], np.array([j]))[0]
        coarse = bank.decide(z[None, :], np.array([j]))[0]
        np.testing.assert_array_equal(exact, brute)
        # the coarse decision is its cell centre's: only symbols within a cell of a boundary differ
        assert 0.9 < np.mean(coarse == brute)
        np.testing.assert_array_equal(bank.decide(alphabet[None, :], np.array([j]))[0], alphabet)


def test_the_neighbour_mixture_matches_the_whole_alphabets():
    bank = _bank(("64QAM",))
    alphabet = bank.points[0, :64]
    rng = np.random.default_rng(1)
    n0 = 0.01
    noise = math.sqrt(n0 / 2) * (rng.standard_normal(500) + 1j * rng.standard_normal(500))
    z = alphabet[rng.integers(0, 64, 500)] + noise
    e = -np.abs(z[:, None] - alphabet[None, :]) ** 2 / n0
    exact = np.mean(np.log(np.mean(np.exp(e), axis=1))) - math.log(math.pi * n0)
    got = bank.loglik(z[None, :], np.array([0]), np.array([[n0]]))[0, 0]
    assert got == pytest.approx(exact, abs=0.01)


def _symbols(label: str, n: int, rng: np.random.Generator, es_n0_db: float = 30.0) -> np.ndarray:
    alphabet = ce.class_alphabets(label)[0]
    s = alphabet[rng.integers(0, alphabet.size, n)].astype(np.complex128)
    sigma = math.sqrt(10 ** (-es_n0_db / 10) / 2)
    return s * np.exp(1j * rng.uniform(0, 2 * np.pi)) + sigma * (rng.standard_normal(n) + 1j * rng.standard_normal(n))


@pytest.mark.parametrize("label", HIGH_ORDER_LABELS)
def test_the_scores_prefer_the_true_class_of_clean_symbols_at_any_carrier_phase(label):
    scores = ce.class_scores(_symbols(label, 400, np.random.default_rng(len(label))), HIGH_ORDER_LABELS)
    assert scores.shape == (len(HIGH_ORDER_LABELS),) and np.all(np.isfinite(scores))
    assert HIGH_ORDER_LABELS[int(np.argmax(scores))] == label


def test_the_turn_series_gives_back_the_soft_likelihood_as_a_point_turns():
    alphabet = ce.class_alphabets("16QAM")[0]
    series = ce.alphabet_turn_series(alphabet)
    d = np.abs(alphabet[:, None] - alphabet[None, :])
    s2 = (ce.CARRIER_SPREAD * d[d > 1e-9].min()) ** 2
    theta = np.linspace(0, 2 * np.pi, 400, endpoint=False)
    for i in (60, 120, 200):           # table radii: 0.52, 1.04, 1.73
        rho = i * ce.GRID_LIMIT / (ce.CARRIER_RADII - 1)
        e = -np.abs(rho * np.exp(1j * theta)[:, None] - alphabet[None, :]) ** 2 / s2
        direct = (np.log(np.exp(e - e.max(axis=1, keepdims=True)).sum(axis=1)) + e.max(axis=1)) * s2
        orders = 4 * np.arange(1, ce.CARRIER_HARMONICS + 1)
        rebuilt = 2 * np.real(np.exp(1j * np.outer(theta, orders)) @ series[i])
        np.testing.assert_allclose(rebuilt - rebuilt.mean(), direct - direct.mean(), atol=0.02 * np.ptp(direct))


@pytest.mark.parametrize("label", ["16QAM", "64QAM", "256QAM", "32APSK", "32PSK"])
def test_the_carrier_fit_finds_a_residual_carrier_for_the_true_alphabet(label):
    rng = np.random.default_rng(len(label))
    n, offset, phase = 200, 0.031, 0.7
    alphabet = ce.class_alphabets(label)[0]
    s = alphabet[rng.integers(0, alphabet.size, n)]
    y = s * np.exp(1j * (2 * np.pi * offset * np.arange(n) + phase))
    y += 0.02 * (rng.standard_normal(n) + 1j * rng.standard_normal(n))
    y /= math.sqrt(np.mean(np.abs(y) ** 2))
    bank = _bank((label,))
    freq, found = ce.carrier_fit(y, bank)
    period = 1.0 / bank.symmetry[0]        # a turn of 2 pi / s a symbol leaves the alphabet as it is
    miss = (freq[0] - offset + period / 2) % period - period / 2
    turn = 2 * np.pi / bank.symmetry[0]
    assert abs(miss) < 0.05 / n               # under 0.05 cycles over the burst
    assert abs((found[0] - phase + turn / 2) % turn - turn / 2) < 0.15


def test_a_narrowed_carrier_fit_searches_only_its_reach_and_reach_0_fits_the_phase_alone():
    """carrier_fit(reach=r) keeps every frequency within r (one line width beyond it, its
    fine search); reach 0 tries frequency 0 alone and still finds the phase. A residual
    carrier beyond the reach is not found there (the fit is narrowed, not moved)."""
    rng = np.random.default_rng(3)
    n, phase = 200, 0.4
    alphabet = ce.class_alphabets("16QAM")[0]
    s = alphabet[rng.integers(0, alphabet.size, n)] * np.exp(1j * phase)
    s += 0.02 * (rng.standard_normal(n) + 1j * rng.standard_normal(n))
    bank = _bank(("16QAM", "8PSK"))
    freq, found = ce.carrier_fit(s / math.sqrt(np.mean(np.abs(s) ** 2)), bank, reach=0.0)
    assert np.all(freq == 0.0)
    assert abs((found[0] - phase + np.pi / 4) % (np.pi / 2) - np.pi / 4) < 0.15
    turned = s * np.exp(2j * np.pi * 0.031 * np.arange(n))
    wide, _ = ce.carrier_fit(turned / math.sqrt(np.mean(np.abs(turned) ** 2)), bank)
    narrow, _ = ce.carrier_fit(turned / math.sqrt(np.mean(np.abs(turned) ** 2)), bank, reach=0.01)
    step = 1.0 / (4 * ce.CARRIER_HARMONICS * n)     # 16QAM's finest line width
    assert abs(wide[0] - 0.031) < 0.05 / n
    assert abs(narrow[0]) <= 0.01 + step


def test_the_fit_start_scores_dense_qam_through_a_carrier_offset_the_line_start_loses():
    labels = ("16QAM", "32QAM", "64QAM", "128QAM", "256QAM")
    rng = np.random.default_rng(7)
    right = {ce.START_FIT: 0, ce.START_LINES: 0}
    for label in labels * 2:
        y = _symbols(label, 96, rng, es_n0_db=32.0) * np.exp(2j * np.pi * 0.043 * np.arange(96))
        y /= math.sqrt(np.mean(np.abs(y) ** 2))
        bank = _bank(labels)
        for start in right:
            ll = ce.equalized_logliks(y, bank, start=start)[0]
            right[start] += labels[int(bank.owner[int(np.argmax(ll))])] == label
    assert right[ce.START_FIT] == 2 * len(labels)
    assert right[ce.START_LINES] <= right[ce.START_FIT] - 2     # 7 of 10 here
    with pytest.raises(ValueError, match="unknown start"):
        ce.start_filters(y, bank, start="nearest")


def test_the_equalizer_undoes_a_multipath_channel_that_a_gain_alone_cannot():
    rng = np.random.default_rng(2)
    s = _symbols("16QAM", 500, rng, es_n0_db=35.0)
    y = s + 0.4 * np.exp(1j) * np.concatenate([[0], s[:-1]])        # a second path one symbol late
    labels = ("16QAM", "32QAM", "64QAM", "16APSK")
    equalized = ce.class_scores(y, labels, taps=5)
    gain_only = ce.class_scores(y, labels, taps=1)
    assert labels[int(np.argmax(equalized))] == "16QAM"
    assert labels[int(np.argmax(gain_only))] != "16QAM"           # the smeared grid looks denser
    assert equalized[0] > gain_only[0] + 1.0


def test_the_soft_fit_finds_the_class_through_an_echo_the_hard_fit_loses_half_the_time():
    # the hard fit commits to wrong decisions while the echoes still close the eye
    labels = tuple(HIGH_ORDER_LABELS)
    right = {ce.FIT_HARD: 0, ce.FIT_SOFT: 0}
    for seed in range(18):
        s = _symbols("32QAM", 400, np.random.default_rng(seed))
        y = np.convolve(s, np.array([1, -0.5, 0.4j]))[:s.size]
        for fit in right:
            right[fit] += labels[int(np.argmax(ce.class_scores(y, labels, fit=fit)))] == "32QAM"
    assert right[ce.FIT_SOFT] >= 14 and right[ce.FIT_HARD] <= 9          # 15 and 8 of 18 here
    with pytest.raises(ValueError, match="unknown equalizer fit"):
        ce.class_scores(y, labels, fit="blind")


def test_too_few_symbols_have_no_scores_and_long_bursts_use_their_centre():
    assert ce.class_scores(np.ones(ce.MIN_SYMBOLS - 1, complex), ("16QAM",)) is None
    rng = np.random.default_rng(3)
    centre = _symbols("8PSK", ce.MAX_SYMBOLS, rng)
    noise = 3.0 * (rng.standard_normal(400) + 1j * rng.standard_normal(400))
    y = np.concatenate([noise[:200], centre, noise[200:]])        # the noise falls outside the centre
    np.testing.assert_allclose(ce.class_scores(y, ("8PSK", "16PSK")), ce.class_scores(centre, ("8PSK", "16PSK")),
                               rtol=1e-5)


def test_which_classes_it_can_score():
    assert all(ce.scorable(lb) for lb in HIGH_ORDER_LABELS)
    assert not ce.scorable("QPSK") and not ce.scorable("FM")       # too few points; no alphabet
    def first(label):
        return ce.class_alphabets(label)[0]
    # the APSK rings have all but no 4th-power line: 16APSK's 12-ring gives a 12th-power one
    assert [ce.carrier_line(first(lb)) for lb in ("32PSK", "16APSK", "128APSK", "64QAM")] == [32, 12, 16, 4]
    assert [ce.rotational_order(first(lb)) for lb in ("8PSK", "32APSK", "128APSK", "32QAM")] == [8, 4, 16, 4]
    assert len(ce.class_alphabets("16APSK")) == 6 and len(ce.class_alphabets("32APSK")) == 5


def test_an_extra_regressor_is_turned_with_the_symbols_and_fitted_beside_the_taps():
    rng = np.random.default_rng(3)
    bank = ce.alphabet_bank(("16QAM", "8PSK"))
    y = bank.points[0, rng.integers(0, 16, 200)] * np.exp(2j * np.pi * 0.01 * np.arange(200))
    y = y / np.sqrt(np.mean(np.abs(y) ** 2))
    tone = np.exp(-2j * np.pi * 0.003 * np.arange(200))
    cols, solve, z = ce.start_filters(y, bank)
    cols_x, solve_x, z_x = ce.start_filters(y, bank, extra=tone)
    freq, _ = ce.carrier_fit(y, bank)
    turn = np.exp(-2j * np.pi * freq[:, None] * np.arange(200)[None, :])
    np.testing.assert_array_equal(cols_x[:, :, :-1], cols)                   # the taps' inputs as without it
    np.testing.assert_allclose(cols_x[:, :, -1], tone[None, :] * turn)        # the regressor, turned like y
    np.testing.assert_allclose(z_x, z)                                        # its weight starts at 0
    assert solve_x.shape == (2, ce.TAPS + 1, 200)
    with pytest.raises(ValueError, match="START_FIT"):
        ce.start_filters(y, bank, start=ce.START_LINES, extra=tone)
