"""The constellation refiner: what it changes in a result, how it is stored and loaded, and its fit."""

from __future__ import annotations

import json
import multiprocessing
import shutil
import threading
from dataclasses import replace

import numpy as np
import pytest

from rfclassify._exceptions import ConfigError, ModelNotFoundError
from rfclassify.dsp.symbol_clock import N_INVARIANTS
from rfclassify._digest import file_sha256
from rfclassify.engine.refiner import LIGHT_REFINER_FILE, REFINER_FILE, Refiner, refiner_info
from rfclassify.engine.tree_ensemble import TreeEnsemble
from rfclassify.labels import LABELS
from rfclassify.model.meta import ModelMeta, default_model_dir

N_FEATURES = len(LABELS) + 1 + N_INVARIANTS


def constant_refiner(classes: tuple[str, ...], favoured: str, hidden: int = 4) -> Refiner:
    """A refiner whose perceptron ignores its input and always puts 90 % on `favoured`."""
    k = len(classes)
    b2 = np.zeros(k, np.float32)
    b2[classes.index(favoured)] = np.log(0.9 * (k - 1) / 0.1)
    return Refiner(labels=classes, index=np.array([LABELS.index(c) for c in classes]),
                   mean=np.zeros(N_FEATURES, np.float32), scale=np.ones(N_FEATURES, np.float32),
                   w1=np.zeros((N_FEATURES, hidden), np.float32), b1=np.ones(hidden, np.float32),
                   w2=np.zeros((hidden, k), np.float32), b2=b2)


def _probs(top: str, p_top: float = 0.5) -> np.ndarray:
    p = np.full(len(LABELS), (1 - p_top) / (len(LABELS) - 1))
    p[LABELS.index(top)] = p_top
    return p


def test_refine_reshares_only_its_own_classes_and_keeps_their_mass():
    ref = constant_refiner(("16PSK", "32PSK", "64QAM"), favoured="32PSK")
    probs = _probs("16PSK", 0.6)
    burst = np.exp(2j * np.pi * 0.05 * np.arange(1024)).astype(np.complex64)
    out = ref.refine(probs, 20.0, burst)
    assert out.sum() == pytest.approx(1.0)
    mine = ref.index
    others = np.setdiff1d(np.arange(len(LABELS)), mine)
    np.testing.assert_allclose(out[others], probs[others])
    assert out[mine].sum() == pytest.approx(probs[mine].sum())
    assert LABELS[int(out.argmax())] == "32PSK"
    assert out[LABELS.index("32PSK")] == pytest.approx(0.9 * probs[mine].sum(), rel=1e-5)


def test_refine_leaves_bursts_whose_top_class_is_not_its_own():
    ref = constant_refiner(("16PSK", "32PSK"), favoured="32PSK")
    probs = _probs("QPSK", 0.4)
    assert not ref.applies(probs)
    np.testing.assert_array_equal(ref.refine(probs, 20.0, np.ones(512, np.complex64)), probs)


def test_each_burst_goes_to_the_refiner_of_its_network_top_class_and_no_further():
    from rfclassify.engine.refiner import refine_routed

    high = constant_refiner(("16PSK", "32PSK", "64QAM"), favoured="32PSK")
    uniform = replace(high, b2=np.zeros(3, np.float32))      # shares its classes' mass out evenly
    low = constant_refiner(("GFSK", "GMSK"), favoured="GMSK")
    burst = np.exp(2j * np.pi * 0.05 * np.arange(1024)).astype(np.complex64)
    close_call = _probs("16PSK", 0.3)
    close_call[LABELS.index("GFSK")] = 0.29                  # second to 16PSK
    close_call /= close_call.sum()
    probs = [_probs("16PSK", 0.6), _probs("GFSK", 0.6), _probs("QPSK", 0.6), close_call]
    out = refine_routed((high, low), probs, [20.0] * 4, [burst] * 4)
    assert [LABELS[int(p.argmax())] for p in out[:3]] == ["32PSK", "GMSK", "QPSK"]
    np.testing.assert_array_equal(out[2], probs[2])
    np.testing.assert_allclose(out[1][low.index].sum(), probs[1][low.index].sum())
    # 16PSK's mass spread evenly leaves GFSK on top; the low-order refiner still does not take it
    (spread,) = refine_routed((uniform, low), [close_call], [20.0], [burst])
    assert LABELS[int(spread.argmax())] == "GFSK"
    np.testing.assert_allclose(spread[low.index], close_call[low.index])


def test_two_refiners_that_share_a_class_are_refused(tiny_model_dir, tmp_path):
    from rfclassify.engine.classifier import Classifier
    from rfclassify.engine.refiner import LOW_ORDER_REFINER_FILE, disjoint_refiners

    high = constant_refiner(("16PSK", "32PSK"), favoured="32PSK")
    low = constant_refiner(("GFSK", "GMSK"), favoured="GMSK")
    assert disjoint_refiners(high, None, low) == (high, low)
    overlapping = constant_refiner(("32PSK", "GMSK"), favoured="GMSK")
    with pytest.raises(ModelNotFoundError, match="32PSK"):
        disjoint_refiners(high, overlapping)
    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    _with_refiner(model_dir, high)
    path = overlapping.save(model_dir / LOW_ORDER_REFINER_FILE)
    meta = ModelMeta.load(model_dir)
    meta.with_updates(low_order_refiner={"file": LOW_ORDER_REFINER_FILE, "sha256": file_sha256(path),
                                         "classes": list(overlapping.labels)}).save(model_dir)
    with pytest.raises(ModelNotFoundError, match="do not overlap"):
        Classifier.load(model_dir, backend="onnxruntime")


def _stored_and_loaded(tiny_model_dir, tmp_path, ref: Refiner) -> Refiner:
    """ref saved as the refiner of a copy of the tiny model, and loaded back from it."""
    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    _with_refiner(model_dir, ref)
    return Refiner.load(model_dir, ModelMeta.load(model_dir).refiner, LABELS)


def _refused_without(tmp_path, ref: Refiner, **flags) -> None:
    """The weights of ref, stored with its sequence network's `flags` changed, do not load."""
    _with_refiner(tmp_path / "m", replace(ref, sequence=replace(ref.sequence, **flags)))
    with pytest.raises(ModelNotFoundError, match="sequence-network outputs"):
        Refiner.load(tmp_path / "m", ModelMeta.load(tmp_path / "m").refiner, LABELS)


def _with_refiner(model_dir, ref: Refiner):
    path = ref.save(model_dir / REFINER_FILE)
    meta = ModelMeta.load(model_dir)
    meta.with_updates(refiner={"file": REFINER_FILE, "sha256": file_sha256(path),
                               "classes": list(ref.labels)}).save(model_dir)


def test_classifier_and_daemon_path_apply_the_models_refiner(tiny_model_dir, tmp_path):
    from rfclassify.dsp.windows import burst_to_windows
    from rfclassify.engine.classifier import Classifier
    from rfclassify.serve.batching import Batch, Pending
    from rfclassify.serve.bursts import Burst
    from rfclassify.serve.pipeline import EngineAdapter

    burst = (np.random.default_rng(3).standard_normal(2048) * (1 + 1j)).astype(np.complex64)
    with Classifier.load(tiny_model_dir, backend="onnxruntime") as plain:
        (r0,) = plain.classify([burst])
    favoured = "NOISE" if r0.top[0][0] != "NOISE" else "FM"
    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    _with_refiner(model_dir, constant_refiner(LABELS, favoured))  # re-decides every class
    with Classifier.load(model_dir, backend="onnxruntime") as clf:
        (r,) = clf.classify([burst])
        cut = burst_to_windows(burst, clf.policy)
        (d,) = EngineAdapter(clf).classify_batch(Batch(cut.bucket_samples, [Pending(Burst(iq=burst), cut)]))
        assert clf.describe()["refiner"] == {"classes": list(LABELS), "min_samples": 0, "rate_rule": "strongest_line"}
    with Classifier.load(model_dir, backend="onnxruntime", refiner=False) as off:
        (r_off,) = off.classify([burst])
    assert r.top[0] == (favoured, pytest.approx(0.9, abs=1e-5)) and d.top[0][0] == favoured
    assert r_off.top == r0.top  # refiner=False: the network alone


@pytest.mark.parametrize("damage", ["missing", "altered", "shape", "label", "long_name"])
def test_a_broken_refiner_stops_the_load_with_a_clear_error(tiny_model_dir, tmp_path, damage):
    from rfclassify.engine.classifier import Classifier

    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    ref = constant_refiner(("16PSK", "32PSK"), favoured="32PSK")
    if damage == "shape":
        ref = Refiner(**{**ref.__dict__, "mean": ref.mean[:-1], "scale": ref.scale[:-1], "w1": ref.w1[:-1]})
    _with_refiner(model_dir, ref)
    if damage == "missing":
        (model_dir / REFINER_FILE).unlink()
    elif damage == "altered":
        with np.load(model_dir / REFINER_FILE) as z:
            arrays = dict(z)
        arrays["b2"] = arrays["b2"] + 1
        np.savez(model_dir / REFINER_FILE, **arrays)
    elif damage == "label":
        meta = json.loads((model_dir / "model.json").read_text())
        meta["labels"] = [lb for lb in LABELS if lb != "32PSK"]   # (a name outside LABELS: model.json's own check)
        (model_dir / "model.json").write_text(json.dumps(meta))
    elif damage == "long_name":  # past the file system's limit: OSError from is_file, once a traceback
        meta = json.loads((model_dir / "model.json").read_text())
        meta["refiner"]["file"] = "r" * 5000
        (model_dir / "model.json").write_text(json.dumps(meta))
    expected = {"missing": "missing", "altered": "sha256", "shape": "do not fit", "label": "not among",
                "long_name": "cannot read the refiner"}[damage]
    with pytest.raises(ModelNotFoundError, match=expected):
        Classifier.load(model_dir, backend="onnxruntime")


def test_fit_refiner_writes_a_refiner_the_classifier_loads_and_export_carries(tiny_model_dir, tmp_path):
    pytest.importorskip("torch")
    from rfclassify.engine.classifier import Classifier
    from rfclassify.labels import HIGH_ORDER_LABELS
    from rfclassify.model.export import export_model_dir
    from rfclassify.model.refiner_fit import RefinerFitConfig, fit_refiner

    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    ModelMeta.load(model_dir).with_updates(refiner_skip_above=0.9).save(model_dir)
    rep = fit_refiner(model_dir, RefinerFitConfig(per_class=40, workers=2, epochs=5, chunk=96))
    meta = ModelMeta.load(model_dir)
    assert meta.refiner["sha256"] == file_sha256(model_dir / REFINER_FILE)
    assert meta.refiner_skip_above == 1.0      # chosen for the refiner it replaced: every burst refined again
    assert meta.refiner_skip_temperature == 1.0
    assert rep["classes"] == list(HIGH_ORDER_LABELS) and 50 <= rep["bursts_routed"] <= 480
    assert set(rep["holdout_accuracy"]) == {"network", "refined"}
    with Classifier.load(model_dir, backend="onnxruntime") as clf:
        assert clf.refiner is not None and clf.refiner.labels == tuple(HIGH_ORDER_LABELS)
    out = tmp_path / "exported"
    export_model_dir(model_dir, out, parity_lengths=(128,))
    assert (out / REFINER_FILE).read_bytes() == (model_dir / REFINER_FILE).read_bytes()
    with Classifier.load(out, backend="onnxruntime") as clf:
        assert clf.refiner is not None


def test_a_low_order_refiner_fits_beside_the_constellation_refiner_and_both_serve(tmp_path):
    """On a copy of the shipped model (the random tiny one calls no low-order class)."""
    pytest.importorskip("torch")
    from rfclassify.engine.classifier import Classifier
    from rfclassify.engine.refiner import LOW_ORDER_REFINER_FILE
    from rfclassify.labels import HIGH_ORDER_LABELS, LOW_ORDER_LABELS
    from rfclassify.model.card import render_markdown
    from rfclassify.model.export import export_model_dir
    from rfclassify.model.meta import default_model_dir
    from rfclassify.model.refiner_fit import RefinerFitConfig, fit_refiner

    model_dir = tmp_path / "m"
    model_dir.mkdir()
    for name in ("model.json", "model.pt", "model.onnx", REFINER_FILE, LIGHT_REFINER_FILE):
        shutil.copy2(default_model_dir() / name, model_dir / name)
    high_file = (model_dir / REFINER_FILE).read_bytes()
    rep = fit_refiner(model_dir, RefinerFitConfig(per_class=30, workers=2, epochs=5, chunk=96, group="low-order"))
    meta = ModelMeta.load(model_dir)
    assert rep["classes"] == list(LOW_ORDER_LABELS) and set(LOW_ORDER_LABELS).isdisjoint(HIGH_ORDER_LABELS)
    assert len(LOW_ORDER_LABELS) + len(HIGH_ORDER_LABELS) == len(LABELS)
    assert meta.low_order_refiner["sha256"] == file_sha256(model_dir / LOW_ORDER_REFINER_FILE)
    assert meta.refiner["file"] == REFINER_FILE and (model_dir / REFINER_FILE).read_bytes() == high_file
    with Classifier.load(model_dir, backend="onnxruntime") as clf:
        assert clf.low_order_refiner is not None and clf.low_order_refiner.sequence is None
        assert clf.low_order_refiner.labels == LOW_ORDER_LABELS and clf.refiners == (clf.refiner, clf.low_order_refiner)
        assert clf.describe()["low_order_refiner"]["classes"] == list(LOW_ORDER_LABELS)
    with Classifier.load(model_dir, backend="onnxruntime", refiner=False) as off:
        assert off.refiners == ()
    with Classifier.load(model_dir, backend="onnxruntime", low_order_refiner=False) as high_only:
        assert high_only.low_order_refiner is None and high_only.refiners == (high_only.refiner,)
    card = render_markdown({"model_id": "m", "labels": list(LABELS), "buckets_samples": [128], "min_samples": 64,
                            "max_windows": 4, "unknown_threshold": 0.5, "temperature": 1.0, "parameters": 1,
                            "flops_per_bucket": {}, "training": {}, "low_order_refiner": meta.low_order_refiner,
                            "evaluations": {"e": {"run": {"low_order_refiner": list(LOW_ORDER_LABELS)}}}})
    assert "## Low-order refiner" in card and "`rfclassify fit-refiner --group low-order --per-class 30" in card
    assert "with the low-order refiner, " in card and "constellation refiner," not in card
    out = tmp_path / "exported"
    export_model_dir(model_dir, out, parity_lengths=(128,))
    assert (out / LOW_ORDER_REFINER_FILE).read_bytes() == (model_dir / LOW_ORDER_REFINER_FILE).read_bytes()
    with pytest.raises(ConfigError, match="invariants alone"):
        RefinerFitConfig(group="low-order", equalizer=True)
    with pytest.raises(ConfigError, match="group must be one of"):
        RefinerFitConfig(group="analog")


def test_fit_workers_make_the_same_examples_in_the_same_order_as_one_process(tiny_model_dir, random_sequence_net):
    """fit-refiner's workers classify and measure whole chunks while the bursts are still
    synthesized in the calling process from one stream: the examples do not depend on how
    many workers made them, nor on the order the chunks finish in."""
    from rfclassify.labels import HIGH_ORDER_LABELS
    from rfclassify.model.refiner_fit import RefinerFitConfig, routed_examples

    net = random_sequence_net(tuple(HIGH_ORDER_LABELS), seed=3)
    cfg = RefinerFitConfig(per_class=30, workers=0, chunk=40, seed=11, rate_rule="alphabet_fit")
    alone = routed_examples(tiny_model_dir, cfg, sequence_net=net)
    pooled = routed_examples(tiny_model_dir, replace(cfg, workers=2), sequence_net=net)
    assert alone["truth"].size >= 50 and len(np.unique(alone["length"])) > 1
    for k in ("truth", "network_top", "length", "snr_db"):
        np.testing.assert_array_equal(pooled[k], alone[k])
    # the network runs on one thread in a worker: its sums may differ in the last bits
    np.testing.assert_allclose(pooled["features"], alone["features"], rtol=1e-4, atol=1e-4)


def test_a_refiner_fit_measures_its_bursts_after_the_dc_pass_as_they_are_served():
    """The shipped network: a 64QAM burst with a -15 dB receiver offset is measured, routed
    and scored by the fit as the served DC pass leaves it (the burst less its fitted offset,
    the network run again on that) with --dc-pass, and as it came without it."""
    from rfclassify.dsp.symbol_clock import STRONGEST_LINE
    from rfclassify.dsp.synth import ChannelConfig, synthesize
    from rfclassify.engine.classifier import Classifier
    from rfclassify.engine.dc_pass import offsets_to_remove
    from rfclassify.labels import HIGH_ORDER_LABELS
    from rfclassify.model.refiner_fit import RefinerFitConfig, _chunk_examples, dc_route

    iq = synthesize(["64QAM", "64QAM"], 1024, np.random.default_rng(29), snr_db=np.full(2, 25.0),
                    channel=ChannelConfig(p_dc_offset=0.0, p_multipath=0.0)).iq.astype(np.complex128)
    x = iq[0] + np.sqrt(np.mean(np.abs(iq[0]) ** 2) * 10 ** -1.5) * np.exp(1j)   # -15 dB offset
    bursts = [x.astype(np.complex64), iq[1].astype(np.complex64)]
    route = dc_route(default_model_dir(), RefinerFitConfig(dc_pass=True), HIGH_ORDER_LABELS)
    assert route is not None and route.names == HIGH_ORDER_LABELS and route.min_samples == 0
    assert dc_route(default_model_dir(), RefinerFitConfig(), HIGH_ORDER_LABELS) is None      # off by default
    with Classifier.load(backend="onnxruntime", refiner=False) as clf:
        index = np.array([clf.labels.index(c) for c in HIGH_ORDER_LABELS])
        first = clf.classify(bursts)
        found = offsets_to_remove([r.probabilities.astype(np.float64) for r in first], [r.snr_db for r in first],
                                  bursts, route)
        assert list(found) == [0]           # the burst with the offset; the other has none to find
        clean = [bursts[0] - found[0], bursts[1]]
        keep, rows, top = _chunk_examples(clf, bursts, index, N_INVARIANTS, None, (), STRONGEST_LINE, route)
        keep_c, rows_c, top_c = _chunk_examples(clf, clean, index, N_INVARIANTS, None, (), STRONGEST_LINE)
        keep_raw, rows_raw, _ = _chunk_examples(clf, bursts, index, N_INVARIANTS, None, (), STRONGEST_LINE)
    np.testing.assert_array_equal(keep, keep_c)
    np.testing.assert_array_equal(top, top_c)
    assert 0 in keep and 0 in keep_raw
    np.testing.assert_allclose(rows, rows_c, rtol=1e-4, atol=1e-4)
    here = list(keep).index(0)
    assert not np.allclose(rows[here], rows_raw[list(keep_raw).index(0)], rtol=1e-3, atol=1e-3)


def test_fit_refiner_command_sets_the_perceptron_width_its_smoothing_and_the_dc_pass(tiny_model_dir, tmp_path, capsys):
    pytest.importorskip("torch")
    from rfclassify.cli import main

    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    assert main(["fit-refiner", "--model-dir", str(model_dir), "--per-class", "40", "--workers", "0",
                 "--hidden", "8", "--dc-pass", "--label-smoothing", "0.1"]) == 0
    assert "refiner.npz" in capsys.readouterr().out
    with np.load(model_dir / REFINER_FILE) as z:
        assert z["w1"].shape[1] == 8 and z["w2"].shape[0] == 8
    config = ModelMeta.load(model_dir).refiner["fit"]["config"]
    assert config["hidden"] == 8 and config["dc_pass"] is True and config["sequence_features"] is False
    assert config["label_smoothing"] == 0.1
    assert main(["fit-refiner", "--model-dir", str(model_dir), "--sequence-features"]) == 2
    assert "needs a sequence network (--sequence-net)" in capsys.readouterr().err


def test_a_perceptron_fitted_on_smoothed_targets_is_sharpened_back_without_changing_its_decisions(monkeypatch):
    """Label smoothing caps what the perceptron says (at most 1 - eps + eps / K for the class
    it is sure of); the temperature fitted on the held-out share lifts its confidence back to
    its accuracy, and its decisions are those of the same fit without the temperature."""
    pytest.importorskip("torch")
    from rfclassify.model import calibration
    from rfclassify.model.refiner_fit import RefinerFitConfig, train_perceptron

    rng = np.random.default_rng(2)
    y = rng.integers(0, 3, 1500)
    x = (np.eye(3)[y] * 6.0 + rng.standard_normal((1500, 3))).astype(np.float32)

    def confidence_and_decisions(w: dict[str, np.ndarray], rows: np.ndarray) -> tuple[float, np.ndarray]:
        h = np.maximum((x[rows] - w["mean"]) / w["scale"] @ w["w1"] + w["b1"], 0.0)
        z = h @ w["w2"] + w["b2"]
        p = np.exp(z - z.max(1, keepdims=True))
        return float((p / p.sum(1, keepdims=True)).max(1).mean()), z.argmax(1)

    cfg = RefinerFitConfig(hidden=16, epochs=30, patience=30, label_smoothing=0.3)
    sharp, hold = train_perceptron(x, y, 3, cfg)
    conf, pred = confidence_and_decisions(sharp, hold)
    assert np.mean(pred == y[hold]) > 0.99 and conf > 0.95
    monkeypatch.setattr(calibration, "fit_temperature", lambda logits, labels: 1.0)
    flat, same_hold = train_perceptron(x, y, 3, cfg)          # the same fit, no temperature
    flat_conf, flat_pred = confidence_and_decisions(flat, same_hold)
    assert np.array_equal(same_hold, hold) and np.array_equal(flat_pred, pred)
    assert flat_conf < 1 - 0.3 + 0.3 / 3 + 0.02              # the smoothing's cap, 0.8
    with pytest.raises(ConfigError, match="label_smoothing"):
        RefinerFitConfig(label_smoothing=1.0)


def test_an_ensemble_refiner_serves_the_mean_of_its_members_probabilities_and_stores_them(tiny_model_dir,
                                                                                        tmp_path):
    """A refiner whose arrays carry a leading member axis: its re-shared probabilities are the
    mean of what each member alone would give; it saves and loads back as an ensemble, and a
    file whose members disagree in shape is refused."""
    classes = ("16PSK", "32PSK", "16QAM")
    rng = np.random.default_rng(4)

    def a(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)
    members = [Refiner(labels=classes, index=np.array([LABELS.index(c) for c in classes]), mean=a(N_FEATURES),
                       scale=np.ones(N_FEATURES, np.float32), w1=a(N_FEATURES, 6), b1=a(6), w2=a(6, 3), b2=a(3))
               for _ in range(3)]
    stacked = replace(members[0], **{k: np.stack([getattr(m, k) for m in members])
                                     for k in ("mean", "scale", "w1", "b1", "w2", "b2")})
    assert stacked.members == 3 and members[0].members == 1 and stacked.n_features == members[0].n_features
    probs = [_probs("16PSK", 0.6), _probs("16QAM", 0.5)]
    stats = [np.random.default_rng(k).standard_normal(N_INVARIANTS).astype(np.float32) for k in range(2)]
    each = [m.refine_measured(probs, [20.0, 5.0], stats) for m in members]
    both = stacked.refine_measured(probs, [20.0, 5.0], stats)
    for i in range(2):
        np.testing.assert_allclose(both[i], np.mean([e[i] for e in each], axis=0), rtol=1e-5, atol=1e-9)
        assert not np.allclose(each[0][i], each[1][i])          # the members do disagree
    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    _with_refiner(model_dir, stacked)
    back = Refiner.load(model_dir, ModelMeta.load(model_dir).refiner, LABELS)
    assert back.members == 3 and back.describe()["perceptrons"] == 3
    np.testing.assert_array_equal(back.refine_measured(probs, [20.0, 5.0], stats)[1], both[1])
    _with_refiner(model_dir, replace(stacked, b2=stacked.b2[:2]))
    with pytest.raises(ModelNotFoundError, match="weights do not fit"):
        Refiner.load(model_dir, ModelMeta.load(model_dir).refiner, LABELS)


def test_an_ensemble_fit_holds_out_what_a_single_fit_holds_out_and_no_member_sees_it():
    """fit-refiner --members: the held-out share is the single fit's; member k is the single fit
    of seed + k on the other rows (its own early-stopping share and initial weights), so the
    members differ and none has trained or early-stopped on the held-out rows."""
    pytest.importorskip("torch")
    from rfclassify.model.refiner_fit import RefinerFitConfig, holdout_split, train_ensemble, train_perceptron

    rng = np.random.default_rng(2)
    y = rng.integers(0, 3, 900)
    x = (np.eye(3)[y] * 2.0 + rng.standard_normal((900, 3))).astype(np.float32)
    cfg = RefinerFitConfig(hidden=8, epochs=20, patience=20)
    _, hold = train_perceptron(x, y, 3, cfg)
    stacked, same_hold = train_ensemble(x, y, 3, replace(cfg, members=3))
    assert np.array_equal(hold, same_hold) and stacked["w1"].shape == (3, 3, 8) and stacked["b2"].shape == (3, 3)
    rest = holdout_split(900, cfg)[1]
    assert np.array_equal(np.sort(np.concatenate([hold, rest])), np.arange(900))
    poisoned = y.copy()
    poisoned[hold] = (y[hold] + 1) % 3          # what the held-out rows say cannot reach any member
    member1, _ = train_perceptron(x[rest], poisoned[rest], 3, replace(cfg, seed=cfg.seed + 1))
    again, _ = train_ensemble(x, poisoned, 3, replace(cfg, members=3))
    for k in member1:
        np.testing.assert_array_equal(again[k][1], member1[k])
        np.testing.assert_array_equal(again[k], stacked[k])
    assert not np.allclose(stacked["w1"][1], stacked["w1"][0]) and not np.allclose(stacked["w1"][2], stacked["w1"][1])
    with pytest.raises(ConfigError, match="members"):
        RefinerFitConfig(members=0)


def _tree_of_one_split(classes: int, feature: int, n_features: int) -> TreeEnsemble:
    """Trees that give class 0 a raw score of 2.0 when `feature` is <= 0, else -2.0 (every other
    class's tree is a single leaf of 0)."""
    n = 3 + classes - 1
    value = np.zeros(n)
    value[1], value[2] = 2.0, -2.0
    left = np.r_[1, np.arange(1, n)].astype(np.int32)
    right = np.r_[2, np.arange(1, n)].astype(np.int32)
    return TreeEnsemble(feature=np.r_[feature, np.zeros(n - 1)].astype(np.int32), threshold=np.zeros(n),
                        left=left, right=right, default_left=np.zeros(n, bool), missing=np.zeros(n, np.int8),
                        value=value, root=np.r_[0, np.arange(3, n)].astype(np.int32),
                        tree_class=np.r_[0, np.arange(1, classes)].astype(np.int32), n_classes=classes,
                        n_features=n_features, share=0.25)


def test_a_refiner_with_trees_serves_the_mix_of_both_fusers_and_stores_them(tiny_model_dir, tmp_path):
    """Refiner.trees: the re-shared probabilities are (1 - share) x the perceptrons' plus share x
    the trees'; the trees save and load with the refiner, and trees that read another number of
    features than its perceptrons are refused."""
    classes = ("16PSK", "32PSK", "16QAM")
    plain = constant_refiner(classes, favoured="32PSK")
    trees = _tree_of_one_split(3, feature=len(LABELS) + 1, n_features=N_FEATURES)   # the first statistic
    mixed = replace(plain, trees=trees)
    probs = [_probs("16PSK", 0.6), _probs("16QAM", 0.5)]
    stats = [np.full(N_INVARIANTS, v, np.float32) for v in (-1.0, 1.0)]     # left, then right of the split
    out = mixed.refine_measured(probs, [20.0, 5.0], stats)
    alone = plain.refine_measured(probs, [20.0, 5.0], stats)
    tops = []
    for i, p in enumerate(probs):
        z = trees.raw_scores(Refiner.features(p, [0.0], stats[i]))[0]
        q = np.exp(z) / np.exp(z).sum()
        tops.append(q[0])
        mass = p[plain.index].sum()
        np.testing.assert_allclose(out[i][plain.index], 0.75 * alone[i][plain.index] + 0.25 * mass * q, rtol=1e-6)
    assert tops[0] > 0.75 > 0.1 > tops[1]         # the trees do read the statistic
    assert mixed.describe()["trees"] == 3 and mixed.describe()["trees_share"] == 0.25
    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    _with_refiner(model_dir, mixed)
    back = Refiner.load(model_dir, ModelMeta.load(model_dir).refiner, LABELS)
    assert back.trees is not None and back.trees.share == 0.25
    np.testing.assert_array_equal(back.refine_measured(probs, [20.0, 5.0], stats)[1], out[1])
    _with_refiner(model_dir, replace(mixed, trees=_tree_of_one_split(3, 0, N_FEATURES - 1)))
    with pytest.raises(ModelNotFoundError, match="its trees read"):
        Refiner.load(model_dir, ModelMeta.load(model_dir).refiner, LABELS)


def test_a_fit_with_trees_trains_them_on_the_perceptrons_rows_and_reports_each_fuser():
    """fit-refiner --trees: the trees never see the held-out rows (labels poisoned there change
    nothing), the refiner serves the mix, and the report scores perceptrons and trees alone."""
    pytest.importorskip("torch")
    pytest.importorskip("lightgbm")
    from rfclassify.model.refiner_fit import RefinerFitConfig, _fit_and_score

    rng = np.random.default_rng(3)
    classes = ("16PSK", "32PSK", "16QAM")
    y = rng.integers(0, 3, 1200)
    x = rng.standard_normal((1200, N_FEATURES)).astype(np.float32)
    x[:, len(LABELS) + 1] += 3.0 * y          # the first statistic tells the class
    ex = {"truth": y, "network_top": np.zeros(1200, int), "length": np.full(1200, 1024),
          "snr_db": rng.uniform(-5, 25, 1200)}
    cfg = RefinerFitConfig(hidden=8, lr=1e-2, epochs=60, patience=10, trees=True, tree_leaves=4, tree_lr=0.2)
    index = np.array([LABELS.index(c) for c in classes])
    ref, scores = _fit_and_score(ex, x, cfg, classes, index, None, "strongest_line")
    assert ref.trees is not None and ref.trees.share == 0.5 and scores["trees"]["rounds"] >= 1
    acc = scores["holdout_accuracy"]
    assert acc["trees"] > 0.8 and acc["perceptrons"] > 0.8 and acc["refined"] > 0.8
    hold = np.flatnonzero(np.isin(np.arange(1200), np.random.default_rng(cfg.seed).permutation(1200)[:180]))
    poisoned = dict(ex, truth=np.where(np.isin(np.arange(1200), hold), (y + 1) % 3, y))
    again, _ = _fit_and_score(poisoned, x, cfg, classes, index, None, "strongest_line")
    np.testing.assert_array_equal(again.trees.value, ref.trees.value)
    with pytest.raises(ConfigError, match="tree_leaves"):
        RefinerFitConfig(tree_share=0.0)


def test_saved_examples_refit_the_same_refiner_and_only_for_the_fit_they_were_made_for(tiny_model_dir, tmp_path):
    """fit-refiner --save-examples keeps what the fit made; --examples fits on it again, to
    the same weights with the same settings, and refuses examples of another rate rule."""
    pytest.importorskip("torch")
    from rfclassify.cli import main

    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    saved = tmp_path / "ex.npz"
    assert main(["fit-refiner", "--model-dir", str(model_dir), "--per-class", "40", "--workers", "0",
                 "--seed", "5", "--save-examples", str(saved)]) == 0
    first = dict(np.load(model_dir / REFINER_FILE))
    # the seed and burst count are the examples': the ones given here give way
    assert main(["fit-refiner", "--model-dir", str(model_dir), "--per-class", "999", "--seed", "6",
                 "--examples", str(saved)]) == 0
    again = dict(np.load(model_dir / REFINER_FILE))
    for k in ("w1", "b1", "w2", "b2", "mean", "scale"):
        np.testing.assert_array_equal(again[k], first[k])
    fit = ModelMeta.load(model_dir).refiner["fit"]
    assert fit["examples"] == "ex.npz" and fit["config"]["per_class"] == 40 and fit["config"]["seed"] == 5
    assert main(["fit-refiner", "--model-dir", str(model_dir), "--examples", str(saved), "--hidden", "8"]) == 0
    assert np.load(model_dir / REFINER_FILE)["w1"].shape[1] == 8
    # examples whose statistics another rate rule clocked are refused, naming what differs
    from rfclassify.model.refiner_fit import RefinerFitConfig, fit_refiner

    with pytest.raises(ConfigError, match="rate_rule: 'strongest_line' there, 'alphabet_fit' here"):
        fit_refiner(model_dir, RefinerFitConfig(rate_rule="alphabet_fit"), examples=saved)
    with pytest.raises(ConfigError, match="dc_pass: False there, True here"):
        fit_refiner(model_dir, RefinerFitConfig(dc_pass=True), examples=saved)
    (tmp_path / "junk.npz").write_bytes(b"junk")
    with pytest.raises(ConfigError, match="not an examples file"):
        fit_refiner(model_dir, RefinerFitConfig(), examples=tmp_path / "junk.npz")
    with pytest.raises(ConfigError, match="no such examples file"):
        fit_refiner(model_dir, RefinerFitConfig(), examples=tmp_path / "none.npz")


@pytest.mark.parametrize("equalizer", [False, True])
def test_fit_refiner_with_a_sequence_network_stores_it_in_the_refiner(tiny_model_dir, tmp_path, random_sequence_net,
                                                                      equalizer):
    """With --equalizer the classes' equalized scores follow the sequence network's outputs;
    the light variant has neither, and the report scores a fit without the scores too. Both
    variants clock by the rate rule the network was trained on. The second case also fits
    trees (--trees): the refiner serves them, the light variant has none."""
    pytest.importorskip("torch")
    from rfclassify.engine.classifier import Classifier
    from rfclassify.labels import HIGH_ORDER_LABELS
    from rfclassify.model.export import export_model_dir
    from rfclassify.model.refiner_fit import RefinerFitConfig, fit_refiner

    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    net = random_sequence_net(tuple(HIGH_ORDER_LABELS), seed=5, rate_rule="alphabet_fit")
    net_path = net.save(tmp_path / "seq.npz")
    if equalizer:
        pytest.importorskip("lightgbm")
    rep = fit_refiner(model_dir, RefinerFitConfig(per_class=30, workers=0, epochs=5, chunk=96,
                                                  sequence_net=str(net_path), equalizer=equalizer, trees=equalizer))
    info = ModelMeta.load(model_dir).refiner
    n_equalizer = len(HIGH_ORDER_LABELS) if equalizer else 0
    assert ("without_equalizer" in rep) == equalizer
    assert rep["sequence_net"]["sha256"] == file_sha256(net_path)
    assert rep["rate_rule"] == "alphabet_fit"
    assert info["fit"]["sequence_net"]["params"] == rep["sequence_net"]["params"]
    assert info["light"]["sha256"] == file_sha256(model_dir / LIGHT_REFINER_FILE)
    assert set(info["light"]["fit"]["holdout_accuracy"]) == {"network", "refined"}
    burst = np.exp(2j * np.pi * 0.1 * np.arange(1024)).astype(np.complex64)
    with Classifier.load(model_dir, backend="onnxruntime") as clf:
        assert clf.refiner is not None and clf.refiner.sequence is not None
        assert clf.refiner.n_features == len(LABELS) + 1 + N_INVARIANTS + len(HIGH_ORDER_LABELS) + n_equalizer
        assert clf.refiner.equalizer == (tuple(HIGH_ORDER_LABELS) if equalizer else ())
        assert clf.refiner.rate_rule == "alphabet_fit"
        assert (clf.refiner.trees is not None) == equalizer and ("trees" in rep) == equalizer
        assert clf.classify([burst])[0].top
    with Classifier.load(model_dir, backend="onnxruntime", refiner_sequence=False) as light:
        assert light.refiner is not None and light.refiner.sequence is None and not light.refiner.equalizer
        assert light.refiner.trees is None
        assert light.refiner.n_features == len(LABELS) + 1 + N_INVARIANTS
        assert light.refiner.rate_rule == "alphabet_fit"
        assert light.classify([burst])[0].top
    out = tmp_path / "exported"
    export_model_dir(model_dir, out, parity_lengths=(128,))
    assert (out / LIGHT_REFINER_FILE).read_bytes() == (model_dir / LIGHT_REFINER_FILE).read_bytes()


def test_which_refiner_a_model_serves():
    plain = {"file": REFINER_FILE, "fit": {}}
    with_light = {"file": REFINER_FILE, "fit": {"sequence_net": {}}, "light": {"file": LIGHT_REFINER_FILE}}
    assert refiner_info(plain) is plain and refiner_info(plain, sequence=False) is plain
    assert refiner_info(with_light) is with_light
    assert refiner_info(with_light, sequence=False) == {"file": LIGHT_REFINER_FILE}
    with pytest.raises(ConfigError, match="no light variant"):
        refiner_info({"file": REFINER_FILE, "fit": {"sequence_net": {}}}, sequence=False)


def test_short_bursts_are_left_to_the_network():
    ref = constant_refiner(("16PSK", "32PSK"), favoured="32PSK")
    ref = Refiner(**{**ref.__dict__, "min_samples": 512})
    probs = _probs("16PSK", 0.6)
    np.testing.assert_array_equal(ref.refine(probs, 20.0, np.ones(511, np.complex64)), probs)
    assert LABELS[int(ref.refine(probs, 20.0, np.ones(512, np.complex64)).argmax())] == "32PSK"


def test_the_refiner_applies_from_the_shortest_length_it_helps_at_every_longer_one():
    from rfclassify.model.refiner_fit import shortest_helped

    def table(*pairs):
        return {n: {"network": a, "refined": b} for n, (a, b) in zip((128, 256, 1024, 4096), pairs)}
    assert shortest_helped(table((0.5, 0.6), (0.5, 0.6), (0.5, 0.6), (0.5, 0.6))) == 128
    assert shortest_helped(table((0.5, 0.4), (0.5, 0.6), (0.5, 0.5), (0.5, 0.7))) == 256
    assert shortest_helped(table((0.5, 0.6), (0.5, 0.4), (0.5, 0.6), (0.5, 0.7))) == 1024
    assert shortest_helped(table((0.5, 0.6), (0.5, 0.6), (0.5, 0.6), (0.5, 0.4))) == 4097


def test_the_daemon_config_can_leave_the_refiner_out(tiny_model_dir, tmp_path):

    from rfclassify.serve.config import DaemonConfig
    from rfclassify.serve.daemon import load_engine

    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    _with_refiner(model_dir, constant_refiner(("16PSK", "32PSK"), favoured="32PSK"))
    cfg = DaemonConfig()
    on = replace(cfg, model=replace(cfg.model, dir=str(model_dir), backend="onnxruntime", warmup=False))
    off = replace(on, model=replace(on.model, refiner=False))
    pooled = replace(on, model=replace(on.model, refiner_workers=1))
    for config, present in ((on, True), (off, False), (pooled, True)):
        engine = load_engine(config)
        assert (engine.classifier.refiner is not None) == present
        assert (engine.classifier._refiner_pool is not None) == (config is pooled)
        assert engine.classifier.refiner_workers == (1 if config is pooled else 0)  # -1: none on 1 core (conftest)
        engine.classifier.close()


def test_a_burst_the_statistics_cannot_take_keeps_the_networks_answer(monkeypatch, caplog):
    import rfclassify.engine.refiner as refiner_module

    def broken(iq):
        raise FloatingPointError("boom")
    monkeypatch.setattr(refiner_module, "burst_invariants", broken)
    ref = constant_refiner(("16PSK", "32PSK"), favoured="32PSK")
    probs = _probs("16PSK", 0.6)
    np.testing.assert_array_equal(ref.refine(probs, 20.0, np.ones(600, np.complex64)), probs)
    assert "network's decision stands" in caplog.text


def test_a_process_pool_gives_the_same_results_as_the_inference_thread(monkeypatch):
    """The shipped model's refiner, its statistics (and the DC pass's fits) in two spawned
    processes (refiner_workers -1 on a 4-core box) or in this one."""
    import rfclassify._cpus as cpus
    from rfclassify.dsp.channel import ChannelConfig
    from rfclassify.dsp.synth import synthesize
    from rfclassify.engine.classifier import Classifier
    from rfclassify.labels import HIGH_ORDER_LABELS

    rng = np.random.default_rng(21)
    low = ["4ASK", "8ASK", "GFSK", "GMSK", "AM-SSB-SC", "AM-SSB-WC"]    # the low-order refiner's, same batch
    bursts = list(synthesize(list(HIGH_ORDER_LABELS) * 2 + low, 1024, rng, 25.0, ChannelConfig(p_dc_offset=0.0)).iq)
    for i in range(0, len(bursts), 2):      # a -15 dB receiver DC offset on every other one
        bursts[i] = bursts[i] + np.sqrt(np.mean(np.abs(bursts[i]) ** 2) * 10 ** -1.5).astype(np.complex64)
    bursts += [np.zeros(0, np.complex64), np.tile([1, 0], 150).astype(np.complex64)]  # a reject, a degenerate burst
    monkeypatch.setattr(cpus, "usable_cpu_count", lambda: 4)
    with Classifier.load(backend="onnxruntime") as here, \
            Classifier.load(backend="onnxruntime", refiner_workers=-1) as pooled:
        assert here.refiner is not None and pooled._refiner_pool is not None
        assert (here.refiner_workers, pooled.refiner_workers, pooled.describe()["refiner_workers"]) == (0, 2, 2)
        assert len(pooled._refiner_pool.executor._processes) == 2
        # each worker runs one BLAS thread, and so does this process's refiner (one_blas_thread),
        # so both sum in one order (with more threads the probabilities differ by 1e-6 and may
        # round apart)
        a = here.classify(bursts)
        b = pooled.classify(bursts)
        with Classifier.load(backend="onnxruntime", refiner=False) as alone:
            c = alone.classify(bursts)
    assert [r.top for r in a] == [r.top for r in b]
    assert [r.ok for r in a] == [r.ok for r in b] == [True] * (len(bursts) - 2) + [False, True]
    assert [r.top for r in a] != [r.top for r in c]  # the refiner did re-decide some of them
    for ref in (here.refiner, here.low_order_refiner):  # both refiners had bursts of this batch
        assert any(ref.applies(r.probabilities) for r in c if r.ok)
    assert pooled._refiner_pool is None and pooled.refiner_workers == 0  # closed with the Classifier


def test_a_daemon_with_refiner_workers_classifies_and_ends_its_workers(tmp_path):
    """The shipped model through a real daemon with its refiner in one worker process: every
    burst answered, the count and its pool's breaks in the status and health; stop() ends the pool."""
    import os
    import signal
    import threading
    import time

    from rfclassify.dsp.synth import synthesize

    from rfclassify.serve.daemon import Daemon
    from rfclassify.serve.demo import ResultCollector, local_config
    from rfclassify.serve.simulate import SimulateOptions, run_simulator
    from rfclassify.serve.status_view import render_status

    cfg = local_config(tmp_path, backend="onnxruntime")
    cfg = replace(cfg, model=replace(cfg.model, refiner_workers=1, warmup=False))
    d = Daemon(cfg)
    d.start()
    clf = d.engine.classifier
    try:
        assert clf.refiner is not None and clf._refiner_pool is not None
        c = ResultCollector(d.pipeline.output_endpoint).start()
        opts = SimulateOptions(endpoint=d.pipeline.input_endpoint, bind=False, socket_type="push",
                               rate_bursts_per_s=200, count=24, classes=("16PSK", "32PSK", "64QAM"))
        sim = threading.Thread(target=run_simulator, args=(opts,))
        sim.start()
        sim.join(30)
        assert c.wait_for(24, 30), f"{c.count()} of 24"
        c.stop()
        engine = d.status()["engine"]
        assert engine["refiner_workers"] == 1 and engine["dc_pass"] and engine["refiner"]["classes"]
        # how many of the bursts long enough to skip the refiners did (most of 256..2,048 samples are)
        counts = clf.refiner_skip_counts
        assert engine["refiner_skip_counts"] == counts and 0 < counts["long_enough"] <= 24
        assert "its statistics in 1 worker process\n" in render_status(d.status())
        # its worker killed: the health says so until a new pool takes over (after about a second)
        for pid in list(clf._refiner_pool.executor._processes):
            os.kill(pid, signal.SIGKILL)
        bursts = list(synthesize(["16PSK", "64QAM"] * 2, 1024, np.random.default_rng(3), 25.0).iq)
        assert all(r.ok for r in clf.classify(bursts))
        st = d.status()
        assert any("refiner worker pool broke (1 so far)" in r for r in st["health_reasons"])
        assert "its statistics in the inference thread (worker pool broke 1 time)" in render_status(st)
        deadline = time.monotonic() + 60
        while clf.refiner_workers == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        st = d.status()
        assert st["engine"]["refiner_workers"] == 1 and st["engine"]["refiner_pool_breaks"] == 1
        assert not any("worker pool" in r for r in st["health_reasons"])
    finally:
        assert d.stop(drain=True)
    assert clf._refiner_pool is None


def test_a_killed_refiner_worker_does_not_stop_classification_and_its_pool_starts_again(caplog):
    import os
    import signal
    import time

    from rfclassify.dsp.channel import ChannelConfig
    from rfclassify.dsp.synth import synthesize
    from rfclassify.engine.classifier import Classifier
    from rfclassify.labels import HIGH_ORDER_LABELS

    bursts = list(synthesize(list(HIGH_ORDER_LABELS), 1024, np.random.default_rng(2), 25.0, ChannelConfig()).iq)
    with Classifier.load(backend="onnxruntime", refiner_workers=1) as clf, \
            Classifier.load(backend="onnxruntime") as here:
        expected = [r.top for r in here.classify(bursts)]
        pool = clf._refiner_pool
        first = pool.executor
        for pid in list(first._processes):
            os.kill(pid, signal.SIGKILL)
        got = clf.classify(bursts)
        assert [r.top for r in got] == expected
        assert "worker pool broke (1 so far)" in caplog.text and clf.describe()["refiner_pool_breaks"] == 1
        # a new pool starts in the background (after FIRST_RESTART_DELAY_S) and takes the work again
        deadline = time.monotonic() + 60
        while clf.refiner_workers == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert clf.refiner_workers == 1 and pool.executor is not first and pool.restarts == 1
        assert [r.top for r in clf.classify(bursts)] == expected
        assert "worker pool runs again (1 process)" in caplog.text
    assert clf._refiner_pool is None and clf.refiner_workers == 0


def test_a_refiner_failing_in_the_daemon_leaves_its_batch_to_the_network(tiny_model_dir, tmp_path, monkeypatch,
                                                                          serving):
    """The refiner raising on one batch: that batch's bursts still get results, the network's
    (counted, in health); the next batches are refined again."""
    import time

    from rfclassify.serve.demo import local_config
    from rfclassify.serve.native import encode_native

    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    _with_refiner(model_dir, constant_refiner(LABELS, favoured="FM"))  # re-decides every burst: FM at 0.9
    real, calls = Refiner.refine_many, []

    def fails_once(self, *args, **kwargs):
        calls.append(len(args[0]))
        if len(calls) == 1:
            raise RuntimeError("refiner exploded")
        return real(self, *args, **kwargs)
    monkeypatch.setattr(Refiner, "refine_many", fails_once)

    with serving(local_config(tmp_path, model_dir=str(model_dir), backend="onnxruntime", max_batch=4,
                              max_wait_ms=1.0)) as (d, push, c):
        rng = np.random.default_rng(5)
        for k in range(12):
            iq = (rng.standard_normal(1024) + 1j * rng.standard_normal(1024)).astype(np.complex64)
            push.send_multipart(encode_native(iq, {"burst_id": k, "sample_rate": 1e6}))
            if k % 4 == 3:
                time.sleep(0.3)  # three batches of four
        assert c.wait_for(12, 30), f"{c.count()} of 12"
        c.stop()
        by_id = {r["burst_id"]: r for r in c.results}
        assert sorted(by_id) == list(range(12)) and not c.rejects
        first = calls[0]
        network_alone = [k for k, r in by_id.items() if r["top"][0]["label"] != "FM" or r["top"][0]["p"] < 0.89]
        assert network_alone and set(network_alone) <= set(range(first))  # only the failed batch
        assert all(by_id[k]["top"][0]["label"] == "FM" for k in range(first, 12))
        st = d.status()
        assert any("refiner failed" in r for r in st["health_reasons"])
        assert d.pipeline.refiner_errors == 1 and d.pipeline.inference_errors == 0


def sequence_reading_refiner(classes: tuple[str, ...], sequence) -> Refiner:
    """A refiner whose perceptron passes the sequence network's log-probabilities through
    (shifted up by 20 so that no ReLU clips them): its re-shared distribution over its classes
    is the sequence network's."""
    k, n_in = len(classes), N_FEATURES + len(sequence.labels)
    w1 = np.zeros((n_in, k), np.float32)
    w1[N_FEATURES:, :] = np.eye(k, dtype=np.float32)
    return Refiner(labels=classes, index=np.array([LABELS.index(c) for c in classes]),
                   mean=np.zeros(n_in, np.float32), scale=np.ones(n_in, np.float32), w1=w1,
                   b1=np.full(k, 20.0, np.float32), w2=np.eye(k, dtype=np.float32), b2=np.zeros(k, np.float32),
                   sequence=sequence)


def random_refiner(classes: tuple[str, ...], sequence) -> Refiner:
    """A refiner with random perceptron weights over everything `sequence` gives it (its
    n_outputs), for tests of what a refiner feeds, stores and loads."""
    k, n_in = len(classes), N_FEATURES + sequence.n_outputs
    rng = np.random.default_rng(1)
    return Refiner(labels=classes, index=np.array([LABELS.index(c) for c in classes]),
                   mean=np.zeros(n_in, np.float32), scale=np.ones(n_in, np.float32),
                   w1=rng.standard_normal((n_in, 6)).astype(np.float32), b1=np.zeros(6, np.float32),
                   w2=rng.standard_normal((6, k)).astype(np.float32), b2=np.zeros(k, np.float32), sequence=sequence)


def test_a_refiner_with_a_sequence_network_feeds_it_the_bursts_sequence_and_stores_it(tiny_model_dir, tmp_path,
                                                                                      random_sequence_net):

    from rfclassify.dsp.channel import ChannelConfig
    from rfclassify.dsp.symbol_sequence import burst_sequence
    from rfclassify.dsp.synth import synthesize
    from rfclassify.engine.refiner import burst_invariants, burst_statistics

    classes = ("16PSK", "32PSK", "16QAM")
    ref = sequence_reading_refiner(classes, random_sequence_net(classes, seed=3))
    burst = synthesize(["16QAM"], 1024, np.random.default_rng(8), 25.0, ChannelConfig()).iq[0]
    stats = burst_statistics(burst, ref.sequence)
    np.testing.assert_array_equal(stats[:N_INVARIANTS], burst_invariants(burst))
    np.testing.assert_array_equal(stats[N_INVARIANTS:], ref.sequence.log_probs(burst_sequence(burst)))
    probs = _probs("16PSK", 0.6)
    out = ref.refine(probs, 20.0, burst)
    np.testing.assert_allclose(out[ref.index] / probs[ref.index].sum(), np.exp(stats[N_INVARIANTS:]), rtol=1e-4)
    # a burst with no clock: invalid invariants, uniform sequence outputs
    silent = burst_statistics(np.zeros(600, np.complex64), ref.sequence)
    assert not np.any(silent[:N_INVARIANTS]) and np.allclose(np.exp(silent[N_INVARIANTS:]), 1 / 3)

    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    _with_refiner(model_dir, ref)
    back = Refiner.load(model_dir, ModelMeta.load(model_dir).refiner, LABELS)
    assert back.sequence is not None and back.sequence.labels == classes
    assert back.describe()["sequence_net_params"] == ref.sequence.n_params
    np.testing.assert_array_equal(back.refine(probs, 20.0, burst), out)
    # the same perceptron without its sequence network does not fit the features
    _with_refiner(model_dir, replace(ref, sequence=None))
    with pytest.raises(ModelNotFoundError, match="sequence-network outputs"):
        Refiner.load(model_dir, ModelMeta.load(model_dir).refiner, LABELS)


def test_a_refiner_with_the_sequence_networks_features_feeds_them_after_its_log_probs_and_stores_them(
        tiny_model_dir, tmp_path, random_sequence_net):
    """With with_features the statistics carry the network's pooled features (what its head
    reads) after its log-probabilities, zeros for a burst without a sequence; the refiner file
    records it, and the same weights without it do not load."""
    from rfclassify.dsp.channel import ChannelConfig
    from rfclassify.dsp.symbol_sequence import burst_sequence
    from rfclassify.dsp.synth import synthesize
    from rfclassify.engine.refiner import burst_statistics

    classes = ("16PSK", "32PSK", "16QAM")
    net = replace(random_sequence_net(classes, seed=3), with_features=True)
    assert net.n_features == 2 * 8 + 1 and net.n_outputs == len(classes) + net.n_features
    burst = synthesize(["16QAM"], 1024, np.random.default_rng(8), 25.0, ChannelConfig()).iq[0]
    stats = burst_statistics(burst, net)
    seq = burst_sequence(burst)
    lp = stats[N_INVARIANTS:N_INVARIANTS + len(classes)]
    np.testing.assert_array_equal(lp, net.log_probs(seq))
    np.testing.assert_array_equal(stats[N_INVARIANTS + len(classes):], net.pooled(seq))
    np.testing.assert_array_equal(net.head_log_probs(net.pooled(seq)), lp)
    assert stats[-1] == pytest.approx(np.log(seq.shape[1]) / 6.0)       # the pooled symbol count
    silent = burst_statistics(np.zeros(600, np.complex64), net)
    assert np.allclose(np.exp(silent[N_INVARIANTS:N_INVARIANTS + 3]), 1 / 3)
    assert not np.any(silent[N_INVARIANTS + 3:])

    ref = random_refiner(classes, net)
    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    _with_refiner(model_dir, ref)
    back = Refiner.load(model_dir, ModelMeta.load(model_dir).refiner, LABELS)
    assert back.sequence is not None and back.sequence.with_features
    assert back.describe()["sequence_net_features"] == net.n_features
    probs = _probs("16PSK", 0.6)
    np.testing.assert_array_equal(back.refine(probs, 20.0, burst), ref.refine(probs, 20.0, burst))
    _with_refiner(model_dir, replace(ref, sequence=replace(net, with_features=False)))
    with pytest.raises(ModelNotFoundError, match="sequence-network outputs"):
        Refiner.load(model_dir, ModelMeta.load(model_dir).refiner, LABELS)


@pytest.mark.parametrize("option, attribute", [("sequence_features", "with_features"), ("blind_view", "blind_view"),
                                               ("power_lines", "power_lines")])
def test_a_refiner_fit_with_more_of_the_sequence_network_scores_a_fit_without_it(tiny_model_dir, tmp_path,
                                                                                random_sequence_net, option,
                                                                                attribute):
    """fit-refiner --sequence-features (its pooled features), --blind-view (its reading of
    the blind-equalized symbols and that filter's moments) and --power-lines (the symbols'
    coherent power lines, dsp.power_lines): the extra columns join the
    perceptron's input, the report scores the same examples without them, the light variant
    has neither, and examples made the other way are refused."""
    pytest.importorskip("torch")
    from rfclassify.engine.classifier import Classifier
    from rfclassify.labels import HIGH_ORDER_LABELS
    from rfclassify.dsp.power_lines import N_FEATURES as N_POWER_LINES
    from rfclassify.model.refiner_fit import RefinerFitConfig, fit_refiner

    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    net = random_sequence_net(tuple(HIGH_ORDER_LABELS), seed=5)
    net_path = net.save(tmp_path / "seq.npz")
    saved = tmp_path / "ex.npz"
    cfg = RefinerFitConfig(per_class=30, workers=0, epochs=5, chunk=96, sequence_net=str(net_path), **{option: True})
    rep = fit_refiner(model_dir, cfg, save_examples_to=saved)
    assert set(rep[f"without_{option}"]) >= {"holdout_accuracy", "holdout_accuracy_snr_ge_10db"}
    extra = {"sequence_features": net.n_features, "blind_view": len(HIGH_ORDER_LABELS) + 2,
             "power_lines": N_POWER_LINES}[option]
    width = len(LABELS) + 1 + N_INVARIANTS + len(HIGH_ORDER_LABELS) + extra
    assert np.load(saved)["features"].shape[1] == width
    with Classifier.load(model_dir, backend="onnxruntime") as clf:
        assert clf.refiner is not None and clf.refiner.sequence is not None
        assert getattr(clf.refiner.sequence, attribute) and clf.refiner.n_features == width
        assert clf.classify([np.exp(2j * np.pi * 0.1 * np.arange(1024)).astype(np.complex64)])[0].top
    with Classifier.load(model_dir, backend="onnxruntime", refiner_sequence=False) as light:
        assert light.refiner is not None and light.refiner.n_features == len(LABELS) + 1 + N_INVARIANTS
    with pytest.raises(ConfigError, match=f"{option}: True there, False here"):
        fit_refiner(model_dir, replace(cfg, **{option: False}), examples=saved)
    with pytest.raises(ConfigError, match="needs a sequence network"):
        RefinerFitConfig(**{option: True})


@pytest.mark.parametrize("option", ["with_features", "blind_view", "power_lines"])
def test_a_fit_without_one_of_the_sequence_networks_options_drops_exactly_its_columns(monkeypatch, random_sequence_net,
                                                                                       option):
    """With every option on (as shipped: the blind view and the power lines together), the
    report's fit without one of them sees every column but that option's own block."""
    import rfclassify.model.refiner_fit as refiner_fit
    from rfclassify.dsp.power_lines import N_FEATURES as N_POWER_LINES
    from rfclassify.labels import HIGH_ORDER_LABELS

    net = replace(random_sequence_net(tuple(HIGH_ORDER_LABELS), seed=5), with_features=True, blind_view=True,
                  power_lines=True)
    n_invariant, n_equalizer, k = 9, 3, len(HIGH_ORDER_LABELS)
    blocks = {"with_features": net.n_features, "blind_view": k + 2, "power_lines": N_POWER_LINES}
    starts = {"with_features": n_invariant + k}
    starts["blind_view"] = starts["with_features"] + blocks["with_features"]
    starts["power_lines"] = starts["blind_view"] + blocks["blind_view"]
    width = n_invariant + net.n_outputs + n_equalizer
    seen = {}

    def fit_and_score(ex, features, cfg, classes, index, sequence, *rest):
        seen["columns"], seen["sequence"] = features[0].tolist(), sequence
        return None, {}
    monkeypatch.setattr(refiner_fit, "_fit_and_score", fit_and_score)
    ex = {"features": np.tile(np.arange(width), (2, 1))}
    refiner_fit._fit_without(ex, refiner_fit.RefinerFitConfig(), (), np.zeros(0), net, option, n_invariant,
                             "strongest_line", ())
    dropped = set(range(starts[option], starts[option] + blocks[option]))
    assert seen["columns"] == [c for c in range(width) if c not in dropped]
    assert not getattr(seen["sequence"], option) and seen["sequence"].n_outputs == net.n_outputs - blocks[option]


def test_a_refiner_with_the_blind_view_feeds_the_networks_reading_of_equalized_symbols_and_stores_it(
        tiny_model_dir, tmp_path, random_sequence_net):
    """With blind_view the statistics carry, after the network's reading of the raw symbols, its
    reading of the same symbols through the class-blind equalizer and that filter's fourth
    moments (uniform and zeros for a burst without symbols); the refiner file records it, and
    the same weights without it do not load."""
    from rfclassify.dsp.blind_equalizer import kurtosis_equalize
    from rfclassify.dsp.channel import ChannelConfig
    from rfclassify.dsp.symbol_clock import blind_symbols
    from rfclassify.dsp.symbol_sequence import clocked_symbols, sequence_from_symbols
    from rfclassify.dsp.synth import synthesize
    from rfclassify.engine.refiner import burst_statistics

    classes = ("16PSK", "32PSK", "16QAM")
    net = replace(random_sequence_net(classes, seed=3), blind_view=True)
    assert net.n_outputs == 2 * len(classes) + 2
    burst = synthesize(["16QAM"], 1024, np.random.default_rng(8), 25.0, ChannelConfig()).iq[0]
    stats = burst_statistics(burst, net)
    assert stats.size == N_INVARIANTS + net.n_outputs
    y = clocked_symbols(blind_symbols(burst))
    z, before, after = kurtosis_equalize(y)
    own, view = stats[N_INVARIANTS:N_INVARIANTS + 3], stats[N_INVARIANTS + 3:]
    np.testing.assert_array_equal(own, net.log_probs(sequence_from_symbols(y)))
    np.testing.assert_allclose(view[:3], net.log_probs(sequence_from_symbols(z)), rtol=1e-6)
    np.testing.assert_allclose(view[3:], [before, after], rtol=1e-6)
    assert not np.allclose(view[:3], own)       # the filter changed what the network reads
    silent = burst_statistics(np.zeros(600, np.complex64), net)
    assert np.allclose(np.exp(silent[N_INVARIANTS + 3:N_INVARIANTS + 6]), 1 / 3) and not np.any(silent[-2:])

    ref = random_refiner(classes, net)
    back = _stored_and_loaded(tiny_model_dir, tmp_path, ref)
    assert back.sequence is not None and back.sequence.blind_view and not back.sequence.with_features
    assert back.describe()["sequence_net_blind_view"] is True
    probs = _probs("16PSK", 0.6)
    np.testing.assert_array_equal(back.refine(probs, 20.0, burst), ref.refine(probs, 20.0, burst))
    _refused_without(tmp_path, ref, blind_view=False)


def test_a_refiner_with_power_lines_feeds_them_last_from_the_same_symbols_and_stores_them(
        tiny_model_dir, tmp_path, random_sequence_net):
    """With power_lines the statistics end with the power lines of the clocked symbols, raw,
    through the blind filter (the blind view's, computed once) and through the constant-modulus
    filter; the refiner file records it, and the same weights without it do not load."""
    from rfclassify.dsp.channel import ChannelConfig
    from rfclassify.dsp.power_lines import FLOOR, N_FEATURES, power_line_features
    from rfclassify.dsp.sequence_fronts import blind_filtered
    from rfclassify.dsp.symbol_clock import blind_symbols
    from rfclassify.dsp.symbol_sequence import clocked_symbols
    from rfclassify.dsp.synth import synthesize
    from rfclassify.engine.refiner import burst_statistics

    classes = ("16PSK", "32PSK", "16QAM")
    net = replace(random_sequence_net(classes, seed=4), blind_view=True, power_lines=True)
    assert net.n_outputs == 2 * len(classes) + 2 + N_FEATURES
    burst = synthesize(["16PSK"], 1024, np.random.default_rng(9), 25.0, ChannelConfig()).iq[0]
    stats = burst_statistics(burst, net)
    assert stats.size == N_INVARIANTS + net.n_outputs
    y = clocked_symbols(blind_symbols(burst))
    np.testing.assert_allclose(stats[-N_FEATURES:], power_line_features(y, blind_filtered(y)[0]), rtol=1e-6)
    without = burst_statistics(burst, replace(net, power_lines=False))
    np.testing.assert_array_equal(stats[:-N_FEATURES], without)     # the rest as before, in the same order
    silent = burst_statistics(np.zeros(600, np.complex64), net)
    np.testing.assert_array_equal(silent[-N_FEATURES:], np.full(N_FEATURES, np.log(FLOOR), np.float32))

    ref = random_refiner(classes, net)
    back = _stored_and_loaded(tiny_model_dir, tmp_path, ref)
    assert back.sequence is not None and back.sequence.power_lines and back.sequence.blind_view
    assert back.describe()["power_lines"] is True
    probs = _probs("16PSK", 0.6)
    np.testing.assert_array_equal(back.refine(probs, 20.0, burst), ref.refine(probs, 20.0, burst))
    _refused_without(tmp_path, ref, power_lines=False)


def test_a_blind_reader_reads_the_blind_view_is_stored_inside_the_refiner_and_keys_its_examples(
        tiny_model_dir, tmp_path, random_sequence_net):
    """With a blind reader (a network of the filtered front) the blind view's log-probabilities
    are the reader's for the filtered symbols, not the sequence network's; the refiner file
    carries the reader and loads back deciding the same; fit-refiner --blind-reader needs
    --blind-view and refuses examples made without the reader."""
    pytest.importorskip("torch")
    from rfclassify.dsp.blind_equalizer import kurtosis_equalize
    from rfclassify.dsp.channel import ChannelConfig
    from rfclassify.dsp.symbol_clock import blind_symbols
    from rfclassify.dsp.symbol_sequence import clocked_symbols, sequence_from_symbols
    from rfclassify.dsp.synth import synthesize
    from rfclassify.engine.classifier import Classifier
    from rfclassify.engine.refiner import burst_statistics
    from rfclassify.labels import HIGH_ORDER_LABELS
    from rfclassify.model.refiner_fit import RefinerFitConfig, fit_refiner

    classes = ("16PSK", "32PSK", "16QAM")
    reader = random_sequence_net(classes, seed=7, front="filtered")
    net = replace(random_sequence_net(classes, seed=3), blind_view=True, blind_reader=reader)
    burst = synthesize(["16QAM"], 1024, np.random.default_rng(8), 25.0, ChannelConfig()).iq[0]
    stats = burst_statistics(burst, net)
    z, before, after = kurtosis_equalize(clocked_symbols(blind_symbols(burst)))
    view = stats[N_INVARIANTS + 3:]
    np.testing.assert_allclose(view[:3], reader.log_probs(sequence_from_symbols(z)), rtol=1e-6)
    assert not np.allclose(view[:3], net.log_probs(sequence_from_symbols(z)))
    np.testing.assert_allclose(view[3:], [before, after], rtol=1e-6)

    ref = random_refiner(classes, net)
    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    _with_refiner(model_dir, ref)
    back = Refiner.load(model_dir, ModelMeta.load(model_dir).refiner, LABELS)
    assert back.sequence.blind_reader is not None and back.sequence.blind_reader.front == "filtered"
    assert back.describe()["sequence_net_blind_reader_params"] == reader.n_params
    probs = _probs("16PSK", 0.6)
    np.testing.assert_array_equal(back.refine(probs, 20.0, burst), ref.refine(probs, 20.0, burst))

    fit_dir = tmp_path / "fit"
    shutil.copytree(tiny_model_dir, fit_dir)
    net_path = random_sequence_net(tuple(HIGH_ORDER_LABELS), seed=5).save(tmp_path / "seq.npz")
    reader_path = random_sequence_net(tuple(HIGH_ORDER_LABELS), seed=6, front="filtered").save(tmp_path / "rd.npz")
    with pytest.raises(ConfigError, match="add --blind-view"):
        RefinerFitConfig(sequence_net=str(net_path), blind_reader=str(reader_path))
    cfg = RefinerFitConfig(per_class=30, workers=0, epochs=5, chunk=96, sequence_net=str(net_path), blind_view=True)
    fit_refiner(fit_dir, cfg, save_examples_to=tmp_path / "ex.npz")
    rep = fit_refiner(fit_dir, replace(cfg, blind_reader=str(reader_path)))
    assert set(rep["without_blind_view"]) >= {"holdout_accuracy"}
    with Classifier.load(fit_dir, backend="onnxruntime") as clf:
        assert clf.refiner.sequence.blind_reader is not None
    with pytest.raises(ConfigError, match="blind_reader_sha256"):
        fit_refiner(fit_dir, replace(cfg, blind_reader=str(reader_path)), examples=tmp_path / "ex.npz")


def test_a_refiner_feeds_a_blind_front_network_its_front_and_refuses_a_blind_view_of_it(tiny_model_dir, tmp_path,
                                                                                       random_sequence_net):
    """A blind-front sequence network gets the clocked symbols' blind front (raw and filtered
    channels, the filter's moments) from the refiner's statistics; fit-refiner --blind-view
    with it is a configuration error, said before any burst is made."""
    from rfclassify.dsp.channel import ChannelConfig
    from rfclassify.dsp.sequence_fronts import front_sequence
    from rfclassify.dsp.symbol_clock import blind_symbols
    from rfclassify.dsp.symbol_sequence import clocked_symbols
    from rfclassify.dsp.synth import synthesize
    from rfclassify.engine.refiner import burst_statistics
    from rfclassify.labels import HIGH_ORDER_LABELS
    from rfclassify.model.refiner_fit import RefinerFitConfig, fit_refiner

    net = random_sequence_net(("16PSK", "32PSK", "16QAM"), seed=4, front="blind")
    burst = synthesize(["16QAM"], 1024, np.random.default_rng(9), 25.0, ChannelConfig()).iq[0]
    stats = burst_statistics(burst, net)
    expected = net.log_probs(front_sequence(clocked_symbols(blind_symbols(burst)), "blind", net.labels))
    np.testing.assert_array_equal(stats[N_INVARIANTS:], expected)
    assert not np.allclose(expected, net.uniform())

    net_path = random_sequence_net(tuple(HIGH_ORDER_LABELS), front="blind").save(tmp_path / "seq.npz")
    cfg = RefinerFitConfig(per_class=30, workers=0, sequence_net=str(net_path), blind_view=True)
    with pytest.raises(ConfigError, match="takes no blind view"):
        fit_refiner(tiny_model_dir, cfg)


def test_a_refiner_with_equalizer_scores_feeds_them_after_the_sequence_and_stores_them(tiny_model_dir, tmp_path,
                                                                                       random_sequence_net):

    from rfclassify.dsp.channel import ChannelConfig
    from rfclassify.dsp.class_equalizer import class_scores
    from rfclassify.dsp.symbol_clock import blind_symbols
    from rfclassify.dsp.symbol_sequence import burst_sequence, clocked_symbols
    from rfclassify.dsp.synth import synthesize
    from rfclassify.engine.refiner import burst_invariants, burst_statistics, statistics_many

    classes = ("16PSK", "32PSK", "16QAM")
    sequence = random_sequence_net(classes, seed=6)
    burst = synthesize(["16QAM"], 1024, np.random.default_rng(10), 25.0, ChannelConfig()).iq[0]
    stats = burst_statistics(burst, sequence, classes)
    assert stats.shape == (N_INVARIANTS + 3 + 3,) and stats.dtype == np.float32
    np.testing.assert_array_equal(stats[:N_INVARIANTS], burst_invariants(burst))
    np.testing.assert_allclose(stats[N_INVARIANTS:N_INVARIANTS + 3], sequence.log_probs(burst_sequence(burst)),
                               rtol=1e-6)
    scores = class_scores(clocked_symbols(blind_symbols(burst)), classes)
    np.testing.assert_array_equal(stats[-3:], scores)
    assert classes[int(np.argmax(scores))] == "16QAM"
    # without the sequence network the scores follow the invariants; a burst with no clock gets zeros
    np.testing.assert_array_equal(burst_statistics(burst, None, classes)[N_INVARIANTS:], scores)
    assert not np.any(burst_statistics(np.zeros(600, np.complex64), sequence, classes)[-3:])

    n_in = N_FEATURES + 3 + 3
    ref = Refiner(labels=classes, index=np.array([LABELS.index(c) for c in classes]),
                  mean=np.zeros(n_in, np.float32), scale=np.ones(n_in, np.float32),
                  w1=np.random.default_rng(0).normal(size=(n_in, 4)).astype(np.float32), b1=np.ones(4, np.float32),
                  w2=np.ones((4, 3), np.float32), b2=np.zeros(3, np.float32), sequence=sequence, equalizer=classes)
    assert ref.describe()["equalizer_classes"] == 3
    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    _with_refiner(model_dir, ref)
    back = Refiner.load(model_dir, ModelMeta.load(model_dir).refiner, LABELS)
    assert back.equalizer == classes
    probs = _probs("16PSK", 0.6)
    np.testing.assert_array_equal(back.refine(probs, 20.0, burst), ref.refine(probs, 20.0, burst))
    pool = back.start_pool(2)
    try:
        there = statistics_many([burst, burst[:700]], back.sequence, pool, back.equalizer)
    finally:
        pool.shutdown()
    np.testing.assert_array_equal(there[0], stats)
    np.testing.assert_array_equal(there[1], burst_statistics(burst[:700], sequence, classes))
    # the same perceptron without its scores does not fit; nor do scores of a class with no alphabet
    _with_refiner(model_dir, replace(ref, equalizer=()))
    with pytest.raises(ModelNotFoundError, match="3 equalizer scores|0 equalizer scores"):
        Refiner.load(model_dir, ModelMeta.load(model_dir).refiner, LABELS)
    _with_refiner(model_dir, replace(ref, equalizer=("16PSK", "32PSK", "QPSK")))
    with pytest.raises(ModelNotFoundError, match="no alphabets for"):
        Refiner.load(model_dir, ModelMeta.load(model_dir).refiner, LABELS)


def test_the_pools_workers_hold_the_refiners_sequence_network(random_sequence_net):
    from rfclassify.dsp.channel import ChannelConfig
    from rfclassify.dsp.synth import synthesize
    from rfclassify.engine.refiner import statistics_many

    classes = ("16PSK", "32PSK", "16QAM")
    ref = sequence_reading_refiner(classes, random_sequence_net(classes, seed=4))
    bursts = list(synthesize(["16QAM", "32PSK", "16PSK"], 2048, np.random.default_rng(9), 20.0, ChannelConfig()).iq)
    bursts.append(np.zeros(300, np.complex64))
    here = statistics_many(bursts, ref.sequence)
    before = len(multiprocessing.active_children())
    pool = ref.start_pool(3)
    try:
        started = len(multiprocessing.active_children()) - before   # all of them, before any real burst
        there = statistics_many(bursts, ref.sequence, pool)
        invariants_there = statistics_many(bursts, None, pool)   # the low-order refiner's, in the same pool
    finally:
        pool.shutdown()
    assert started == 3
    assert all(v.shape == (N_INVARIANTS + 3,) for v in here)
    np.testing.assert_array_equal(np.stack(there), np.stack(here))
    np.testing.assert_array_equal(np.stack(invariants_there), np.stack(statistics_many(bursts)))
    assert all(v.shape == (N_INVARIANTS,) for v in invariants_there)


def test_a_starting_pool_worker_waits_until_all_have_started():
    """start_pool's workers each wait in their start until the last one is counted (then the
    pool has them all before its first real burst); a later one finds the wait over."""
    from rfclassify.engine.refiner import _wait_for_all

    ctx = multiprocessing.get_context("spawn")
    started, all_started = ctx.Value("i", 0), ctx.Event()
    first = threading.Thread(target=_wait_for_all, args=(started, all_started, 2))
    first.start()
    first.join(0.3)
    assert first.is_alive() and not all_started.is_set()       # one of two: still waiting
    assert _wait_for_all(started, all_started, 2, timeout_s=5.0)
    first.join(5.0)
    assert not first.is_alive()
    assert _wait_for_all(started, all_started, 2, timeout_s=0.0)   # a replacement worker does not wait
    lone_started, lone_event = ctx.Value("i", 0), ctx.Event()
    assert not _wait_for_all(lone_started, lone_event, 2, timeout_s=0.05)   # the others never came: gives up


def test_the_daemon_config_chooses_the_refiners_light_variant(tiny_model_dir, tmp_path, random_sequence_net):
    """`[model] refiner_sequence = false` serves the invariants-only variant model.json names
    beside a refiner with a sequence network."""
    from rfclassify.serve.config import config_from_dict
    from rfclassify.serve.daemon import load_engine

    classes = ("16PSK", "32PSK", "16QAM")
    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    _with_refiner(model_dir, sequence_reading_refiner(classes, random_sequence_net(classes, seed=6)))
    light = constant_refiner(classes, favoured="32PSK").save(model_dir / LIGHT_REFINER_FILE)
    meta = ModelMeta.load(model_dir)
    meta.with_updates(refiner={**meta.refiner, "fit": {"sequence_net": {}},
                               "light": {"file": LIGHT_REFINER_FILE, "sha256": file_sha256(light)}}).save(model_dir)
    for sequence in (True, False):
        cfg = config_from_dict({"model": {"dir": str(model_dir), "backend": "onnxruntime", "warmup": False,
                                          "refiner_sequence": sequence}})
        engine = load_engine(cfg)
        try:
            assert (engine.classifier.refiner.sequence is not None) == sequence
        finally:
            engine.classifier.close()


def test_the_daemon_config_can_leave_out_the_shipped_low_order_refiner():
    """`[model] low_order_refiner = false` gives its CPU back and keeps the constellation refiner."""
    from rfclassify.model.meta import default_model_dir
    from rfclassify.serve.config import config_from_dict
    from rfclassify.serve.daemon import load_engine

    assert ModelMeta.load(default_model_dir()).low_order_refiner, "the shipped model has a low-order refiner"
    for low_order in (True, False):
        cfg = config_from_dict({"model": {"dir": str(default_model_dir()), "backend": "onnxruntime", "warmup": False,
                                          "low_order_refiner": low_order}})
        engine = load_engine(cfg)
        try:
            clf = engine.classifier
            assert clf.refiner is not None and (clf.low_order_refiner is not None) == low_order
        finally:
            engine.classifier.close()


def _burst_the_rate_rules_clock_apart() -> np.ndarray:
    """A low roll-off high-order burst whose strongest |x|^2 line is not its symbol rate."""
    from rfclassify.dsp import symbol_clock as sc
    from rfclassify.dsp.channel import ChannelConfig
    from rfclassify.dsp.synth import synthesize
    from rfclassify.labels import HIGH_ORDER_LABELS

    batch = synthesize(list(HIGH_ORDER_LABELS) * 2, 1024, np.random.default_rng(41), 25.0, ChannelConfig())
    for iq, sps in zip(batch.iq, batch.params["samples_per_symbol"], strict=True):
        x = sc.remove_dc_line(iq)
        strongest, fitted = sc.blind_clock(x, sc.STRONGEST_LINE)[0], sc.blind_clock(x, sc.ALPHABET_FIT)[0]
        if abs(sps / strongest - 1) > 0.02 and abs(sps / fitted - 1) < 0.01:
            return iq
    raise AssertionError("no burst whose rate only the alphabet fit finds")


def test_a_refiner_clocks_bursts_by_its_rate_rule_here_and_in_its_pool_and_stores_it(tiny_model_dir, tmp_path,
                                                                                     random_sequence_net):

    from rfclassify.dsp.sequence_fronts import front_sequence
    from rfclassify.dsp.symbol_clock import ALPHABET_FIT, STRONGEST_LINE
    from rfclassify.dsp.symbol_sequence import clocked_symbols
    from rfclassify.engine.refiner import blind_symbols, burst_invariants, burst_statistics, statistics_many

    classes = ("16PSK", "32PSK", "16QAM")
    burst = _burst_the_rate_rules_clock_apart()
    ref = sequence_reading_refiner(classes, random_sequence_net(classes, seed=5, rate_rule=ALPHABET_FIT))
    ref = replace(ref, rate_rule=ALPHABET_FIT)
    stats = burst_statistics(burst, ref.sequence, (), ALPHABET_FIT)
    np.testing.assert_array_equal(stats[:N_INVARIANTS], burst_invariants(burst, ALPHABET_FIT))
    assert not np.allclose(stats[:N_INVARIANTS], burst_invariants(burst, STRONGEST_LINE))
    seq = front_sequence(clocked_symbols(blind_symbols(burst, ALPHABET_FIT)), "clocked", classes)
    np.testing.assert_array_equal(stats[N_INVARIANTS:], ref.sequence.log_probs(seq))
    pool = ref.start_pool(2)
    try:
        there = statistics_many([burst, burst], ref.sequence, pool, (), ref.rate_rule)
    finally:
        pool.shutdown()
    np.testing.assert_array_equal(there[0], stats)
    probs = _probs("16PSK", 0.6)
    np.testing.assert_allclose(ref.refine(probs, 20.0, burst)[ref.index] / probs[ref.index].sum(),
                               np.exp(stats[N_INVARIANTS:]), rtol=1e-4)

    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    _with_refiner(model_dir, ref)
    back = Refiner.load(model_dir, ModelMeta.load(model_dir).refiner, LABELS)
    assert back.rate_rule == ALPHABET_FIT and back.describe()["rate_rule"] == ALPHABET_FIT
    np.testing.assert_array_equal(back.refine(probs, 20.0, burst), ref.refine(probs, 20.0, burst))
    # the refiner's rule, not the one its sequence network was trained on, clocks the bursts
    _with_refiner(model_dir, replace(ref, rate_rule=STRONGEST_LINE))
    other = Refiner.load(model_dir, ModelMeta.load(model_dir).refiner, LABELS)
    assert other.rate_rule == STRONGEST_LINE and other.sequence.rate_rule == ALPHABET_FIT
    np.testing.assert_allclose(other.refine(probs, 20.0, burst)[other.index] / probs[other.index].sum(),
                               np.exp(burst_statistics(burst, ref.sequence)[N_INVARIANTS:]), rtol=1e-4)


def test_a_refiner_file_from_before_rate_rules_clocks_by_the_strongest_line_and_an_unknown_rule_is_refused(
        tiny_model_dir, tmp_path):
    from rfclassify.dsp.symbol_clock import STRONGEST_LINE

    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    path = constant_refiner(LABELS, favoured="FM").save(model_dir / REFINER_FILE)
    with np.load(path) as z:
        arrays = dict(z)
    for rule, written in ((None, "old"), ("loudest_line", "future")):
        if rule is None:
            arrays.pop("rate_rule")
        else:
            arrays["rate_rule"] = np.array(rule)
        np.savez(path, **arrays)
        ModelMeta.load(model_dir).with_updates(refiner={"file": REFINER_FILE, "classes": list(LABELS)}).save(model_dir)
        if written == "old":
            assert Refiner.load(model_dir, ModelMeta.load(model_dir).refiner, LABELS).rate_rule == STRONGEST_LINE
        else:
            with pytest.raises(ModelNotFoundError, match="unknown rate rule 'loudest_line'"):
                Refiner.load(model_dir, ModelMeta.load(model_dir).refiner, LABELS)


def test_a_refiner_fit_clocks_by_its_own_rule_else_its_sequence_networks(random_sequence_net):
    from rfclassify.dsp.symbol_clock import ALPHABET_FIT, STRONGEST_LINE
    from rfclassify.model.refiner_fit import RefinerFitConfig

    old = random_sequence_net(("8PSK", "16QAM"))
    assert old.rate_rule == STRONGEST_LINE
    assert RefinerFitConfig().clock_rule(old) == STRONGEST_LINE
    assert RefinerFitConfig().clock_rule(random_sequence_net(("8PSK", "16QAM"), rate_rule=ALPHABET_FIT)) == ALPHABET_FIT
    assert RefinerFitConfig().clock_rule(None) == STRONGEST_LINE
    assert RefinerFitConfig(rate_rule=ALPHABET_FIT).clock_rule(None) == ALPHABET_FIT
    assert RefinerFitConfig(rate_rule=ALPHABET_FIT).clock_rule(old) == ALPHABET_FIT
    with pytest.raises(ConfigError, match="rate_rule must be one of"):
        RefinerFitConfig(rate_rule="loudest")


@pytest.fixture
def sure_and_unsure(tiny_model_dir, tmp_path):
    """A copy of the tiny model with a refiner that re-decides every class (FM at 0.9), four
    bursts of 2,048 samples, the network's results for them, and a threshold between the
    second and third of their network confidences."""
    from rfclassify.engine.classifier import Classifier

    rng = np.random.default_rng(3)
    bursts = [(rng.standard_normal(2048) * (1 + 1j)).astype(np.complex64) for _ in range(4)]
    with Classifier.load(tiny_model_dir, backend="onnxruntime") as plain:
        network = plain.classify(bursts)
    tops = sorted(r.confidence for r in network)
    assert tops[1] < tops[2]                        # the bursts' network confidences differ
    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    _with_refiner(model_dir, constant_refiner(LABELS, "FM"))
    return model_dir, bursts, network, (tops[1] + tops[2]) / 2, tops


def test_a_burst_the_network_is_sure_of_skips_the_dc_pass_and_the_refiners(sure_and_unsure, monkeypatch):
    """Above refiner_skip_above (the API's, model.json's, the daemon's) a burst of at least
    refiner_skip_min_samples keeps the network's answer and neither the DC pass nor a refiner
    sees its samples; at or below it, shorter, and with 1.0 (older models) it is refined."""
    import rfclassify.engine.dc_pass as dc_pass
    from rfclassify.engine.classifier import Classifier, skip_sure
    from rfclassify.serve.config import config_from_dict
    from rfclassify.serve.daemon import load_engine

    model_dir, bursts, network, cut, _ = sure_and_unsure
    assert ModelMeta.load(model_dir).refiner_skip_above == 1.0   # model.json without it: none skips
    seen: list[int] = []

    def offsets_seen(probs, snr_db, bursts, *args, **kwargs):
        seen.append(sum(x is not None for x in bursts))
        return {}
    monkeypatch.setattr(dc_pass, "offsets_to_remove", offsets_seen)
    with Classifier.load(model_dir, backend="onnxruntime") as every, \
            Classifier.load(model_dir, backend="onnxruntime", refiner_skip_above=cut) as gated:
        refined, answers = every.classify(bursts), gated.classify(bursts)
        assert gated.describe()["refiner_skip_above"] == cut and every.refiner_skip_above == 1.0
        assert every.refiner_skip_counts == {"long_enough": 4, "skipped": 0}
        assert gated.refiner_skip_counts == {"long_enough": 4, "skipped": 2}
        unsure = [x for x, r in zip(bursts, network, strict=True) if r.confidence <= cut]
        gated.classify(unsure + [bursts[0][:10]])       # counted on; a burst rejected too short is not
        assert gated.describe()["refiner_skip_counts"] == {"long_enough": 6, "skipped": 2}
    assert seen == [4, 2, 2]                        # the DC pass had only the unsure bursts
    assert all(r.top[0][0] == "FM" for r in refined)
    for net, ref, got in zip(network, refined, answers, strict=True):
        assert got.top == (net.top if net.confidence > cut else ref.top)
    ModelMeta.load(model_dir).with_updates(refiner_skip_above=cut, refiner_skip_min_samples=4096).save(model_dir)
    with Classifier.load(model_dir, backend="onnxruntime") as long_only:    # 2,048 samples are too short to skip
        assert [r.top for r in long_only.classify(bursts)] == [r.top for r in refined]
        assert long_only.refiner_skip_counts == {"long_enough": 0, "skipped": 0}
    ModelMeta.load(model_dir).with_updates(refiner_skip_min_samples=2048).save(model_dir)
    for keys, skipping in (({}, True), ({"refiner_skip_above": -1.0}, True), ({"refiner_skip_above": 1.0}, False)):
        engine = load_engine(config_from_dict({"model": {"dir": str(model_dir), "backend": "onnxruntime",
                                                         "warmup": False, **keys}}))
        with engine.classifier as clf:
            assert clf.refiner_skip_above == (cut if skipping else 1.0)
            assert [r.top for r in clf.classify(bursts)] == [r.top for r in (answers if skipping else refined)]
    one = np.array([0.0, 1.0])
    assert skip_sure([one, one, one * 0.5], [bursts[0], None, bursts[1]], 1.0) == [bursts[0], None, bursts[1]]
    assert skip_sure([one, one * 0.5], [bursts[0], bursts[1]], 0.5) == [None, bursts[1]]
    short = bursts[1][:100]
    assert skip_sure([one, one], [bursts[0], short], 0.5, 2048) == [None, short]


def test_the_bursts_that_skip_are_sharpened_by_the_models_temperature_for_its_threshold_only(sure_and_unsure):
    """model.json's refiner_skip_temperature sharpens the skipped bursts' probabilities (the
    answer unchanged); a threshold other than the model's serves them as the network gave them."""
    from rfclassify.engine.classifier import Classifier, sharpened

    model_dir, bursts, network, cut, tops = sure_and_unsure
    ModelMeta.load(model_dir).with_updates(refiner_skip_above=cut, refiner_skip_temperature=0.5).save(model_dir)
    with Classifier.load(model_dir, backend="onnxruntime") as sharp:
        for net, got in zip(network, sharp.classify(bursts), strict=True):
            if net.confidence > cut:
                p = net.probabilities.astype(np.float64) ** 2
                np.testing.assert_allclose(got.probabilities, p / p.sum(), rtol=1e-5)
                assert got.label == net.label and got.confidence > net.confidence
    with Classifier.load(model_dir, backend="onnxruntime", refiner_skip_above=cut) as same, \
            Classifier.load(model_dir, backend="onnxruntime", refiner_skip_above=(cut + tops[2]) / 2) as other:
        assert same.meta.refiner_skip_temperature == 0.5 and other.meta.refiner_skip_temperature == 1.0
        above = [(net, got) for net, got in zip(network, other.classify(bursts), strict=True)
                 if net.confidence > other.refiner_skip_above]
        assert above and all(got.top == net.top for net, got in above)
    p = np.array([0.6, 0.4])
    assert sharpened(p, 1.0) is p
    np.testing.assert_allclose(sharpened(p, 0.5), np.array([0.36, 0.16]) / 0.52)


def test_a_skip_threshold_outside_0_to_1_is_a_clear_error(sure_and_unsure):
    from rfclassify.engine.classifier import Classifier
    from rfclassify.serve.config import config_from_dict

    model_dir = sure_and_unsure[0]
    for bad in (-0.1, 1.5):
        with pytest.raises(ConfigError, match="refiner_skip_above must be in 0..1"):
            Classifier.load(model_dir, backend="onnxruntime", refiner_skip_above=bad)
    with pytest.raises(ConfigError, match="refiner_skip_above"):
        config_from_dict({"model": {"refiner_skip_above": 2.0}})


def _daemon_refiner(model_dir, **model_keys):
    """The constellation refiner the daemon's load_engine serves for a [model] section naming
    model_dir and model_keys (its classifier closed again)."""
    from rfclassify.serve.config import config_from_dict
    from rfclassify.serve.daemon import load_engine

    engine = load_engine(config_from_dict({"model": {"dir": str(model_dir), "backend": "onnxruntime",
                                                     "warmup": False, **model_keys}}))
    try:
        return engine.classifier.refiner
    finally:
        engine.classifier.close()


def test_serving_can_clock_a_refiner_by_another_rate_rule(tiny_model_dir, tmp_path, random_sequence_net):
    """Classifier.load(refiner_rate_rule=...) and `[model] refiner_rate_rule` clock the
    refiner's bursts by that rule, its weights as fitted; "" or None keep its own; an unknown
    rule is a clear error."""
    from rfclassify.dsp.symbol_clock import ALPHABET_FIT, RATE_RULES, STRONGEST_LINE
    from rfclassify.engine.classifier import Classifier
    from rfclassify.engine.refiner import burst_statistics
    from rfclassify.serve.config import REFINER_RATE_RULES, config_from_dict

    assert REFINER_RATE_RULES == ("", *RATE_RULES)      # the config's copy of the rules
    classes = ("16PSK", "32PSK", "16QAM")
    burst = _burst_the_rate_rules_clock_apart()
    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    ref = sequence_reading_refiner(classes, random_sequence_net(classes, seed=5))
    _with_refiner(model_dir, ref)
    probs = _probs("16PSK", 0.6)
    with Classifier.load(model_dir, backend="onnxruntime") as own, \
            Classifier.load(model_dir, backend="onnxruntime", refiner_rate_rule=ALPHABET_FIT) as fitted:
        assert own.refiner.rate_rule == STRONGEST_LINE and fitted.refiner.rate_rule == ALPHABET_FIT
        assert fitted.refiner.describe()["rate_rule"] == ALPHABET_FIT
        for clf, rule in ((own, STRONGEST_LINE), (fitted, ALPHABET_FIT)):
            share = clf.refiner.refine(probs, 20.0, burst)[clf.refiner.index] / probs[clf.refiner.index].sum()
            np.testing.assert_allclose(share, np.exp(burst_statistics(burst, ref.sequence, (), rule)[N_INVARIANTS:]),
                                       rtol=1e-4)
        for name in ("w1", "b1", "w2", "b2"):
            np.testing.assert_array_equal(getattr(fitted.refiner, name), getattr(own.refiner, name))
    with pytest.raises(ConfigError, match="unknown refiner rate rule 'loudest_line'"):
        Classifier.load(model_dir, backend="onnxruntime", refiner_rate_rule="loudest_line")
    for rule, expected in (("", STRONGEST_LINE), (ALPHABET_FIT, ALPHABET_FIT)):
        assert _daemon_refiner(model_dir, refiner_rate_rule=rule).rate_rule == expected
    with pytest.raises(ConfigError, match="refiner_rate_rule: must be one of"):
        config_from_dict({"model": {"refiner_rate_rule": "loudest_line"}})


def test_the_models_serving_rate_rule_clocks_its_refiner_unless_the_caller_names_one(tiny_model_dir, tmp_path,
                                                                                      random_sequence_net):
    """model.json's refiner.serve_rate_rule is the rule the refiner's bursts are clocked by
    when served (the API, the daemon's "" and evaluate), its weights as fitted; a rule the
    caller names wins; the card says which clock served; an unknown one fails the load."""
    from rfclassify.dsp.symbol_clock import ALPHABET_FIT_3, STRONGEST_LINE
    from rfclassify.engine.classifier import Classifier
    from rfclassify.model.card import render_markdown

    classes = ("16PSK", "32PSK", "16QAM")
    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    _with_refiner(model_dir, sequence_reading_refiner(classes, random_sequence_net(classes, seed=5)))
    meta = ModelMeta.load(model_dir)
    meta.with_updates(refiner={**meta.refiner, "serve_rate_rule": ALPHABET_FIT_3}).save(model_dir)
    with Classifier.load(model_dir, backend="onnxruntime") as served, \
            Classifier.load(model_dir, backend="onnxruntime", refiner_rate_rule=STRONGEST_LINE) as named:
        assert served.refiner.rate_rule == ALPHABET_FIT_3 and named.refiner.rate_rule == STRONGEST_LINE
        np.testing.assert_array_equal(served.refiner.w1, named.refiner.w1)
    assert _daemon_refiner(model_dir, refiner_rate_rule="").rate_rule == ALPHABET_FIT_3
    # a refiner served on the rule it was fitted on names none (the shipped one is served on another)
    shipped = {k: v for k, v in ModelMeta.load(default_model_dir()).refiner.items() if k != "serve_rate_rule"}

    def card(refiner: dict) -> str:
        return render_markdown({"model_id": "m", "labels": list(LABELS), "buckets_samples": [128], "min_samples": 64,
                                "max_windows": 4, "unknown_threshold": 0.5, "temperature": 1.0, "parameters": 1,
                                "flops_per_bucket": {}, "training": {}, "refiner": refiner,
                                "evaluations": {"e": {"run": {"refiner": list(classes), "dc_pass": True,
                                                              "refiner_rate_rule": ALPHABET_FIT_3}}}})
    assert "- Served with its bursts clocked by" not in card(shipped)
    assert "- Served with the EM scores fitted for the network's top 4 of its classes" in card(
        {**shipped, "serve_em_classes": 4})
    # the shipped refiner is fitted for five (forty-fifth session) and serves them as fitted
    unnamed = {k: v for k, v in shipped.items() if k != "serve_em_classes"}
    assert "- Served with the EM scores fitted for the network's top 5 of its classes, as in its fit" in card(unnamed)
    three = {**unnamed, "fit": {**unnamed["fit"], "config": {**unnamed["fit"]["config"], "em_classes": 3}}}
    assert "- Served with the EM scores fitted" not in card(three)
    fitted_on = shipped["fit"]["rate_rule"]
    assert ("- Served on the `coherence` rate rule it was fitted on; model.json's refiner.serve_rate_rule names it, "
            "so the light variant's bursts are clocked by it too.") in card({**shipped, "serve_rate_rule": fitted_on})
    named_card = card({**shipped, "serve_rate_rule": ALPHABET_FIT_3})
    assert ("- Served with its bursts clocked by the `alphabet_fit_3` rate rule (model.json's "
            "refiner.serve_rate_rule; fitted on `coherence`)") in named_card
    assert "with the DC pass and the constellation refiner (its bursts clocked by `alphabet_fit_3`), " in named_card
    meta = ModelMeta.load(model_dir)
    meta.with_updates(refiner={**meta.refiner, "serve_rate_rule": "loudest_line"}).save(model_dir)
    with pytest.raises(ConfigError, match="unknown refiner rate rule 'loudest_line'"):
        Classifier.load(model_dir, backend="onnxruntime")


def _serves_its_em_count(model_dir):
    """model.json's refiner.serve_em_classes is how many classes get the EM scores when served
    (the API, the daemon's 0, evaluate's run record); a count the caller names wins; a count the
    refiner cannot serve fails the load and the daemon's config."""
    from rfclassify.engine.classifier import Classifier
    from rfclassify.serve.config import config_from_dict

    meta = ModelMeta.load(model_dir)
    meta.with_updates(refiner={**meta.refiner, "serve_em_classes": 4}).save(model_dir)
    with Classifier.load(model_dir, backend="onnxruntime") as served, \
            Classifier.load(model_dir, backend="onnxruntime", refiner_em_classes=2) as named:
        assert served.refiner.em_count == 4 and named.refiner.em_count == 2
    for asked, expected in ((0, 4), (1, 1)):
        assert _daemon_refiner(model_dir, refiner_em_classes=asked).em_count == expected
    with pytest.raises(ConfigError, match="refiner_em_classes"):
        config_from_dict({"model": {"refiner_em_classes": -1}})
    meta.with_updates(refiner={**meta.refiner, "serve_em_classes": 9}).save(model_dir)
    with pytest.raises(ConfigError, match="a count in 1..4, got 9"):
        Classifier.load(model_dir, backend="onnxruntime")
    meta.save(model_dir)                                     # back as fitted


def test_a_refiner_with_em_scores_fits_the_networks_top_classes_feeds_them_last_and_stores_them(tiny_model_dir,
                                                                                                 tmp_path):
    """The EM scores (rfclassify.dsp.em_channel) of the network's top three of the refiner's
    classes follow the invariants, from the same blind clock; the classes left out sit
    ABSENT_MARGIN under the worst fitted; the pool computes the same; the flag is stored, and
    the same perceptron without it does not load."""
    from rfclassify.dsp import em_channel
    from rfclassify.dsp.channel import ChannelConfig
    from rfclassify.dsp.symbol_clock import STRONGEST_LINE, blind_symbols
    from rfclassify.dsp.synth import synthesize
    from rfclassify.engine.refiner import burst_invariants, burst_statistics, statistics_many

    classes = ("16PSK", "16QAM", "32QAM", "64QAM")
    burst = synthesize(["16QAM"], 1024, np.random.default_rng(10), 25.0, ChannelConfig()).iq[0]
    top = np.array([1, 2, 3])
    stats = burst_statistics(burst, None, (), STRONGEST_LINE, classes, top)
    n_em = em_channel.n_scores(classes)
    assert stats.shape == (N_INVARIANTS + n_em,) and stats.dtype == np.float32
    np.testing.assert_array_equal(stats[:N_INVARIANTS], burst_invariants(burst))
    scores = em_channel.scores_at_clock(blind_symbols(burst), classes, top)
    np.testing.assert_array_equal(stats[N_INVARIANTS:], scores)
    unit_power = scores[:len(classes)]
    assert classes[int(np.argmax(unit_power))] == "16QAM"
    assert unit_power[0] == pytest.approx(unit_power[1:].min() - em_channel.ABSENT_MARGIN)
    assert not np.any(burst_statistics(np.zeros(600, np.complex64), None, (), STRONGEST_LINE, classes, top)[-n_em:])

    n_in = N_FEATURES + n_em
    ref = Refiner(labels=classes, index=np.array([LABELS.index(c) for c in classes]),
                  mean=np.zeros(n_in, np.float32), scale=np.ones(n_in, np.float32),
                  w1=np.random.default_rng(0).normal(size=(n_in, 4)).astype(np.float32), b1=np.ones(4, np.float32),
                  w2=np.random.default_rng(1).normal(size=(4, 4)).astype(np.float32), b2=np.zeros(4, np.float32),
                  em_channel=True)
    assert ref.describe()["em_channel_classes"] == em_channel.FAST_CLASSES
    probs = _probs("32QAM", 0.5)
    probs[LABELS.index("16PSK")], probs[LABELS.index("64QAM")], probs[LABELS.index("16QAM")] = 0.2, 0.1, 0.01
    labels_fitted, picked = ref.em_arguments([probs], [20.0])
    assert labels_fitted == classes and list(picked[0]) == [0, 2, 3]      # 16PSK, 32QAM, 64QAM
    four = ref.fitting_em_classes(4)                                       # served for one more class
    assert list(four.em_arguments([probs], [20.0])[1][0]) == [0, 1, 2, 3] and four.describe()["em_channel_classes"] == 4
    np.testing.assert_array_equal(four.w1, ref.w1)
    for bad in (0, 5, 2.5, True):
        with pytest.raises(ConfigError, match="a count in 1..4"):
            ref.fitting_em_classes(bad)
    measured = burst_statistics(burst, None, (), STRONGEST_LINE, classes, picked[0])
    np.testing.assert_array_equal(ref.refine(probs, 20.0, burst), ref.refine_measured([probs], [20.0], [measured])[0])
    assert not np.array_equal(measured, stats)                           # other classes fitted, other scores

    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    _with_refiner(model_dir, ref)
    back = Refiner.load(model_dir, ModelMeta.load(model_dir).refiner, LABELS)
    assert back.em_channel and back.em_count == em_channel.FAST_CLASSES
    _serves_its_em_count(model_dir)
    np.testing.assert_array_equal(back.refine(probs, 20.0, burst), ref.refine(probs, 20.0, burst))
    pool = back.start_pool(2)
    try:
        there = statistics_many([burst, burst[:700]], None, pool, (), STRONGEST_LINE, classes, [top, picked[0]])
    finally:
        pool.shutdown()
    np.testing.assert_array_equal(there[0], stats)
    np.testing.assert_array_equal(there[1], burst_statistics(burst[:700], None, (), STRONGEST_LINE, classes,
                                                             picked[0]))
    with pytest.raises(ValueError, match="one array of classes per burst"):
        statistics_many([burst, burst], None, None, (), STRONGEST_LINE, classes, [top])
    _with_refiner(model_dir, replace(ref, em_channel=False))
    with pytest.raises(ModelNotFoundError, match="0 EM scores"):
        Refiner.load(model_dir, ModelMeta.load(model_dir).refiner, LABELS)


def test_an_em_gate_holds_bursts_back_from_the_em_fit_served_and_stored(tiny_model_dir, tmp_path):
    """A gated refiner fits the EM scores only for the bursts its gate passes (a dense QAM
    near the top of the network's ranking, above an SNR); the others get zeros, as in its
    fit. The gate is stored with it, and an unknown one in its file does not load."""
    from rfclassify.dsp import em_channel
    from rfclassify.dsp.channel import ChannelConfig
    from rfclassify.dsp.symbol_clock import STRONGEST_LINE
    from rfclassify.dsp.synth import synthesize
    from rfclassify.engine.refiner import burst_statistics

    classes = ("16PSK", "16QAM", "32QAM", "64QAM")
    burst = synthesize(["64QAM"], 1024, np.random.default_rng(11), 25.0, ChannelConfig()).iq[0]
    n_in, n_em = N_FEATURES + em_channel.n_scores(classes), em_channel.n_scores(classes)
    ref = Refiner(labels=classes, index=np.array([LABELS.index(c) for c in classes]),
                  mean=np.zeros(n_in, np.float32), scale=np.ones(n_in, np.float32),
                  w1=np.random.default_rng(0).normal(size=(n_in, 4)).astype(np.float32), b1=np.ones(4, np.float32),
                  w2=np.random.default_rng(1).normal(size=(4, 4)).astype(np.float32), b2=np.zeros(4, np.float32),
                  em_channel=True, em_gate="dense_top1_snr5")
    qam, psk = _probs("64QAM", 0.6), _probs("16PSK", 0.6)
    _, picked = ref.em_arguments([qam, qam, psk], [20.0, 3.0, 20.0])
    assert picked[0].size == em_channel.FAST_CLASSES and 3 in picked[0]          # 64QAM and two of the tied
    assert picked[1].size == 0 and picked[2].size == 0
    fitted = burst_statistics(burst, None, (), STRONGEST_LINE, classes, picked[0])
    held_back = burst_statistics(burst, None, (), STRONGEST_LINE, classes, picked[2])
    np.testing.assert_array_equal(held_back[:-n_em], fitted[:-n_em])
    assert not np.any(held_back[-n_em:]) and np.any(fitted[-n_em:])
    np.testing.assert_array_equal(ref.refine(qam, 3.0, burst), ref.refine_measured([qam], [3.0], [held_back])[0])
    np.testing.assert_array_equal(ref.refine(qam, 20.0, burst), ref.refine_measured([qam], [20.0], [fitted])[0])

    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    _with_refiner(model_dir, ref)
    assert Refiner.load(model_dir, ModelMeta.load(model_dir).refiner, LABELS).em_gate == "dense_top1_snr5"
    _with_refiner(model_dir, replace(ref, em_gate="dense_top"))
    with pytest.raises(ModelNotFoundError, match="unknown gate 'dense_top'"):
        Refiner.load(model_dir, ModelMeta.load(model_dir).refiner, LABELS)


def test_a_gated_fit_zeroes_the_em_scores_it_holds_back_and_takes_examples_made_for_every_burst(tmp_path):
    """gate_em_columns reads the gate from each row's network log-probabilities and SNR
    estimate and zeroes the EM scores of the rows it holds back; examples with every burst's
    EM scores serve a gated fit, but gated examples do not serve an ungated one."""
    from rfclassify.dsp import em_channel
    from rfclassify.engine.refiner import Refiner as R
    from rfclassify.model.refiner_fit import (RefinerFitConfig, examples_key, gate_em_columns, load_examples,
                                              save_examples)

    classes = ("16PSK", "16QAM", "32QAM", "64QAM")
    n_em = em_channel.n_scores(classes)
    rows = [(_probs("64QAM", 0.6), 20.0), (_probs("64QAM", 0.6), 2.0), (_probs("16PSK", 0.6), 20.0)]
    stats = np.ones((3, N_INVARIANTS + n_em), np.float32)
    features = R.features(np.stack([p for p, _ in rows]), np.array([s for _, s in rows]), stats)
    gated = gate_em_columns(features, LABELS, classes, "dense_top1_snr5")
    np.testing.assert_array_equal(gated[:, :-n_em], features[:, :-n_em])
    assert np.all(gated[0, -n_em:] == 1) and not np.any(gated[1:, -n_em:])
    assert gate_em_columns(features, LABELS, classes, em_channel.ALL_BURSTS) is features
    with pytest.raises(ConfigError, match="em_gate must be"):
        RefinerFitConfig(em_channel=True, em_gate="dense_top")
    with pytest.raises(ConfigError, match="add --em-channel"):
        RefinerFitConfig(em_gate="dense_top2")

    ex = {"features": features, "truth": np.zeros(3, np.int64), "network_top": np.zeros(3, np.int64),
          "snr_db": np.zeros(3, np.float32), "length": np.full(3, 1024, np.int64)}
    every = examples_key("m", classes, None, "coherence", (), False, em_channel=True)
    gated_key = examples_key("m", classes, None, "coherence", (), False, em_channel=True, em_gate="dense_top2")
    cfg = RefinerFitConfig(em_channel=True)
    load_examples(save_examples(tmp_path / "every.npz", ex, every, cfg), gated_key)
    with pytest.raises(ConfigError, match="em_gate: 'dense_top2' there, 'all' here"):
        load_examples(save_examples(tmp_path / "gated.npz", ex, gated_key, cfg), every)


@pytest.mark.parametrize("gate", ["all", "dense5_top4_snr6"])
def test_a_fit_with_em_scores_measures_them_for_the_networks_top_classes_as_served(tiny_model_dir, gate):
    """fit-refiner's examples carry, last, the EM scores fitted for the classes the network
    ranks highest, as Refiner.em_arguments picks them when the burst is served, and zeros
    for the bursts the EM gate holds back."""
    from rfclassify.dsp import em_channel
    from rfclassify.dsp.channel import ChannelConfig
    from rfclassify.dsp.symbol_clock import COHERENCE
    from rfclassify.dsp.synth import synthesize
    from rfclassify.engine.classifier import Classifier
    from rfclassify.engine.refiner import burst_statistics
    from rfclassify.labels import HIGH_ORDER_LABELS
    from rfclassify.model.refiner_fit import _chunk_examples

    index = np.array([LABELS.index(c) for c in HIGH_ORDER_LABELS])
    bursts = list(synthesize(list(HIGH_ORDER_LABELS[:6]), 1024, np.random.default_rng(4), 25.0, ChannelConfig()).iq)
    n_stats = N_INVARIANTS + em_channel.n_scores(HIGH_ORDER_LABELS)
    with Classifier.load(tiny_model_dir, backend="onnxruntime", refiner=False) as clf:
        keep, features, _ = _chunk_examples(clf, bursts, index, n_stats, None, (), COHERENCE, None,
                                            HIGH_ORDER_LABELS, gate)
        results = clf.classify(bursts)
    assert keep.size and features.shape == (keep.size, N_FEATURES + em_channel.n_scores(HIGH_ORDER_LABELS))
    fitted = []
    for row, i in enumerate(keep):
        top = em_channel.em_classes(np.asarray(results[i].probabilities)[index], HIGH_ORDER_LABELS,
                                    results[i].snr_db, gate)
        stats = burst_statistics(bursts[i], None, (), COHERENCE, HIGH_ORDER_LABELS, top)
        np.testing.assert_allclose(features[row, N_FEATURES:], stats[N_INVARIANTS:])
        fitted.append(bool(np.any(stats[N_INVARIANTS:])))
    assert all(fitted) if gate == "all" else not any(fitted)   # the tiny model's SNR estimates are all under 6 dB


def test_a_fit_leaves_out_exactly_the_equalized_or_the_em_scores():
    from rfclassify.model.refiner_fit import RefinerFitConfig, last_blocks_kept

    assert list(last_blocks_kept(10, 3, 2)) == list(range(10))
    assert list(last_blocks_kept(10, 3, 2, keep_equalizer=False)) == [0, 1, 2, 3, 4, 8, 9]
    assert list(last_blocks_kept(10, 3, 2, keep_em=False)) == list(range(8))
    assert list(last_blocks_kept(10, 0, 2, keep_em=False)) == list(range(8))
    with pytest.raises(ConfigError, match="made for the high-order alphabets"):
        RefinerFitConfig(group="low-order", em_channel=True)


def _random_refiner(classes: tuple[str, ...], n_in: int, seed: int, **fields) -> Refiner:
    rng = np.random.default_rng(seed)
    return Refiner(labels=classes, index=np.array([LABELS.index(c) for c in classes]),
                   mean=np.zeros(n_in, np.float32), scale=np.ones(n_in, np.float32),
                   w1=rng.normal(size=(n_in, 4)).astype(np.float32), b1=np.ones(4, np.float32),
                   w2=rng.normal(size=(4, len(classes))).astype(np.float32),
                   b2=np.zeros(len(classes), np.float32), **fields)


def test_an_em_ranker_picks_the_em_classes_from_the_other_statistics_served_pooled_and_stored(tiny_model_dir,
                                                                                               tmp_path):
    """With an EM ranker, a burst's EM classes are the ranker's top three (and its gate reads
    the ranker's ranking), from the network's outputs and the statistics before the EM
    scores: picked in the worker that measures them, so served, pooled and stored alike. A
    ranker whose inputs do not fit, or one without EM scores to pick for, does not load."""
    from rfclassify.dsp import em_channel
    from rfclassify.dsp.channel import ChannelConfig
    from rfclassify.dsp.symbol_clock import STRONGEST_LINE
    from rfclassify.dsp.synth import synthesize
    from rfclassify.engine.refiner import EmPick, burst_statistics, statistics_many

    classes = ("16PSK", "16QAM", "32QAM", "64QAM")
    n_em = em_channel.n_scores(classes)
    burst = synthesize(["64QAM"], 1024, np.random.default_rng(12), 25.0, ChannelConfig()).iq[0]
    probs = _probs("16PSK", 0.6)                     # the network's top three: 16PSK and two tied
    base = burst_statistics(burst)
    # a ranker that ranks 64QAM, 32QAM, 16QAM above 16PSK whatever it reads
    ranker = replace(_random_refiner(classes, N_FEATURES, 2), w2=np.zeros((4, 4), np.float32),
                     b2=np.array([0.0, 1.0, 2.0, 3.0], np.float32))
    ref = _random_refiner(classes, N_FEATURES + n_em, 3, em_channel=True, em_ranker=ranker)
    assert ref.describe()["em_ranked_by"] == "refiner"
    labels_fitted, picks = ref.em_arguments([probs], [20.0])
    assert labels_fitted == classes and isinstance(picks[0], EmPick)
    assert list(picks[0].classes(ranker, classes, base)) == [1, 2, 3]
    assert list(replace(ref, em_ranker=None).em_arguments([probs], [20.0])[1][0]) != [1, 2, 3]
    ranked = burst_statistics(burst, None, (), STRONGEST_LINE, classes, picks[0], ranker)
    np.testing.assert_array_equal(ranked, burst_statistics(burst, None, (), STRONGEST_LINE, classes,
                                                           np.array([1, 2, 3])))
    with pytest.raises(ValueError, match="needs the refiner's EM ranker"):
        burst_statistics(burst, None, (), STRONGEST_LINE, classes, picks[0])
    # the gate reads the ranker's ranking: 64QAM on top passes it where the network's 16PSK would not
    gated = replace(ref, em_gate="dense_top1")
    assert list(gated.em_arguments([probs], [20.0])[1][0].classes(ranker, classes, base)) == [1, 2, 3]
    assert replace(gated, em_ranker=None).em_arguments([probs], [20.0])[1][0].size == 0
    np.testing.assert_array_equal(ref.refine(probs, 20.0, burst), ref.refine_measured([probs], [20.0], [ranked])[0])

    with_trees = replace(ref, em_ranker=replace(ranker, trees=_tree_of_one_split(4, 0, N_FEATURES)))
    back = _stored_and_loaded(tiny_model_dir, tmp_path, with_trees)
    assert back.em_ranker is not None and back.em_ranker.trees is not None and not back.em_ranker.em_channel
    for k in ("w1", "b2", "mean"):
        np.testing.assert_array_equal(getattr(back.em_ranker, k), getattr(ranker, k))
    np.testing.assert_array_equal(back.refine(probs, 20.0, burst), with_trees.refine(probs, 20.0, burst))
    pool = back.start_pool(2)
    try:
        there = statistics_many([burst, burst[:700]], None, pool, (), STRONGEST_LINE, *back.em_arguments(
            [probs, probs], [20.0, 20.0]))
    finally:
        pool.shutdown()
    np.testing.assert_array_equal(there[0], burst_statistics(burst, None, (), STRONGEST_LINE, classes,
                                                             back.em_arguments([probs], [20.0])[1][0],
                                                             back.em_ranker))
    assert there[1].shape == there[0].shape
    for broken in (replace(ref, em_ranker=_random_refiner(classes, N_FEATURES + 1, 2)),
                   replace(ref, em_channel=False, w1=ref.w1[:N_FEATURES], mean=ref.mean[:N_FEATURES],
                           scale=ref.scale[:N_FEATURES])):
        _with_refiner(tmp_path / "m", broken)
        with pytest.raises(ModelNotFoundError, match="EM ranker does not read"):
            Refiner.load(tmp_path / "m", ModelMeta.load(tmp_path / "m").refiner, LABELS)


def test_a_fit_with_an_em_ranker_finds_its_examples_bursts_again_and_measures_the_picks_that_changed(
        tiny_model_dir, tmp_path):
    """em_columns regenerates the fit's bursts and finds each example's again: for the
    network's picks it measures exactly the EM scores the examples were made with, and
    examples of another seed are refused. A fit with an EM ranker keeps the stored scores
    whose picks agree with its ranker's out-of-fold ones, measures the others, and serves
    the ranker it fitted."""
    pytest.importorskip("torch")
    from rfclassify.dsp import em_channel
    from rfclassify.engine.classifier import Classifier
    from rfclassify.labels import HIGH_ORDER_LABELS
    from rfclassify.model.refiner_fit import (RefinerFitConfig, em_columns, examples_key, fit_refiner,
                                              routed_examples, save_examples, stored_em_picks)

    cfg = RefinerFitConfig(per_class=30, workers=0, epochs=5, chunk=96, seed=7, em_channel=True)
    ex = routed_examples(tiny_model_dir, cfg)
    n_em = em_channel.n_scores(HIGH_ORDER_LABELS)
    key = examples_key(ModelMeta.load(tiny_model_dir).model_id, tuple(HIGH_ORDER_LABELS), None, "strongest_line",
                       (), False, em_channel=True)
    network = stored_em_picks(ex, key, LABELS, tuple(HIGH_ORDER_LABELS))
    assert all(p.size == em_channel.FAST_CLASSES for p in network)
    again = em_columns(tiny_model_dir, cfg, tuple(HIGH_ORDER_LABELS), ex, network, "strongest_line")
    np.testing.assert_array_equal(again, ex["features"][:, -n_em:])
    none = em_columns(tiny_model_dir, cfg, tuple(HIGH_ORDER_LABELS), ex, [np.zeros(0, np.int64)] * len(network),
                      "strongest_line")
    assert not np.any(none)
    with pytest.raises(ConfigError, match="found again"):
        em_columns(tiny_model_dir, replace(cfg, seed=8), tuple(HIGH_ORDER_LABELS), ex, network, "strongest_line")
    with pytest.raises(ConfigError, match="add --em-channel"):
        RefinerFitConfig(em_ranker=True)
    with pytest.raises(ConfigError, match="leave out --dc-pass"):
        RefinerFitConfig(em_channel=True, em_ranker=True, dc_pass=True)

    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    saved = save_examples(tmp_path / "ex.npz", ex, key, cfg)
    rep = fit_refiner(model_dir, replace(cfg, em_ranker=True), examples=saved,
                      save_examples_to=tmp_path / "ranked.npz")
    r = rep["em_ranker"]
    assert r["bursts_picked"] == rep["bursts_routed"] and r["folds"] == 2
    assert r["scores_kept"] + r["scores_measured"] == r["bursts_picked"] and r["scores_kept"] > 0
    assert rep["without_em_channel"] == r["scores"]
    with Classifier.load(model_dir, backend="onnxruntime") as clf:
        assert clf.refiner.em_ranker is not None and clf.refiner.em_channel
        assert clf.refiner.em_ranker.n_features == clf.refiner.n_features - n_em
    with np.load(tmp_path / "ranked.npz") as z:
        assert z["em_picks"].shape == (rep["bursts_routed"], em_channel.FAST_CLASSES)
        assert json.loads(str(z["key"]))["em_ranker"]


def test_a_fit_with_another_em_count_measures_that_many_classes_and_its_refiner_serves_it(tiny_model_dir, tmp_path):
    """fit-refiner --em-classes N fits each example's EM scores for the network's top N classes,
    stores N in its examples' key and in refiner.npz, and the model serves N without a
    serve_em_classes; its examples serve no fit of another count, except one with an EM ranker
    (which measures what its own picks need: that many of its ranking's top classes)."""
    pytest.importorskip("torch")
    from rfclassify.dsp import em_channel
    from rfclassify.engine.classifier import Classifier
    from rfclassify.labels import HIGH_ORDER_LABELS
    from rfclassify.model.refiner_fit import (RefinerFitConfig, em_columns, examples_key, fit_refiner,
                                              load_examples, packed_picks, ranked_picks, stored_em_picks)

    classes = tuple(HIGH_ORDER_LABELS)
    cfg = RefinerFitConfig(per_class=30, workers=0, epochs=5, chunk=96, seed=7, em_channel=True, em_classes=5)
    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    rep = fit_refiner(model_dir, cfg, save_examples_to=tmp_path / "ex5.npz")
    assert rep["config"]["em_classes"] == 5
    model_id = ModelMeta.load(model_dir).model_id
    ex, _, stored = load_examples(tmp_path / "ex5.npz", examples_key(model_id, classes, None, "strongest_line", (),
                                                                       False, em_channel=True, em_classes=5))
    assert stored["em_classes"] == 5
    picks = stored_em_picks(ex, stored, LABELS, classes)
    assert all(p.size == 5 for p in picks)
    n_em, rows = em_channel.n_scores(classes), np.arange(6)     # measured again for a few rows only
    none = [np.zeros(0, np.int64)] * (len(picks) - rows.size)
    five = em_columns(model_dir, cfg, classes, ex, picks[:rows.size] + none, "strongest_line")
    np.testing.assert_array_equal(five[rows], ex["features"][rows, -n_em:])
    three = em_columns(model_dir, cfg, classes, ex, [p[:3] for p in picks[:rows.size]] + none, "strongest_line")
    assert not np.array_equal(three[rows], five[rows])
    with Classifier.load(model_dir, backend="onnxruntime") as clf:
        assert clf.refiner.em_count == 5 and "serve_em_classes" not in ModelMeta.load(model_dir).refiner
    with np.load(model_dir / REFINER_FILE) as z:
        assert int(z["em_count"]) == 5

    with pytest.raises(ConfigError, match="em_classes: 5 there, 3 here"):
        fit_refiner(model_dir, RefinerFitConfig(per_class=30, workers=0, epochs=5, chunk=96, seed=7,
                                                em_channel=True), examples=tmp_path / "ex5.npz")
    load_examples(tmp_path / "ex5.npz", examples_key(model_id, classes, None, "strongest_line", (), False,
                                                      em_channel=True), em_recomputed=True)
    logits = np.random.default_rng(2).normal(size=(len(picks), len(classes)))
    four = ranked_picks(logits, ex["features"], LABELS, classes, "all", 4)
    assert all(set(p.tolist()) == set(np.argsort(-z)[:4].tolist()) for p, z in zip(four, logits))
    assert packed_picks(four, 4).shape == (len(picks), 4) and np.all(packed_picks(four, 4) >= 0)
    for bad in (0, 13, True):
        with pytest.raises(ConfigError, match="count in 1..12"):
            RefinerFitConfig(em_channel=True, em_classes=bad)
    with pytest.raises(ConfigError, match="add --em-channel"):
        RefinerFitConfig(em_classes=4)


def test_a_refiner_file_keeps_its_em_count_and_older_files_read_as_three(tiny_model_dir, tmp_path):
    """refiner.npz stores the EM count its scores are fitted for (Refiner.em_count); a file
    from before it was stored was fitted for em_channel.FAST_CLASSES, and a count outside
    1..its classes does not load."""
    from rfclassify.dsp import em_channel

    classes = ("16PSK", "16QAM", "32QAM", "64QAM")
    ref = _random_refiner(classes, N_FEATURES + em_channel.n_scores(classes), 3, em_channel=True, em_count=2)
    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    _with_refiner(model_dir, ref)
    assert Refiner.load(model_dir, ModelMeta.load(model_dir).refiner, LABELS).em_count == 2

    def rewrite(**change):
        with np.load(model_dir / REFINER_FILE) as z:
            arrays = {k: z[k] for k in z.files if k != "em_count"}
        np.savez(model_dir / REFINER_FILE, **arrays, **change)
        meta = ModelMeta.load(model_dir)
        meta.with_updates(refiner={**meta.refiner, "sha256": file_sha256(model_dir / REFINER_FILE)}).save(model_dir)

    rewrite()
    assert Refiner.load(model_dir, ModelMeta.load(model_dir).refiner, LABELS).em_count == em_channel.FAST_CLASSES
    rewrite(em_count=np.int64(5))
    with pytest.raises(ModelNotFoundError, match="fitted for 5 classes, not 1..4"):
        Refiner.load(model_dir, ModelMeta.load(model_dir).refiner, LABELS)


def test_a_worker_killed_after_the_dc_pass_costs_no_second_dc_pass(monkeypatch):
    """The DC pass cleans bursts in place; when the pool broke after it (in the refiners), the
    retry without the pool ran the DC pass again on the cleaned bursts, took out a second
    'offset' and changed the answers (before the sixty-seventh session)."""
    import os
    import signal

    import rfclassify.engine.refiner as refiner_module
    from rfclassify.dsp.synth import synthesize
    from rfclassify.engine.classifier import Classifier

    bursts = list(synthesize(["64QAM"] * 6, 2048, np.random.default_rng(19), snr_db=np.full(6, 25.0)).iq)
    bursts = [b + np.complex64(0.2 * np.sqrt(np.mean(np.abs(b) ** 2)) * np.exp(1j * k))      # -14 dB DC
              for k, b in enumerate(bursts)]
    real = refiner_module.refine_routed
    killed = []

    def kill_first_worker(refiners, probs, snr, bursts, pool=None):
        if pool is not None and not killed:           # the worker dies mid-batch, after the DC pass
            for pid, proc in list(pool._processes.items()):
                os.kill(pid, signal.SIGKILL)
                proc.join()
                killed.append(pid)
        return real(refiners, probs, snr, bursts, pool)

    with Classifier.load(backend="onnxruntime", refiner_skip_above=1.0) as here:
        expected = [r.top for r in here.classify(bursts)]
    with Classifier.load(backend="onnxruntime", refiner_skip_above=1.0, refiner_workers=1) as clf:
        monkeypatch.setattr(refiner_module, "refine_routed", kill_first_worker)
        got = [r.top for r in clf.classify(bursts)]
        assert killed and clf.describe()["refiner_pool_breaks"] == 1
    assert got == expected
