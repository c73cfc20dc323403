"""`rfclassify fit-sequence`: train the refiner's sequence network (torch, CPU or CUDA)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rfclassify._argtypes import count, finite_float, int_range, learning_rate, output_file, seed, width, worker_count
from rfclassify.engine.options import model_dir_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from rfclassify.dsp.sequence_fronts import FRONTS
    from rfclassify.dsp.symbol_clock import RATE_RULES
    from rfclassify.dsp.symbol_sequence import CARRIER_PASSES
    from rfclassify.model.sequence_fit import SEQUENCE_NET_FILE, SequenceFitConfig

    d = SequenceFitConfig()
    parser.add_argument("--model-dir", type=model_dir_path, default=None,
                        help="the model whose training recipe (channel) the bursts follow (default: shipped models/)")
    parser.add_argument("--out", type=output_file, default=None,
                        help=f"where to write the network (default: MODEL_DIR/{SEQUENCE_NET_FILE}); "
                             "`rfclassify fit-refiner --sequence-net` then fuses it")
    parser.add_argument("--bursts", type=count(), default=d.bursts,
                        help=f"training bursts (default {d.bursts}), made in whole chunks of {d.chunk} (so rounded up); "
                             "a burst without clocked symbols is left out")
    parser.add_argument("--start-bursts", type=count(0), default=d.start_bursts,
                        help="start training once this many bursts are made; the rest keep coming while it "
                             "trains (default 0: make them all first, which is reproducible)")
    parser.add_argument("--train-s", type=finite_float, default=d.train_s, help=f"training seconds (default {d.train_s:g})")
    parser.add_argument("--max-steps", type=count(0), default=d.max_steps,
                        help="also stop after this many steps (default 0: the time budget alone)")
    parser.add_argument("--device", default=d.device, help=f"cpu | cuda | cuda:N (default {d.device})")
    parser.add_argument("--workers", type=worker_count, default=d.workers, help="processes making the sequences")
    parser.add_argument("--seed", type=seed, default=d.seed, help="synthesis and training seed")
    parser.add_argument("--eval-per-length", type=count(), default=d.eval_per_length,
                        help="fresh evaluation bursts per length")
    parser.add_argument("--width", type=width, default=d.width, help=f"channels of the residual blocks (default {d.width})")
    parser.add_argument("--hidden", type=width, default=d.hidden, help=f"width of the head's hidden layer (default {d.hidden})")
    parser.add_argument("--blocks", type=int_range(1, 1024), default=d.blocks, help=f"residual blocks (default {d.blocks})")
    parser.add_argument("--gates", action="store_true",
                        help="a squeeze-and-excitation gate on each residual block (channel gains from the whole burst)")
    parser.add_argument("--front", choices=FRONTS, default=d.front,
                        help="the input: the clocked symbols' channels, or those and the best alphabet's "
                             "equalized symbols, or those and the class-blind filter's symbols and moments, "
                             "or the filter's symbols alone (a reader for the refiner's blind view, "
                             "fit-refiner --blind-reader) (rfclassify.dsp.sequence_fronts; default %(default)s)")
    parser.add_argument("--rate-rule", choices=RATE_RULES, default=d.rate_rule,
                        help="how the bursts' blind clock picks the symbol rate: the strongest |x|^2 line, or "
                             "the line whose symbols an alphabet fits best (rfclassify.dsp.symbol_clock; "
                             "default %(default)s)")
    parser.add_argument("--carrier", choices=CARRIER_PASSES, default=d.carrier,
                        help="the second carrier pass: the strongest 4th/8th-power line of the symbols, or the "
                             "frequency under which a few alphabets fit them best (rfclassify.dsp.symbol_sequence; "
                             "default %(default)s)")
    parser.add_argument("--batch", type=width, default=d.batch, help=f"bursts per step (default {d.batch})")
    parser.add_argument("--lr", type=learning_rate, default=d.lr, help=f"peak learning rate (default {d.lr:g})")
    parser.add_argument("--eval-every", type=count(), default=d.eval_every, help="steps between evaluations and saves")


def run(args: argparse.Namespace) -> int:
    from rfclassify.model.meta import ModelMeta, default_model_dir
    from rfclassify.model.sequence_fit import SEQUENCE_NET_FILE, SequenceFitConfig, fit_sequence_net, report_summary

    model_dir = args.model_dir or default_model_dir()
    cfg = SequenceFitConfig(bursts=args.bursts, start_bursts=args.start_bursts, train_s=args.train_s,
                            max_steps=args.max_steps, device=args.device, workers=args.workers, seed=args.seed,
                            width=args.width, hidden=args.hidden, blocks=args.blocks, gates=args.gates,
                            front=args.front, rate_rule=args.rate_rule, carrier=args.carrier,
                            batch=args.batch, lr=args.lr,
                            eval_per_length=args.eval_per_length, eval_every=args.eval_every)
    out = args.out or Path(model_dir) / SEQUENCE_NET_FILE
    rep = fit_sequence_net(out, cfg, ModelMeta.load(model_dir).channel_overrides,
                           progress=lambda line: print(f"  {line}", flush=True))
    print(f"wrote {out}: {rep['params']} parameters; {report_summary(rep)}")
    print("fuse it with `rfclassify fit-refiner --sequence-net " + str(out) + "`")
    return 0
