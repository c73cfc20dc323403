"""The DC pass: which bursts carry a receiver DC offset worth taking out before the refiners, and how much.

A zero-IF receiver's DC offset (LO leak) of -30..-10 dB costs the high-order classes about
10 points at 10..30 dB (benchmarks/dc_offset_robustness.md, ``--paired``); the burst's mean is
too poor an estimate to take out. For each burst the constellation refiner takes whose
network top class has an alphabet the class equalizer can fit (class_equalizer.scorable: all
twelve high-order classes), the offset is fitted from its symbols (rfclassify.dsp.dc_estimate)
under the alphabets of the network's LIKELY_CLASSES likeliest such classes. Every other
burst loses its mean only where 0 Hz holds a leak line (dc_estimate.leak_line_offset): what
a burst of no particular alphabet can safely lose. Where the offset found is at least
MIN_OFFSET_DB of the burst's power (and a fitted one at least MIN_STANDARD_ERRORS of its
fit's standard errors, and consistent with the burst's mean), the Classifier takes it out of
the burst and runs the network again on it; the refiners then see the burst without it too.
Bursts shorter than MIN_SAMPLES are left as they are, and so are those whose SNR the network
puts below MIN_SNR_DB (for the fit) or within LEAK_SNR_GAP_DB (for the leak line).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from rfclassify.dsp.class_equalizer import alphabet_bank, scorable
from rfclassify.dsp.dc_estimate import OffsetEstimate, estimate_offset, leak_line_offset
from rfclassify.engine.refiner_pool import map_chunksize

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from rfclassify.engine.refiner import Refiner

#: the network's likeliest refiner classes whose alphabets the estimate fits (as good as all
#: twelve high-order classes at about a third of the cost: benchmarks/dc_offset_robustness.md)
LIKELY_CLASSES = 3
#: an offset found weaker than this, in dB of the burst's power, is left in. Offsets below -30
#: dB cost the served model little (dc_offset_robustness.md), while a fit on a burst without
#: one finds more than -28 dB for about one burst in ten (its decisions or its clock being
#: wrong), and taking that out costs: on big1024's high-order bursts at >= 10 dB, -0.86
#: points on those without an offset at -35 dB, -0.35 at -28, for 3.96 / 3.92 gained on
#: those with one (benchmarks/dc_offset_robustness.md, "The DC pass")
MIN_OFFSET_DB = -28.0
#: and a fitted offset must be at least this many standard errors of its least-squares fit:
#: where the alphabet, clock or pulse do not explain the symbols, the offset's regressor soaks
#: up what they leave. Routed high-order bursts at >= 10 dB without an offset that lose a
#: false one, at 4 / 6 / 10 standard errors: big1024 6.7 / 2.8 / 0.2 %, the GNU Radio set
#: (other modulators, no offsets) 15.2 / 8.5 / 2.1 %; big1024's bursts with a -30..-10 dB
#: offset that lose it: 63 / 55 / 44 % (benchmarks/dc_offset_robustness.md, "The DC pass")
MIN_STANDARD_ERRORS = 10.0
#: shorter bursts keep their offset: the leak-line test's bins beside 0 Hz (2..9 of n) leave
#: the band of a burst at 16 samples per symbol below 9 * 32 = 288 samples, and the fit has
#: too few symbols (at 128 samples it cost -2.0 points on high-order bursts without an offset)
MIN_SAMPLES = 512
#: the fit is made only for bursts the network puts at this SNR or more: below it the noise
#: drowns any offset of the training range, and the fits change many answers for nothing
#: (benchmarks/dc_offset_robustness.md, "The DC pass")
MIN_SNR_DB = 0.0
#: the leak line is not taken out of a burst the network puts in this SNR range: there the
#: carrier of OOK, the ASKs and AM with carrier passes for a leak (it stands out, and holds
#: less than LEAK_MAX_DB of a burst that is mostly noise); without this gap the pass lost
#: 0.7-1.2 points at -10..-4 dB on three sets. Below it, a line that stands out is the
#: receiver's: noise with a leak reads as AM-SSB-WC or 8ASK until the leak is taken out.
LEAK_SNR_GAP_DB = (-10.0, 0.0)


@dataclass(frozen=True)
class FitRoute:
    """Which bursts get their offset fitted rather than the leak line: those whose network top
    class is one of `names` (at `index` in the model's labels, each with alphabets:
    class_equalizer.scorable) and that are at least min_samples long. Served, it is the
    constellation refiner's (of_refiner); a refiner's fit, whose refiner does not exist yet,
    routes by the classes it fits (of_classes)."""

    index: np.ndarray
    names: tuple[str, ...]
    min_samples: int = 0

    @classmethod
    def of_refiner(cls, refiner: Refiner) -> FitRoute:
        """The bursts `refiner` takes (Refiner.wants) whose top class has alphabets."""
        keep = [j for j, c in enumerate(refiner.labels) if scorable(c)]
        return cls(refiner.index[keep], tuple(refiner.labels[j] for j in keep), int(refiner.min_samples))

    @classmethod
    def of_classes(cls, classes: Sequence[str], model_labels: Sequence[str]) -> FitRoute:
        """Bursts of any length whose top class is one of `classes` that has alphabets."""
        names = tuple(c for c in classes if scorable(c))
        return cls(np.array([list(model_labels).index(c) for c in names], dtype=np.int64), names)

    def takes(self, probs: np.ndarray, iq: np.ndarray | None) -> bool:
        return (iq is not None and np.shape(iq)[0] >= self.min_samples
                and bool(np.isin(int(np.argmax(probs)), self.index)))


def prepare(route: FitRoute) -> None:
    """Build the alphabet bank the fits use (about two seconds on a 2-core x86), so the first
    bursts do not pay for it, in this process (worker_setup does it in pool workers)."""
    build_bank(route.names)


def worker_setup(route: FitRoute) -> tuple[Callable[..., None], tuple[Any, ...]]:
    """start_pool's `setup` that builds the fits' alphabet bank in each worker as it starts."""
    return build_bank, (route.names,)


def build_bank(names: tuple[str, ...]) -> None:
    """The alphabet bank of classes `names`, with its carrier-fit tables (nothing for none)."""
    if names:
        alphabet_bank(names).turn_series    # noqa: B018 - made on first use


def likely_classes(index: np.ndarray, names: tuple[str, ...], probs: np.ndarray,
                   k: int = LIKELY_CLASSES) -> tuple[str, ...]:
    """The k of classes `names` (at `index` in the model's labels) the network finds likeliest
    for a burst with probabilities probs, likeliest first."""
    order = np.argsort(-np.asarray(probs)[index], kind="stable")[:k]
    return tuple(names[int(j)] for j in order)


def offset_db(offset: complex, iq: np.ndarray) -> float:
    """An offset's power in dB of burst iq's mean power (-inf for a zero offset or a silent burst)."""
    # squared in float64 (float32 overflows past about 1e19); a power past that too is -inf dB, not a warning
    with np.errstate(over="ignore"):
        power = float(np.mean(np.abs(np.asarray(iq, dtype=np.complex128)) ** 2)) if np.size(iq) else 0.0
    if offset == 0 or not power > 0 or not math.isfinite(power):
        return -math.inf
    # in logs: abs(offset) ** 2 of a burst near 1e-160 fell to 0.0 under a power that did not
    # (math domain error before the sixty-seventh session)
    return 20 * math.log10(abs(offset)) - 10 * math.log10(power)


def offsets_to_remove(probs: Sequence[np.ndarray], snr_db: Sequence[float], bursts: Sequence[np.ndarray | None],
                      route: FitRoute | None = None, pool: Executor | None = None) -> dict[int, complex]:
    """{burst index: its DC offset} for the bursts of at least MIN_SAMPLES whose offset is at
    least MIN_OFFSET_DB (a fitted one also MIN_STANDARD_ERRORS): fitted from the symbols for
    those `route` takes (FitRoute.of_refiner of the constellation refiner, if any) whose
    network SNR estimate (snr_db) is at least MIN_SNR_DB; the leak line for the others whose
    estimate is outside LEAK_SNR_GAP_DB. The fits run in
    `pool` (any process pool, such as the refiner's) when given, even a lone one."""
    long = [i for i, x in enumerate(bursts) if x is not None and np.shape(x)[0] >= MIN_SAMPLES]
    constellation = {i for i in long if route is not None and route.takes(probs[i], bursts[i])}
    fit = [i for i in long if i in constellation and snr_db[i] >= MIN_SNR_DB]
    gap_lo, gap_hi = LEAK_SNR_GAP_DB
    found = {i: OffsetEstimate(leak_line_offset(bursts[i]), 0.0) for i in long
             if i not in constellation and not gap_lo <= snr_db[i] < gap_hi}
    if fit:
        xs = [bursts[i] for i in fit]
        likely = [likely_classes(route.index, route.names, probs[i]) for i in fit]
        classes = [route.names] * len(fit)
        if pool is not None:    # one burst too: its fit would hold the caller's interpreter lock
            fitted = pool.map(estimate_offset, xs, classes, likely, chunksize=map_chunksize(len(fit)))
        else:
            fitted = map(estimate_offset, xs, classes, likely)
        found.update(zip(fit, fitted, strict=True))
    return {i: e.offset for i, e in sorted(found.items())
            if offset_db(e.offset, bursts[i]) >= MIN_OFFSET_DB and abs(e.offset) >= MIN_STANDARD_ERRORS * e.stderr}
