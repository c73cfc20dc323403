"""`rfclassify evaluate`: accuracy tables and figures on an HDF5 dataset, optionally the model card."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from rfclassify._argtypes import finite_float, path_text, refiner_worker_count
from rfclassify._exceptions import InputError, MissingDependencyError
from rfclassify._optional import require
from rfclassify._paths import nearest_existing, writable_folder
from rfclassify.engine.options import model_dir_path
from rfclassify.engine.select import BACKEND_CHOICES, PRECISION_CHOICES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from rfclassify.dsp.symbol_clock import RATE_RULES

    parser.add_argument("dataset", metavar="FILE.h5", help="HDF5 dataset (rfclassify dataset generate/gnuradio)")
    parser.add_argument("--model-dir", type=model_dir_path, default=None,
                        help="model directory (default: shipped models/)")
    parser.add_argument("--backend", default="auto", choices=BACKEND_CHOICES,
                        help="inference backend, through the serving Classifier (default auto; tensorrt "
                             "measures a Jetson's engines)")
    parser.add_argument("--precision", default="auto", choices=PRECISION_CHOICES,
                        help="numeric precision (default auto: the best the backend has artifacts for; on the "
                             "CPU int8 where `rfclassify calibrate` made the INT8 graph, else fp32)")
    parser.add_argument("--out", type=path_text, default=None,
                        help="where evaluation.json and the PNGs go (default: <model-dir>/eval/<file stem>); "
                             "with --card, those written outside the card's directory are copied into its "
                             "eval/<file stem> too, so the card links only to files beside it")
    parser.add_argument("--name", default=None, help="name of this evaluation in the card (default source:stem)")
    parser.add_argument("--extra-eval", type=path_text, nargs="*", default=[], metavar="FILE.h5",
                        help="more datasets (e.g. the GNU Radio set) evaluated into the same card; their "
                             "results go to <--out>/<file stem> (default: <model-dir>/eval/<file stem>)")
    parser.add_argument("--no-refiner", action="store_true",
                        help="leave out the model's refiners, the constellation and the low-order one (measure the "
                             "network alone)")
    parser.add_argument("--no-low-order-refiner", action="store_true",
                        help="leave out the model's low-order refiner alone")
    parser.add_argument("--light-refiner", action="store_true",
                        help="the refiner's light variant (invariants only, no sequence network)")
    parser.add_argument("--refiner-rate-rule", choices=RATE_RULES, default=None,
                        help="clock the refiner's bursts by this rate rule (default: the model's serving rule, "
                             "model.json refiner.serve_rate_rule, else the one it was fitted on)")
    parser.add_argument("--refiner-em-classes", type=int, default=None, metavar="N",
                        help="fit the refiner's EM scores for the network's top N classes (default: model.json "
                             "refiner.serve_em_classes, else the count it was fitted with, 3)")
    parser.add_argument("--no-dc-pass", action="store_true",
                        help="leave out the DC pass before the refiners (engine.dc_pass: each burst's receiver DC "
                             "offset found and taken out, the network run again on it)")
    parser.add_argument("--refiner-skip-above", type=finite_float, default=None, metavar="P",
                        help="a burst whose network top probability is above P keeps the network's answer, "
                             "without the DC pass and the refiners (default: model.json refiner_skip_above; "
                             "1: every burst goes through them)")
    parser.add_argument("--refiner-workers", type=refiner_worker_count, default=0, metavar="N",
                        help="compute the refiner's statistics in N processes (default 0: in this one; -1: all "
                             "cores but two, at least two); the results are the same, sooner on a box with "
                             "cores to spare")
    parser.add_argument("--predictions", action="store_true",
                        help="also write each burst's outcome, served probabilities and SNR estimate "
                             "(predictions.npz) for a burst-for-burst comparison of two evaluations "
                             "(benchmarks/paired_compare.py)")
    parser.add_argument("--no-plots", action="store_true",
                        help="write no PNG figures (evaluation.json only; needs no matplotlib, e.g. on a "
                             "box with the serving install)")
    parser.add_argument("--card", action="store_true",
                        help="write MODEL_CARD.md and model_card.json (merging earlier evaluations)")
    parser.add_argument("--card-dir", type=path_text, default=None,
                        help="where the card goes (default: the model directory)")


def _print(res: dict) -> None:
    print(f"{res['name']}: {res['dataset']['n_bursts']} bursts via {res['run']['backend']} "
          f"{res['run']['precision']} at {res['bursts_per_s']} bursts/s; rejected {res['rejected'] or 'none'}")
    unread = res.get("unreadable") or {}
    if unread.get("bursts"):
        print(f"unreadable: {unread['bursts']} bursts cannot be read (damaged file), left out: the numbers below "
              f"are over the other {res['dataset']['n_bursts'] - unread['bursts']}")
    left = res.get("not_scored") or {}
    if left.get("bursts"):
        print(f"not scored: {left['bursts']} bursts of labels this model does not classify "
              f"({', '.join(left['labels'])})")
    counts, skip = res["run"].get("refiner_skip_counts"), res["run"].get("refiner_skip_above")
    if counts and skip is not None and skip < 1:
        print(f"{counts['skipped']} of {counts['long_enough']} bursts of >= {res['run']['refiner_skip_min_samples']} "
              f"samples skipped the DC pass and the refiners (network top probability above {skip:g})")
    print(f"{'bucket':>7} {'n':>6} {'acc':>7} {'meanSNR':>8} {'>=10dB':>7} {'SNR MAE':>8}")
    for b, s in [*res["per_bucket"].items(), ("all", res["overall"])]:
        print(f"{b:>7} {s['n']:>6} {s['accuracy']:7.3f} {s['mean_accuracy_over_snr']:8.3f} "
              f"{s['accuracy_snr_ge_10db']:7.3f} {s.get('snr_mae_db_0_20', float('nan')):8.2f}")


def _card_figures(out: Path, figures: list[str], card_dir: Path, stem: str) -> list[str]:
    """The card's links to an evaluation's figures, relative to card_dir. Figures written
    outside card_dir (an --out elsewhere) are copied, with evaluation.json, into
    card_dir/eval/<dataset stem>, so that the card never links to files it does not ship."""
    kept = _card_folder(out, card_dir, stem)
    if figures and kept != out:
        kept.mkdir(parents=True, exist_ok=True)
        for name in [*figures, "evaluation.json"]:
            shutil.copyfile(out / name, kept / name)
    return [os.path.relpath(kept / f, card_dir) for f in figures]


def _card_folder(out: Path, card_dir: Path, stem: str) -> Path:
    """Where the card links an evaluation's figures: `out` itself inside card_dir, else
    card_dir/eval/<dataset stem>."""
    return out if out.resolve().is_relative_to(card_dir.resolve()) else card_dir / "eval" / stem


def _check_folder(folder: Path, what: str) -> None:
    """InputError unless `folder` is one, or can be made: the nearest part of it that exists is a
    folder this process may write in."""
    if folder.exists() and not folder.is_dir():
        raise InputError(f"{what} {folder} is a file, not a folder")
    base = nearest_existing(folder.absolute())
    if not writable_folder(base):
        raise InputError(f"{what} {folder} cannot be written ({base} is not a writable folder)")


def run(args: argparse.Namespace) -> int:
    from rfclassify.data.reader import DatasetReader
    from rfclassify.model.evaluate import counts_text, evaluate_file
    from rfclassify.model.meta import default_model_dir

    model_dir = args.model_dir or default_model_dir()  # --model-dir is already a Path
    card_dir = Path(args.card_dir) if args.card_dir else model_dir
    if not args.no_plots:
        try:    # found before the evaluation, not after it (the figures are drawn last)
            require("matplotlib", "the figures")
        except MissingDependencyError as exc:
            raise MissingDependencyError(f"{exc}, or pass --no-plots") from None
    datasets = [args.dataset, *args.extra_eval]
    names: dict[str, str] = {}      # the card's name of each evaluation -> its file
    for i, path in enumerate(datasets):
        # every file opened (and checked) first: a bad --extra-eval failed after the main file's
        # evaluation, minutes of it on a full test split, and left no card
        reader = DatasetReader(path)
        name = (args.name if i == 0 and args.name else None) or f"{reader.attrs.source}:{Path(path).stem}"
        reader.close()
        if args.card and name in names:
            # the card keeps evaluations by name: the second replaced the first (sixty-sixth note)
            raise InputError(f"{path} and {names[name]} would both be the card's evaluation {name!r}; "
                             "give the first a --name or rename one")
        names[name] = str(path)
    # --out holds the run's results: the first file's there, the others' in --out/<file stem> (they
    # went into the model's eval/<file stem>, into the shipped models/ by default, --out or not);
    # without it, each in <model-dir>/eval/<file stem>. The card copies what it links (_card_figures)
    home = Path(args.out) if args.out else model_dir / "eval"
    outs = [Path(args.out) if (args.out and i == 0) else home / Path(path).stem for i, path in enumerate(datasets)]
    # where the results go, checked before the evaluation too: an --out that is a file failed
    # after it, and two datasets of one name wrote one folder, the first lost (sixty-sixth session)
    seen: dict[Path, str] = {}
    for i, (path, out) in enumerate(zip(datasets, outs, strict=True)):
        _check_folder(out, "--out" if i == 0 and args.out else "the evaluation folder")
        if out.resolve() in seen:
            raise InputError(f"{path} and {seen[out.resolve()]} would both be evaluated into {out}; "
                             "rename one (its file name names the folder) or give the first --out")
        seen[out.resolve()] = str(path)
    if args.card:
        _check_folder(card_dir, "--card-dir")
        linked: dict[Path, str] = {}    # where the card's copies of each evaluation's figures go
        for path, out in zip(datasets, outs, strict=True):
            kept = _card_folder(out, card_dir, Path(path).stem).resolve()
            if not args.no_plots and kept in linked:
                raise InputError(f"{path} and {linked[kept]} would both have their figures kept in {kept} for "
                                 "the card; rename one (its file name names the folder)")
            linked[kept] = str(path)
    results = []
    for i, (path, out) in enumerate(zip(datasets, outs, strict=True)):
        res = evaluate_file(path, model_dir, backend=args.backend, precision=args.precision, out_dir=out,
                            name=args.name if i == 0 else None, refiner=not args.no_refiner,
                            refiner_sequence=not args.light_refiner, predictions=args.predictions,
                            refiner_rate_rule=args.refiner_rate_rule, refiner_workers=args.refiner_workers,
                            dc_pass=not args.no_dc_pass, low_order_refiner=not args.no_low_order_refiner,
                            refiner_em_classes=args.refiner_em_classes,
                            refiner_skip_above=args.refiner_skip_above, plots=not args.no_plots)
        if args.card:
            res["figures_rel"] = _card_figures(out, res.get("figures", []), card_dir, Path(path).stem)
        unread = res["unreadable"]
        if unread["bursts"]:   # stderr too: a script that keeps stdout alone is told
            print(f"warning: {path}: {unread['bursts']} of {res['dataset']['n_bursts']} bursts cannot be read "
                  f"({counts_text(unread['by_reason'])}), left out of the evaluation; the first: {unread['first']}",
                  file=sys.stderr, flush=True)
        _print(res)
        figures = "" if args.no_plots else " and figures"
        print(f"wrote {out}/evaluation.json{', predictions.npz' if args.predictions else ''}{figures}")
        results.append(res)
    if args.card:
        from rfclassify.model.card import CARD_JSON, CARD_MD, build_card

        build_card(model_dir, results, card_dir)
        print(f"wrote {card_dir}/{CARD_MD} and {card_dir}/{CARD_JSON}")
    return 0
