"""`rfclassify fit-refiner`: fit the constellation refiner, or the low-order one, to a trained model (torch, CPU)."""

from __future__ import annotations

import argparse

from rfclassify._argtypes import (MAX_WIDTH, count, finite_float, int_range, output_file, path_text, seed, width,
                                  worker_count)
from rfclassify.engine.options import model_dir_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from rfclassify.dsp.symbol_clock import RATE_RULES
    from rfclassify.model.refiner_fit import GROUPS, HIGH_ORDER, RefinerFitConfig

    d = RefinerFitConfig()
    parser.add_argument("--model-dir", type=model_dir_path, default=None,
                        help="trained model directory; refiner.npz and model.json are written there "
                             "(default: shipped models/)")
    parser.add_argument("--group", choices=tuple(GROUPS), default=HIGH_ORDER,
                        help="which classes it re-decides: the 12 high-order ones (refiner.npz, the default), or "
                             "the 16 others from their invariants alone (refiner_low_order.npz)")
    parser.add_argument("--per-class", type=count(), default=d.per_class,
                        help=f"bursts synthesized per class of the group (default {d.per_class})")
    parser.add_argument("--seed", type=seed, default=d.seed, help="synthesis and fit seed (use one the test split does not)")
    parser.add_argument("--workers", type=worker_count, default=d.workers, help="processes computing the burst invariants")
    parser.add_argument("--hidden", type=width, default=d.hidden,
                        help=f"units in the perceptron's hidden layer (default {d.hidden})")
    parser.add_argument("--label-smoothing", type=finite_float, default=d.label_smoothing, metavar="EPS",
                        help="smooth the perceptron's targets by EPS, then sharpen its outputs back with a "
                             "temperature fitted on the held-out share (default %(default)s)")
    parser.add_argument("--members", type=int_range(1, 1024), default=d.members, metavar="M",
                        help="fit M perceptrons (on the examples outside the held-out share, each with its own "
                             "early-stopping share, initial weights and batch order) and serve the mean of their "
                             "probabilities (default %(default)s)")
    parser.add_argument("--trees", action="store_true",
                        help="also fit gradient-boosted trees on the perceptrons' examples (LightGBM, the train "
                             "extra; served in numpy) and serve the mix of their probabilities and the "
                             "perceptrons' (docs/model.md, twenty-eighth session)")
    parser.add_argument("--tree-leaves", type=int_range(2, MAX_WIDTH), default=d.tree_leaves, metavar="N",
                        help="leaves per tree (default %(default)s)")
    parser.add_argument("--tree-lr", type=finite_float, default=d.tree_lr, metavar="LR",
                        help="the trees' learning rate (default %(default)s)")
    parser.add_argument("--tree-share", type=finite_float, default=d.tree_share, metavar="S",
                        help="the trees' share of the served probabilities (default %(default)s)")
    parser.add_argument("--backend", default=d.backend, choices=("onnxruntime", "torch"),
                        help="what runs the network while fitting")
    parser.add_argument("--sequence-net", type=path_text, default=None, metavar="NPZ",
                        help="a network from `rfclassify fit-sequence` whose outputs join the invariants "
                             "(stored inside refiner.npz)")
    parser.add_argument("--sequence-features", action="store_true",
                        help="the sequence network's pooled features (what its head reads) join its "
                             "log-probabilities in the perceptron's input; needs --sequence-net")
    parser.add_argument("--blind-view", action="store_true",
                        help="the sequence network also reads the symbols after a class-blind equalizer "
                             "(rfclassify.dsp.blind_equalizer), for multipath; needs --sequence-net")
    parser.add_argument("--power-lines", action="store_true",
                        help="the coherent power lines of the clocked symbols, raw, after the class-blind "
                             "equalizer and after a constant-modulus filter (rfclassify.dsp.power_lines); "
                             "needs --sequence-net")
    parser.add_argument("--blind-reader", type=path_text, default=None, metavar="NPZ",
                        help="a fit-sequence network of the filtered front (--front filtered) that reads the "
                             "blind view in place of the sequence network (stored inside refiner.npz); "
                             "needs --blind-view")
    parser.add_argument("--equalizer", action="store_true",
                        help="add each class's score after an equalizer fitted to its alphabets "
                             "(rfclassify.dsp.class_equalizer; about 3.4x the refiner's CPU per burst)")
    parser.add_argument("--em-channel", action="store_true",
                        help="add each class's score by a channel estimate fitted by EM, for the network's "
                             "top 3 classes or --em-classes (rfclassify.dsp.em_channel; docs/model.md, "
                             "thirty-eighth session)")
    parser.add_argument("--em-classes", type=int, default=None, metavar="N",
                        help="how many of the top-ranked classes get the EM scores, in the fit and when served "
                             "(stored in refiner.npz; default 3; docs/model.md, forty-fourth session); needs "
                             "--em-channel")
    parser.add_argument("--em-gate", default="all", metavar="GATE",
                        help="which bursts get the EM scores, from the network's ranking of the refiner's classes "
                             "and its SNR estimate: all, or dense_top<k>[_snr<dB>] (a 32-256QAM among its top k, "
                             "the SNR at least that) / dense5_top<k>[_snr<dB>] (16QAM too); the others get zeros. "
                             "Examples with every burst's scores fit any gate (docs/model.md, thirty-ninth session)")
    parser.add_argument("--em-ranker", action="store_true",
                        help="fit the EM scores for the top 3 (or --em-classes) classes of a first refiner over "
                             "the other inputs (stored inside refiner.npz), not the network's; the gate reads its "
                             "ranking too. Takes any --examples: it measures the EM scores its picks need again "
                             "(docs/model.md, fortieth session)")
    parser.add_argument("--save-examples", type=output_file, default=None, metavar="NPZ",
                        help="also write the fit's examples (the statistics of every routed burst) here")
    parser.add_argument("--examples", type=path_text, default=None, metavar="NPZ",
                        help="fit on the examples an earlier --save-examples wrote instead of making them (same "
                             "model, sequence network, rate rule and equalizer; their --per-class and --seed hold)")
    parser.add_argument("--rate-rule", choices=RATE_RULES, default=None,
                        help="how the bursts' blind clock picks the symbol rate (rfclassify.dsp.symbol_clock; "
                             "default: the sequence network's, else strongest_line; alphabet_fit finds it at low "
                             "roll-off for about 2.9x the refiner's CPU per burst)")
    parser.add_argument("--dc-pass", action="store_true",
                        help="measure the bursts after the served DC pass has cleaned them (engine.dc_pass), as "
                             "the refiner then sees them; the shipped refiner was fitted without it, and a refit "
                             "with it served level with it (docs/model.md, twenty-second session)")


def run(args: argparse.Namespace) -> int:
    from rfclassify.model.meta import default_model_dir
    from rfclassify.model.refiner_fit import GROUPS, RefinerFitConfig, fit_refiner

    cfg = RefinerFitConfig(per_class=args.per_class, seed=args.seed, hidden=args.hidden, workers=args.workers,
                           backend=args.backend, label_smoothing=args.label_smoothing, members=args.members,
                           sequence_net=args.sequence_net, equalizer=args.equalizer,
                           rate_rule=args.rate_rule, group=args.group, dc_pass=args.dc_pass,
                           sequence_features=args.sequence_features, blind_view=args.blind_view,
                           blind_reader=args.blind_reader, power_lines=args.power_lines, em_channel=args.em_channel,
                           em_gate=args.em_gate, em_ranker=args.em_ranker, trees=args.trees,
                           **({"em_classes": args.em_classes} if args.em_classes is not None else {}),
                           tree_leaves=args.tree_leaves, tree_lr=args.tree_lr, tree_share=args.tree_share)
    model_dir = args.model_dir or default_model_dir()
    rep = fit_refiner(model_dir, cfg, progress=lambda line: print(f"  {line}", flush=True), examples=args.examples,
                      save_examples_to=args.save_examples)
    acc, acc10 = rep["holdout_accuracy"], rep["holdout_accuracy_snr_ge_10db"]
    print(f"wrote {model_dir}/{GROUPS[cfg.group].file}: {len(rep['classes'])} classes, {rep['bursts_routed']} of "
          f"{rep['bursts_synthesized']} bursts routed to it, {rep['total_s']:.0f} s")
    print(f"held-out ({rep['holdout_bursts']} bursts): network {100 * acc['network']:.1f} % -> refined "
          f"{100 * acc['refined']:.1f} %; at >= 10 dB {100 * acc10['network']:.1f} % -> {100 * acc10['refined']:.1f} %")
    if "trees" in rep:
        print(f"held-out, perceptrons alone {100 * acc['perceptrons']:.1f} % "
              f"(>= 10 dB {100 * acc10['perceptrons']:.1f} %), trees alone {100 * acc['trees']:.1f} % "
              f"({100 * acc10['trees']:.1f} %); {rep['trees']['trees']} trees, {rep['trees']['rounds']} rounds")
    if "em_ranker" in rep:
        r = rep["em_ranker"]
        among = "" if r["truth_among_picks"] is None else f", the truth among its picks for {100 * r['truth_among_picks']:.1f} %"
        print(f"EM ranker: {r['bursts_picked']} bursts passed its gate{among}; EM scores kept for "
              f"{r['scores_kept']}, measured for {r['scores_measured']}")
    for key, what in (("without_equalizer", "the equalizer's scores"), ("without_em_channel", "the EM scores"),
                      ("without_sequence_features", "the sequence network's features"),
                      ("without_blind_view", "the blind view"), ("without_power_lines", "the power lines")):
        if key in rep:      # the same examples fitted without that part of the inputs
            base = rep[key]
            print(f"held-out without {what}: {100 * base['holdout_accuracy']['refined']:.1f} %; "
                  f"at >= 10 dB {100 * base['holdout_accuracy_snr_ge_10db']['refined']:.1f} %")
    print("re-run `rfclassify evaluate ... --card` for the model card's numbers")
    return 0
