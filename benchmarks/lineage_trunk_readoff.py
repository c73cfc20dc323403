"""Read a lineage's paused trunk off on a CPU and log it in trunk_readoffs.json.

No device time: `train --resume CHECKPOINT --steps <its own step>` trains nothing and writes
the checkpoint's weights as a model, and with `--ema-half-life-steps` its weight average
instead (when the checkpoint keeps one). Each is exported and evaluated alone
(`evaluate --no-refiner`) on a dataset, compared burst for burst with the shipped network
evaluated the same way, the average also with the live weights and, given `--against`, with
another evaluation (a decay branch's, from `lineage_branch_measure.py` in the same work
folder; the pairing is keyed by the model that evaluation measured). Undecayed snapshots
wobble by a point at >= 10 dB (fiftieth session): a read-off says how the trunk trends, a
branch what it reaches; the weight average is steadier and takes about half of a decay's
gain (fifty-first session).

    PYTHONPATH=. python3 benchmarks/lineage_trunk_readoff.py benchmarks/lineage_wsd_wide/checkpoint.pt \
        /work/data/big1024.h5 --work /tmp/lineage --session 51 \
        --log benchmarks/lineage_wsd_wide/trunk_readoffs.json [--against /tmp/lineage/eval_branch_alone]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lineage_branch_measure import USER_ERRORS, _evaluate, _export, _overall, _paired, _run, log_entries  # noqa: E402

from rfclassify._exceptions import ConfigError  # noqa: E402


def readoff_args(checkpoint: Path, ck: dict[str, Any], out: Path, average: bool) -> list[str]:
    """`rfclassify train` arguments that write the checkpoint's live weights (or its weight
    average) as a model at `out` without a training step, validated with the run's own recipe.
    ConfigError for an average the checkpoint does not keep."""
    cfg = ck.get("config", {})
    if int(ck["step"]) < 1:
        raise ConfigError(f"{checkpoint} is at step 0: nothing trained to read off")
    args = ["train", "--out", str(out), "--resume", str(checkpoint), "--steps", str(int(ck["step"])),
            "--device", "cpu", "--workers", "1", "--val-per-bucket", str(cfg.get("val_per_bucket", 1024)),
            "--seed", str(int(cfg.get("seed", 0)) + 1)]
    if cfg.get("channel_overrides"):
        args += ["--channel-overrides", json.dumps(cfg["channel_overrides"])]
    if average:
        if not ck.get("ema"):
            raise ConfigError(f"{checkpoint} keeps no weight average (its run had no --ema-half-life-steps)")
        args += ["--ema-half-life-steps", str(ck["ema"]["half_life_steps"])]
    else:   # the live weights: a --resume keeps its checkpoint's average unless told to drop it
        args += ["--ema-half-life-steps", "0"]
    return args


def evaluated_model(eval_dir: Path) -> str:
    """The model id an evaluation folder measured (its evaluation.json's run), else the
    folder's name: what an entry's pairing with `--against` is keyed by."""
    try:
        return json.loads((eval_dir / "evaluation.json").read_text())["run"]["model"]
    except (FileNotFoundError, KeyError, ValueError):
        return eval_dir.name


def readoff_entry(session: int, ck: dict[str, Any], meta: dict[str, Any], big1024: dict[str, float],
                  paired: dict[str, Any]) -> dict[str, Any]:
    """One trunk_readoffs.json entry: which weights of which step (the model's record says
    whether they are the average), and what they measured."""
    avg = meta.get("extra", {}).get("training", {}).get("weight_average")
    return {"session": session, "step": int(ck["step"]), "model_id": meta["model_id"],
            "weights": (f"average (half-life {avg['half_life_steps']} steps since step {avg['since_step']})"
                        if avg else "live"),
            "big1024": big1024, **paired}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", type=Path, help="the trunk's checkpoint.pt")
    ap.add_argument("data", type=Path, help="the dataset the read-offs and the shipped network are evaluated on")
    ap.add_argument("--work", type=Path, required=True, help="folder for the models and evaluations")
    ap.add_argument("--session", type=int, required=True)
    ap.add_argument("--shipped", type=Path, default=Path("models"))
    ap.add_argument("--against", type=Path, default=None,
                    help="another evaluation folder (with predictions.npz) to pair the read-offs with")
    ap.add_argument("--log", type=Path, default=None, help="trunk_readoffs.json to append the entries to")
    args = ap.parse_args(argv)
    try:
        import torch

        ck = torch.load(args.checkpoint, map_location="cpu", weights_only=False)
        args.work.mkdir(parents=True, exist_ok=True)
        shipped = _evaluate(args.shipped, args.data, args.work / "eval_shipped_alone", alone=True)
        evals: dict[str, Path] = {}
        entries = []
        for kind in ("live", "average") if ck.get("ema") else ("live",):
            model = args.work / f"readoff_{ck['step']}_{kind}"
            if not (model / "model.onnx").is_file():
                shutil.rmtree(model, ignore_errors=True)
                _run(*readoff_args(args.checkpoint, ck, model, kind == "average"))
                _export(model)
            evals[kind] = _evaluate(model, args.data, args.work / f"eval_readoff_{ck['step']}_{kind}", alone=True)
            paired = {"paired_vs_shipped_network": _paired(shipped, evals[kind])}
            if kind == "average":
                paired["paired_vs_live_weights"] = _paired(evals["live"], evals[kind])
            if args.against:
                paired[f"paired_vs_{evaluated_model(args.against)}"] = _paired(args.against, evals[kind])
            entries.append(readoff_entry(args.session, ck, json.loads((model / "model.json").read_text()),
                                         _overall(evals[kind]), paired))
        print(json.dumps(entries, indent=1))
        log_entries(args.log, entries, key="readoffs")
    except USER_ERRORS as e:
        print(f"lineage_trunk_readoff: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
