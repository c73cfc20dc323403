"""An independent signal source: GNU Radio 3.10's own modulators and channel model -> our HDF5 schema.

The classifier is trained on rfclassify's synthesizer; to see whether it learned modulations
rather than our generator's quirks, evaluate it on bursts made by different code. GNU Radio
is installed for the system Python only, so the flowgraphs live in a standalone script
(`_gr_flowgraph.py`) run as `/usr/bin/python3 -I _gr_flowgraph.py SPEC.json OUT.npz`; this
module writes the spec, runs it, and converts its output (labels mapped to canonical names,
parameters matched by name into PARAM_DTYPE) with the same DatasetWriter as `generate`.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from rfclassify._exceptions import InputError, InternalError, MissingDependencyError
from rfclassify._progress import Progress
from rfclassify.data import schema
from rfclassify.data.generate import MAX_EXAMPLES, check_output
from rfclassify.labels import LABELS, label_index, parse_labels

FLOWGRAPH = Path(__file__).with_name("_gr_flowgraph.py")
SYSTEM_PYTHON = "/usr/bin/python3"

#: Labels the flowgraph makes (same list as SUPPORTED in _gr_flowgraph.py; a test keeps them
#: equal): all 28. GNU Radio's own constellation objects / modulators for BPSK, QPSK, 8PSK,
#: 16/32PSK, 16/64/256QAM, GMSK, GFSK, CPFSK and (gr-dtv's DVB-S2/S2X mapper) 16/32/64/128APSK;
#: built from GNU Radio blocks for AM, FM, OQPSK (Q rail delayed) and NOISE; generic_mod with
#: a constellation_calcdist of rfclassify's points for OOK, 4ASK, 8ASK, PAM4, 32QAM, 128QAM
#: (GNU Radio has no object for these layouts: the least independent labels).
GNURADIO_LABELS: tuple[str, ...] = LABELS
CALCDIST_LABELS: tuple[str, ...] = ("OOK", "4ASK", "8ASK", "PAM4", "32QAM", "128QAM")

CHANNEL_DESCRIPTION = {
    "model": "gnuradio channels.channel_model",
    "phase_offset_deg": [0.0, 360.0],
    "cfo_cyc_per_sample_max": 0.02,
    "sro_ppm_max": 100.0,
    "multipath": "1/3 none, 1/3 static taps (2-4 paths, exponential power profile, random phases), "
                 "1/3 selective_fading_model (Rayleigh or Rician K 0..15 dB, Doppler 1e-6..5e-4)",
    "noise": "channel_model noise_voltage set from signal power measured before noise",
}


@dataclass(frozen=True)
class GnuRadioSpec:
    """What to make with GNU Radio; classes None means every label in GNURADIO_LABELS."""

    classes: tuple[str, ...] | None = None
    snr_grid_db: tuple[float, ...] = tuple(float(s) for s in range(-10, 31, 4))
    per_cell: int = 20
    length_samples: int = 1024
    seed: int = 0

    def __post_init__(self) -> None:
        classes = GNURADIO_LABELS if self.classes is None else parse_labels(list(self.classes))
        unsupported = [c for c in classes if c not in GNURADIO_LABELS]
        if unsupported:
            raise InputError(f"GNU Radio cannot make {', '.join(unsupported)} here; "
                             f"it can make {', '.join(GNURADIO_LABELS)}")
        if len(set(classes)) != len(classes):
            raise InputError("duplicate class in --classes")
        object.__setattr__(self, "classes", tuple(classes))
        snrs = tuple(float(s) for s in self.snr_grid_db)
        if not snrs or not all(np.isfinite(snrs)):
            raise InputError("the SNR grid must be a non-empty list of finite numbers")
        if len(set(np.float32(snrs).tolist())) != len(snrs):   # as the file stores them
            raise InputError("duplicate value in the SNR grid (a cell would get twice --per-cell bursts)")
        object.__setattr__(self, "snr_grid_db", snrs)
        if self.per_cell < 1:
            raise InputError(f"--per-cell must be >= 1, got {self.per_cell}")
        if not schema.MIN_BURST_SAMPLES <= self.length_samples <= schema.MAX_BURST_SAMPLES:
            raise InputError(f"--length must be {schema.MIN_BURST_SAMPLES}..{schema.MAX_BURST_SAMPLES}, "
                             f"got {self.length_samples}")
        if self.seed < 0:
            raise InputError(f"--seed must be >= 0, got {self.seed}")
        n = len(self.classes) * len(snrs) * self.per_cell
        if n > MAX_EXAMPLES:
            raise InputError(f"--per-cell {self.per_cell} makes {n:,} examples; one file holds at most {MAX_EXAMPLES:,}")


@dataclass(frozen=True)
class GnuRadioReport:
    path: Path
    n_examples: int
    classes: tuple[str, ...]
    gr_version: str
    elapsed_s: float


def gnuradio_available(python: str = SYSTEM_PYTHON) -> tuple[bool, str]:
    """(True, version) when `python` can import GNU Radio, else (False, why)."""
    try:
        proc = subprocess.run([python, "-I", "-c", "from gnuradio import gr; print(gr.version())"],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"cannot run {python}: {exc}"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["import failed"])[-1]
        return False, f"{python} cannot import gnuradio ({last})"
    return True, proc.stdout.strip()


def params_by_name(data: dict[str, np.ndarray], n: int) -> np.ndarray:
    """Per-burst parameters given as data["param_NAME"] arrays (the flowgraph's, or none) as a
    PARAM_DTYPE array of n; the fields not given are unknown (NaN / -1)."""
    from rfclassify.dsp.synth import PARAM_DTYPE

    out = np.zeros(n, PARAM_DTYPE)
    for name in PARAM_DTYPE.names:
        kind = PARAM_DTYPE[name].kind
        src = data.get(f"param_{name}")
        if src is None:
            out[name] = -1 if kind == "i" else np.nan
        elif kind == "i":
            out[name] = np.where(np.isfinite(src), np.round(np.nan_to_num(src)), -1)
        else:
            out[name] = src
    return out


def run_flowgraph(spec: GnuRadioSpec, workdir: Path, python: str = SYSTEM_PYTHON) -> dict[str, np.ndarray]:
    """Run _gr_flowgraph.py for `spec` in `workdir`; returns the arrays it saved."""
    ok, why = gnuradio_available(python)
    if not ok:
        raise MissingDependencyError(f"GNU Radio 3.10 is needed: {why}; install it with apt-get install gnuradio")
    spec_path, out_path = workdir / "spec.json", workdir / "out.npz"
    spec_path.write_text(json.dumps({
        "labels": list(spec.classes), "snr_grid_db": list(spec.snr_grid_db),
        "per_cell": spec.per_cell, "length": spec.length_samples, "seed": spec.seed}))
    per_label = len(spec.snr_grid_db) * spec.per_cell
    lines: list[str] = []
    with Progress(per_label * len(spec.classes), desc="gnuradio", unit="bursts") as bar, \
            subprocess.Popen([python, "-I", str(FLOWGRAPH), str(spec_path), str(out_path)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stderr is not None
        for line in proc.stderr:  # the script reports "<label>: done" per label
            lines.append(line.rstrip())
            if line.rstrip().endswith(": done"):
                bar.update(per_label)
        code = proc.wait()
    if code != 0 or not out_path.exists():
        tail = " | ".join(lines[-3:])
        raise InternalError(f"the GNU Radio flowgraph failed (exit {code}): {tail}")
    with np.load(out_path, allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


def generate_gnuradio_dataset(spec: GnuRadioSpec, out: str | os.PathLike[str], python: str = SYSTEM_PYTHON,
                              force: bool = False, command_line: str = "") -> GnuRadioReport:
    """Make the bursts with GNU Radio and write them to `out` in the rfclassify schema."""
    path = check_output(out, force)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rfclassify-gr-") as tmp:
        data = run_flowgraph(spec, Path(tmp), python)
    iq = data["iq"]
    n = iq.shape[0]
    names = [str(s) for s in data["labels"]]
    gr_version = str(data["gr_version"])
    attrs = schema.DatasetAttrs(
        source="gnuradio", seed=spec.seed, generator=f"GNU Radio {gr_version} via rfclassify/data/_gr_flowgraph.py",
        classes=spec.classes, snr_grid_db=spec.snr_grid_db, channel={"gnuradio": CHANNEL_DESCRIPTION},
        lengths={"rule": "fixed", "length_samples": spec.length_samples},
        command_line=command_line or shlex.join(["rfclassify", "dataset", "gnuradio"]),
        created_utc=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        extra={"per_cell": spec.per_cell, "gr_version": gr_version,
               "noise_power_per_volt2": float(data["noise_power_per_volt2"])})
    from rfclassify.dsp.synth import PARAM_DTYPE

    with schema.DatasetWriter(path, attrs, PARAM_DTYPE) as writer:
        writer.append(iq, np.array([label_index(s) for s in names], dtype=np.int16),
                      data["snr_db"], params_by_name(data, n), 0)
        writer.commit()
    return GnuRadioReport(path, n, spec.classes, gr_version, time.perf_counter() - start)
