"""How well each high-order alphabet explains a burst's symbols once a short equalizer is fitted to it.

The sequence network's errors are in multipath bursts, whose intersymbol interference
nothing before it undoes (benchmarks/sequence_net_limits.py). A blind equalizer before one
receiver did not help (benchmarks/high_order_sync_ladder.md: CMA); one fitted per
hypothesis adds to the sequence network (benchmarks/dd_equalizer_probe.py). For every
alphabet of the refiner's classes (one per DVB-S2 ring ratio for 16/32APSK), the burst's
clocked symbols are

1. turned back by the residual carrier (frequency and phase) under which that alphabet fits
   them best (``carrier_fit``, START_FIT). Each symbol's soft decision log-likelihood as it
   turns is periodic in the alphabet's rotational symmetry s; its first CARRIER_HARMONICS
   Fourier coefficients, tabled over the radius, turn the fit over (frequency, phase) into
   one transform per harmonic: the power lines of orders s, 2s, ... with the nonlinearity
   the alphabet itself implies, combined coherently. The coarse transform's best
   CARRIER_PEAKS frequencies are then refined exactly. (START_LINES, the rate rule's cheaper
   start: the alphabet's strongest k-th power line, ``carrier_line``, then the best of TURNS
   turns. On 64-512 symbols of a dense alphabet that line often loses to a noise peak of the
   search range, and a spinning constellation then fits no alphabet: 92 against 98 % on AWGN
   symbols, benchmarks/multipath_bound.md);
2. passed through a TAPS-tap symbol-spaced filter fitted by least squares to its own
   nearest-point decisions, at most PASSES times (an alphabet stops once none of its
   decisions changes). FIT_SOFT fits it first to soft decisions instead (each symbol's mean
   over the alphabet's NEIGHBOURS nearest points weighted by exp(-|z - a|^2 / s2), s2
   annealed geometrically through SOFT_VARIANCE over PASSES passes), then to hard ones at
   most SOFT_HARD_PASSES times: a fit that does not commit to decisions while a multipath
   channel still closes the eye (benchmarks/multipath_bound.md: at the known clock on
   faded bursts 73.4 against 67.4 % for the hard fit, at about its cost; as the refiner's
   scores it added nothing measurable, benchmarks/soft_equalizer_refiner_paired_run20.json);
3. scaled to the alphabet's unit signal power (the filter's gain is free, and 64QAM holds a
   scaled copy of 32QAM) and scored by the Gaussian-mixture log-likelihood per symbol of
   the filtered symbols, the noise taken from the residual (the best of NOISE_FACTORS times it).

A class's score is the log-mean-exp of its alphabets' burst log-likelihoods, per symbol.

All 21 alphabets at once in numpy (18 ms for 128 symbols on the 2-core x86, 1.9x the line
start's time):

- decisions, and the NEIGHBOURS points the mixture sums over, come from a table over a
  fine grid of the plane (GRID cells a side over |re|, |im| <= GRID_LIMIT), built once
  per process (about a second, and as much again for the carrier fit's tables on their
  first use); a symbol off the grid takes its edge cell;
- at most MAX_SYMBOLS central symbols are used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from rfclassify.dsp.constellations import APSK16_RATIOS, APSK32_RATIOS, apsk, constellation
from rfclassify.dsp.carrier_lines import derotations, power_line
from rfclassify.dsp.windows import central

TAPS = 5
PASSES = 10                     # at most: the fit stops once no decision changes
TURNS = 16                      # start turns tried within an alphabet's rotational ambiguity
NOISE_FACTORS = (1.0, 2.0, 4.0)
NEIGHBOURS = 8                  # alphabet points the mixture sums over (all of smaller alphabets)
DECISION_CANDIDATES = 4         # of which the nearest to a symbol is its decision
GRID = 256
GRID_LIMIT = 2.2                # unit-power alphabets reach 1.63 (256QAM)
MAX_SYMBOLS = 512
MIN_SYMBOLS = 16                # fewer: no scores
N0_FLOOR = 1e-4
LINE_POWERS = (4, 8, 12, 16, 20, 24, 32)   # carrier lines an alphabet can be recovered by
LINE_DESIGN_ES_N0_DB = 15.0     # the symbol SNR at which carrier_line weighs a line's phase noise
MIN_SIGNAL_POWER = 0.05         # of the filtered symbols, when they are scaled to unit signal power
START_FIT, START_LINES = "fit", "lines"     # how start_filters finds each alphabet's carrier
FIT_HARD, FIT_SOFT = "hard", "soft"         # what each alphabet's filter is fitted to (equalized_logliks)
EQUALIZER_FITS = (FIT_HARD, FIT_SOFT)
SOFT_VARIANCE = (1.0, 0.003)    # the soft decisions' variance at the first and last soft pass (unit power)
SOFT_HARD_PASSES = 3            # hard passes at most after the soft ones
CARRIER_HARMONICS = 8           # of the symmetry's order: lines of orders s, 2s, ..., 8s
CARRIER_RADII = 256             # radii of the tabled Fourier series (0..GRID_LIMIT)
CARRIER_TURN_SAMPLES = 128      # turns over one symmetry period sampled to table the series
CARRIER_SPREAD = 0.6            # the soft decision's noise std, in the alphabet's minimum distances
#                                 (0.35 found 16QAM under a 0.35 echo in 6 of 12 bursts, 0.6 in 11)
CARRIER_MAX_OFFSET = 0.07       # cycles/symbol searched either side (strongest_line's range)
CARRIER_OVERSAMPLE = 4          # the coarse transform's length over the symbol count (a power of 2)
CARRIER_PEAKS = 2               # coarse maxima refined exactly
CARRIER_FINE = 5                # exact frequencies tried across each coarse maximum's step
CARRIER_PHASES = 32             # phases tried over one symmetry period


def line_strength(alphabet: np.ndarray, k: int) -> float:
    """|E[a^k]| of an alphabet's k-th power line as rfclassify.dsp.carrier_lines takes it
    (amplitude-weighted a^4 / |a|^2 for k = 4, unit-magnitude above), times the loss a
    symbol's phase noise at LINE_DESIGN_ES_N0_DB causes it (exp(-(k sigma)^2 / 2))."""
    line = power_line(np.asarray(alphabet, np.complex128), k)
    sigma = math.sqrt(10 ** (-LINE_DESIGN_ES_N0_DB / 10) / 2)
    return float(abs(np.mean(line)) * math.exp(-((k * sigma) ** 2) / 2))


def carrier_line(alphabet: np.ndarray) -> int:
    """The power whose line takes an alphabet's carrier out (of LINE_POWERS, the strongest by
    line_strength): M for M-PSK, 4 for the square QAMs, 12 for 16APSK and 32QAM ... The
    4th power's line of the APSK rings is all but absent (|E[a^4/|a|^2]| is 0.03 for 16APSK
    and 0 for 128APSK), so one power for all left them a spurious frequency."""
    return max(LINE_POWERS, key=lambda k: (line_strength(alphabet, k), -k))


def rotational_order(alphabet: np.ndarray) -> int:
    """The largest s such that turning the alphabet by 2 pi / s maps it onto itself."""
    a = np.asarray(alphabet, np.complex128)
    for s in range(a.size, 0, -1):
        turned = a * np.exp(2j * np.pi / s)
        if np.all(np.min(np.abs(turned[:, None] - a[None, :]), axis=1) < 1e-6):
            return s
    return 1


def class_alphabets(label: str) -> tuple[np.ndarray, ...]:
    """A class's alphabets: one per DVB-S2 ring ratio for 16APSK and 32APSK, else its one."""
    if label == "16APSK":
        return tuple(apsk((4, 12), (1.0, r)) for r in APSK16_RATIOS)
    if label == "32APSK":
        return tuple(apsk((4, 12, 16), (1.0, r2, r3)) for r2, r3 in APSK32_RATIOS)
    return (constellation(label),)


def scorable(label: str) -> bool:
    """Whether class_scores can score a class: it has alphabets of NEIGHBOURS..256 points."""
    try:
        return all(NEIGHBOURS <= a.size <= 256 for a in class_alphabets(label))
    except KeyError:
        return False


def alphabet_turn_series(alphabet: np.ndarray) -> np.ndarray:
    """(CARRIER_RADII, CARRIER_HARMONICS) complex: G[i, q - 1] such that the soft decision
    log-likelihood of a point at radius rho_i (0..GRID_LIMIT) and angle theta,
    log sum_m exp(-|rho e^(j theta) - a_m|^2 / s2), is sum_q G[i, q - 1] e^(j s q theta) +
    conjugate + constant, s the alphabet's rotational order; s2 from CARRIER_SPREAD. Scaled
    by s2, so every alphabet's series is in units of squared distance."""
    a = np.asarray(alphabet, np.complex128)
    s = rotational_order(a)
    d = np.abs(a[:, None] - a[None, :])
    s2 = (CARRIER_SPREAD * float(d[d > 1e-9].min())) ** 2
    rho = np.linspace(0.0, GRID_LIMIT, CARRIER_RADII)
    theta = np.arange(CARRIER_TURN_SAMPLES) * (2 * np.pi / s) / CARRIER_TURN_SAMPLES
    e = -np.abs(rho[:, None, None] * np.exp(1j * theta)[None, :, None] - a[None, None, :]) ** 2 / s2
    peak = e.max(axis=-1)
    ll = (np.log(np.exp(e - peak[..., None]).sum(axis=-1)) + peak) * s2
    return np.fft.fft(ll, axis=1)[:, 1:CARRIER_HARMONICS + 1] / CARRIER_TURN_SAMPLES


@dataclass(frozen=True)
class AlphabetBank:
    """Alphabets (padded to the largest) and, for each cell of the grid, each alphabet's
    nearest point and NEIGHBOURS nearest; each alphabet's class and carrier power."""

    points: np.ndarray          # (A, M_max) complex128, padded past each alphabet's size
    sizes: np.ndarray           # (A,)
    flat: np.ndarray            # (A * M_max,) points, raveled (alphabet j's point m at j * M_max + m)
    nearest: np.ndarray         # (A, GRID * GRID) uint8: index of the nearest point
    neighbours: np.ndarray      # (A, GRID * GRID, NEIGHBOURS) uint8: the nearest, nearest first
    owner: np.ndarray           # (A,) the class (index into the labels) of each alphabet
    power: np.ndarray           # (A,) the power of each alphabet's carrier line (carrier_line)
    symmetry: np.ndarray        # (A,) each alphabet's rotational order (rotational_order)

    @classmethod
    def build(cls, labels: tuple[str, ...]) -> AlphabetBank:
        alphabets, owner = [], []
        for c, label in enumerate(labels):
            for a in class_alphabets(label):
                alphabets.append(np.asarray(a, np.complex128))
                owner.append(c)
        sizes = np.array([a.size for a in alphabets])
        if sizes.min() < NEIGHBOURS or sizes.max() > 256:
            raise ValueError(f"alphabets of {NEIGHBOURS}..256 points only, got {sizes.min()}..{sizes.max()}")
        points = np.full((len(alphabets), sizes.max()), 1e3 + 0j)
        centre = (np.arange(GRID) + 0.5) * (2 * GRID_LIMIT / GRID) - GRID_LIMIT
        cells = (centre[:, None] + 1j * centre[None, :]).ravel()
        near = np.empty((len(alphabets), cells.size, NEIGHBOURS), np.uint8)
        for j, a in enumerate(alphabets):
            points[j, :a.size] = a
            for s in range(0, cells.size, 4096):
                d = np.abs(cells[s:s + 4096, None] - a[None, :])
                part = np.argpartition(d, NEIGHBOURS - 1, axis=1)[:, :NEIGHBOURS]
                order = np.argsort(np.take_along_axis(d, part, axis=1), axis=1)
                near[j, s:s + 4096] = np.take_along_axis(part, order, axis=1)
        return cls(points=points, sizes=sizes, flat=points.ravel(), nearest=np.ascontiguousarray(near[:, :, 0]),
                   neighbours=near,
                   owner=np.array(owner), power=np.array([carrier_line(a) for a in alphabets]),
                   symmetry=np.array([rotational_order(a) for a in alphabets]))

    def subset(self, classes: np.ndarray) -> AlphabetBank:
        """The bank of the alphabets of the classes `classes` (indices into its labels) only,
        sliced from this one (nothing rebuilt; owner keeps the full bank's class indices)."""
        rows = np.flatnonzero(np.isin(self.owner, classes))
        points = self.points[rows]
        sub = AlphabetBank(points=points, sizes=self.sizes[rows], flat=points.ravel(), nearest=self.nearest[rows],
                           neighbours=self.neighbours[rows], owner=self.owner[rows], power=self.power[rows],
                           symmetry=self.symmetry[rows])
        if "turn_series" in self.__dict__:       # made already: slice it too rather than make it again
            sub.__dict__["turn_series"] = self.turn_series[rows]
        return sub

    @cached_property
    def turn_series(self) -> np.ndarray:
        """(A, CARRIER_RADII, CARRIER_HARMONICS) complex: each alphabet's alphabet_turn_series,
        made on first use (about a second for the 21 alphabets; the rate rule never uses it)."""
        return np.stack([alphabet_turn_series(self.points[j, :self.sizes[j]]) for j in range(len(self.sizes))])

    @staticmethod
    def cells(z: np.ndarray) -> np.ndarray:
        """The grid cell of each symbol (the edge cell off the grid)."""
        scale = GRID / (2 * GRID_LIMIT)
        i = np.minimum(np.maximum(((z.real + GRID_LIMIT) * scale).astype(np.int64), 0), GRID - 1)
        q = np.minimum(np.maximum(((z.imag + GRID_LIMIT) * scale).astype(np.int64), 0), GRID - 1)
        return i * GRID + q

    def decide(self, z: np.ndarray, which: np.ndarray) -> np.ndarray:
        """(len(which), ..., n) the nearest point of its grid cell's centre of each symbol of
        z (len(which), ..., n) in alphabet which[j] (coarse: near a boundary, a symbol can get
        its neighbour across it)."""
        rows = which.reshape((-1,) + (1,) * (z.ndim - 1))
        return self.flat[self.nearest[rows, self.cells(z)] + rows * self.points.shape[1]]

    def candidates(self, z: np.ndarray, which: np.ndarray, k: int = NEIGHBOURS) -> np.ndarray:
        """(len(which), n, k) the k points nearest each symbol's grid cell, for symbols z
        (len(which), n) in alphabets `which`, nearest the cell's centre first."""
        near = self.neighbours[which[:, None], self.cells(z), :k]                    # (A, n, k)
        return self.flat[near + (which * self.points.shape[1])[:, None, None]]

    def decide_exactly(self, z: np.ndarray, which: np.ndarray) -> np.ndarray:
        """(len(which), n) the nearest point of each symbol of z (len(which), n) in alphabet
        which[j]: the nearest of its cell's DECISION_CANDIDATES candidates (the true nearest
        is among them but for symbols far off the grid)."""
        cand = self.candidates(z, which, DECISION_CANDIDATES)
        d = z[:, :, None] - cand
        best = np.argmin(d.real ** 2 + d.imag ** 2, axis=-1)
        return np.take_along_axis(cand, best[:, :, None], axis=-1)[:, :, 0]

    def loglik(self, z: np.ndarray, which: np.ndarray, n0: np.ndarray) -> np.ndarray:
        """(len(which), F) mean over symbols of log((1/M) sum_m exp(-|z - a_m|^2 / n0) / (pi n0))
        for z (len(which), n) in alphabets `which` and noise n0 (len(which), F); the sum over
        the symbol's cell's nearest points (the rest add nothing at a usable noise)."""
        d2 = np.abs(z[:, :, None] - self.candidates(z, which)) ** 2                   # (A, n, K)
        e = -d2[:, None] / n0[:, :, None, None]                                       # (A, F, n, K)
        peak = e.max(axis=-1)
        per = np.log(np.exp(e - peak[..., None]).sum(axis=-1)) + peak
        return per.mean(axis=-1) - np.log(self.sizes[which])[:, None] - np.log(np.pi * n0)


@lru_cache(maxsize=None)
def alphabet_bank(labels: tuple[str, ...]) -> AlphabetBank:
    """The bank of every class's alphabets, built once per process (about a second for the
    12 high-order classes)."""
    return AlphabetBank.build(tuple(labels))


def filter_inputs(y: np.ndarray, taps: int) -> np.ndarray:
    """(n, taps) the symbols around each symbol, zero padded, the symbol itself in the middle."""
    half = taps // 2
    padded = np.concatenate([np.zeros(half, complex), y, np.zeros(half, complex)])
    return np.stack([padded[i:i + y.size] for i in range(taps)][::-1], axis=1)


def carrier_fit(y: np.ndarray, bank: AlphabetBank, reach: float = CARRIER_MAX_OFFSET
                ) -> tuple[np.ndarray, np.ndarray]:
    """((A,) frequency in cycles/symbol, (A,) phase in radians): for each of the bank's
    alphabets, the residual carrier that, taken out of unit-power symbols y, makes them fit
    the alphabet best (the sum of their soft decision log-likelihoods, from its
    turn_series). Frequencies within `reach` (CARRIER_MAX_OFFSET unless a probe narrows it;
    0: the phase alone, at frequency 0), or within half the alphabet's symmetry period where
    that is less (a turn by 2 pi / s a symbol leaves the alphabet as it is); first on a
    coarse grid by one transform per harmonic, then exactly across the CARRIER_PEAKS best
    coarse frequencies."""
    n = y.size
    t = np.arange(n)
    harmonics = np.arange(1, CARRIER_HARMONICS + 1)
    radius = np.minimum(np.round(np.abs(y) * ((CARRIER_RADII - 1) / GRID_LIMIT)).astype(np.int64), CARRIER_RADII - 1)
    nfft = 1 << int(math.ceil(math.log2(CARRIER_OVERSAMPLE * n)))
    freq = np.empty(len(bank.sizes))
    phase = np.empty(len(bank.sizes))
    for s in np.unique(bank.symmetry):
        rows = np.flatnonzero(bank.symmetry == s)
        orders = int(s) * harmonics
        z = bank.turn_series[rows][:, radius, :] * np.exp(1j * np.angle(y)[:, None] * orders[None, :])   # (a, n, Q)
        spectra = np.fft.fft(z, nfft, axis=1)
        step = 1.0 / (orders[-1] * n)        # the finest harmonic's line width
        half = min(reach, 0.5 / int(s))
        grid = np.arange(-half, half, step) if half > 0 else np.zeros(1)
        bins = np.round(grid[:, None] * orders[None, :] * nfft).astype(np.int64) % nfft              # (R, Q)
        phases = np.arange(CARRIER_PHASES) * (2 * np.pi / int(s)) / CARRIER_PHASES
        turns = np.exp(-1j * orders[:, None] * phases[None, :])                                     # (Q, P)
        across = step * np.linspace(-1.0, 1.0, CARRIER_FINE) if half > 0 else np.zeros(1)
        for j, a in enumerate(rows):
            coarse = (spectra[j][bins, harmonics - 1] @ turns).real.max(axis=1)
            peaks: list[int] = []
            for i in np.argsort(coarse)[::-1]:
                if all(abs(int(i) - p) > 2 for p in peaks):
                    peaks.append(int(i))
                    if len(peaks) == CARRIER_PEAKS:
                        break
            tried = (grid[peaks][:, None] + across[None, :]).ravel()
            rotor = np.exp(-2j * np.pi * int(s) * np.outer(tried, t))        # (K, n): the first harmonic's turns
            exact = np.empty((tried.size, harmonics.size), complex)
            turning = np.ones_like(rotor)
            for q in range(harmonics.size):
                turning *= rotor
                exact[:, q] = turning @ z[j][:, q]
            k, p = np.unravel_index(np.argmax((exact @ turns).real), (tried.size, phases.size))
            freq[a], phase[a] = tried[k], phases[p]
    return freq, phase


def start_filters(y: np.ndarray, bank: AlphabetBank, taps: int = TAPS, start: str = START_FIT,
                  carrier: tuple[np.ndarray, np.ndarray] | None = None,
                  extra: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each of the bank's alphabets' filter at its start, for unit-power symbols y: its inputs
    (A, n, taps) (y turned back by the alphabet's carrier), their least-squares
    pseudo-inverse (A, taps, n), and the symbols (A, n) through a centre tap at the start
    phase. The carrier by `start`: START_FIT carrier_fit's (`carrier`, where the caller has
    it already); START_LINES the alphabet's carrier line's frequency and phase, then the best
    of TURNS turns within its symmetry. `extra` (n,) (START_FIT only): one more regressor,
    turned by each alphabet's carrier like y and fitted beside the taps (its column last, its
    weight 0 at the start; rfclassify.dsp.dc_estimate fits a DC offset's tone so)."""
    n = y.size
    half = taps // 2
    which = np.arange(len(bank.sizes))
    w = np.zeros((which.size, taps if extra is None else taps + 1), complex)
    if start == START_FIT:
        freq, phase = carrier if carrier is not None else carrier_fit(y, bank)
        turn = np.exp(-2j * np.pi * freq[:, None] * np.arange(n)[None, :])
        cols = np.stack([filter_inputs(row, taps) for row in y[None, :] * turn])
        if extra is not None:
            cols = np.concatenate([cols, (extra[None, :] * turn)[:, :, None]], axis=2)
        w[:, half] = np.exp(-1j * phase)
        return cols, np.linalg.pinv(cols), np.einsum("ant,at->an", cols, w)
    if start != START_LINES:
        raise ValueError(f"unknown start {start!r} (one of {START_FIT}, {START_LINES})")
    if extra is not None:
        raise ValueError("an extra regressor needs the fitted carrier (START_FIT)")
    cols = np.empty((which.size, n, taps), complex)       # each alphabet's filter inputs
    solve = np.empty((which.size, taps, n), complex)      # their least-squares pseudo-inverse
    period = 2 * np.pi / bank.symmetry      # the carrier line fixes the phase up to this turn at best
    for k in np.unique(bank.power):
        rows = bank.power == k
        c = filter_inputs(derotations(y, int(k), local=False)[1], taps)
        cols[rows], solve[rows] = c, np.linalg.pinv(c)
    angles = np.arange(TURNS)[None, :] * period[:, None] / TURNS                     # (A, T)
    turned = cols[:, None, :, half] * np.exp(1j * angles)[:, :, None]                 # (A, T, n)
    cost = np.mean(np.abs(turned - bank.decide(turned, which)) ** 2, axis=-1)
    w[:, half] = np.exp(1j * angles[which, cost.argmin(axis=1)])
    return cols, solve, np.einsum("ant,at->an", cols, w)


def decision_directed(z: np.ndarray, cols: np.ndarray, solve: np.ndarray, bank: AlphabetBank,
                      passes: int = PASSES) -> tuple[np.ndarray, np.ndarray]:
    """(symbols, their decisions), both (A, n): each alphabet's filter refitted by least
    squares to its own decisions of z, at most `passes` times (an alphabet stops once none of
    its decisions changes). z is updated in place."""
    which = np.arange(len(bank.sizes))
    decided = bank.decide_exactly(z, which)
    moving = which                               # the alphabets whose decisions still change
    for _ in range(passes):
        w = np.einsum("atn,an->at", solve[moving], decided[moving])
        z[moving] = np.einsum("ant,at->an", cols[moving], w)
        now = bank.decide_exactly(z[moving], moving)
        changed = np.any(now != decided[moving], axis=1)
        decided[moving] = now
        moving = moving[changed]
        if moving.size == 0:
            break
    return z, decided


def soft_directed(z: np.ndarray, cols: np.ndarray, solve: np.ndarray, bank: AlphabetBank,
                  passes: int = PASSES, variance: tuple[float, float] = SOFT_VARIANCE) -> np.ndarray:
    """(A, n) symbols after each alphabet's filter is refitted by least squares `passes` times
    to the soft decisions of its own output z (A, n): each symbol's mean over the alphabet's
    NEIGHBOURS nearest points weighted by exp(-|z - a|^2 / s2) at unit power, s2 going
    geometrically from variance[0] to variance[1]."""
    which = np.arange(len(bank.sizes))
    for s2 in np.geomspace(variance[0], variance[1], passes):
        z = z / np.sqrt(np.maximum(np.mean(np.abs(z) ** 2, axis=1, keepdims=True), 1e-30))
        cand = bank.candidates(z, which)                                               # (A, n, K)
        e = -np.abs(z[:, :, None] - cand) ** 2 / s2
        p = np.exp(e - e.max(axis=-1, keepdims=True))
        target = (p * cand).sum(axis=-1) / p.sum(axis=-1)
        z = np.einsum("ant,at->an", cols, np.einsum("atn,an->at", solve, target))
    return z


def unit_power_logliks(z: np.ndarray, decided: np.ndarray, bank: AlphabetBank) -> tuple[np.ndarray, np.ndarray]:
    """((A,) per-symbol log-likelihood, (A, n) the symbols scored) of each alphabet's filtered
    symbols z given their decisions, at the alphabet's unit signal power. The filter's gain is
    free, so an alphabet that holds a scaled copy of the true one (64QAM holds 32QAM's cross)
    would fit it as well with less noise: scoring at the alphabet's own signal power stops that."""
    which = np.arange(len(bank.sizes))
    residual = np.mean(np.abs(z - decided) ** 2, axis=1)
    z /= np.sqrt(np.maximum(np.mean(np.abs(z) ** 2, axis=1) - residual, MIN_SIGNAL_POWER))[:, None]
    n0 = np.maximum(np.mean(np.abs(z - bank.decide_exactly(z, which)) ** 2, axis=1), N0_FLOOR)
    return bank.loglik(z, which, n0[:, None] * np.array(NOISE_FACTORS)[None, :]).max(axis=1), z


def equalized_logliks(y: np.ndarray, bank: AlphabetBank, taps: int = TAPS, passes: int = PASSES,
                      start: str = START_FIT, carrier: tuple[np.ndarray, np.ndarray] | None = None,
                      fit: str = FIT_HARD) -> tuple[np.ndarray, np.ndarray]:
    """((A,) per-symbol log-likelihood, (A, n) the symbols scored) of unit-power symbols y
    under each of the bank's alphabets, after that alphabet's start carrier (`start` and
    `carrier`: start_filters) and filter, the filtered symbols at the alphabet's unit signal
    power. The filter by `fit`: FIT_HARD decision-directed, at most `passes` times; FIT_SOFT
    `passes` soft passes (soft_directed), then at most SOFT_HARD_PASSES decision-directed ones."""
    if fit not in EQUALIZER_FITS:
        raise ValueError(f"unknown equalizer fit {fit!r} (one of {', '.join(EQUALIZER_FITS)})")
    cols, solve, z = start_filters(y, bank, taps, start, carrier)
    if fit == FIT_SOFT:
        z = soft_directed(z, cols, solve, bank, passes)
        passes = SOFT_HARD_PASSES
    z, decided = decision_directed(z, cols, solve, bank, passes)
    return unit_power_logliks(z, decided, bank)


def class_scores(y: np.ndarray, labels: tuple[str, ...], taps: int = TAPS, passes: int = PASSES,
                 start: str = START_FIT, fit: str = FIT_HARD) -> np.ndarray | None:
    """(len(labels),) float32 per-symbol log-likelihood of each class's alphabets after their
    own start carrier (`start`: start_filters) and equalizer (`fit`: equalized_logliks)
    (log-mean-exp over a class's alphabets), of clocked symbols y (any scale; the central
    MAX_SYMBOLS are used); None for fewer than MIN_SYMBOLS."""
    y = central(np.asarray(y, np.complex128), MAX_SYMBOLS)
    if y.size < MIN_SYMBOLS:
        return None
    y = y / math.sqrt(max(float(np.mean(np.abs(y) ** 2)), 1e-30))
    bank = alphabet_bank(tuple(labels))
    total = equalized_logliks(y, bank, taps, passes, start, fit=fit)[0] * y.size
    out = np.empty(len(labels), np.float32)
    for c in range(len(labels)):
        t = total[bank.owner == c]
        out[c] = (t.max() + math.log(np.mean(np.exp(t - t.max())))) / y.size
    return out


def best_equalized(y: np.ndarray, labels: tuple[str, ...]) -> np.ndarray | None:
    """(n,) complex128: clocked symbols y (any scale, all of them) as the equalizer of the
    best-fitting of the classes' alphabets leaves them, at that alphabet's unit signal power
    (the equalized front of rfclassify.dsp.sequence_fronts); None for fewer than MIN_SYMBOLS
    or where no alphabet has a finite likelihood."""
    y = np.asarray(y, np.complex128)
    if y.size < MIN_SYMBOLS:
        return None
    y = y / math.sqrt(max(float(np.mean(np.abs(y) ** 2)), 1e-30))
    ll, z = equalized_logliks(y, alphabet_bank(tuple(labels)))
    best = best_alphabet(ll)
    return None if best is None else z[best]


def best_carrier(y: np.ndarray, labels: tuple[str, ...]) -> float | None:
    """Cycles per symbol: the residual carrier (carrier_fit) of the best-fitting of the
    classes' alphabets (by their equalized likelihood) for the central MAX_SYMBOLS of
    unit-power symbols y; None for fewer than MIN_SYMBOLS or where no alphabet has a finite
    likelihood."""
    yc = central(y, MAX_SYMBOLS)
    if yc.size < MIN_SYMBOLS:
        return None
    bank = alphabet_bank(tuple(labels))
    freq, phase = carrier_fit(yc, bank)
    best = best_alphabet(equalized_logliks(yc, bank, carrier=(freq, phase))[0])
    return None if best is None else float(freq[best])


def best_alphabet(ll: np.ndarray) -> int | None:
    """The index of the largest finite log-likelihood; None where none is finite."""
    ll = np.nan_to_num(ll, nan=-np.inf, posinf=-np.inf)
    return int(np.argmax(ll)) if np.isfinite(ll).any() else None
