"""The model card: MODEL_CARD.md (for people) and model_card.json (for programs), from what the
model directory already holds (model.json, train_log.json, export_report.json) plus evaluations.

Evaluations merge by name: a second `rfclassify evaluate --card` (e.g. on the GNU Radio set)
adds its section and keeps the others, as long as the model id is the same.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from rfclassify._paths import storable
from rfclassify.model.evaluate import clean_json, write_json
from rfclassify.model.meta import ModelMeta

CARD_MD = "MODEL_CARD.md"
CARD_JSON = "model_card.json"


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _pct(x: Any) -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{100 * x:.1f}%"


def _num(x: Any, fmt: str = ".2f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)


def build_card(model_dir: str | os.PathLike[str], evaluations: list[dict[str, Any]] | None = None,
               card_dir: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Write MODEL_CARD.md and model_card.json into card_dir (default model_dir); returns the JSON."""
    from rfclassify.model.flops import flops_per_bucket
    from rfclassify.model.network import build_network, count_parameters

    mdir = Path(model_dir)
    cdir = Path(card_dir or model_dir)
    cdir.mkdir(parents=True, exist_ok=True)
    meta = ModelMeta.load(mdir)
    old = _read_json(cdir / CARD_JSON)
    evals = dict(old.get("evaluations", {})) if old.get("model_id") == meta.model_id else {}
    for ev in evaluations or []:
        evals[ev["name"]] = ev
    log = _read_json(mdir / "train_log.json").get("training", {})
    training = {**meta.extra.get("training", {}), **log}
    net = build_network(meta.arch or None)
    card = clean_json({
        "model_id": meta.model_id, "labels": list(meta.labels),
        "buckets_samples": list(meta.buckets_samples), "min_samples": meta.min_samples,
        "max_windows": meta.max_windows, "symbol_rate": meta.symbol_rate,
        "normalization": meta.normalization, "arch": meta.arch,
        "parameters": count_parameters(net),
        "flops_per_bucket": flops_per_bucket(net, meta.buckets_samples),
        "temperature": meta.temperature, "unknown_threshold": meta.unknown_threshold,
        "refiner": meta.refiner,
        "low_order_refiner": meta.low_order_refiner,
        "refiner_skip_above": meta.refiner_skip_above, "refiner_skip_min_samples": meta.refiner_skip_min_samples,
        "refiner_skip_temperature": meta.refiner_skip_temperature,
        "training": {k: training.get(k) for k in (
            "command", "seed", "device_name", "steps", "train_s", "total_s", "examples_fresh",
            "examples_reused", "data_wait_s", "recipe", "validation", "calibration", "torch",
            "started_utc", "init_from", "lineage", "commands", "weight_average") if k in training},
        "export": _read_json(mdir / "export_report.json") or meta.extra.get("export", {}),
        "int8": meta.extra.get("int8", {}) if meta.int8_onnx_file else {},
        "tensorrt_int8": meta.extra.get("tensorrt_int8", {}),
        "evaluations": evals,
    })
    write_json(cdir / CARD_JSON, card)
    # a path with bytes that are not UTF-8 (the dataset's, read back from JSON) as \xNN
    (cdir / CARD_MD).write_text(storable(render_markdown(card)), encoding="utf-8")
    return card


def _resumed(commands: list[str] | None) -> str:
    """What the card adds to a resumed run's command: the invocations it continued, in order."""
    if not commands or len(commands) < 2:
        return ""
    return "; it resumed " + ", then ".join(f"`{c}`" if c else "a run that recorded no command"
                                            for c in commands[:-1])


def _overrides(overrides: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(overrides.items()))


def _focus(focus: Any) -> str:
    """The recipe's SNR focus in words ('' for none)."""
    if not focus:
        return ""
    lo, hi, share = focus
    return f" ({_pct(share)} of them drawn from {lo:g}..{hi:g} dB instead)"


def _lineage_lines(t: dict[str, Any]) -> list[str]:
    """The warm-start line of the training section (none for a run that started from random weights)."""
    total = t.get("lineage")
    if not t.get("init_from") or not total:
        return []
    grown = (f" (deepened from its {t['grown_from_parameters']:,} parameters, added units starting as identity)"
             if t.get("grown_from_parameters") else "")
    return [f"- Warm-started from `{t['init_from']}`{grown}; over every run behind this model: {total['steps']:,} steps, "
            f"{total['train_s']} s of training schedule, {total['examples']:,} bursts (fresh and reused)"]


def _average_lines(t: dict[str, Any]) -> list[str]:
    """The weights line of the training section: said only when they are a moving average."""
    avg = t.get("weight_average")
    if not avg:
        return []
    return [f"- Weights: the moving average of the trained weights (half-life {avg['half_life_steps']:,} steps, "
            f"kept since step {avg['since_step']:,}), not the last step's"]


def _by_bucket(per_length: dict[str, Any]) -> list[tuple[str, Any]]:
    """A {length in samples: value} record in length order (JSON written with sorted keys puts
    "1024" before "128")."""
    return sorted(per_length.items(), key=lambda kv: int(kv[0]))


def _int8_lines(rec: dict[str, Any]) -> list[str]:
    """The INT8 graph ONNX Runtime serves on the CPU (rfclassify.quant.cpu_int8), where one exists."""
    if not rec:
        return []
    cal = rec.get("calibration", {})
    lines = ["", "### INT8 on the CPU (ONNX Runtime)", "",
             f"`{rec.get('file')}`, made by `rfclassify calibrate` (onnxruntime {rec.get('onnxruntime')}): "
             f"{rec.get('format')}, activations {rec.get('activations')}, weights {rec.get('weights')}; "
             f"{rec.get('int8_nodes')} nodes INT8, the {len(rec.get('fp32_nodes', []))} of the two heads fp32. "
             f"Activation ranges: {rec.get('method')} over {cal.get('bursts')} bursts of `{cal.get('file')}` "
             f"(samples sha256 {str(cal.get('samples_sha256'))[:16]}), windows per bucket "
             + ", ".join(f"{b}: {n}" for b, n in _by_bucket(cal.get("windows_per_bucket", {})))
             + (f"; bias correction: {rec['bias_correction']}" if rec.get("bias_correction") else "")
             + ". Precision `auto` serves it on ONNX Runtime; `--precision fp32` serves model.onnx.", "",
             "Against the fp32 graph on freshly synthesized bursts (each label alike, SNR 0..30 dB), "
             "the network alone:", "",
             "| bucket | bursts | top-1 agreement | max abs softmax diff | mean / max abs SNR diff |",
             "|---:|---:|---:|---:|---:|"]
    for b, a in _by_bucket(rec.get("agreement", {})):
        lines.append(f"| {b} | {a.get('bursts')} | {_pct(a.get('top1_agreement'))} | "
                     f"{_num(a.get('max_abs_softmax_diff'), '.3f')} | {_num(a.get('mean_abs_snr_db_diff'))} / "
                     f"{_num(a.get('max_abs_snr_db_diff'))} dB |")
    return lines


def _tensorrt_int8_lines(rec: dict[str, Any]) -> list[str]:
    """TensorRT's INT8 pair (rfclassify.quant.tensorrt_int8), where calibrate made one."""
    if not rec:
        return []
    lines = ["", "### INT8 for TensorRT (never run in TensorRT)", "",
             f"`{rec.get('qdq_file')}` (the GPU's Q/DQ graph: activations {rec.get('activations')}, weights "
             f"{rec.get('weights')}) and `{rec.get('calibration_cache_file')}` (the DLA's calibration cache, "
             f"TensorRT {rec.get('calibration_cache_tensorrt')} header: {rec.get('cache_tensors')} tensors, "
             f"{rec.get('cache_scales_equalized')} scales raised so that each residual sum's inputs, and each "
             "pooling's input and output, share one), from "
             "the same calibration as the CPU graph. Run in ONNX Runtime against the fp32 graph on freshly "
             "synthesized bursts (an estimate of the quantization, not of TensorRT's kernels):", "",
             "| bucket | top-1 agreement, Q/DQ graph | top-1 agreement, the cache's scales "
             "| mean abs SNR diff, Q/DQ / cache |",
             "|---:|---:|---:|---:|"]
    cached = rec.get("agreement_cache_scales", {})
    for b, a in _by_bucket(rec.get("agreement_qdq", {})):
        c = cached.get(b, {})
        lines.append(f"| {b} | {_pct(a.get('top1_agreement'))} | {_pct(c.get('top1_agreement'))} | "
                     f"{_num(a.get('mean_abs_snr_db_diff'))} / {_num(c.get('mean_abs_snr_db_diff'))} dB |")
    return lines


def _refiner_lines(r: dict[str, Any]) -> list[str]:
    """The constellation refiner's section (none for a model without one)."""
    fit = r.get("fit")
    if not fit:
        return []
    acc, acc10, cfg = fit["holdout_accuracy"], fit["holdout_accuracy_snr_ge_10db"], fit["config"]
    seq = fit.get("sequence_net")
    seq_input = (", and the class log-probabilities of a sequence network over the burst's carrier-recovered clocked "
                 "symbols (rfclassify/dsp/symbol_sequence.py, rfclassify/engine/sequence_net.py; stored in the same "
                 "file)" if seq else "")
    if seq and cfg.get("blind_view"):
        seq_input += (" and over the same symbols after a class-blind equalizer (rfclassify/dsp/blind_equalizer.py)"
                      + (", read by a second network of the same shape trained on such symbols (stored in the same "
                         "file too)" if cfg.get("blind_reader") else "")
                      + ", with that filter's fourth moments before and after")
    if seq and cfg.get("power_lines"):
        seq_input += (", and the coherent power lines of those symbols, raw, after that filter and after a "
                      "constant-modulus filter (rfclassify/dsp/power_lines.py)")
    if cfg.get("equalizer"):
        seq_input += (", and how well each class's alphabets explain the clocked symbols after an equalizer fitted "
                      "to them (rfclassify/dsp/class_equalizer.py)")
    if cfg.get("em_channel"):
        seq_input += (f", and, for the network's top {_count_word(_em_fitted(cfg))} of those classes, how well their "
                      "alphabets explain the burst through a channel estimated for each by EM "
                      "(rfclassify/dsp/em_channel.py)"
                      + _em_gate_words(cfg.get("em_gate", "all")))
    seq_lines = [] if not seq else [
        f"- Sequence network: {seq['params']:,} parameters, trained by `rfclassify fit-sequence` on "
        f"{seq['training_bursts']:,} bursts ({seq['examples']:,} examples, {seq['train_s']:.0f} s); alone, on fresh "
        "bursts at SNR 10..30 dB, by burst length: "
        + ", ".join(f"{n}: {_pct(v)}" for n, v in _by_bucket(seq["eval_accuracy_by_length"])) + "."]
    return ["", "## Constellation refiner", "",
            f"Bursts the network calls one of {', '.join(r['classes'])} are re-decided among those classes by "
            f"{_perceptron_words(cfg, fit.get('trees'))} from the network's "
            "log-probabilities, its SNR estimate and the burst's carrier-invariant statistics at its blind symbol clock "
            f"(rfclassify/dsp/symbol_clock.py, rfclassify/engine/refiner.py){seq_input}; the probability the network "
            f"gave those classes is shared out again, every other class keeps its own. File `{r['file']}` "
            f"(sha256 {r['sha256'][:12]}...).", "",
            *seq_lines,
            f"- Fitted by `rfclassify fit-refiner --per-class {cfg['per_class']} --seed {cfg['seed']}"
            f"{' --sequence-net ' + Path(seq['file']).name if seq else ''}{_fit_flags(cfg)}`: "
            f"{fit['bursts_synthesized']:,} bursts of those classes from the training recipe at "
            f"{', '.join(map(str, fit['lengths']))} samples, {fit['bursts_routed']:,} of them called one of the "
            f"classes by the network; {fit['total_s']:.0f} s on the CPU.",
            f"- Held-out share ({fit['holdout_bursts']:,} of those bursts): network {_pct(acc['network'])} -> "
            f"refined {_pct(acc['refined'])}; at SNR >= 10 dB {_pct(acc10['network'])} -> {_pct(acc10['refined'])}. "
            "By burst length (network -> refiner): " + ", ".join(
                f"{n}: {_pct(v['network'])} -> {_pct(v['refined'])}"
                for n, v in _by_bucket(fit.get("holdout_by_length", {})))
            + f"; bursts shorter than {fit.get('min_samples', 0)} samples are left to the network."
            + _fuser_parts(acc, acc10),
            *_serving_clock_lines(r.get("serve_rate_rule"), fit.get("rate_rule")),
            *_serving_em_lines(r.get("serve_em_classes"), cfg),
            *_light_lines(r.get("light"))]


def _perceptron_words(cfg: dict[str, Any], trees: dict[str, Any] | None = None) -> str:
    """What decides: one two-layer perceptron, or an ensemble of them, and the trees beside them."""
    one = f"two-layer perceptron ({cfg['hidden']} hidden units, numpy on the CPU)"
    members = cfg.get("members", 1)
    words = (f"a {one}" if members == 1 else
             f"the mean class probabilities of {members} two-layer perceptrons ({cfg['hidden']} hidden units each, "
             "numpy on the CPU, fitted from their own initial weights)")
    if not trees:
        return words
    return (f"{words}, mixed {1 - trees['share']:g} : {trees['share']:g} with the class probabilities of "
            f"{trees['trees']:,} gradient-boosted trees ({trees['leaves']} leaves each, {trees['rounds']} rounds "
            "fitted by LightGBM on the same examples, evaluated in numpy)")


def _fuser_parts(acc: dict[str, float], acc10: dict[str, float]) -> str:
    """The held-out scores of the perceptrons and the trees alone, when the refiner has both."""
    if "trees" not in acc:
        return ""
    return (f" Each alone on the same share: perceptrons {_pct(acc['perceptrons'])} ({_pct(acc10['perceptrons'])} at "
            f">= 10 dB), trees {_pct(acc['trees'])} ({_pct(acc10['trees'])}).")


def _em_gate_words(gate: str) -> str:
    """What a refiner's EM gate (em_channel.passes_gate) passes, in words ('' for every burst)."""
    from rfclassify.dsp.em_channel import gate_terms

    terms = gate_terms(gate)
    if terms is None:
        return ""
    qams, top, least_snr = terms
    snr = f" and an SNR estimate of at least {least_snr:g} dB" if least_snr is not None else ""
    return (f", only for the bursts with one of {', '.join(qams)} among the network's top {top} of them{snr} "
            f"(EM gate `{gate}`; the others get zeros there)")


def _fit_flags(cfg: dict[str, Any]) -> str:
    """The fit-refiner options beyond --per-class, --seed and --sequence-net that shaped a refiner."""
    flags = [f" --rate-rule {cfg['rate_rule']}"] if cfg.get("rate_rule") else []
    options = ("blind_view", "power_lines", "sequence_features", "equalizer", "em_channel", "dc_pass")
    flags += [f" --{name.replace('_', '-')}" for name in options if cfg.get(name)]
    flags += [f" --em-gate {cfg['em_gate']}"] if cfg.get("em_gate", "all") != "all" else []
    if cfg.get("em_channel") and _em_fitted(cfg) != _em_default():
        flags.append(f" --em-classes {cfg['em_classes']}")
    flags += [f" --blind-reader {Path(cfg['blind_reader']).name}"] if cfg.get("blind_reader") else []
    flags += [f" --label-smoothing {cfg['label_smoothing']:g}"] if cfg.get("label_smoothing") else []
    flags += [f" --members {cfg['members']}"] if cfg.get("members", 1) > 1 else []
    if cfg.get("trees"):
        from rfclassify.model.refiner_fit import RefinerFitConfig

        d = RefinerFitConfig()
        flags += [" --trees"] + [f" --{name.replace('_', '-')} {cfg[name]:g}"
                                 for name in ("tree_leaves", "tree_lr", "tree_share")
                                 if name in cfg and cfg[name] != getattr(d, name)]
    return "".join(flags)


def _serving_clock_lines(serve: str | None, fitted: str | None) -> list[str]:
    """The rate rule the refiner's bursts are clocked by when served, where the model names one."""
    if not serve:
        return []
    if serve == fitted:
        return [f"- Served on the `{serve}` rate rule it was fitted on; model.json's refiner.serve_rate_rule names "
                "it, so the light variant's bursts are clocked by it too."]
    return [f"- Served with its bursts clocked by the `{serve}` rate rule (model.json's refiner.serve_rate_rule; "
            f"fitted on `{fitted or 'strongest_line'}`); `[model] refiner_rate_rule` or `--refiner-rate-rule` "
            "choose another."]


def _count_word(n: int) -> str:
    """n in words up to twelve, else in digits."""
    words = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve")
    return words[n - 1] if 1 <= n <= len(words) else str(n)


def _em_default() -> int:
    """em_channel.FAST_CLASSES, imported here: em_channel pulls in scipy (about 0.9 s against
    this module's 0.09 s on the 2-core CI box), which writing a card without EM scores never needs."""
    from rfclassify.dsp.em_channel import FAST_CLASSES

    return FAST_CLASSES


def _em_fitted(cfg: dict[str, Any]) -> int:
    """How many of the network's top classes a refiner fit (its config) measured EM scores for
    (fits before fit-refiner --em-classes used em_channel.FAST_CLASSES)."""
    return int(cfg.get("em_classes", _em_default()))


def _serving_em_lines(count: int | None, cfg: dict[str, Any]) -> list[str]:
    """How many classes get the refiner's EM scores when served, where the model names a count
    or its fit used another than em_channel.FAST_CLASSES."""
    fitted = _em_fitted(cfg)
    if not cfg.get("em_channel") or (not count and fitted == _em_default()):
        return []
    if not count or count == fitted:
        return [f"- Served with the EM scores fitted for the network's top {fitted} of its classes, as in its fit; "
                "`[model] refiner_em_classes` or `--refiner-em-classes` choose another."]
    return [f"- Served with the EM scores fitted for the network's top {count} of its classes (model.json's "
            f"refiner.serve_em_classes; fitted for its top {fitted}); `[model] refiner_em_classes` or "
            "`--refiner-em-classes` choose another."]


def _low_order_refiner_lines(r: dict[str, Any]) -> list[str]:
    """The low-order refiner's section (none for a model without one)."""
    fit = r.get("fit")
    if not fit:
        return []
    acc, acc10, cfg = fit["holdout_accuracy"], fit["holdout_accuracy_snr_ge_10db"], fit["config"]
    return ["", "## Low-order refiner", "",
            f"Bursts the network calls one of {', '.join(r['classes'])} are re-decided among those classes the same "
            f"way, from the network's log-probabilities, its SNR estimate and the burst's invariants alone "
            f"({cfg['hidden']} hidden units). File `{r['file']}` (sha256 {r['sha256'][:12]}...).", "",
            f"- Fitted by `rfclassify fit-refiner --group low-order --per-class {cfg['per_class']} --seed "
            f"{cfg['seed']}`: {fit['bursts_synthesized']:,} bursts, {fit['bursts_routed']:,} of them called one of "
            f"the classes by the network; {fit['total_s']:.0f} s.",
            f"- Held-out share ({fit['holdout_bursts']:,} bursts): network {_pct(acc['network'])} -> refined "
            f"{_pct(acc['refined'])}; at SNR >= 10 dB {_pct(acc10['network'])} -> {_pct(acc10['refined'])}; bursts "
            f"shorter than {fit.get('min_samples', 0)} samples are left to the network."]


def _skip_lines(skip_above: float, min_samples: int, refiners: bool, temperature: float = 1.0) -> list[str]:
    """The bursts the refiners leave to the network (none said for a model without refiners or
    one that refines every burst)."""
    if not refiners or skip_above >= 1:
        return []
    burst = f"A burst of at least {min_samples} samples" if min_samples > 0 else "A burst"
    sharp = ("" if temperature == 1 else
             f", its probabilities sharpened by the temperature {temperature:g} (refiner_skip_temperature, fitted on "
             "the held-out bursts that skip: the network's confidence alone sits below their accuracy)")
    return ["", f"{burst} whose network top probability is above {skip_above:g} keeps the network's answer{sharp}: "
                "neither the DC pass nor a refiner runs for it (model.json's refiner_skip_above and "
                "refiner_skip_min_samples, chosen on held-out bursts where the refiners changed no such answer; "
                "docs/model.md). `[model] refiner_skip_above` or `--refiner-skip-above` change it; 1 refines every "
                "burst."]


def _light_lines(light: dict[str, Any] | None) -> list[str]:
    """The refiner's light variant (fitted without the sequence network), when it has one."""
    if not light or "fit" not in light:
        return []
    acc, acc10 = light["fit"]["holdout_accuracy"], light["fit"]["holdout_accuracy_snr_ge_10db"]
    return [f"- Light variant `{light['file']}` (the same fit without the sequence network; about half the CPU "
            f"per burst; `[model] refiner_sequence = false`): held-out {_pct(acc['refined'])}, at SNR >= 10 dB "
            f"{_pct(acc10['refined'])}; bursts shorter than {light['fit'].get('min_samples', 0)} samples are left "
            "to the network."]


def render_markdown(card: dict[str, Any]) -> str:
    """MODEL_CARD.md from the card JSON."""
    t = card.get("training", {})
    lines = [
        f"# Model card: {card['model_id']}", "",
        "Edge RF modulation classifier: a residual 1xk CNN over normalized I/Q windows, "
        f"{len(card['labels'])} classes plus an SNR estimate. Open-set rule: calibrated "
        f"confidence below {card['unknown_threshold']} is reported as `unknown` "
        f"(best guess kept in `top`). Temperature {card['temperature']}.", "",
        "Generated by `rfclassify evaluate --card`; numbers below are measured, not claimed.", "",
        "## Inputs and labels", "",
        f"- Labels (output order): {', '.join(card['labels'])}",
        f"- Length buckets (samples): {', '.join(map(str, card['buckets_samples']))}; bursts shorter "
        f"than {card['min_samples']} are rejected, shorter than the smallest bucket are zero-padded, "
        f"longer ones are cut into up to {card['max_windows']} windows of their bucket whose "
        "log-probabilities are averaged (rfclassify/dsp/windows.py).",
        ("- Normalization: per burst, before windowing, the mean-free part scaled to unit RMS and the "
         "mean kept in that scale (capped; `keep_dc`, rfclassify/dsp/windows.py)."
         if card.get("normalization") == "keep_dc" else
         "- Normalization: per burst, DC removed and scaled to unit RMS before windowing."),
        *([f"- Symbol-rate front end: each burst resampled to about {card['symbol_rate']['target_sps']:g} "
           "samples/symbol (blind estimate) before bucketing (rfclassify/dsp/rate.py)."]
          if card.get("symbol_rate") else []), "",
        "## Network", "",
        f"Parameters: {card['parameters']:,}. FLOPs = 2 x conv multiply-accumulates per window.", "",
        "| bucket | FLOPs per window | DLA check (static graph) | max abs logit diff ONNX vs torch |",
        "|---:|---:|---|---:|",
    ]
    static = card.get("export", {}).get("static", {})
    for b, f in card["flops_per_bucket"].items():
        s = static.get(str(b), {})
        dla = "not exported" if not s else ("ok" if not s.get("dla_violations") else
                                            f"{len(s['dla_violations'])} violation(s)")
        par = max((p["max_abs_logit_diff"] for p in s.get("parity", {}).values()), default=None)
        lines.append(f"| {b} | {f / 1e6:.1f} M | {dla} | {_num(par, '.2e')} |")
    worst = card.get("export", {}).get("worst")
    if worst:
        lines += ["", f"Export parity, worst over the dynamic and static graphs on random and synthesized "
                      f"bursts: |logit| {worst['max_abs_logit_diff']:.2e}, |softmax| "
                      f"{worst['max_abs_softmax_diff']:.2e}, |SNR| {worst['max_abs_snr_db_diff']:.2e} dB."]
    lines += _int8_lines(card.get("int8") or {})
    lines += _tensorrt_int8_lines(card.get("tensorrt_int8") or {})
    lines += _refiner_lines(card.get("refiner") or {})
    lines += _low_order_refiner_lines(card.get("low_order_refiner") or {})
    lines += _skip_lines(card.get("refiner_skip_above", 1.0), card.get("refiner_skip_min_samples", 0),
                         bool(card.get("refiner") or card.get("low_order_refiner")),
                         card.get("refiner_skip_temperature", 1.0))
    lines += ["", "## Training", ""]
    if t:
        recipe = t.get("recipe", {})
        lines += [
            f"- Command: `{t.get('command', '')}` (seed {t.get('seed')})" + _resumed(t.get("commands")),
            f"- Device: {t.get('device_name')}, torch {t.get('torch', '?')}; {t.get('steps')} steps in "
            f"{t.get('train_s')} s of training schedule (the last invocation took {t.get('total_s', '?')} s "
            "in all, start-up, validation and saving included)",
            f"- Data volume: {t.get('examples_fresh', 0):,} freshly synthesized bursts, "
            f"{t.get('examples_reused', 0):,} reuses of them with a random phase rotation / conjugation",
            *_lineage_lines(t),
            *_average_lines(t),
            "- Data recipe: on-the-fly synthesis with the full impairment chain"
            + (f" (changed: {_overrides(recipe['channel_overrides'])})" if recipe.get("channel_overrides") else "")
            + ", SNR uniform "
            f"{recipe.get('snr_range_db')} dB{_focus(recipe.get('snr_focus'))}, labels uniform, 2-16 samples/symbol; bucket time shares "
            f"{dict(zip(recipe.get('buckets_samples', []), recipe.get('time_share', [])))}; "
            f"{_pct(recipe.get('short_fraction'))} of the smallest bucket's rows are 64..127-sample "
            "bursts zero-padded.",
        ]
        cal = t.get("calibration", {})
        if cal:
            lines.append(f"- Calibration on {cal.get('n_examples')} held-out synthesized windows: "
                         f"T = {_num(cal.get('temperature'), '.3f')}, ECE {_num(cal.get('ece_before'), '.3f')} -> "
                         f"{_num(cal.get('ece_after'), '.3f')}, NLL {_num(cal.get('nll_before'), '.3f')} -> "
                         f"{_num(cal.get('nll_after'), '.3f')}")
        val = t.get("validation", {}).get("per_bucket", {})
        if val:
            lines.append("- Held-out validation (one window per burst): " + ", ".join(
                f"L={b}: {_pct(v['accuracy'])}" for b, v in val.items()))
    else:
        lines.append("No training record found (train_log.json / model.json extra).")
    for name, ev in card.get("evaluations", {}).items():
        lines += _render_eval(name, ev)
    lines += ["", "## Not measured here", "",
              "- TensorRT, its INT8 and DLA: the static graphs pass the DLA-limit check above and TensorRT's "
              "INT8 pair is made, but no engine was built and nothing ran on a Jetson from this card (every "
              "INT8 figure above is ONNX Runtime's).",
              "- Real over-the-air captures: every number above comes from synthetic or GNU Radio-simulated data.", ""]
    return "\n".join(lines)


def _unreadable_text(ev: dict[str, Any], d: dict[str, Any]) -> str:
    """The card's word on bursts the file could not give (a damaged copy): its numbers are over
    the others."""
    n = (ev.get("unreadable") or {}).get("bursts")
    return (f" **{n} of its {d.get('n_bursts')} bursts could not be read (a damaged file) and are left out: "
            "the numbers below are over the others.**") if n else ""


def _render_eval(name: str, ev: dict[str, Any]) -> list[str]:
    d, run, o = ev.get("dataset", {}), ev.get("run", {}), ev.get("overall", {})
    clock = run.get("refiner_rate_rule")
    constellation = "the constellation refiner" + (f" (its bursts clocked by `{clock}`)"
                                                   if clock and clock != "strongest_line" else "")
    refiners = [which for which, key in ((constellation, "refiner"),
                                         ("the low-order refiner", "low_order_refiner")) if run.get(key)]
    if refiners and run.get("dc_pass"):
        refiners.insert(0, "the DC pass")
    lines = ["", f"## Evaluation: {name}", "",
             f"Dataset `{d.get('file')}` (source {d.get('source')}, seed {d.get('seed')}, "
             f"{d.get('n_bursts')} bursts"
             + (f", samples sha256 {d['samples_sha256'][:16]}" if d.get("samples_sha256") else "")
             + f"); made by `{d.get('command_line', '')}`. Run through the serving "
             f"Classifier: backend {run.get('backend')} {run.get('precision')} on {run.get('device')}, "
             + (f"with {' and '.join(refiners)}, " if refiners else "the network alone, ")
             + f"{ev.get('bursts_per_s')} bursts/s. Rejected: {ev.get('rejected') or 'none'}."
             + _unreadable_text(ev, d), "",
             "| bucket | n | accuracy | mean over SNR | SNR >= 10 dB | SNR MAE 0..20 dB |",
             "|---:|---:|---:|---:|---:|---:|"]
    rows = list(ev.get("per_bucket", {}).items()) + [("all", o)]
    for b, s in rows:
        lines.append(f"| {b} | {s.get('n')} | {_pct(s.get('accuracy'))} | {_pct(s.get('mean_accuracy_over_snr'))} "
                     f"| {_pct(s.get('accuracy_snr_ge_10db'))} | {_num(s.get('snr_mae_db_0_20'))} dB |")
    buckets = list(ev.get("per_bucket", {}))
    snrs = sorted({r["snr_db"] for s in ev.get("per_bucket", {}).values() for r in s["per_snr"]})
    if snrs:
        lines += ["", "Accuracy per SNR (rows) and bucket (columns):", "",
                  "| SNR dB | " + " | ".join(buckets) + " | all |", "|---:" * (len(buckets) + 2) + "|"]
        for snr in snrs:
            cells = []
            for s in [*ev["per_bucket"].values(), o]:
                hit = [r["accuracy"] for r in s.get("per_snr", []) if r["snr_db"] == snr]
                cells.append(_pct(hit[0]) if hit else "")
            lines.append(f"| {snr:g} | " + " | ".join(cells) + " |")
    pc, pc10 = ev.get("per_class", {}), ev.get("per_class_snr_ge_10db", {})
    if pc:
        lines += ["", "| class | accuracy | SNR >= 10 dB |", "|---|---:|---:|"]
        lines += [f"| {c} | {_pct(a)} | {_pct(pc10.get(c))} |" for c, a in pc.items()]
    if ev.get("conditions_snr_ge_10db"):
        lines += ["", "Accuracy at SNR >= 10 dB with and without each condition (from the parameters recorded "
                      "with each burst; a condition the dataset does not record counts as absent):", "",
                  "| condition | n with | accuracy with | n without | accuracy without |",
                  "|---|---:|---:|---:|---:|"]
        lines += [f"| {r['condition']} | {r['n_with']} | {_pct(r['accuracy_with'])} | {r['n_without']} "
                  f"| {_pct(r['accuracy_without'])} |" for r in ev["conditions_snr_ge_10db"]]
    if ev.get("open_set"):
        lines += ["", f"Open set (calibrated confidence threshold; ECE {_num(ev.get('ece'), '.3f')}; "
                      f"default threshold {run.get('unknown_threshold')} accepts "
                      f"{_pct(ev.get('accepted_at_default_threshold'))}):", "",
                  "| threshold | accepted | accuracy of accepted |", "|---:|---:|---:|"]
        lines += [f"| {r['threshold']} | {_pct(r['accepted_fraction'])} | {_pct(r['accepted_accuracy'])} |"
                  for r in ev["open_set"]]
    for fig in ev.get("figures_rel", []):
        lines += ["", f"![{fig}]({fig})"]
    return lines
