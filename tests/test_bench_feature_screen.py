"""The parts of benchmarks/feature_screen.py: the lattice lines and their grid-directed filter,
the cross-validated regression and the table that pairs candidates against it."""

from __future__ import annotations

import numpy as np
import pytest

from benchmark_modules import load_benchmark

fs = load_benchmark("feature_screen")


def _square_qam(order: int, n: int, rng: np.random.Generator) -> np.ndarray:
    side = int(round(np.sqrt(order)))
    levels = np.arange(-(side - 1), side, 2, dtype=float)
    s = rng.choice(levels, n) + 1j * rng.choice(levels, n)
    return s / np.sqrt(np.mean(np.abs(s) ** 2))


@pytest.mark.parametrize("order, name, coarser", [(16, "16QAM", None), (64, "64QAM", "16QAM"),
                                                   (256, "256QAM", "64QAM")])
def test_a_clean_square_qam_holds_its_own_lattice_line_at_any_turn(order, name, coarser):
    """Clean symbols on a grid turned by an arbitrary angle: the line of their own spacing is
    near 1 and found there. A coarser grid's spacing holds none (a denser grid's does: the
    coarse grid's harmonics, so the lines are read together, not one per class)."""
    rng = np.random.default_rng(order)
    v = _square_qam(order, 512, rng) * np.exp(0.61j) * 3.0
    lines, where = fs.lattice_lines(v)
    assert lines[fs.QAMS.index(name)] > 0.9
    if coarser:
        assert lines[fs.QAMS.index(coarser)] < 0.45
    turn, freq = where[fs.QAMS.index(name)]
    assert freq == pytest.approx(np.pi * np.sqrt(fs.QAM_ENERGY[name]), rel=0.04)


def test_noise_holds_no_lattice_line():
    rng = np.random.default_rng(1)
    noise = rng.standard_normal(512) + 1j * rng.standard_normal(512)
    assert fs.lattice_lines(noise)[0].max() < 0.3


def test_the_grid_directed_filter_undoes_intersymbol_interference():
    """16QAM through a two-tap channel: its lattice line is weak as received and strong after
    the filter fitted to the nearest grid points at the blind search's spacing. (With an echo
    of 0.35 the search picks a spacing 8 % off and the filter collapses: it needs the eye
    half open.)"""
    rng = np.random.default_rng(2)
    s = _square_qam(16, 512, rng)
    y = fs._unit(s + 0.2 * np.roll(s, 1) + 0.02 * (rng.standard_normal(512) + 1j * rng.standard_normal(512)))
    before, where = fs.lattice_lines(y)
    k = fs.QAMS.index("16QAM")
    turn, freq = where[k]
    z = fs.grid_directed(y, turn, freq, fs.QAM_EDGE["16QAM"])
    after = 0.5 * (abs(np.exp(1j * freq * z.real).mean()) + abs(np.exp(1j * freq * z.imag).mean()))
    assert before[k] < 0.6 < 0.9 < after


def test_a_burst_without_symbols_gives_zeros_and_says_so():
    views = fs.BurstViews(np.zeros(40, np.complex64), None, None)
    row, ok = fs.candidate_row(views, ["lattice", "equalizer_raw"])
    assert not ok and row.shape == (15 + 12,) and not row.any()


def test_spectral_lines_find_a_carrier():
    rng = np.random.default_rng(3)
    noise = (rng.standard_normal(1024) + 1j * rng.standard_normal(1024)) / np.sqrt(2)
    tone = noise + 0.5 * np.exp(2j * np.pi * 0.123 * np.arange(1024))
    quiet = fs.spectral_line_features(fs.BurstViews(noise, None, None))
    loud = fs.spectral_line_features(fs.BurstViews(tone, None, None))
    assert loud[0] > quiet[0] + 3           # the tone's own line, log ratio to the median bin


def test_the_regression_learns_an_informative_input_and_not_a_useless_one():
    rng = np.random.default_rng(4)
    y = rng.integers(0, 3, 900)
    useless = rng.standard_normal((900, 2))
    telling = np.eye(3)[y] + 0.3 * rng.standard_normal((900, 3))
    assert fs.cross_validated(useless, y, 3).mean() < 0.45
    assert fs.cross_validated(telling, y, 3).mean() > 0.95


def _cache(rng: np.random.Generator, n: int = 600) -> dict[str, np.ndarray]:
    """Served probabilities right on about half the bursts of three classes, and two candidates:
    one that tells the class, one that is noise."""
    classes = ("16QAM", "64QAM", "256QAM")
    index = [fs.LABELS.index(c) for c in classes]
    truth = rng.integers(0, 3, n)
    probs = np.full((n, len(fs.LABELS)), 1e-3)
    guess = np.where(rng.random(n) < 0.5, truth, rng.integers(0, 3, n))
    probs[np.arange(n), np.array(index)[guess]] = 1.0
    probs /= probs.sum(1, keepdims=True)
    lattice = np.hstack([np.eye(3)[truth] + 0.2 * rng.standard_normal((n, 3)), np.zeros((n, 12))])
    spectral = rng.standard_normal((n, 8))
    return {"classes": np.array(classes), "truth": np.array(index)[truth], "probs": probs,
            "snr_estimate": rng.normal(15, 3, n), "snr_db": rng.choice([-12.0, 4.0, 20.0], n),
            "faded": rng.random(n) < 0.3, "features": np.hstack([lattice, spectral]),
            "feature_names": np.array(["lattice", "spectral_lines"]), "ok": np.ones(n, bool)}


def test_the_score_pairs_each_candidate_against_the_regression():
    result = fs.score(_cache(np.random.default_rng(5)))
    arms = result["arms"]
    assert set(arms) == {"served", "regression", "+ lattice", "+ spectral_lines", "+ all"}
    served = arms["served"]["all"]["accuracy"]
    assert 55 < served < 80                                 # half right, a third of the rest by luck
    assert arms["+ lattice"]["all"]["vs_regression"] > 20   # it tells the class
    assert abs(arms["+ spectral_lines"]["all"]["vs_regression"]) < 4
    assert arms["regression"]["all"]["vs_regression"] == 0
    assert {"faded", "unfaded", "-20..-10 dB", "-8..8 dB", "10..30 dB"} <= set(arms["served"])
    table = fs.format_table(result)
    assert "| + lattice |" in table and table.count("\n") == 2 + len(arms)


def test_bursts_are_picked_per_cell_within_the_snr_range():
    labels = np.repeat(np.arange(len(fs.LABELS)), 10)
    snr = np.tile(np.array([-4.0, 10.0, 12.0, 30.0, 8.0] * 2), len(fs.LABELS))
    idx = fs.pick_bursts(labels, snr, ("8PSK", "16QAM"), 10.0, 12.0, 1, seed=0)
    names = np.array(fs.LABELS)[labels[idx]]
    assert sorted(names.tolist()) == ["16QAM", "16QAM", "8PSK", "8PSK"]
    assert set(snr[idx]) == {10.0, 12.0} and np.all(np.diff(idx) > 0)


def _channel(**values: float) -> np.void:
    names = ("samples_per_symbol", "fading_type", "delay_spread_samples", "k_factor_db", "doppler_cyc_per_sample",
             "rolloff", "dc_offset_db", "pa_backoff_db", "phase_noise_deg_per_sqrt_sample")
    row = np.zeros(1, [(n, "i1" if n == "fading_type" else "f4") for n in names])
    for n in names:
        row[n] = values.get(n, np.nan)
    return row[0]


def test_the_channel_oracle_reads_the_recorded_channel_and_its_absences():
    faded = fs.channel_oracle_features(fs.BurstViews(np.zeros(8), None, None, _channel(
        samples_per_symbol=4, fading_type=2, delay_spread_samples=0.8, k_factor_db=6, doppler_cyc_per_sample=1e-4,
        rolloff=0.3, dc_offset_db=-20, pa_backoff_db=3, phase_noise_deg_per_sqrt_sample=0.1)))
    assert faded[:5].tolist() == [1, pytest.approx(0.2), 0, 1, 6] and faded[8:12].tolist() == [1, -20, 1, 3]
    clean = fs.channel_oracle_features(fs.BurstViews(np.zeros(8), None, None, _channel(
        samples_per_symbol=8, fading_type=0, rolloff=0.25, phase_noise_deg_per_sqrt_sample=0.0)))
    assert np.all(np.isfinite(clean)) and clean[[0, 2, 3, 8, 10]].tolist() == [0, 0, 0, 0, 0]
    assert fs.channel_oracle_features(fs.BurstViews(np.zeros(8), None, None)) is None


def test_a_context_candidate_is_scored_also_crossed_with_the_served_outputs():
    """A condition flag that says when the served answer is wrong is of no use added alone to
    a linear fusion, and of much use crossed with its inputs."""
    rng = np.random.default_rng(6)
    cache = _cache(rng)
    n = len(cache["truth"])
    index = [fs.LABELS.index(c) for c in cache["classes"]]
    bad = rng.random(n) < 0.5                           # these bursts' served answer points away from the truth
    truth = np.array([index.index(t) for t in cache["truth"]])
    probs = np.full((n, len(fs.LABELS)), 1e-3)
    probs[np.arange(n), np.array(index)[np.where(bad, (truth + 1) % 3, truth)]] = 1.0
    cache["probs"] = probs / probs.sum(1, keepdims=True)
    oracle = np.zeros((n, 13))
    oracle[:, 0] = bad
    cache["features"], cache["feature_names"] = oracle, np.array(["channel_oracle"])
    arms = fs.score(cache)["arms"]
    assert arms["+ channel_oracle"]["all"]["vs_regression"] < 5
    assert arms["+ channel_oracle x served"]["all"]["accuracy"] > 95


def test_the_directed_reading_is_the_networks_reading_of_the_filtered_grid(random_sequence_net):
    """Its log-probabilities are the reader's own for the grid-directed filter's output (less
    their best), then the line after it; no reader or no symbols: none."""
    from rfclassify.dsp.sequence_fronts import front_sequence

    net = random_sequence_net(fs.HIGH_ORDER_LABELS, seed=7)
    rng = np.random.default_rng(7)
    y = _square_qam(64, 400, rng) * np.exp(0.3j)
    views = fs.BurstViews(np.zeros(8), y, None, None, net)
    got = fs.directed_reading_features(views)
    lines, where = fs.lattice_lines(y)
    k = int(np.argmax(lines))
    z = fs.grid_directed(fs._unit(y), *where[k], fs.QAM_EDGE[fs.QAMS[k]])
    lp = net.log_probs(front_sequence(z, net.front, net.labels))
    assert fs.QAMS[k] in ("64QAM", "256QAM")               # its own grid or the denser one holding its harmonic
    assert got.shape == (13,) and np.allclose(got[:12], lp - lp.max(), atol=1e-5) and got[12] > np.log(0.8)
    assert fs.directed_reading_features(fs.BurstViews(np.zeros(8), y, None)) is None
    assert fs.directed_reading_features(fs.BurstViews(np.zeros(8), None, None, None, net)) is None


def test_the_power_lines_candidate_is_the_refiners_own():
    from rfclassify.dsp.power_lines import power_line_features

    y = _square_qam(16, 300, np.random.default_rng(8)) * np.exp(0.2j)
    z = _square_qam(16, 300, np.random.default_rng(9))
    got = fs.power_lines_features(fs.BurstViews(np.zeros(8), y, (z, 1.5, 1.3)))
    assert np.array_equal(got, power_line_features(y, z)) and got.shape == (fs.N_POWER_LINES,)
    assert fs.power_lines_features(fs.BurstViews(np.zeros(8), None, None)) is None


def test_the_symmetric_reading_averages_the_readings_of_the_symmetries(random_sequence_net):
    from rfclassify.dsp.sequence_fronts import front_sequence

    net = random_sequence_net(fs.HIGH_ORDER_LABELS, seed=10)
    y = _square_qam(16, 200, np.random.default_rng(10)) * np.exp(0.4j)
    got = fs.symmetric_reading_features(fs.BurstViews(np.zeros(8), y, None, None, net))
    readings = [net.log_probs(front_sequence(v, net.front, net.labels)) for v in (y, y.conj(), 1j * y, 1j * y.conj())]
    want = np.mean(readings, 0)
    assert np.allclose(got, want - want.max(), atol=1e-5)
    assert not np.allclose(got, readings[0] - readings[0].max(), atol=1e-3)   # a random network is not symmetric


def test_the_timing_reading_reads_the_burst_clocked_three_ways(random_sequence_net):
    from rfclassify.dsp.pulses import rrc

    net = random_sequence_net(fs.HIGH_ORDER_LABELS, seed=11)
    rng = np.random.default_rng(11)
    sps = 4
    up = np.zeros(1024, complex)
    up[::sps] = _square_qam(16, 1024 // sps, rng)
    pulse = rrc(np.arange(-8 * sps, 8 * sps + 1) / sps, 0.35)
    iq = np.convolve(up, pulse, mode="same") + 0.01 * (rng.standard_normal(1024) + 1j * rng.standard_normal(1024))
    views = fs.burst_views(iq.astype(np.complex64), "coherence", "lines", None, net)
    assert views.found is not None and abs(views.found.sps - sps) < 0.1
    got = fs.timing_reading_features(views)
    own = net.log_probs(fs.front_sequence(views.symbols, net.front, net.labels))
    assert got.shape == (12,) and got.max() == 0 and np.all(np.isfinite(got))
    assert not np.allclose(got, own - own.max(), atol=1e-3)                 # the shifted clocks read differently
    assert fs.timing_reading_features(fs.BurstViews(iq, views.symbols, None, None, net)) is None


def _rrc_burst(sps: float, cfo: float, seed: int, n: int = 1024) -> np.ndarray:
    from rfclassify.dsp.pulses import rrc

    rng = np.random.default_rng(seed)
    s = _square_qam(16, int(n / sps) + 20, rng)
    t = np.arange(n)
    x = rrc((t[:, None] - 1.3 - sps * (np.arange(s.size)[None, :] - 10)) / sps, 0.35) @ s
    x = x * np.exp(2j * np.pi * cfo * t) + 0.02 * (rng.standard_normal(n) + 1j * rng.standard_normal(n))
    return x.astype(np.complex64)


def test_the_blind_clock_keeps_the_carrier_it_took_out():
    """What em_channel fits a DC offset's tone at: the band centroid blind_clock found, by
    which the kept baseband is the prepared burst turned."""
    from rfclassify.dsp.symbol_clock import blind_clock, remove_dc_line

    iq = _rrc_burst(4.3, 0.013, 5)
    found = fs.burst_views(iq, "coherence", "lines").found
    x = remove_dc_line(iq)
    _, _, f0 = blind_clock(x, "coherence")
    assert abs(f0 - 0.013) < 0.01                 # the band's centroid: near the offset
    assert found.carrier == f0
    assert np.allclose(found.baseband, x * np.exp(-2j * np.pi * f0 * np.arange(x.size)))


def test_the_em_channel_candidate_scores_the_twelve_classes_twice():
    views = fs.burst_views(_rrc_burst(4.3, 0.013, 6), "coherence", "lines")
    got = fs.em_channel_features(views)
    assert got.shape == (fs.FEATURES["em_channel"][0],) == (24,)
    assert got[:12].max() == 0.0 and got[12:].max() == 0.0
    assert fs.HIGH_ORDER_LABELS[int(np.argmax(got[:12]))] == "16QAM"
    assert fs.em_channel_features(fs.BurstViews(np.zeros(8), None, None)) is None


def test_a_worker_computes_the_row_the_parent_would():
    iq = _rrc_burst(3.1, -0.004, 7)
    names = ["spectral_lines", "power_lines"]
    fs._start_worker("coherence", "lines", None, names, None)
    got = fs._worker_row((iq, None, None, None))
    want = fs.candidate_row(fs.burst_views(iq, "coherence", "lines"), names)
    assert got[1] == want[1] and np.array_equal(got[0], want[0])


def test_the_fast_em_candidate_fits_only_the_served_top_classes():
    """Served probabilities that rank 16QAM, 64QAM and 8PSK first: those three are scored by
    their fits (16QAM best), the other nine all sit ABSENT_MARGIN under the worst of them;
    without served probabilities there is no candidate."""
    from rfclassify.labels import LABELS

    iq = _rrc_burst(4.3, 0.013, 6)
    served = np.full(len(LABELS), 0.01)
    for name, p in (("16QAM", 0.5), ("64QAM", 0.3), ("8PSK", 0.1)):
        served[LABELS.index(name)] = p
    assert fs.em_channel_fast_features(fs.burst_views(iq, "coherence", "lines")) is None
    got = fs.em_channel_fast_features(fs.burst_views(iq, "coherence", "lines", served=served))
    # the network's ranking, where collect has it, picks the same way from its own probabilities
    by_network = fs.FEATURES["em_channel_fast_network"][1]
    assert by_network(fs.burst_views(iq, "coherence", "lines", served=served)) is None
    np.testing.assert_array_equal(by_network(fs.burst_views(iq, "coherence", "lines", network=served)), got)
    fitted = [fs.HIGH_ORDER_LABELS.index(c) for c in ("8PSK", "16QAM", "64QAM")]
    rest = np.setdiff1d(np.arange(12), fitted)
    unit = got[:12]
    assert fs.HIGH_ORDER_LABELS[int(np.argmax(unit))] == "16QAM"
    assert np.allclose(unit[rest], unit[fitted].min() - 0.1)
    two = fs.em_channel_fast_two_starts_features(fs.burst_views(iq, "coherence", "lines", served=served))
    assert two.shape == (24,) and fs.HIGH_ORDER_LABELS[int(np.argmax(two[:12]))] == "16QAM"


def _psk(order: int, n: int, rng: np.random.Generator) -> np.ndarray:
    return np.exp(2j * np.pi * rng.integers(0, order, n) / order)


@pytest.mark.parametrize("label", ["8PSK", "16QAM", "64QAM", "32APSK", "32PSK"])
def test_the_glrt_picks_the_true_class_of_clean_symbols_through_a_residual_carrier(label):
    """Clean symbols of a class, turned by a residual carrier the fit must find: the soft
    likelihood scores the true class best (0) and every other class below it."""
    from rfclassify.dsp.class_equalizer import class_alphabets
    rng = np.random.default_rng(len(label))
    n = 200
    alphabet = class_alphabets(label)[0]
    y = alphabet[rng.integers(0, alphabet.size, n)] * np.exp(1j * (2 * np.pi * 0.004 * np.arange(n) + 0.3))
    y = y + 0.01 * (rng.standard_normal(n) + 1j * rng.standard_normal(n))
    s = fs.glrt_class_scores(y * 2.5)
    assert s.shape == (len(fs.HIGH_ORDER_LABELS),)
    assert s[fs.HIGH_ORDER_LABELS.index(label)] == 0.0
    assert np.sum(s == 0.0) == 1


def test_the_glrt_tells_32psk_from_16psk_at_high_snr_where_its_noise_grid_must_reach():
    """At 30 dB a free frequency let 16PSK fit 32PSK symbols as well as 32PSK did while the
    noise shares tried stopped at 0.02 (17 dB): both alphabets were blurred the same. The grid
    reaches 35 dB now, and 32PSK wins with the carrier fitted as with it known."""
    rng = np.random.default_rng(5)
    n = 114
    y = _psk(32, n, rng) + 0.03 * (rng.standard_normal(n) + 1j * rng.standard_normal(n))
    assert fs.GLRT_NOISE.min() < 1e-3
    for carrier in (None, (np.zeros(21), np.zeros(21))):
        s = fs.glrt_class_scores(y, carrier)
        assert int(np.argmax(s)) == fs.HIGH_ORDER_LABELS.index("32PSK")


def test_the_glrt_has_no_scores_for_too_few_symbols():
    from rfclassify.dsp.class_equalizer import MIN_SYMBOLS
    assert fs.glrt_class_scores(np.ones(MIN_SYMBOLS - 1, complex)) is None
