"""Measure a decay branch of a lineage against the shipped model and log it in branches.json.

A branch comes back from the device as a train directory (model.pt, model.json,
train_log.json: `sitting.sh collect`). This exports it, evaluates it on a dataset twice —
the network alone (`evaluate --no-refiner`) and served with the shipped model's refiners,
unchanged (the forty-ninth session found a refit of them to a branch adds nothing) — compares
each burst for burst with the shipped model evaluated the same way, and appends one entry to
the lineage's branches.json: the branch's trunk step and decay steps, both measurements, and
the two networks' accuracy by SNR band and by class at >= 10 dB side by side. The shipped
model's evaluations are made once per work folder.

    PYTHONPATH=. python3 benchmarks/lineage_branch_measure.py BRANCH_DIR /work/data/big1024.h5 \
        --work /tmp/lineage --session 50 --log benchmarks/lineage_wsd_wide/branches.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rfclassify._exceptions import ConfigError  # noqa: E402
from rfclassify.model.paired import load_predictions, paired_difference  # noqa: E402

REFINER_KEYS = ("refiner", "low_order_refiner")
#: what a lineage script reports as a one-line error (a bad argument, a missing file, a failed step)
USER_ERRORS = (ConfigError, FileNotFoundError, subprocess.CalledProcessError)
SNR_BANDS_DB = ((-20, -11), (-10, -1), (0, 9), (10, 19), (20, 30))


def serve_with_refiners(branch: Path, source: Path, out: Path) -> Path:
    """A copy of the model directory `branch` at `out` that serves `source`'s refiners: their
    model.json entries and the files those name. ConfigError when source has no refiner or
    the two models' labels differ (a refiner re-decides the network's classes by name)."""
    meta = json.loads((branch / "model.json").read_text())
    src = json.loads((source / "model.json").read_text())
    if not any(src.get(k) for k in REFINER_KEYS):
        raise ConfigError(f"{source} serves no refiner to lend")
    if list(meta["labels"]) != list(src["labels"]):
        raise ConfigError(f"{branch} and {source} classify different labels; the refiners would not fit")
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(branch, out)
    for key in REFINER_KEYS:
        entry = src.get(key) or {}
        meta[key] = entry
        for sub in (entry, entry.get("light") or {}):
            if sub.get("file"):
                shutil.copy2(source / sub["file"], out / sub["file"])
    (out / "model.json").write_text(json.dumps(meta, indent=1) + "\n")
    return out


def _overall(eval_dir: Path) -> dict[str, float]:
    o = json.loads((eval_dir / "evaluation.json").read_text())["overall"]
    return {"mean_over_snr": round(100 * o["mean_accuracy_over_snr"], 2),
            "snr_ge_10db": round(100 * o["accuracy_snr_ge_10db"], 2)}


def _paired(a: Path, b: Path) -> dict[str, Any]:
    """B - A burst for burst, in points: [difference, standard error] over SNR and at >= 10 dB."""
    d = paired_difference(load_predictions(a), load_predictions(b))["overall"]
    return {**{k: [round(100 * d[k], 2), round(100 * d[f"{k}_se"], 2)] for k in ("mean_over_snr", "snr_ge_10db")},
            "b_only_right": d["b_only_right"], "a_only_right": d["a_only_right"]}


def shipped_and_branch_tables(shipped: dict[str, Any], branch: dict[str, Any]) -> dict[str, Any]:
    """[shipped, branch] accuracy in % by SNR band (the mean of the band's per-SNR accuracies)
    and by class at >= 10 dB, from the two models' evaluation.json documents: where the
    branch gains or loses, for the entry."""
    def by_band(ev: dict[str, Any]) -> list[float | None]:
        out = []
        for lo, hi in SNR_BANDS_DB:
            accs = [p["accuracy"] for p in ev["overall"]["per_snr"] if lo <= p["snr_db"] <= hi]
            out.append(round(100 * sum(accs) / len(accs), 1) if accs else None)
        return out

    return {
        "big1024_by_snr_band_pct_shipped_branch": {
            f"{lo}..{hi}": [a, b] for (lo, hi), a, b in zip(SNR_BANDS_DB, by_band(shipped), by_band(branch))},
        "big1024_by_class_snr_ge_10db_pct_shipped_branch": {
            c: [round(100 * a, 1), round(100 * branch["per_class_snr_ge_10db"][c], 1)]
            for c, a in shipped["per_class_snr_ge_10db"].items()},
    }


def decay_split(command: str, steps: int) -> dict[str, int] | None:
    """{"trunk_step", "decay_steps"} of a branch from its training command's --decay-steps
    (the branch decays over its last decay_steps of `steps`); None for a run without one."""
    words = shlex.split(command)
    if "--decay-steps" not in words:
        return None
    decay = int(words[words.index("--decay-steps") + 1])
    return {"trunk_step": steps - decay, "decay_steps": decay}


def branch_entry(session: int, meta: dict[str, Any], alone: dict[str, Any], served: dict[str, Any],
                 tables: dict[str, Any] | None = None) -> dict[str, Any]:
    """One branches.json entry from the branch's model.json and its two measurements, each
    {"big1024": overall, "paired": paired against the shipped model measured the same way};
    `tables` (shipped_and_branch_tables) are added as they are."""
    tr = meta["extra"]["training"]
    commands = tr.get("commands", [tr.get("command")])
    return {
        "session": session, "model_id": meta["model_id"], "device": tr.get("device_name"),
        **(decay_split(commands[-1], tr["steps"]) or {}),
        "steps": tr["steps"], "train_s": tr["train_s"],
        "examples_fresh": tr.get("examples_fresh"), "examples_reused": tr.get("examples_reused"),
        "commands": commands, "temperature": meta["temperature"],
        "validation_accuracy_pct": {b: round(100 * v, 1)
                                    for b, v in meta["extra"].get("validation_accuracy", {}).items()},
        "big1024": alone["big1024"], "big1024_paired": alone["paired"],
        "served_big1024": {"shipped_refiners_unchanged": {**served["big1024"],
                                                          "paired_vs_shipped_served": served["paired"]}},
        **(tables or {}),
    }


def append_entry(log: Path, entry: dict[str, Any], key: str = "branches") -> None:
    """Add entry to the log's list `key`; ConfigError if that model is logged already."""
    doc = json.loads(log.read_text())
    if any(b.get("model_id") == entry["model_id"] for b in doc.setdefault(key, [])):
        raise ConfigError(f"{entry['model_id']} is in {log} already")
    doc[key].append(entry)
    log.write_text(json.dumps(doc, indent=1) + "\n")


def log_entries(log: Path | None, entries: list[dict[str, Any]], key: str) -> None:
    """append_entry each entry to `log` (when one is given), saying so."""
    for entry in entries if log else []:
        append_entry(log, entry, key=key)
        print(f"appended {entry['model_id']} to {log}")


def _run(*args: str) -> None:
    print("+ rfclassify " + " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", "rfclassify", *args], check=True)


def _export(model_dir: Path) -> None:
    """model.onnx into model_dir; the per-bucket static graphs (TensorRT's) are not needed here."""
    _run("export", "--model-dir", str(model_dir))
    shutil.rmtree(model_dir / "static", ignore_errors=True)


def _evaluate(model_dir: Path, data: Path, out: Path, alone: bool) -> Path:
    if not (out / "predictions.npz").is_file():
        _run("evaluate", "--model-dir", str(model_dir), "--predictions", "--out", str(out),
             *(["--no-refiner"] if alone else []), str(data))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("branch", type=Path, help="the branch's train directory (model.pt, model.json)")
    ap.add_argument("data", type=Path, help="the dataset both models are evaluated on (big1024)")
    ap.add_argument("--work", type=Path, required=True, help="folder for the copies and evaluations")
    ap.add_argument("--session", type=int, required=True)
    ap.add_argument("--shipped", type=Path, default=Path("models"))
    ap.add_argument("--log", type=Path, default=None, help="branches.json to append the entry to")
    args = ap.parse_args(argv)
    try:
        args.work.mkdir(parents=True, exist_ok=True)
        alone_dir = args.work / args.branch.name
        if not (alone_dir / "model.onnx").is_file():
            shutil.copytree(args.branch, alone_dir, dirs_exist_ok=True)
            _export(alone_dir)
        served_dir = serve_with_refiners(alone_dir, args.shipped, args.work / f"{args.branch.name}_served")
        ev = {name: _evaluate(model, args.data, args.work / f"eval_{name}", alone)
              for name, model, alone in (("shipped_alone", args.shipped, True), ("shipped_served", args.shipped, False),
                                         ("branch_alone", alone_dir, True), ("branch_served", served_dir, False))}
        measured = {kind: {"big1024": _overall(ev[f"branch_{kind}"]),
                           "paired": _paired(ev[f"shipped_{kind}"], ev[f"branch_{kind}"])}
                    for kind in ("alone", "served")}
        tables = shipped_and_branch_tables(*(json.loads((ev[k] / "evaluation.json").read_text())
                                             for k in ("shipped_alone", "branch_alone")))
        entry = branch_entry(args.session, json.loads((alone_dir / "model.json").read_text()),
                             measured["alone"], measured["served"], tables)
        print(json.dumps({k: entry[k] for k in ("model_id", "big1024", "big1024_paired", "served_big1024")}, indent=1))
        log_entries(args.log, [entry], key="branches")
    except USER_ERRORS as e:
        print(f"lineage_branch_measure: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
