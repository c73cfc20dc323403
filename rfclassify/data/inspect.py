"""Coverage report of a dataset file: what `rfclassify dataset inspect` prints.

Counts per class x SNR and class x length bucket, totals, the channel presets used, and the
range of every generation parameter, so a reader can see at a glance whether a training or
calibration set covers what it claims to.
"""

from __future__ import annotations

import numpy as np

from rfclassify.data.reader import DatasetReader
from rfclassify.dsp.windows import BucketPolicy


def _table(row_names: list[str], col_names: list[str], counts: np.ndarray, corner: str) -> list[str]:
    width0 = max([len(corner)] + [len(r) for r in row_names])
    widths = [max(len(c), len(str(int(counts[:, j].max()))) if counts.size else 1)
              for j, c in enumerate(col_names)]
    lines = [" ".join([corner.ljust(width0)] + [c.rjust(w) for c, w in zip(col_names, widths)] + ["  total"])]
    for i, r in enumerate(row_names):
        cells = [str(int(v)).rjust(w) for v, w in zip(counts[i], widths)]
        lines.append(" ".join([r.ljust(width0)] + cells + [str(int(counts[i].sum())).rjust(7)]))
    totals = [str(int(v)).rjust(w) for v, w in zip(counts.sum(axis=0), widths)]
    lines.append(" ".join(["total".ljust(width0)] + totals + [str(int(counts.sum())).rjust(7)]))
    return lines


def _synth_note(generator: str) -> str:
    from rfclassify.data.generate import made_by_current_synth

    if made_by_current_synth(generator):
        return "\n  (made by the synthesizer code installed now)"
    return "\n  (the installed synthesizer code differs: regenerating gives other bursts)"


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def coverage_report(ds: DatasetReader, policy: BucketPolicy | None = None) -> str:
    """Multi-line text describing what the dataset contains."""
    policy = policy or BucketPolicy()
    a = ds.attrs
    n = len(ds)
    lines = [
        f"file: {ds.path}",
        f"source: {a.source}   generator: {a.generator}   seed: {a.seed}"
        + (_synth_note(a.generator) if a.source == "synth" else ""),
        f"created: {a.created_utc}   command: {a.command_line}",
        f"examples: {n}   samples: {int(ds.lengths.sum())}   "
        f"lengths: {int(ds.lengths.min()) if n else 0}..{int(ds.lengths.max()) if n else 0} samples "
        f"({a.lengths.get('rule', '?')})",
        f"classes present: {len(np.unique(ds.label_index))} of {len(ds.labels)} labels",
        "",
    ]
    present = [i for i in range(len(ds.labels)) if np.any(ds.label_index == i)]
    rows = [ds.labels[i] for i in present]
    has_noise = np.isfinite(ds.snr_db)
    snrs = np.unique(ds.snr_db[has_noise])
    cols = [_fmt(s) for s in snrs] + (["none"] if not has_noise.all() else [])
    counts = np.zeros((len(present), len(cols)), dtype=np.int64)
    for r, li in enumerate(present):
        sel = ds.label_index == li
        for c, s in enumerate(snrs):
            counts[r, c] = np.count_nonzero(sel & (ds.snr_db == s))
        if not has_noise.all():
            counts[r, -1] = np.count_nonzero(sel & ~has_noise)
    lines.append("class x SNR (dB) counts:")
    lines += _table(rows, cols, counts, "class")
    lines.append("")
    buckets = ds.buckets(policy)
    bcols = list(policy.buckets_samples)
    bcounts = np.array([[np.count_nonzero((ds.label_index == li) & (buckets == b)) for b in bcols]
                        for li in present], dtype=np.int64).reshape(len(present), len(bcols))
    lines.append("class x length bucket (samples) counts:")
    lines += _table(rows, [str(b) for b in bcols], bcounts, "class")
    lines.append("")
    lines.append("channel presets:")
    for ci, name in enumerate(ds.channel_names):
        lines.append(f"  {name}: {np.count_nonzero(ds.channel_index == ci)} examples")
    lines.append("")
    lines += _param_ranges(ds.params)
    return "\n".join(lines)


def _param_ranges(params: np.ndarray) -> list[str]:
    lines = ["generation parameters (examples where set: min .. max):"]
    names = params.dtype.names or ()
    width = max([len(nm) for nm in names] + [4])
    for name in names:
        col = params[name]
        if col.dtype.kind in "fc":
            ok = np.isfinite(col)
            if not ok.any():
                lines.append(f"  {name.ljust(width)} never set")
                continue
            v = col[ok].real
            lines.append(f"  {name.ljust(width)} {int(ok.sum()):>8}: {_fmt(float(v.min()))} .. {_fmt(float(v.max()))}")
        elif col.dtype.kind in "iub":
            v = col.astype(np.int64)
            v = v[v != -1]  # -1: not applicable
            if not v.size:
                lines.append(f"  {name.ljust(width)} never set")
                continue
            lines.append(f"  {name.ljust(width)} {v.size:>8}: {int(v.min())} .. {int(v.max())}")
        else:
            uniq = np.unique(col)
            shown = ", ".join(x.decode() if isinstance(x, bytes) else str(x) for x in uniq[:8])
            lines.append(f"  {name.ljust(width)} {len(uniq)} values: {shown}{' ...' if len(uniq) > 8 else ''}")
    return lines
