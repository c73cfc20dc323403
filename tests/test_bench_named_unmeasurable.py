"""`rfclassify bench` with backends or precisions named that cannot be measured here: an
error naming each reason, exit 2, where it printed a "skipped" line, measured nothing and
exited 0. The defaults still skip what this machine lacks."""

from __future__ import annotations

import importlib.util
import json

import pytest

from rfclassify._exceptions import ConfigError
from rfclassify.cli import main

TINY = ["--device", "cpu", "--seconds", "0.02", "--buckets", "128", "--batch-sizes", "1", "--threads", "1"]


@pytest.mark.parametrize("named, reason", [
    (["--backends", "onnxruntime", "--precisions", "int8"], "onnxruntime int8: INT8 artifacts are not calibrated"),
    (["--backends", "onnxruntime", "--precisions", "fp16"], "onnxruntime fp16: not supported by onnxruntime on cpu"),
    (["--precisions", "fp16", "--backends", "onnxruntime,torch"], "torch fp16: not supported by torch on cpu"),
])
def test_named_combinations_none_of_which_can_run_are_an_error(tiny_model_dir, tmp_path, named, reason, capsys):
    out = tmp_path / "r.json"
    rc = main(["bench", "--model-dir", str(tiny_model_dir), *named, *TINY, "--json", str(out)])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "nothing that was asked can be measured here" in err and reason in err and "Traceback" not in err
    assert not out.exists()


def test_a_gpu_asked_of_a_machine_without_one_is_an_error(tiny_model_dir, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    assert main(["bench", "--model-dir", str(tiny_model_dir), "--device", "cuda", "--backends", "torch",
                 "--seconds", "0.02", "--buckets", "128", "--batch-sizes", "1"]) == 2
    assert "torch (every precision): cuda: torch sees no CUDA GPU" in capsys.readouterr().err


def test_named_ones_that_partly_run_measure_those_and_show_the_rest_skipped(tiny_model_dir, capsys):
    if importlib.util.find_spec("tensorrt") is not None:
        pytest.skip("tensorrt is installed here")
    assert main(["bench", "--model-dir", str(tiny_model_dir), "--backends", "onnxruntime,tensorrt",
                 "--precisions", "fp32", *TINY]) == 0
    out = capsys.readouterr().out
    assert "onnxruntime  fp32" in out and "skipped tensorrt *:" in out


def test_the_skips_are_said_on_stderr_when_the_report_goes_to_stdout(tiny_model_dir, capsys):
    assert main(["bench", "--model-dir", str(tiny_model_dir), "--backends", "onnxruntime",
                 *TINY, "--json", "-"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert [r["precision"] for r in report["rows"]] == ["fp32"]
    assert "skipped onnxruntime int8:" in captured.err


def test_the_defaults_still_skip_what_this_machine_lacks(tiny_model_dir):
    """run_bench as the defaults call it (nothing named): nothing measurable is an empty report;
    named, it is a ConfigError with a line per reason."""
    from rfclassify.engine.bench import BenchConfig, run_bench

    common = dict(backends=("onnxruntime",), precisions=("int8",), buckets_samples=(128,), batch_sizes=(1,),
                  seconds=0.02, device="cpu", threads=1)
    report = run_bench(tiny_model_dir, BenchConfig(**common))
    assert report["rows"] == [] and [s["precision"] for s in report["skipped"]] == ["int8"]
    with pytest.raises(ConfigError, match="nothing that was asked can be measured here: onnxruntime int8"):
        run_bench(tiny_model_dir, BenchConfig(**common, named=True))
