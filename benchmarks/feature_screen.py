"""Screen candidate burst features against the served model in minutes, before any refit.

A refiner input is worth the H200's examples, a refit and three served comparisons only if
it tells the served model's errors apart. This asks that first, on a dataset's own bursts:
`collect` serves a sample of them once (the model as shipped, ONNX Runtime, refiners and
DC pass) and keeps each burst's served probabilities, SNR estimate and candidate features
computed from the same clocked symbols the refiner reads (FEATURES); `score` fits a
multinomial logistic regression on the served log-probabilities and SNR estimate, five-fold
cross-validated, then the same with each candidate added, and prints the accuracy of each
beside the served answer, paired against the regression without candidates (+- one standard
error), over all bursts, by SNR range and on faded and unfaded bursts. A candidate that does
not move the regression here gives a refit nothing to use. (The thirtieth session chose the
power lines by such a check, +4.4 points on the 16PSK / 32PSK bursts, and they were +0.3 /
+0.5 served; the candidates below were screened in the thirty-fifth: docs/model.md.)

    PYTHONPATH=. python3 benchmarks/feature_screen.py collect FILE.h5 --out CACHE.npz \
        [--model-dir models] [--classes high-order|all] [--snr-min 10 --snr-max 30] [--per-cell 20] \
        [--features lattice,equalizer_raw,...] [--torch-arms W.pt --features arm_plain,arm_learned] \
        [--workers N]
    PYTHONPATH=. python3 benchmarks/feature_screen.py score CACHE.npz [--json OUT.json]

The candidates (each a function of one burst's views, returning a fixed-length vector):
- lattice: for each square or cross QAM (16 to 256), the strongest lattice line of the
  clocked symbols at unit power, max over grid rotation and -12..+15 % of the QAM's line:
  (|E exp(i w Re v)| + |E exp(i w Im v)|) / 2, which is 1 for clean symbols on the odd grid
  of spacing pi / w; of the raw and the blindly filtered symbols, then after a least-squares
  filter fitted to the nearest grid points (a decision-directed filter that needs no
  alphabet, only its spacing). Log, 15 values.
- equalizer_raw / equalizer_blind: the class equalizer's per-class scores
  (rfclassify.dsp.class_equalizer.class_scores over the refiner's classes, each less the
  burst's best) started from the raw clocked symbols / from the class-blind filter's output
  (with that filter's fourth moments).
- spectral_lines: the strongest line of x, x^2, x^4 and |x|^2 of the raw burst over its
  median bin and the mean of the next seven over it (log): carriers and rate lines at low SNR.
- directed_reading: the refiner's sequence network reading the blind filter's output after
  the grid-directed filter above (at the strongest lattice line's QAM), and that line after
  it: the QAM analogue of the constant-modulus view the power lines read.
- symmetric_reading / timing_reading: the sequence network's mean log-probabilities over
  the symbols and their conjugate and 90-degree turns / over the symbols clocked at the
  found instants and a quarter symbol either side (readings less noisy at low SNR?).
- power_lines: the refiner's own power lines (rfclassify.dsp.power_lines), to screen a model
  without them and to calibrate the screen: against the model before them they gain what
  their refit served, against the shipped model nothing.
- arm_<name> (with --torch-arms W.pt): each sequence network saved by
  benchmarks/learned_equalizer_probe.py, its log-probabilities for the clocked symbols
  (thirty-sixth session: a network with a learned equalizer in front adds nothing).
- em_channel: rfclassify.dsp.em_channel's receiver at the blind clock (per alphabet a
  channel estimate by expectation-maximization and the MMSE filter built from it), each
  class's score less the best, at unit power and by output likelihood (thirty-seventh
  session: +2.2 +- 0.4 points on the high-order bursts at 10..30 dB, the most any candidate
  has screened; 330-350 ms a burst on this 2-core x86, so `collect --workers`).
- em_channel_fast: the same for the served answer's EM_FAST_CLASSES top classes only, with
  EM_FAST_PASSES passes (+2.1 +- 0.4 there at 44-48 ms a burst).
- em_channel_fast_two_starts: em_channel_fast with a second start per alphabet from the
  class-blind filter's output (reads more alone, adds no more fused: +1.9 +- 0.4).
- em_channel_fast_filtered: em_channel_fast started from the class-blind filter's output
  alone (em_channel.START_FILTERED; forty-second session).
- em_channel_fast4, em_channel_fast_network, em_channel_fast_network4: em_channel_fast for
  the served answer's top 4, the network's own top 3 (collect runs the network alone too)
  or its top 4 (fortieth session: the served answer's top 3 screened +0.74 +- 0.18 over the
  network's; served as `fit-refiner --em-ranker`, it did not carry over).
- glrt: per class, an exact soft likelihood of the clocked symbols with no equalizer, the
  carrier (class_equalizer.carrier_fit), noise and gain fitted per alphabet
  (glrt_class_scores; fifty-fourth session: +0.3 +- 0.6 points at -8..8 dB, nothing;
  benchmarks/carrier_price_probe.md uses it to price the carrier).
- channel_oracle: the channel the file recorded (multipath, delay spread, fading, Doppler,
  rate, roll-off, DC offset, PA, phase noise), which no receiver has: the most any input
  describing the burst's conditions could add. Scored also crossed with the served outputs.
A measurement tool, not a test; tests/test_bench_feature_screen.py checks its parts.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import math
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import minimize

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rfclassify.dsp import em_channel  # noqa: E402
from rfclassify.dsp import class_equalizer as ce  # noqa: E402
from rfclassify.dsp.class_equalizer import class_scores, filter_inputs  # noqa: E402
from rfclassify.dsp.power_lines import N_FEATURES as N_POWER_LINES  # noqa: E402
from rfclassify.dsp.power_lines import power_line_features  # noqa: E402
from rfclassify.dsp.sequence_fronts import blind_filtered, front_sequence  # noqa: E402
from rfclassify.dsp.symbol_clock import BLIND_ROLLOFF, blind_symbols, rrc_lookup, symbols_at  # noqa: E402
from rfclassify.dsp.symbol_sequence import clocked_symbols  # noqa: E402
from rfclassify.data.reader import DatasetReader  # noqa: E402
from rfclassify.labels import HIGH_ORDER_LABELS, LABELS  # noqa: E402

QAMS = ("16QAM", "32QAM", "64QAM", "128QAM", "256QAM")
QAM_ENERGY = {"16QAM": 10, "32QAM": 20, "64QAM": 42, "128QAM": 82, "256QAM": 170}  # mean |s|^2 on the odd grid
QAM_EDGE = {"16QAM": 3, "32QAM": 5, "64QAM": 7, "128QAM": 11, "256QAM": 15}       # largest odd coordinate
LATTICE_TURNS = np.deg2rad(np.arange(0.0, 90.0, 2.0))   # grid rotations searched (a lattice repeats every 90 degrees)
LATTICE_SPAN = (0.88, 1.15)      # of each QAM's line frequency searched (noise power shrinks the grid)
LATTICE_STEPS = 10               # frequencies per QAM
LATTICE_BIN = 0.01               # histogram bin of a unit-power coordinate before the transform
LATTICE_EDGE = 3.0               # coordinates beyond +-this are folded into the last bins
REFINE_TURN_DEG, REFINE_FREQ = 1.0, 0.015   # the exact search around the coarse maximum: +- this turn and share
DIRECTED_TAPS, DIRECTED_PASSES = 9, 8
SPECTRAL_NFFT = 8192
FLOOR = 1e-4
SNR_RANGES = ((-20.0, -10.0), (-8.0, 8.0), (10.0, 30.0))
MULTIPATH_SPREAD = 0.1           # rms delay spread, in symbols, from which a faded burst counts as multipath
FOLDS = 5
L2 = 1e-3                        # on the standardized inputs' weights
EM_FAST_CLASSES = em_channel.FAST_CLASSES   # em_channel_fast: the served answer's top classes fitted
EM_FAST_PASSES = em_channel.FAST_PASSES     # and its annealed and final passes


@dataclass
class BurstViews:
    """One raw burst, the refiner's clocked symbols of it (None where it has none), their blind
    filter's output, and the channel the file recorded for it (None where it recorded none)."""

    iq: np.ndarray
    symbols: np.ndarray | None
    filtered: tuple[np.ndarray, float, float] | None
    channel: np.void | None = None
    reader: Any = None           # the refiner's sequence network (rfclassify.engine.sequence_net), if any
    found: Any = None            # the blind clock's BlindSymbols the symbols came from
    carrier: str = "lines"       # their second carrier pass
    served: np.ndarray | None = None   # the served probabilities over LABELS, where collect has them
    network: np.ndarray | None = None  # the network's own (no refiners, no DC pass), where collect has them

    @functools.cached_property
    def unit_blind(self) -> np.ndarray:
        """The blind filter's output at unit power (the clocked symbols where it gave none)."""
        return _unit(self.filtered[0] if self.filtered is not None else self.symbols)

    @functools.cached_property
    def blind_lattice(self) -> tuple[np.ndarray, list[tuple[float, float]]]:
        """lattice_lines of unit_blind, once for every candidate that reads them."""
        return lattice_lines(self.unit_blind)


def in_multipath(fading_type: np.ndarray, delay_spread_samples: np.ndarray, sps: np.ndarray) -> np.ndarray:
    """Faded with an rms delay spread of MULTIPATH_SPREAD symbols or more."""
    return (np.asarray(fading_type) > 0) & (np.asarray(delay_spread_samples) / np.asarray(sps) >= MULTIPATH_SPREAD)


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.sqrt(max(float(np.mean(np.abs(v) ** 2)), 1e-30))


def lattice_frequencies() -> np.ndarray:
    """(len(QAMS), LATTICE_STEPS) line frequencies searched: pi sqrt(E) of each QAM at unit power, spread."""
    centres = np.pi * np.sqrt(np.array([QAM_ENERGY[q] for q in QAMS], float))
    return centres[:, None] * np.geomspace(*LATTICE_SPAN, LATTICE_STEPS)[None, :]


def lattice_lines(v: np.ndarray) -> tuple[np.ndarray, list[tuple[float, float]]]:
    """Per QAM, the strongest lattice line of symbols v (brought to unit power) over LATTICE_TURNS
    and its frequencies, and where it is (turn, frequency). The characteristic function of
    each coordinate is read from its histogram, so the search costs a few milliseconds."""
    v = _unit(np.asarray(v, np.complex128))
    n = v.size
    freq = lattice_frequencies()
    bins = int(round(2 * LATTICE_EDGE / LATTICE_BIN))
    centres = -LATTICE_EDGE + LATTICE_BIN * (np.arange(bins) + 0.5)
    kernel = np.exp(1j * np.outer(centres, freq.ravel()))
    turned = v[None, :] * np.exp(-1j * LATTICE_TURNS)[:, None]
    coords = np.concatenate([turned.real, turned.imag])
    at = np.clip(((coords + LATTICE_EDGE) / LATTICE_BIN).astype(np.int64), 0, bins - 1)
    rows = np.arange(coords.shape[0])[:, None] * bins
    hist = np.bincount((at + rows).ravel(), minlength=coords.shape[0] * bins).reshape(coords.shape[0], bins)
    phi = np.abs(hist @ kernel) / n
    t = LATTICE_TURNS.size
    line = 0.5 * (phi[:t] + phi[t:])
    best, where = np.empty(len(QAMS)), []
    for k in range(len(QAMS)):
        block = line[:, k * LATTICE_STEPS:(k + 1) * LATTICE_STEPS]
        i, j = np.unravel_index(int(np.argmax(block)), block.shape)
        best[k], turn, f = _refined(v, float(LATTICE_TURNS[i]), float(freq[k, j]))
        where.append((turn, f))
    return best, where


def grid_line(z: np.ndarray, freq: float) -> float:
    """The lattice line of z at one frequency: (|E exp(i freq Re z)| + |E exp(i freq Im z)|) / 2."""
    return 0.5 * (abs(np.exp(1j * freq * z.real).mean()) + abs(np.exp(1j * freq * z.imag).mean()))


def _refined(v: np.ndarray, turn: float, freq: float) -> tuple[float, float, float]:
    """The lattice line of v at the finer turns and frequencies around a coarse maximum (the
    coarse steps are too wide for 256QAM's outer points), evaluated exactly: (line, turn, freq)."""
    turns = turn + np.deg2rad(REFINE_TURN_DEG) * np.linspace(-1.0, 1.0, 9)
    freqs = freq * (1.0 + REFINE_FREQ * np.linspace(-1.0, 1.0, 7))
    x = v[None, :] * np.exp(-1j * turns)[:, None]                                   # (turns, n)
    re = np.abs(np.exp(1j * freqs[:, None, None] * x.real[None]).mean(-1))          # (freqs, turns)
    im = np.abs(np.exp(1j * freqs[:, None, None] * x.imag[None]).mean(-1))
    line = 0.5 * (re + im)
    j, i = np.unravel_index(int(np.argmax(line)), line.shape)
    return float(line[j, i]), float(turns[i]), float(freqs[j])


def grid_directed(v: np.ndarray, turn: float, freq: float, edge: int) -> np.ndarray:
    """v (unit power) turned by -turn through a least-squares filter refitted DIRECTED_PASSES
    times to its outputs' nearest points of the odd grid of spacing pi / freq (coordinates
    clipped to +-edge spacings): a decision-directed filter that knows a spacing, not an alphabet."""
    v = v * np.exp(-1j * turn)
    if v.size < 4 * DIRECTED_TAPS:
        return v
    d = np.pi / freq
    x = filter_inputs(v, DIRECTED_TAPS)
    solve = np.linalg.pinv(x)
    z = v
    for _ in range(DIRECTED_PASSES):
        re = np.clip(2 * np.floor(z.real / (2 * d)) + 1, -edge, edge) * d
        im = np.clip(2 * np.floor(z.imag / (2 * d)) + 1, -edge, edge) * d
        z = x @ (solve @ (re + 1j * im))
    return z


def lattice_features(views: BurstViews) -> np.ndarray | None:
    if views.symbols is None:
        return None
    raw, _ = lattice_lines(views.symbols)
    blind, where = views.blind_lattice
    directed = np.empty(len(QAMS))
    for k, (q, (turn, freq)) in enumerate(zip(QAMS, where)):
        directed[k] = grid_line(grid_directed(views.unit_blind, turn, freq, QAM_EDGE[q]), freq)
    return np.log(np.maximum(np.concatenate([raw, blind, directed]), FLOOR))


def directed_reading_features(views: BurstViews) -> np.ndarray | None:
    """The sequence network's log-probabilities (less their best) of the blind filter's output
    after the grid-directed filter at the strongest lattice line's QAM and spacing, then that
    line after the filter (log): a view that restores a QAM's grid as the constant-modulus
    filter restores a PSK's circle, read by the network that reads the others."""
    net = views.reader
    if views.symbols is None or net is None:
        return None
    lines, where = views.blind_lattice
    k = int(np.argmax(lines))
    turn, freq = where[k]
    z = grid_directed(views.unit_blind, turn, freq, QAM_EDGE[QAMS[k]])
    lp = _reading(net, z)
    if lp is None:
        return None
    return np.concatenate([lp - lp.max(), [np.log(max(grid_line(z, freq), FLOOR))]])


def _relative_scores(y: np.ndarray) -> np.ndarray | None:
    with np.errstate(all="ignore"):
        s = class_scores(y, HIGH_ORDER_LABELS)
    return None if s is None or not np.all(np.isfinite(s)) else s - s.max()


def equalizer_raw_features(views: BurstViews) -> np.ndarray | None:
    return None if views.symbols is None else _relative_scores(views.symbols)


def equalizer_blind_features(views: BurstViews) -> np.ndarray | None:
    if views.symbols is None or views.filtered is None:
        return None
    s = _relative_scores(views.filtered[0])
    return None if s is None else np.concatenate([s, views.filtered[1:]])


def spectral_line_features(views: BurstViews) -> np.ndarray:
    x = _unit(np.asarray(views.iq, np.complex128))
    a = np.abs(x) ** 2
    out = []
    for v in (x, x * x, x ** 4, a - a.mean()):
        p = np.sort(np.abs(np.fft.fft(v, max(SPECTRAL_NFFT, v.size))) ** 2)
        med = max(float(np.median(p)), 1e-30)
        out += [np.log(max(p[-1] / med, FLOOR)), np.log(max(p[-8:-1].mean() / med, FLOOR))]
    return np.array(out)


def _reading(net: Any, y: np.ndarray | None) -> np.ndarray | None:
    seq = None if y is None else front_sequence(y, net.front, net.labels)
    return None if seq is None else net.log_probs(seq).astype(float)


def _mean_reading(net: Any, views: list[np.ndarray | None]) -> np.ndarray | None:
    """The mean of the network's log-probabilities over the views it can read, less its best."""
    readings = [r for r in (_reading(net, v) for v in views) if r is not None]
    if not readings:
        return None
    m = np.mean(readings, 0)
    return m - m.max()


def symmetric_reading_features(views: BurstViews) -> np.ndarray | None:
    """The sequence network's mean log-probabilities over the clocked symbols, their conjugate
    (spectral inversion) and both turned by 90 degrees: symmetries of every class it reads,
    so the mean is a less noisy reading of the same symbols (test-time augmentation)."""
    y, net = views.symbols, views.reader
    if y is None or net is None:
        return None
    return _mean_reading(net, [y, np.conj(y), 1j * y, 1j * np.conj(y)])


def timing_reading_features(views: BurstViews) -> np.ndarray | None:
    """The sequence network's mean log-probabilities over the symbols clocked at the found
    instants and a quarter of a symbol either side: at low SNR the timing phase of the rate
    line is noisy, and a reading that does not hinge on it may be steadier."""
    found, net = views.found, views.reader
    if found is None or net is None or views.symbols is None:
        return None
    pulse = rrc_lookup(BLIND_ROLLOFF)
    shifted = [views.symbols]
    for shift in (-0.25, 0.25):
        t = found.timing_samples + shift * found.sps
        moved = found._replace(symbols=symbols_at(found.baseband, found.sps, BLIND_ROLLOFF, t, pulse=pulse),
                               timing_samples=t)
        shifted.append(clocked_symbols(moved, carrier=views.carrier))
    return _mean_reading(net, shifted)


def power_lines_features(views: BurstViews) -> np.ndarray | None:
    """The refiner's own power lines (rfclassify.dsp.power_lines): for screening a model
    without them, and for calibrating the screen against their served gain."""
    if views.symbols is None:
        return None
    return power_line_features(views.symbols, None if views.filtered is None else views.filtered[0])


def channel_oracle_features(views: BurstViews) -> np.ndarray | None:
    """The recorded channel, as no receiver knows it: whether the burst is in multipath (faded
    with an rms delay spread of 0.1 symbols or more), that spread in symbols, Rayleigh,
    Rician and its K factor, log10 of the Doppler per symbol, log2 of the samples per symbol,
    the roll-off, the receiver DC offset (whether, and its level), PA compression (whether,
    and its backoff) and the phase noise. What any channel-state input could add at most."""
    c = views.channel
    if c is None:
        return None

    def get(name: str, absent: float = 0.0) -> float:
        v = float(c[name])
        return v if np.isfinite(v) else absent
    sps = get("samples_per_symbol", 1.0)
    fading = int(c["fading_type"])
    spread = get("delay_spread_samples")
    dc = get("dc_offset_db", -100.0)
    backoff = get("pa_backoff_db")
    return np.array([in_multipath(fading, spread, sps), spread / sps, fading == 1, fading == 2,
                     get("k_factor_db") if fading == 2 else 0.0,
                     np.log10(get("doppler_cyc_per_sample") * sps + 1e-9), np.log2(sps), get("rolloff"),
                     dc > -100.0, max(dc, -50.0), backoff > 0, backoff,
                     get("phase_noise_deg_per_sqrt_sample")], float)


def _sibling(name: str) -> Any:
    """Another benchmark module of this folder, imported (benchmarks/ put on sys.path once)."""
    folder = str(Path(__file__).resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(name)


def _em_scores(views: BurstViews, **options: Any) -> np.ndarray | None:
    if views.found is None:
        return None
    found = views.found
    s = em_channel.blind_class_scores(found.baseband, found.sps, found.timing_samples, HIGH_ORDER_LABELS,
                                      dc_carrier=found.carrier, **options)
    return None if s is None else np.concatenate([s[em_channel.UNIT_POWER], s[em_channel.OUTPUT_LIKELIHOOD]])


def em_channel_features(views: BurstViews) -> np.ndarray | None:
    """rfclassify.dsp.em_channel's class scores at the blind clock: per alphabet, the
    channel fitted by expectation-maximization and the MMSE receiver built from it; each
    class's log-likelihood less the best, scored at unit power and by the outputs' own
    likelihood (24 values)."""
    return _em_scores(views)


def em_channel_fast_features(views: BurstViews, fit_start: str = em_channel.START_MATCHED, ranking: str = "served",
                             count: int = EM_FAST_CLASSES) -> np.ndarray | None:
    """em_channel at a fraction of its cost: only the `count` high-order classes that the
    `ranking` probabilities (views.served or views.network) rate highest are fitted, with
    EM_FAST_PASSES passes (None without those probabilities); fit_start:
    em_channel.blind_class_scores'."""
    probs = getattr(views, ranking)
    if probs is None:
        return None
    high = np.array([LABELS.index(c) for c in HIGH_ORDER_LABELS])
    top = em_channel.top_classes(probs[high], count)
    return _em_scores(views, classes=top, passes=EM_FAST_PASSES, fit_start=fit_start)


def em_channel_fast_two_starts_features(views: BurstViews) -> np.ndarray | None:
    """em_channel_fast with a second start per alphabet from the class-blind filter's output."""
    return em_channel_fast_features(views, fit_start=em_channel.START_BOTH)


def em_channel_fast_filtered_features(views: BurstViews) -> np.ndarray | None:
    """em_channel_fast started from the class-blind filter's output alone (START_FILTERED)."""
    return em_channel_fast_features(views, fit_start=em_channel.START_FILTERED)


GLRT_NOISE = np.geomspace(3e-4, 0.8, 24)   # noise shares of the symbols' power the glrt candidate tries (35..1 dB)


def mixture_loglik(z: np.ndarray, points: np.ndarray, share: float) -> np.ndarray:
    """The mean over the last axis (the symbols) of log((1/M) sum_m exp(-|g z - a_m|^2 / v) /
    (pi v)) + log g^2: the likelihood of unit-power symbols z under an alphabet's M points
    `points` when `share` of their power is noise (v = share g^2) and the signal's power
    1 - share is brought to 1 (g^2 = 1 / (1 - share)); the exact mixture over every point."""
    gain2 = 1.0 / (1.0 - share)
    var = share * gain2
    e = -np.abs(z[..., None] * math.sqrt(gain2) - points) ** 2 / var
    peak = e.max(axis=-1)
    per = peak + np.log(np.mean(np.exp(e - peak[..., None]), axis=-1))
    return per.mean(axis=-1) - math.log(math.pi * var) + math.log(gain2)


def alphabet_logliks(y: np.ndarray, bank: Any, freq: np.ndarray, phase: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
    """((A,) mixture_loglik of unit-power symbols y under each alphabet of `bank`, y turned
    by that alphabet's carrier (freq cycles a symbol, phase), at the best noise share of
    GLRT_NOISE; (A,) that share)."""
    t = np.arange(y.size)
    best, shares = np.empty(len(bank.sizes)), np.empty(len(bank.sizes))
    for a in range(len(bank.sizes)):
        z = y * np.exp(-1j * (2 * np.pi * freq[a] * t + phase[a]))
        lls = [float(mixture_loglik(z, bank.points[a, :bank.sizes[a]], share)) for share in GLRT_NOISE]
        k = int(np.argmax(lls))
        best[a], shares[a] = lls[k], GLRT_NOISE[k]
    return best, shares


def glrt_class_scores(y: np.ndarray, carrier: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray | None:
    """(12,) each high-order class's soft log-likelihood per symbol of unit-power symbols y,
    less the best: per alphabet, y turned by its carrier_fit (or `carrier`, (A,) frequencies
    in cycles a symbol and phases), then alphabet_logliks (the exact mixture over all of its
    points, the signal scaled to unit power under each noise share of GLRT_NOISE and the best
    share kept: a generalized likelihood ratio over the noise, the carrier and the gain); a
    class is its best alphabet. None for fewer than class_equalizer.MIN_SYMBOLS symbols."""
    y = np.asarray(y, complex)
    if y.size < ce.MIN_SYMBOLS:
        return None
    y = _unit(y[:ce.MAX_SYMBOLS])
    bank = ce.alphabet_bank(HIGH_ORDER_LABELS)
    freq, phase = ce.carrier_fit(y, bank) if carrier is None else carrier
    per_alphabet, _ = alphabet_logliks(y, bank, freq, phase)
    best = np.full(len(HIGH_ORDER_LABELS), -np.inf)
    np.maximum.at(best, bank.owner, per_alphabet)
    return best - best.max()


def glrt_features(views: BurstViews) -> np.ndarray | None:
    """glrt_class_scores of the refiner's clocked symbols (12 values): a soft likelihood with
    no equalizer, where the refiner's scores decide by hard decisions (the class equalizer,
    EM's unit-power score) or are gated to 5 dB and more (EM)."""
    return None if views.symbols is None else glrt_class_scores(views.symbols)


#: candidates that describe the burst's conditions rather than its class: scored also with their
#: first two columns multiplied into the served log-probabilities (a linear fusion can only
#: weigh its other inputs by them that way)
CONTEXT = ("channel_oracle",)

FEATURES: dict[str, tuple[int, Callable[[BurstViews], np.ndarray | None]]] = {
    "lattice": (3 * len(QAMS), lattice_features),
    "equalizer_raw": (len(HIGH_ORDER_LABELS), equalizer_raw_features),
    "equalizer_blind": (len(HIGH_ORDER_LABELS) + 2, equalizer_blind_features),
    "spectral_lines": (8, spectral_line_features),
    "channel_oracle": (13, channel_oracle_features),
    "directed_reading": (len(HIGH_ORDER_LABELS) + 1, directed_reading_features),
    "power_lines": (N_POWER_LINES, power_lines_features),
    "symmetric_reading": (len(HIGH_ORDER_LABELS), symmetric_reading_features),
    "timing_reading": (len(HIGH_ORDER_LABELS), timing_reading_features),
    "em_channel": (2 * len(HIGH_ORDER_LABELS), em_channel_features),
    "em_channel_fast": (2 * len(HIGH_ORDER_LABELS), em_channel_fast_features),
    "em_channel_fast_two_starts": (2 * len(HIGH_ORDER_LABELS), em_channel_fast_two_starts_features),
    "em_channel_fast_filtered": (2 * len(HIGH_ORDER_LABELS), em_channel_fast_filtered_features),
    # which classes the refiner's EM fit should take (thirty-ninth session's item 1): the
    # served answer's top four, the network's top three (what the shipped refiner fits) or four
    "em_channel_fast4": (2 * len(HIGH_ORDER_LABELS), functools.partial(em_channel_fast_features, count=4)),
    "em_channel_fast_network": (2 * len(HIGH_ORDER_LABELS),
                                functools.partial(em_channel_fast_features, ranking="network")),
    "em_channel_fast_network4": (2 * len(HIGH_ORDER_LABELS),
                                 functools.partial(em_channel_fast_features, ranking="network", count=4)),
    "glrt": (len(HIGH_ORDER_LABELS), glrt_features),
}


def register_torch_arms(path: Path) -> list[str]:
    """Add each sequence network saved by benchmarks/learned_equalizer_probe.py (``--save``)
    as a candidate ``arm_<name>``: its log-probabilities over the 12 classes for the clocked
    symbols' front (torch on the CPU; a probe's networks, not the product's numpy ones).
    Returns the names added."""
    import torch

    make_arms = _sibling("learned_equalizer_probe").make_arms
    from rfclassify.model.sequence_fit import SequenceFitConfig

    saved = torch.load(path, map_location="cpu", weights_only=True)
    built = make_arms(SequenceFitConfig(), int(saved["taps"]), int(saved["iterations"]))
    names = []
    for arm, state in saved["arms"].items():
        model = built[arm]
        model.load_state_dict(state)
        model.eval()

        def reading(views: BurstViews, model=model) -> np.ndarray | None:
            if views.symbols is None:
                return None
            seq = front_sequence(views.symbols, "clocked", HIGH_ORDER_LABELS)
            if seq is None:
                return None
            with torch.no_grad():
                x = torch.from_numpy(seq.astype(np.float16).astype(np.float32))[None]
                out = torch.log_softmax(model(x, torch.ones(1, 1, x.shape[2])), 1)[0].numpy()
            return out.astype(float)

        FEATURES[f"arm_{arm}"] = (len(HIGH_ORDER_LABELS), reading)
        names.append(f"arm_{arm}")
    return names


def burst_views(iq: np.ndarray, rate_rule: str, carrier: str, channel: np.void | None = None,
                reader: Any = None, served: np.ndarray | None = None,
                network: np.ndarray | None = None) -> BurstViews:
    """The refiner's clock and symbols of one burst (its rate rule and carrier pass) and their blind filter."""
    found = blind_symbols(np.asarray(iq, np.complex64), rate_rule)
    y = clocked_symbols(found, carrier=carrier)
    return BurstViews(np.asarray(iq), y, None if y is None else blind_filtered(y), channel, reader, found, carrier,
                      served, network)


def candidate_row(views: BurstViews, names: list[str]) -> tuple[np.ndarray, bool]:
    """The named candidates of one burst side by side, and whether all were there and finite
    (zeros where one is not)."""
    parts, ok = [], True
    for name in names:
        size, fn = FEATURES[name]
        with np.errstate(all="ignore"):
            v = fn(views)
        if v is None or np.shape(v) != (size,) or not np.all(np.isfinite(v)):
            ok, v = False, np.zeros(size)
        parts.append(np.asarray(v, float))
    return np.concatenate(parts) if parts else np.zeros(0), ok


# ----------------------------------------------------------------------------- the regression

def _softmax_fit(x: np.ndarray, y: np.ndarray, k: int) -> np.ndarray:
    """(d + 1, k) weights of an L2-penalized multinomial logistic regression (L-BFGS)."""
    n, d = x.shape
    xb = np.hstack([x, np.ones((n, 1))])
    onehot = np.eye(k)[y]

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        w = w.reshape(d + 1, k)
        z = xb @ w
        z -= z.max(1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(1, keepdims=True))
        p = np.exp(logp)
        reg = L2 * float((w[:-1] ** 2).sum())
        grad = xb.T @ (p - onehot) / n
        grad[:-1] += 2 * L2 * w[:-1]
        return -float((onehot * logp).sum()) / n + reg, grad.ravel()

    res = minimize(loss, np.zeros((d + 1) * k), jac=True, method="L-BFGS-B", options={"maxiter": 500})
    return res.x.reshape(d + 1, k)


def cross_validated(x: np.ndarray, y: np.ndarray, k: int, folds: int = FOLDS, seed: int = 0) -> np.ndarray:
    """Whether each row's held-out prediction (its fold's fit on the others, standardized on
    them) is its label y (0..k-1)."""
    fold = np.random.default_rng(seed).integers(0, folds, len(y))
    right = np.zeros(len(y), bool)
    for f in range(folds):
        train, test = fold != f, fold == f
        if not test.any():
            continue
        mu, sd = x[train].mean(0), x[train].std(0) + 1e-6
        w = _softmax_fit((x[train] - mu) / sd, y[train], k)
        xt = np.hstack([(x[test] - mu) / sd, np.ones((int(test.sum()), 1))])
        right[test] = np.argmax(xt @ w, 1) == y[test]
    return right


def paired(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Mean of b - a in points, and its standard error."""
    d = b.astype(float) - a.astype(float)
    se = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else 0.0
    return 100 * float(d.mean()), 100 * se


def score(cache: dict[str, np.ndarray]) -> dict:
    """The table of `score`: served, the regression on the served outputs, and with each candidate."""
    classes = tuple(str(c) for c in cache["classes"])
    index = [LABELS.index(c) for c in classes]
    truth = np.array([classes.index(LABELS[t]) for t in cache["truth"]])
    base = np.hstack([np.log(np.maximum(cache["probs"][:, index], 1e-9)), cache["snr_estimate"][:, None]])
    names = [str(n) for n in cache["feature_names"]]
    sizes = ([int(k) for k in cache["feature_sizes"]] if "feature_sizes" in cache
             else [FEATURES[n][0] for n in names])          # caches written before the sizes were kept
    starts = np.cumsum([0] + sizes)
    arms = {"served": cache["probs"].argmax(1) == np.array(index)[truth],
            "regression": cross_validated(base, truth, len(classes))}
    lp = base[:, :-1]
    for name, a, b in zip(names, starts[:-1], starts[1:]):
        f = cache["features"][:, a:b]
        arms[f"+ {name}"] = cross_validated(np.hstack([base, f]), truth, len(classes))
        if name in CONTEXT:
            crossed = [lp * f[:, j:j + 1] for j in range(2)]
            arms[f"+ {name} x served"] = cross_validated(np.hstack([base, f] + crossed), truth, len(classes))
    if len(names) > 1:
        arms["+ all"] = cross_validated(np.hstack([base, cache["features"]]), truth, len(classes))
    snr, faded = cache["snr_db"], cache["faded"]
    groups = {"all": np.ones(len(truth), bool), "faded": faded, "unfaded": ~faded}
    for lo, hi in SNR_RANGES:
        groups[f"{lo:g}..{hi:g} dB"] = (snr >= lo) & (snr <= hi)
    out: dict = {"bursts": int(len(truth)), "classes": list(classes), "features": names,
                 "features_ok": float(cache["ok"].mean()), "arms": {}}
    for arm, right in arms.items():
        row = {}
        for g, m in groups.items():
            if m.any():
                d, se = paired(arms["regression"][m], right[m])
                row[g] = {"n": int(m.sum()), "accuracy": round(100 * float(right[m].mean()), 2),
                          "vs_regression": round(d, 2), "se": round(se, 2)}
        out["arms"][arm] = row
    return out


def format_table(result: dict) -> str:
    groups = list(next(iter(result["arms"].values())).keys())
    lines = [f"{result['bursts']} bursts over {len(result['classes'])} classes; candidates complete on "
             f"{100 * result['features_ok']:.1f} %; accuracy %, and points against the regression +- 1 SE",
             "| arm | " + " | ".join(f"{g} (n={result['arms']['served'][g]['n']})" for g in groups) + " |",
             "|---|" + "---:|" * len(groups)]
    for arm, row in result["arms"].items():
        cells = [f"{row[g]['accuracy']:.1f} ({row[g]['vs_regression']:+.1f} +- {row[g]['se']:.1f})" for g in groups]
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- collect

def pick_bursts(labels: np.ndarray, snr: np.ndarray, classes: tuple[str, ...], snr_min: float, snr_max: float,
                per_cell: int, seed: int) -> np.ndarray:
    """Sorted indices: up to per_cell bursts of each (class, SNR) cell in range, drawn by seed."""
    rng = np.random.default_rng(seed)
    names = np.array(LABELS)[labels]
    picked = []
    for c in classes:
        for v in np.unique(snr[(snr >= snr_min) & (snr <= snr_max)]):
            cell = np.flatnonzero((names == c) & (snr == v))
            picked.extend(rng.permutation(cell)[:per_cell].tolist())
    return np.sort(np.array(picked, np.int64))


_WORKER: dict[str, Any] = {}


def _start_worker(rate_rule: str, carrier: str, reader: Any, names: list[str], torch_arms: Path | None) -> None:
    if torch_arms is not None:
        register_torch_arms(torch_arms)
    _WORKER.update(rate_rule=rate_rule, carrier=carrier, reader=reader, names=names)


def _worker_row(job: tuple[np.ndarray, np.void | None, np.ndarray | None, np.ndarray | None]
                ) -> tuple[np.ndarray, bool]:
    """candidate_row of one (burst, its recorded channel, its served probabilities, the network's)."""
    w = _WORKER
    return candidate_row(burst_views(job[0], w["rate_rule"], w["carrier"], job[1], w["reader"], job[2], job[3]),
                         w["names"])


def collect(args: argparse.Namespace) -> int:
    from rfclassify.engine.classifier import Classifier
    if args.torch_arms is not None:
        register_torch_arms(args.torch_arms)
    names = [n for n in args.features.split(",") if n]
    unknown = [n for n in names if n not in FEATURES]
    if unknown:
        print(f"feature_screen: unknown candidates {unknown}; known: {', '.join(FEATURES)}", file=sys.stderr)
        return 2
    classes = HIGH_ORDER_LABELS if args.classes == "high-order" else LABELS
    with DatasetReader(args.file) as data:
        labels, snr = data.label_index, data.snr_db.astype(float)
        idx = pick_bursts(labels, snr, classes, args.snr_min, args.snr_max, args.per_cell, args.seed)
        bursts = data.read(idx)
        p = data.params[idx]
    faded = in_multipath(p["fading_type"], p["delay_spread_samples"], p["samples_per_symbol"])
    channels = list(p)
    if not len(idx):
        print("feature_screen: no bursts of those classes in that SNR range", file=sys.stderr)
        return 2
    clf = Classifier.load(args.model_dir, backend="onnxruntime")
    ref = next((r for r in clf.refiners if set(r.labels) == set(HIGH_ORDER_LABELS)), None)
    rate_rule = ref.rate_rule if ref is not None else "coherence"
    carrier = ref.sequence.carrier if ref is not None and ref.sequence is not None else "lines"
    t0 = time.perf_counter()
    results = clf.classify(bursts)
    served_s = time.perf_counter() - t0
    network = [None] * len(results)
    if any(n.startswith("em_channel_fast_network") for n in names):
        alone = Classifier.load(args.model_dir, backend="onnxruntime", refiner=False)
        network = [r.probabilities for r in alone.classify(bursts)]
    t0 = time.perf_counter()
    reader = ref.sequence if ref is not None else None
    if reader is not None and len(reader.labels) != len(HIGH_ORDER_LABELS):
        reader = None               # directed_reading's width assumes a network over the 12
    jobs = [(b, c, r.probabilities, n) for b, c, r, n in zip(bursts, channels, results, network)]
    if args.workers > 1:
        with ProcessPoolExecutor(args.workers, initializer=_start_worker,
                                 initargs=(rate_rule, carrier, reader, names, args.torch_arms)) as pool:
            rows = list(pool.map(_worker_row, jobs, chunksize=4))
    else:
        rows = [candidate_row(burst_views(b, rate_rule, carrier, c, reader, served, net), names)
                for b, c, served, net in jobs]
    features_s = time.perf_counter() - t0
    np.savez(args.out, probs=np.stack([r.probabilities for r in results]).astype(np.float32),
             snr_estimate=np.array([r.snr_db for r in results], float), truth=labels[idx], snr_db=snr[idx],
             faded=faded, index=idx, features=np.stack([r for r, _ in rows]), ok=np.array([ok for _, ok in rows]),
             feature_names=np.array(names), feature_sizes=np.array([FEATURES[n][0] for n in names]),
             classes=np.array(classes), source=str(args.file))
    print(f"collect: {len(idx)} bursts served in {served_s:.0f} s, candidates ({', '.join(names)}) in "
          f"{features_s:.0f} s ({1000 * features_s / len(idx):.1f} ms a burst); wrote {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="serve a sample of a dataset once and keep its candidates")
    c.add_argument("file", type=Path)
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--model-dir", default="models")
    c.add_argument("--classes", choices=("high-order", "all"), default="high-order")
    c.add_argument("--snr-min", type=float, default=10.0)
    c.add_argument("--snr-max", type=float, default=30.0)
    c.add_argument("--per-cell", type=int, default=20, help="bursts per class and SNR (default 20)")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--features", default=",".join(FEATURES), help="comma-separated candidates (default all)")
    c.add_argument("--workers", type=int, default=1, help="processes computing the candidates (default 1)")
    c.add_argument("--torch-arms", type=Path, default=None,
                   help="networks saved by learned_equalizer_probe.py --save, screened as arm_<name>")
    s = sub.add_parser("score", help="cross-validated regressions with and without each candidate")
    s.add_argument("cache", type=Path)
    s.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.command == "collect":
        return collect(args)
    with np.load(args.cache) as z:
        result = score({k: z[k] for k in z.files})
    print(format_table(result))
    if args.json:
        args.json.write_text(json.dumps({"cache": str(args.cache), **result}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
