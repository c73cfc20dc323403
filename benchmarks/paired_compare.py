"""Two evaluations of the same dataset, burst for burst: B's accuracy minus A's, with its standard error.

Each argument is a predictions.npz from `rfclassify evaluate FILE.h5 --predictions --out DIR`
(or the DIR). Prints, per length bucket and overall, the difference in mean accuracy over
the SNR grid and in accuracy at SNR >= 10 dB, each +- one standard error of the paired
difference, and how many bursts only one of them got right (rfclassify.model.paired).

    PYTHONPATH=. python3 benchmarks/paired_compare.py A_DIR B_DIR [--names A B] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rfclassify._exceptions import ConfigError  # noqa: E402
from rfclassify.model.paired import format_difference, load_predictions, paired_difference  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", type=Path, help="the baseline's predictions.npz or evaluation directory")
    ap.add_argument("b", type=Path, help="the variant's")
    ap.add_argument("--names", nargs=2, default=("A", "B"), metavar=("A", "B"))
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    try:
        diff = paired_difference(load_predictions(args.a), load_predictions(args.b))
    except ConfigError as e:
        print(f"paired_compare: {e}", file=sys.stderr)
        return 2
    print(format_difference(diff, *args.names))
    if args.json:
        args.json.write_text(json.dumps({"a": str(args.a), "b": str(args.b), **diff}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
