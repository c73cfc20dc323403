"""benchmarks/em_channel_probe.py: the EM channel receiver (rfclassify.dsp.em_channel) at a
known clock, started per alphabet from its best phase."""

from __future__ import annotations

import numpy as np

from benchmark_modules import load_benchmark

em = load_benchmark("em_channel_probe")
from rfclassify.dsp import class_equalizer as ce  # noqa: E402
from rfclassify.dsp import em_channel  # noqa: E402
from rfclassify.labels import HIGH_ORDER_LABELS  # noqa: E402
from test_dsp_em_channel import _burst  # noqa: E402 (the same draw of a faded burst)


def test_the_known_clock_start_reads_64qam_through_three_paths():
    """The probe's known-clock receiver: each alphabet started from the matched filter turned
    by its best phase (phase_start; the phase unknown to it), then em_channel's fit. Three
    paths over two symbols at 25 dB, the burst turned by a phase: 64QAM's start lies within
    a quarter turn's grid step of the true symbols' phase, and the decision is 64QAM."""
    sps = 2
    h = np.zeros(em_channel.EM_TAPS, complex)
    h[[0, 2, 4]] = [0.85, 0.45j, -0.25]
    burst, s, _, _ = _burst("64QAM", h, sps, 25.0, 2)
    burst = burst.turned(np.full(burst.r.size, np.exp(0.3j)))
    bank = ce.alphabet_bank(HIGH_ORDER_LABELS)
    a = int(np.flatnonzero(bank.owner == HIGH_ORDER_LABELS.index("64QAM"))[0])
    response = np.convolve(np.convolve(burst.p, h), burst.p[::-1])
    peak = int(np.argmax(np.abs(response)))
    mf = np.convolve(burst.r, burst.p[::-1])
    at = burst.offsets + peak
    y = np.where((at >= 0) & (at < mf.size), mf[np.clip(at, 0, mf.size - 1)], 0)
    own = (at >= 0) & (at < burst.r.size)
    starts = em.phase_start(y, bank)
    turn = np.angle(np.vdot(s[own], starts[a][own]))       # the start's phase against the true symbols
    step = 2 * np.pi / bank.symmetry[a]
    assert abs((turn + step / 2) % step - step / 2) < step / em.START_PHASES + 0.05
    totals = em_channel.em_totals(burst, own, bank, starts)
    assert HIGH_ORDER_LABELS[em.class_decision(totals["EM, unit power"], bank)] == "64QAM"
