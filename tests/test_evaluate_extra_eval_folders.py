"""Where `evaluate --extra-eval` writes: under --out (--out/<file stem>) when --out is given,
never into the model's folder for it; the card still links only to files beside it.

Before the seventy-first session the extra files' results went to <model-dir>/eval/<file stem>
whatever --out said, with the default model the shipped models/ (refused to a user who cannot
write there, though --out was given)."""

from __future__ import annotations

import json
import re
import shutil

import pytest

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from rfclassify.cli import main  # noqa: E402


@pytest.fixture()
def model_and_other_set(tiny_model_dir, tiny_dataset, tmp_path):
    """A copy of the tiny model (so that what lands in it shows) and a second dataset file."""
    model_dir = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model_dir)
    other = tmp_path / "sets" / "other.h5"
    other.parent.mkdir()
    shutil.copy(tiny_dataset, other)
    return model_dir, other


def test_extra_evaluations_go_under_out_and_leave_the_model_folder_alone(
        model_and_other_set, tiny_dataset, tmp_path, capsys):
    model_dir, other = model_and_other_set
    before = sorted(p.relative_to(model_dir) for p in model_dir.rglob("*"))
    out = tmp_path / "o" / "evx"
    assert main(["evaluate", "--no-plots", "--model-dir", str(model_dir), "--out", str(out), str(tiny_dataset),
                 "--extra-eval", str(other)]) == 0
    assert json.loads((out / "evaluation.json").read_text())["name"] == "synth:tiny"
    assert json.loads((out / "other" / "evaluation.json").read_text())["name"] == "synth:other"
    assert f"wrote {out / 'other'}/evaluation.json" in capsys.readouterr().out
    assert sorted(p.relative_to(model_dir) for p in model_dir.rglob("*")) == before    # no eval/ in the model


def test_with_card_the_extra_evaluation_is_under_out_and_the_card_links_copies_beside_it(
        model_and_other_set, tiny_dataset, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    model_dir, other = model_and_other_set
    out = tmp_path / "ev"
    assert main(["evaluate", "--model-dir", str(model_dir), "--out", str(out), str(tiny_dataset),
                 "--extra-eval", str(other), "--card"]) == 0
    capsys.readouterr()
    assert (out / "other" / "evaluation.json").is_file() and (out / "other" / "confusion_all.png").is_file()
    card = json.loads((model_dir / "model_card.json").read_text())
    assert set(card["evaluations"]) == {"synth:tiny", "synth:other"}
    md = (model_dir / "MODEL_CARD.md").read_text()
    links = re.findall(r"!\[[^]]*\]\(([^)]+)\)", md)
    assert len(links) == 6 and all(not link.startswith("..") and (model_dir / link).is_file() for link in links)
    assert {link.split("/")[1] for link in links} == {"tiny", "other"}     # eval/<stem>/<figure>, one folder each


def test_two_files_whose_card_copies_would_share_a_folder_are_refused_before_any_work(
        model_and_other_set, tiny_dataset, tmp_path, capsys, monkeypatch):
    """Named apart (--name), a/tiny.h5 and b/tiny.h5 had their figures kept for the card in one
    folder, <card dir>/eval/tiny: the second evaluation's replaced the first's under its links."""
    pytest.importorskip("matplotlib")
    import rfclassify.model.evaluate as evaluate_module

    monkeypatch.setattr(evaluate_module, "evaluate_file", lambda *a, **k: pytest.fail("evaluated first"))
    model_dir, _ = model_and_other_set
    twin = tmp_path / "b" / tiny_dataset.name
    twin.parent.mkdir()
    shutil.copy(tiny_dataset, twin)
    assert main(["evaluate", "--model-dir", str(model_dir), "--out", str(tmp_path / "ev"), str(tiny_dataset),
                 "--name", "first", "--extra-eval", str(twin), "--card"]) == 2
    err = capsys.readouterr().err
    assert f"would both have their figures kept in {(model_dir / 'eval' / 'tiny').resolve()}" in err
    assert err.count("\n") == 1
