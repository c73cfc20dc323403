"""Evaluation through the serving Classifier, the measurements, and the model card files."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
pytest.importorskip("matplotlib")

from rfclassify.cli import main  # noqa: E402
from rfclassify.data.reader import DatasetReader  # noqa: E402
from rfclassify.labels import LABELS  # noqa: E402
from rfclassify.model.meta import ModelMeta, default_model_dir  # noqa: E402
from rfclassify.model.evaluate import (  # noqa: E402
    accuracy_summary,
    burst_conditions,
    condition_table,
    confusion,
    per_class_accuracy,
)


def test_accuracy_summary_by_hand():
    labels = np.array([0, 0, 1, 1, LABELS.index("NOISE"), 2])
    pred = np.array([0, 1, 1, 1, LABELS.index("NOISE"), 0])
    snr = np.array([-10.0, -10.0, 10.0, 10.0, 20.0, 20.0])
    est = np.array([-8.0, 0.0, 11.0, 13.0, 99.0, 20.5])
    s = accuracy_summary(labels, pred, snr, est)
    assert s["accuracy"] == pytest.approx(4 / 6)
    assert [r["accuracy"] for r in s["per_snr"]] == [0.5, 1.0, 0.5]
    assert s["mean_accuracy_over_snr"] == pytest.approx(2 / 3)
    assert s["accuracy_snr_ge_10db"] == pytest.approx(3 / 4)
    # NOISE (nominal SNR) and out-of-range SNRs are not in the MAE: (1 + 3 + 0.5) / 3
    assert s["snr_mae_db_0_20"] == pytest.approx(1.5) and s["snr_mae_n"] == 3
    assert per_class_accuracy(labels, pred)[LABELS[0]] == 0.5
    assert confusion(labels, pred)[0, 1] == 1


def _params(n):
    from rfclassify.dsp.synth import PARAM_DTYPE

    p = np.zeros(n, PARAM_DTYPE)
    for name in PARAM_DTYPE.names:
        p[name] = np.nan if PARAM_DTYPE[name].kind == "f" else 0
    return p


def test_condition_table_by_hand():
    p = _params(5)
    p["fading_type"] = [1, 1, 2, 0, 0]
    p["pa_backoff_db"][3] = 4.0                  # PA recorded only where applied
    p["samples_per_symbol"] = [2.5, 9.0, 9.0, np.nan, 5.0]   # NaN: an analog burst
    p["delay_spread_samples"] = [1.0, 1.2, 0.5, 2.0, np.nan]  # recorded with fading (and here on FM)
    labels = np.array([LABELS.index(n) for n in ("64QAM", "BPSK", "16PSK", "FM", "256QAM")])
    correct = np.array([False, True, True, True, False])
    rows = {r["condition"]: r for r in condition_table(correct, p, labels)}
    assert rows["Rayleigh fading"]["n_with"] == 2 and rows["Rayleigh fading"]["accuracy_with"] == 0.5
    assert rows["Rayleigh fading"]["accuracy_without"] == pytest.approx(2 / 3)
    assert rows["PA compression"]["n_with"] == 1 and rows["PA compression"]["accuracy_with"] == 1.0
    assert rows["8-16 samples/symbol"]["n_with"] == 2 and rows["2-4 samples/symbol"]["accuracy_with"] == 0.0
    # delay spread in symbols: 1.0 / 2.5 = 0.4 and 1.2 / 9 = 0.13; 0.5 / 9 is below 0.1, FM has no symbols
    assert rows["multipath delay spread >= 0.2 symbols"]["n_with"] == 1
    assert rows["multipath delay spread >= 0.2 symbols"]["accuracy_with"] == 0.0
    assert rows["multipath delay spread 0.1-0.2 symbols"]["n_with"] == 1
    assert rows["multipath delay spread 0.1-0.2 symbols"]["accuracy_with"] == 1.0
    assert rows["high-order class"]["n_with"] == 3 and rows["high-order class"]["accuracy_with"] == pytest.approx(1 / 3)
    # high-order on a plain channel: only the 256QAM burst (no fading, no PA, no phase noise)
    assert rows["high-order, no fading, phase noise or PA"]["n_with"] == 1
    # a condition nobody has: no accuracy, not a crash; NaN phase noise counts as absent
    assert rows["phase noise"]["n_with"] == 0 and np.isnan(rows["phase noise"]["accuracy_with"])
    assert not burst_conditions(p, labels)["8-bit quantization"].any()


def test_evaluate_writes_tables_figures_and_card(tiny_model_dir, tiny_dataset, tmp_path, capsys):
    model_dir = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model_dir)
    card_dir = tmp_path / "card"
    assert main(["evaluate", str(tiny_dataset), "--model-dir", str(model_dir), "--backend", "onnxruntime",
                 "--out", str(tmp_path / "ev"), "--card", "--card-dir", str(card_dir)]) == 0
    ev = json.loads((tmp_path / "ev" / "evaluation.json").read_text())
    assert ev["overall"]["n"] == 8 and ev["run"]["backend"] == "onnxruntime"
    assert sorted(ev["per_bucket"]) == ["1024", "128", "256"]
    assert {r["snr_db"] for r in ev["overall"]["per_snr"]} == {-10.0, 20.0}
    assert set(ev["per_class"]) == {"BPSK", "QPSK", "FM", "NOISE"}
    for fig in ("accuracy_vs_snr.png", "confusion_all.png", "confusion_snr_ge_10db.png"):
        assert (tmp_path / "ev" / fig).stat().st_size > 1000
    card = json.loads((card_dir / "model_card.json").read_text())
    assert card["model_id"] == "tiny-random" and card["parameters"] <= 1_000_000
    assert set(card["flops_per_bucket"]) == {"128", "256", "512", "1024", "2048", "4096"}
    md = (card_dir / "MODEL_CARD.md").read_text()
    assert "## Evaluation: synth:tiny" in md and "| 1024 |" in md and "Open set" in md
    with DatasetReader(tiny_dataset) as ds:     # which file was evaluated, by its samples
        digest = ds.samples_sha256()
    assert ev["dataset"]["samples_sha256"] == digest and f"samples sha256 {digest[:16]}" in md
    assert "| high-order class |" in md  # the condition table (the tiny set has no high-order class: n/a)
    # --out lies outside the card's directory: the card links to copies beside it, never to --out
    links = re.findall(r"!\[[^]]*\]\(([^)]+)\)", md)
    assert len(links) == 3 and all(not link.startswith("..") and (card_dir / link).is_file() for link in links)
    assert (card_dir / "eval" / "tiny" / "evaluation.json").is_file()
    assert {r["condition"] for r in ev["conditions_snr_ge_10db"]} >= {"Rayleigh fading", "8-16 samples/symbol"}
    out = capsys.readouterr().out
    assert "bursts via onnxruntime" in out and "skipped the DC pass" not in out     # no refiners, no skip
    # a second evaluation (e.g. the GNU Radio set) merges into the card
    assert main(["evaluate", str(tiny_dataset), "--model-dir", str(model_dir), "--backend", "torch",
                 "--name", "second", "--out", str(tmp_path / "ev2"), "--card", "--card-dir", str(card_dir)]) == 0
    card = json.loads((card_dir / "model_card.json").read_text())
    assert set(card["evaluations"]) == {"synth:tiny", "second"}
    # the two backends run the same network: same predictions
    a, b = card["evaluations"]["synth:tiny"]["overall"], card["evaluations"]["second"]["overall"]
    assert a["accuracy"] == b["accuracy"]


def test_evaluate_missing_model_is_a_user_error(tiny_dataset, tmp_path, capsys):
    assert main(["evaluate", str(tiny_dataset), "--model-dir", str(tmp_path / "none")]) == 2
    assert "model.json" in capsys.readouterr().err



def test_bursts_of_labels_the_model_lacks_are_counted_and_a_file_of_none_is_refused(
        tiny_model_dir, tiny_dataset, tmp_path, capsys):
    """Such bursts were left out of every table without a word, and a file holding only them, or no
    bursts at all, was written up as an evaluation of NaNs and reported as done."""
    import h5py

    from rfclassify.data import schema

    renamed = tmp_path / "renamed.h5"
    shutil.copy(tiny_dataset, renamed)
    with h5py.File(renamed, "a") as f:
        labels = json.loads(f.attrs["labels"])
        f.attrs["labels"] = json.dumps(["MYSTERY" if n == "FM" else n for n in labels])
    assert main(["evaluate", str(renamed), "--model-dir", str(tiny_model_dir), "--out", str(tmp_path / "ev")]) == 0
    ev = json.loads((tmp_path / "ev" / "evaluation.json").read_text())
    assert ev["not_scored"] == {"labels": ["MYSTERY"], "bursts": 2} and ev["overall"]["n"] == 6
    assert "not scored: 2 bursts of labels this model does not classify (MYSTERY)" in capsys.readouterr().out
    with h5py.File(renamed, "a") as f:
        f.attrs["labels"] = json.dumps([f"X{i}" for i in range(len(labels))])
    assert main(["evaluate", str(renamed), "--model-dir", str(tiny_model_dir), "--out", str(tmp_path / "ev")]) == 2
    assert "nothing to evaluate: none of its labels is one this model classifies (X" in capsys.readouterr().err
    with h5py.File(renamed, "a") as f:
        for name in schema.PER_EXAMPLE:
            f[name].resize((0,))
    assert main(["evaluate", str(renamed), "--model-dir", str(tiny_model_dir), "--out", str(tmp_path / "ev")]) == 2
    assert "nothing to evaluate: it holds no bursts" in capsys.readouterr().err



def test_where_results_cannot_go_or_would_collide_is_refused_before_the_evaluation(
        tiny_model_dir, tiny_dataset, tmp_path, capsys, monkeypatch):
    """An --out (or --card-dir) that is a file failed after the whole evaluation (an hour on the
    test split); two datasets of one file name were evaluated into one folder, the first lost;
    a file whose every burst was rejected was written up as NaNs (sixty-sixth session)."""
    import h5py

    import rfclassify.model.evaluate as evaluate_module

    ran = []
    real = evaluate_module.evaluate_file
    monkeypatch.setattr(evaluate_module, "evaluate_file", lambda *a, **k: ran.append(a) or real(*a, **k))
    (tmp_path / "afile").write_text("")
    base = ["evaluate", str(tiny_dataset), "--model-dir", str(tiny_model_dir), "--no-plots"]
    assert main([*base, "--out", str(tmp_path / "afile")]) == 2
    assert "--out" in capsys.readouterr().err and not ran
    assert main([*base, "--out", str(tmp_path / "ev"), "--card", "--card-dir", str(tmp_path / "afile")]) == 2
    assert "--card-dir" in capsys.readouterr().err and not ran
    (tmp_path / "sub").mkdir()
    shutil.copy(tiny_dataset, tmp_path / "sub" / tiny_dataset.name)
    copy = tmp_path / "m"
    shutil.copytree(tiny_model_dir, copy)
    assert main(["evaluate", str(tiny_dataset), "--model-dir", str(copy), "--no-plots",
                 "--extra-eval", str(tmp_path / "sub" / tiny_dataset.name)]) == 2
    assert "would both be evaluated into" in capsys.readouterr().err and not ran
    # with the first given --out the folders differ, but the card keeps evaluations by name: the
    # second replaced the first until the sixty-seventh session
    card_args = ["evaluate", str(tiny_dataset), "--model-dir", str(copy), "--no-plots", "--card",
                 "--extra-eval", str(tmp_path / "sub" / tiny_dataset.name), "--out", str(tmp_path / "first")]
    assert main(card_args) == 2
    assert f"would both be the card's evaluation 'synth:{tiny_dataset.stem}'" in capsys.readouterr().err and not ran
    assert main([*card_args, "--name", "first"]) == 0            # named apart: both in the card
    capsys.readouterr()
    card = json.loads((copy / "model_card.json").read_text())
    assert {"first", f"synth:{tiny_dataset.stem}"} <= set(card["evaluations"])
    ran.clear()
    silent = tmp_path / "silent.h5"
    shutil.copy(tiny_dataset, silent)
    with h5py.File(silent, "a") as f:
        f["iq"][...] = 0
    assert main(["evaluate", str(silent), "--model-dir", str(tiny_model_dir), "--no-plots",
                 "--out", str(tmp_path / "ev0")]) == 2
    err = capsys.readouterr().err
    assert "every burst of a label this model classifies was rejected (zero_power" in err
    assert not (tmp_path / "ev0" / "evaluation.json").exists()


def test_a_bad_extra_dataset_fails_before_any_evaluation(tiny_model_dir, tiny_dataset, tmp_path, capsys):
    """It failed after the main file's evaluation (minutes on a full test split) and left no card."""
    bad = tmp_path / "bad.h5"
    bad.write_text("not HDF5")
    assert main(["evaluate", str(tiny_dataset), "--model-dir", str(tiny_model_dir), "--out", str(tmp_path / "ev"),
                 "--extra-eval", str(bad)]) == 2
    assert "not a readable HDF5 file" in capsys.readouterr().err
    assert not (tmp_path / "ev").exists()


def test_a_rate_normalizing_model_is_scored_by_received_length(tiny_model_dir, tiny_dataset, tmp_path):
    from rfclassify.model.meta import ModelMeta

    model_dir = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model_dir)
    ModelMeta.load(model_dir).with_updates(symbol_rate={"target_sps": 4.0}).save(model_dir)
    assert main(["evaluate", str(tiny_dataset), "--model-dir", str(model_dir), "--backend", "onnxruntime",
                 "--out", str(tmp_path / "ev"), "--card", "--card-dir", str(tmp_path / "card")]) == 0
    assert "Symbol-rate front end: each burst resampled to about 4 samples/symbol" in (
        tmp_path / "card" / "MODEL_CARD.md").read_text()
    ev = json.loads((tmp_path / "ev" / "evaluation.json").read_text())
    # resampling runs these bursts in other buckets (checked below); the table keeps received lengths
    assert sorted(ev["per_bucket"]) == ["1024", "128", "256"] and ev["overall"]["n"] == 8


def test_evaluate_with_refiner_workers_gives_the_same_predictions(tmp_path, capsys):
    """--refiner-workers moves the shipped refiner's statistics into processes; not one burst's
    answer changes. A negative count is refused with a clear message."""
    from rfclassify.model.paired import load_predictions

    data = tmp_path / "high.h5"
    assert main(["dataset", "generate", "--out", str(data), "--snr=14,30", "--per-cell", "3",
                 "--classes", "16PSK,32PSK,64QAM,256QAM,QPSK", "--lengths", "1024", "--seed", "9"]) == 0
    card = ["--card", "--card-dir", str(tmp_path / "card")]
    for workers in ("0", "2"):
        assert main(["evaluate", str(data), "--backend", "onnxruntime", "--out", str(tmp_path / workers),
                     "--predictions", "--refiner-workers", workers, *card, "--name", f"workers {workers}"]) == 0
    alone, pooled = load_predictions(tmp_path / "0"), load_predictions(tmp_path / "2")
    assert alone["truth"].size == 30 and np.array_equal(alone["pred"], pooled["pred"])
    # the served probabilities come with the answers: their argmax is the answer, and the SNR
    # estimates are the model's, most of them within 2 dB of these bursts' 14 and 30 dB
    assert np.array_equal(alone["probabilities"].astype(np.float32).argmax(1), alone["pred"])
    assert np.median(np.abs(alone["snr_estimate_db"] - alone["snr_db"])) < 2.0
    run = json.loads((tmp_path / "2" / "evaluation.json").read_text())["run"]
    assert run["refiner"] and run["refiner_workers"] == 2 and run["dc_pass"]
    assert run["refiner_em_classes"] == 5          # the refit's own count (forty-fifth session)
    # the skip as served (fifty-sixth session) and how many of these bursts it took, alike in both runs
    meta = ModelMeta.load(default_model_dir())
    assert (run["refiner_skip_above"], run["refiner_skip_min_samples"], run["refiner_skip_temperature"]) == \
        (meta.refiner_skip_above, meta.refiner_skip_min_samples, meta.refiner_skip_temperature)
    counts = run["refiner_skip_counts"]
    assert counts == json.loads((tmp_path / "0" / "evaluation.json").read_text())["run"]["refiner_skip_counts"]
    assert counts["long_enough"] == 30 and 0 < counts["skipped"] < 30     # QPSK's sure, the dense classes not
    assert f"{counts['skipped']} of 30 bursts of >= 512 samples skipped the DC pass" in capsys.readouterr().out
    # --no-dc-pass: recorded, and the card says how each evaluation was served
    assert main(["evaluate", str(data), "--backend", "onnxruntime", "--out", str(tmp_path / "nodc"),
                 "--no-dc-pass", *card, "--name", "no DC pass"]) == 0
    assert json.loads((tmp_path / "nodc" / "evaluation.json").read_text())["run"]["dc_pass"] is False
    md = (tmp_path / "card" / "MODEL_CARD.md").read_text()
    # the shipped refiner's serving rule (since the forty-first session), and the low-order refiner
    # beside it (since the twenty-ninth)
    served = "the constellation refiner (its bursts clocked by `coherence_cyclic`) and the low-order refiner, "
    assert md.count(f"with the DC pass and {served}") == 2
    assert md.count(f"on cpu, with {served}") == 1
    capsys.readouterr()
    for bad in ("-2", str(10 ** 30)):  # past a C int: once an OverflowError out of the process pool
        with pytest.raises(SystemExit) as exc:
            main(["evaluate", str(data), "--out", str(tmp_path / "bad"), "--refiner-workers", bad])
        assert exc.value.code == 2 and "--refiner-workers: must be in -1..256" in capsys.readouterr().err


def test_the_card_names_the_options_the_shipped_refiner_was_fitted_with():
    """The refiner section's fit command carries the options that shaped the refiner (the
    shipped one: its rate rule, the blind view, the power lines, the gated EM scores, its ten
    perceptrons and its trees), and says what the blind view, the power lines and the EM
    scores read and what decides."""
    from rfclassify.model.card import _fit_flags, _refiner_lines
    from rfclassify.model.meta import ModelMeta, default_model_dir

    lines = "\n".join(_refiner_lines(ModelMeta.load(default_model_dir()).refiner))
    assert ("--sequence-net seq_shipped.npz --rate-rule coherence --blind-view --power-lines --em-channel "
            "--em-gate dense_top2_snr5 --em-classes 5 --members 10 --trees`" in lines)
    assert ("how well their alphabets explain the burst through a channel estimated for each by EM "
            "(rfclassify/dsp/em_channel.py), only for the bursts with one of 32QAM, 64QAM, 128QAM, 256QAM among the "
            "network's top 2 of them and an SNR estimate of at least 5 dB (EM gate `dense_top2_snr5`") in lines
    assert "the coherent power lines of those symbols, raw, after that filter and after a constant-modulus" in lines
    assert "mean class probabilities of 10 two-layer perceptrons" in lines
    assert "mixed 0.5 : 0.5 with the class probabilities of" in lines and "gradient-boosted trees (15 leaves" in lines
    assert "Each alone on the same share: perceptrons" in lines
    assert _fit_flags({"trees": True, "tree_leaves": 15, "tree_lr": 0.1, "tree_share": 0.5}) == " --trees"
    assert _fit_flags({"trees": True, "tree_leaves": 7, "tree_lr": 0.1, "tree_share": 0.3}) == \
        " --trees --tree-leaves 7 --tree-share 0.3"
    assert _fit_flags({"trees": False, "tree_leaves": 7}) == ""
    assert "after a class-blind equalizer (rfclassify/dsp/blind_equalizer.py)" in lines
    assert _fit_flags({"rate_rule": None, "blind_view": False, "dc_pass": True, "hidden": 64}) == " --dc-pass"
    assert _fit_flags({"dc_pass": False, "label_smoothing": 0.1}) == " --label-smoothing 0.1"
    assert _fit_flags({"label_smoothing": 0.0}) == ""
    assert _fit_flags({"blind_view": True, "blind_reader": "/tmp/x/seq_filtered.npz"}) == \
        " --blind-view --blind-reader seq_filtered.npz"
    assert "read by a second network" not in lines      # the shipped refiner's blind view is its own network's
    info = ModelMeta.load(default_model_dir()).refiner
    info = {**info, "fit": {**info["fit"], "config": {**info["fit"]["config"], "blind_reader": "/x/rd.npz"}}}
    lines = "\n".join(_refiner_lines(info))
    assert "read by a second network" in lines and ("--blind-view --power-lines --em-channel --em-gate dense_top2_snr5 "
                                                    "--em-classes 5 --blind-reader rd.npz --members 10 --trees`") in lines
    info["fit"]["config"]["members"] = 1
    lines = "\n".join(_refiner_lines(info))
    assert "by a two-layer perceptron (128 hidden units" in lines and "--blind-reader rd.npz --trees`" in lines
    assert _fit_flags({"members": 1}) == ""
    assert _fit_flags({"em_channel": True, "em_classes": 5}) == " --em-channel --em-classes 5"
    assert _fit_flags({"em_channel": True, "em_classes": 3}) == " --em-channel"


def test_the_card_says_how_many_classes_get_the_em_scores_fitted_and_served():
    """The refiner section names the EM count of the fit and, where model.json's
    serve_em_classes differs, the one served; a fit of the default count served as fitted
    says nothing more."""
    from rfclassify.model.card import _serving_em_lines

    three, five = {"em_channel": True}, {"em_channel": True, "em_classes": 5}
    assert _serving_em_lines(None, three) == [] and _serving_em_lines(4, {}) == []
    assert "top 5 of its classes (model.json's refiner.serve_em_classes; fitted for its top 3)" in \
        _serving_em_lines(5, three)[0]
    assert "top 5 of its classes, as in its fit" in _serving_em_lines(None, five)[0]
    assert _serving_em_lines(5, five) == _serving_em_lines(None, five)
    assert "top 4 of its classes (model.json's refiner.serve_em_classes; fitted for its top 5)" in \
        _serving_em_lines(4, five)[0]


def test_the_card_says_which_bursts_skip_the_refiners_only_where_some_do():
    from rfclassify.model.card import _skip_lines

    assert _skip_lines(1.0, 0, True) == [] and _skip_lines(0.9, 0, False) == []
    blank, line = _skip_lines(0.9, 0, True)
    assert blank == "" and line.startswith("A burst whose network top probability is above 0.9 keeps the network's")
    assert _skip_lines(0.9, 512, True)[1].startswith("A burst of at least 512 samples whose network top probability")
    assert "keeps the network's answer, its probabilities sharpened by the temperature 0.67 (" in \
        _skip_lines(0.9, 512, True, 0.67)[1]


def test_the_shipped_card_links_only_to_figures_it_ships():
    """Every figure MODEL_CARD.md shows is a file inside the model directory (the twenty-fifth
    session's card linked to a scratch directory on the machine that evaluated it)."""
    from rfclassify.model.meta import default_model_dir

    model_dir = default_model_dir()
    links = re.findall(r"!\[[^]]*\]\(([^)]+)\)", (model_dir / "MODEL_CARD.md").read_text())
    assert links
    for link in links:
        path = (model_dir / link).resolve()
        assert path.is_relative_to(model_dir.resolve()) and path.is_file(), link


def test_without_matplotlib_evaluate_says_so_first_and_no_plots_needs_none(tiny_model_dir, tiny_dataset, tmp_path,
                                                                           monkeypatch, capsys):
    """On a box with the serving install (no matplotlib) evaluate ran the whole evaluation,
    then failed drawing the figures and left no evaluation.json."""
    import sys

    from rfclassify.model import evaluate as evaluate_module

    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)           # import matplotlib now fails
    real = evaluate_module.evaluate_file
    monkeypatch.setattr(evaluate_module, "evaluate_file", lambda *a, **k: pytest.fail("evaluated first"))
    assert main(["evaluate", str(tiny_dataset), "--model-dir", str(tiny_model_dir), "--out", str(tmp_path / "ev")]) == 2
    assert capsys.readouterr().err == ("rfclassify evaluate: error: matplotlib is not installed (needed for the "
                                       "figures); pip install 'rfclassify[plot]', or pass --no-plots\n")
    monkeypatch.setattr(evaluate_module, "evaluate_file", real)
    assert main(["evaluate", str(tiny_dataset), "--model-dir", str(tiny_model_dir), "--out", str(tmp_path / "ev"),
                 "--no-plots"]) == 0
    assert sorted(p.name for p in (tmp_path / "ev").iterdir()) == ["evaluation.json"]
    assert "figures" not in json.loads((tmp_path / "ev" / "evaluation.json").read_text())
    assert "and figures" not in capsys.readouterr().out


def test_a_figure_that_fails_leaves_the_numbers(tiny_model_dir, tiny_dataset, tmp_path, monkeypatch, capsys):
    from rfclassify.model import plots

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(plots, "accuracy_vs_snr", full_disk)
    assert main(["evaluate", str(tiny_dataset), "--model-dir", str(tiny_model_dir), "--out", str(tmp_path / "ev")]) == 1
    assert "No space left on device" in capsys.readouterr().err
    assert json.loads((tmp_path / "ev" / "evaluation.json").read_text())["overall"]["n"] > 0
