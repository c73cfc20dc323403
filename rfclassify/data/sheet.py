"""A PNG sheet of a dataset: per class, an IQ constellation at high SNR and the mean spectrum.

Used by `rfclassify dataset inspect --png`; a quick visual check that every label looks like
what its name says. matplotlib is imported only here, via rfclassify._optional.require, and
drawn without pyplot (no global state, no display needed).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from rfclassify._optional import require
from rfclassify._paths import storable
from rfclassify.data.reader import DatasetReader
from rfclassify.dsp.windows import normalize_batch

CLASSES_PER_ROW = 4
MAX_BURSTS_PER_CLASS = 16
FFT_SAMPLES = 256
MAX_POINTS = 1500


def _pick(ds: DatasetReader, label: int) -> np.ndarray:
    """Indices of up to MAX_BURSTS_PER_CLASS bursts of one label at its highest SNRs."""
    idx = np.flatnonzero(ds.label_index == label)
    snr = np.nan_to_num(ds.snr_db[idx], nan=np.inf)  # no noise counts as the cleanest
    return idx[np.argsort(-snr, kind="stable")][:MAX_BURSTS_PER_CLASS]


def _drawable(burst: object) -> bool:
    """Whether the sheet can draw a burst: read (not an UnreadSamples), of some samples, all finite,
    not all zero. A NaN burst made a class's mean spectrum NaN and one of no samples printed
    numpy's RuntimeWarnings ("Mean of empty slice") with their source lines."""
    return (isinstance(burst, np.ndarray) and burst.size > 0 and bool(np.isfinite(burst).all())
            and bool(np.any(burst != 0)))


def _symbol_points(x: np.ndarray, params: np.void) -> np.ndarray:
    """Samples at the symbol centres when the burst has a known symbol clock, else every sample."""
    sps = float(params["samples_per_symbol"]) if "samples_per_symbol" in params.dtype.names else math.nan
    if not (np.isfinite(sps) and sps >= 2):
        return x
    t0 = float(params["timing_offset_samples"]) if "timing_offset_samples" in params.dtype.names else 0.0
    t0 = t0 if np.isfinite(t0) else 0.0
    pos = np.round(t0 + sps * np.arange(int((x.size - t0) / sps))).astype(np.int64)
    return x[pos[(pos >= 0) & (pos < x.size)]]


def _spectrum_db(bursts: list[np.ndarray]) -> np.ndarray:
    acc = np.zeros(FFT_SAMPLES)
    win = np.hanning(FFT_SAMPLES)
    for b in bursts:
        x = normalize_batch(b[None, :])[0]
        if x.size < FFT_SAMPLES:
            x = np.concatenate([x, np.zeros(FFT_SAMPLES - x.size, x.dtype)])
        segs = x[: x.size // FFT_SAMPLES * FFT_SAMPLES].reshape(-1, FFT_SAMPLES)
        acc += np.mean(np.abs(np.fft.fft(segs * win, axis=1)) ** 2, axis=0)
    spec = np.fft.fftshift(acc)
    if not spec.max() > 0:   # bursts whose power is all DC: normalized to zeros
        return np.full(FFT_SAMPLES, -120.0)
    return 10 * np.log10(spec / spec.max() + 1e-12)


def draw_sheet(ds: DatasetReader, png: str | os.PathLike[str]) -> Path:
    """Draw the sheet of `ds` to `png`; returns the path."""
    require("matplotlib", "the dataset PNG sheet")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    present = [i for i in range(len(ds.labels)) if np.any(ds.label_index == i)]
    rows = max(1, math.ceil(len(present) / CLASSES_PER_ROW))
    fig = Figure(figsize=(4.2 * CLASSES_PER_ROW, 2.3 * rows))
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(rows, 2 * CLASSES_PER_ROW, width_ratios=[1, 1.5] * CLASSES_PER_ROW)
    params = ds.params
    freqs = np.fft.fftshift(np.fft.fftfreq(FFT_SAMPLES))
    for k, li in enumerate(present):
        r, c = divmod(k, CLASSES_PER_ROW)
        idx = _pick(ds, li)
        # bursts it cannot draw are left out: a damaged chunk's, a NaN one, one of no samples
        shown = [(i, b) for i, b in zip(idx, ds.read_or_reject(idx)) if _drawable(b)]
        ax = fig.add_subplot(grid[r, 2 * c])
        ax2 = fig.add_subplot(grid[r, 2 * c + 1])
        if not shown:
            for a in (ax, ax2):
                a.set_xticks([])
                a.set_yticks([])
            ax.set_title(ds.labels[li], fontsize=8)
            ax2.text(0.5, 0.5, f"no burst to draw: its {idx.size} of highest SNR\nare unreadable, empty, NaN or zero",
                     ha="center", va="center", fontsize=7, transform=ax2.transAxes)
            continue
        first, bursts = shown[0][0], [b for _, b in shown]
        snr = ds.snr_db[first]
        snr_text = "no noise" if not np.isfinite(snr) else f"{snr:g} dB"
        x = normalize_batch(bursts[0][None, :])[0]
        pts = _symbol_points(x, params[first])[:MAX_POINTS]
        ax.scatter(pts.real, pts.imag, s=1.5, alpha=0.5, linewidths=0)
        lim = max(1.5, float(np.percentile(np.abs(pts), 99)) * 1.1) if pts.size else 1.5
        ax.set_xlim(-lim, lim)
        ax.set_ylim(-lim, lim)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(f"{ds.labels[li]} ({snr_text})", fontsize=8)
        ax2.plot(freqs, _spectrum_db(bursts), linewidth=0.8)
        ax2.set_ylim(-60, 3)
        ax2.set_xlim(-0.5, 0.5)
        ax2.tick_params(labelsize=6)
        ax2.set_title("spectrum, dB vs cyc/sample", fontsize=7)
    # storable: a name's bytes that are not UTF-8 as \xNN (matplotlib's FreeType refused them)
    fig.suptitle(f"{storable(ds.path.name)}: {ds.attrs.source}, {len(ds)} bursts "
                 f"(constellation: symbol centres of the highest-SNR burst; spectrum: mean of "
                 f"up to {MAX_BURSTS_PER_CLASS})", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    out = Path(png)
    out.parent.mkdir(parents=True, exist_ok=True)
    # PNG unless the suffix names another format matplotlib writes (.svg, .pdf): with no suffix it
    # appended ".png" and the path reported was not the file's; another suffix (.bin) raised ValueError
    fmt = out.suffix[1:].lower()
    fig.savefig(out, dpi=90, format=fmt if fmt in fig.canvas.get_supported_filetypes() else "png")
    return out
