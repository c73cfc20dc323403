"""The CLI dispatcher: exit codes, one-line errors, and that light commands stay light."""

import subprocess
import sys
from pathlib import Path

import pytest

from rfclassify import cli
from rfclassify.labels import LABELS, label_index, parse_labels
from rfclassify._exceptions import InputError


def test_labels_are_the_design_contract():
    assert len(LABELS) == 28 and len(set(LABELS)) == 28
    assert LABELS[:3] == ("OOK", "4ASK", "8ASK") and LABELS[-1] == "NOISE"
    assert {"AM-SSB-SC", "OQPSK", "256QAM", "128APSK", "PAM4"} <= set(LABELS)


def test_unknown_label_is_an_input_error():
    with pytest.raises(InputError, match="unknown label 'QAM17'"):
        label_index("QAM17")
    with pytest.raises(InputError):
        parse_labels("")
    assert parse_labels("BPSK, QPSK") == ("BPSK", "QPSK")


def test_usage_error_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["no-such-command"])
    assert exc.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


def test_every_command_has_help():
    for name in cli.COMMANDS:
        proc = subprocess.run([sys.executable, "-m", "rfclassify", name, "--help"],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, (name, proc.stderr)
        assert "usage:" in proc.stdout


def test_status_does_not_import_heavy_packages():
    code = ("import sys; from rfclassify import cli; cli.build_parser(['status']);"
            "heavy = [m for m in ('torch', 'onnxruntime', 'onnx', 'tensorrt', 'matplotlib', 'h5py', 'scipy')"
            " if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


#: plain-int options whose range the command checks itself, each with a one-line error (the
#: daemon's config for --max-batch, the spec for --length and the EM counts, BucketPolicy for
#: --buckets, export_onnx for --opset: the most this torch exports)
CHECKED_BY_THE_COMMAND = {("serve", "--max-batch"), ("dataset gnuradio", "--length"), ("train", "--buckets"),
                          ("evaluate", "--refiner-em-classes"), ("export", "--opset"), ("fit-refiner", "--em-classes")}


def test_every_integer_option_is_parsed_against_a_range():
    """A plain `int` option took 10 ** 30 or -5 and failed deep inside (OverflowError,
    ZeroDivisionError, IndexError, numpy's and torch's own errors: the fifty-eighth session's
    fuzz); each now has an _argtypes range, or is one the command checks itself."""
    import argparse

    plain = set()

    def walk(parser, name):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, subparser in action.choices.items():
                    walk(subparser, f"{name} {sub}")
            elif action.type is int:
                plain.add((name, action.option_strings[-1]))

    for name in cli.COMMANDS:
        parser = cli.build_parser([name])
        (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        walk(subparsers.choices[name], name)
    assert plain == CHECKED_BY_THE_COMMAND


def test_a_request_past_the_machines_memory_is_one_line(monkeypatch, capsys):
    """fit-refiner --per-class 2147483647 asked numpy for 672 GiB and printed its traceback;
    the size numpy names is kept. (The allocation failure is raised here rather than provoked:
    a real one would first take what this machine has.)"""
    import rfclassify.commands.keys as keys

    def huge(args):
        raise MemoryError("Unable to allocate 672. GiB for an array with shape (25769803764,)")

    monkeypatch.setattr(keys, "run", huge)
    assert cli.main(["keys", "--dir", "unused"]) == 1
    err = capsys.readouterr().err
    assert err == "rfclassify keys: error: not enough memory for what was asked (Unable to allocate 672. GiB " \
                  "for an array with shape (25769803764,))\n"


@pytest.mark.parametrize("argv", [
    ["simulate", "--rate", "nan", "--count", "1"],
    ["demo", "--rate", "inf", "--count", "5"],
    ["bench", "daemon", "--seconds", "nan"],
    ["bench", "daemon", "--rate", "nan"],      # measured as "nan/s offered"
    ["dataset", "generate", "--out", "unused.h5", "--snr-min", "nan"],
    ["status", "--timeout", "nan"],
    ["status", "--watch", "inf"],
    ["train", "--lr=-inf", "--out", "unused"],
    ["serve", "--max-wait-ms", "nan", "--check-config"],
])
def test_a_number_that_is_not_finite_is_a_usage_error(argv, capsys):
    """float() reads 'nan' and 'inf'; every float option refuses them at parse time (they
    passed the commands' range checks and ended in tracebacks or waits)."""
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "must be a finite number" in err and "Traceback" not in err


def test_a_simulator_rate_too_small_to_sleep_for_is_a_config_error():
    """A burst every 1e300 s overflowed time.sleep inside the sending loop."""
    from rfclassify._exceptions import ConfigError
    from rfclassify.serve.simulate import SimulateOptions

    with pytest.raises(ConfigError, match="rate must be 0 .as fast as possible. or at least 0.001"):
        SimulateOptions(rate_bursts_per_s=1e-300)
    assert SimulateOptions(rate_bursts_per_s=0).rate_bursts_per_s == 0


@pytest.mark.parametrize("argv, needle", [
    # ZeroMQ reads a negative receive timeout as 'wait for ever': with no daemon, status hung
    (["status", "--timeout", "-1"], "--timeout: must be more than 0 and at most 86400, got -1"),
    (["status", "--timeout", "0"], "--timeout: must be more than 0 and at most 86400, got 0"),
    # each a traceback before the fifty-eighth session: an overflow in the poll, in time.sleep,
    # a division by zero, torch's optimizer
    (["status", "--timeout", "1e300"], "--timeout: must be more than 0 and at most 86400"),
    (["status", "--watch", "1e300"], "--watch: must be more than 0 and at most 86400"),
    (["simulate", "--warmup", "1e300"], "--warmup: must be in 0..3600"),
    (["bench", "daemon", "--seconds", "1e-300"], "--seconds: must be in 0.1..86400"),
    (["bench", "daemon", "--rate", "1e-300"], "--rate: must be in 0.001..1e+06"),   # an OSError in its load process
    (["bench", "daemon", "--rate", "0"], "--rate: must be in 0.001..1e+06"),
    (["bench", "--batch-sizes", str(10 ** 30)], "--batch-sizes: batch sizes must be in 1..65536"),  # numpy's error
    (["train", "--out", "unused", "--lr", "-1"], "--lr: must be more than 0 and at most 10"),
    (["fit-sequence", "--lr", "1e300"], "--lr: must be more than 0 and at most 10"),
])
def test_a_number_out_of_its_range_is_a_usage_error(tmp_path, capsys, argv, needle):
    with pytest.raises(SystemExit) as exc:
        cli.main([*argv[:1], "--control", f"ipc://{tmp_path}/nothing", *argv[1:]] if argv[0] == "status" else argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and needle in err and "Traceback" not in err, err


@pytest.mark.parametrize("argv,needle", [
    (["simulate", "--seed", "-5", "--count", "1"], "--seed: must be in 0.."),              # numpy refused it: traceback
    (["classify", "x.sigmf-meta", "--threads", "1" + "0" * 30], "--threads: must be in 0..1024"),  # ONNX Runtime's C++
    (["bench", "daemon", "--max-batch", "0"], "--max-batch: must be in 1..4096"),
    (["train", "--seed=-1", "--out", "unused"], "--seed: must be in 0.."),
])
def test_an_integer_option_out_of_its_range_is_a_usage_error(argv, needle, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and needle in err and "Traceback" not in err


@pytest.mark.parametrize("source", ["generate", "gnuradio"])
def test_a_dataset_too_large_for_one_file_is_refused_before_any_work(tmp_path, capsys, source):
    out = tmp_path / "huge.h5"
    # each cell within --per-cell's own bound (2 ** 31 - 1), the cells together far past it
    assert cli.main(["dataset", source, "--out", str(out), "--per-cell", str(2 ** 31 - 1)]) == 2
    assert "one file holds at most 2,147,483,647" in capsys.readouterr().err and not out.exists()


@pytest.mark.parametrize("argv", [
    ["export", "--out="], ["evaluate", "d.h5", "--out="], ["evaluate", "d.h5", "--card-dir="],
    ["evaluate", "d.h5", "--extra-eval="], ["train", "--out="], ["train", "--out", "x", "--data="],
    ["train", "--out", "x", "--resume="], ["train", "--out", "x", "--init-from="],
    ["dataset", "generate", "--out="], ["dataset", "gnuradio", "--out="], ["dataset", "inspect", "d.h5", "--png="],
    ["fit-refiner", "--sequence-net="], ["fit-refiner", "--save-examples="], ["fit-refiner", "--examples="],
    ["fit-refiner", "--blind-reader="], ["fit-sequence", "--out="], ["keys", "--dir="], ["serve", "--config="],
    ["bench", "--json="], ["bench", "daemon", "--json="],
])
def test_an_empty_path_is_a_usage_error(argv, capsys):
    """'' read as the current folder, or as the option's default where the command takes
    `value or default`: `export --out ''` exported into the shipped model's folder."""
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    assert "must not be empty: give a path" in capsys.readouterr().err


def test_a_file_written_at_the_end_is_checked_before_the_work(tmp_path, capsys):
    """`bench daemon --json` under a file measured for its whole run and then failed to write."""
    a_file = tmp_path / "f"
    a_file.write_text("")
    for argv, where in [(["bench", "daemon", "--json", str(a_file / "sub" / "r.json")], str(a_file)),
                        (["bench", "--json", str(tmp_path)], str(tmp_path)),
                        (["fit-sequence", "--out", str(tmp_path)], str(tmp_path)),
                        (["fit-refiner", "--save-examples", str(a_file / "x.npz")], str(a_file)),
                        (["dataset", "inspect", "d.h5", "--png", str(a_file / "s.png")], str(a_file))]:
        with pytest.raises(SystemExit) as exc:
            cli.main(argv)
        err = capsys.readouterr().err
        assert exc.value.code == 2 and f"{where} is " in err and err.count("\n") == 1, err
    from rfclassify._argtypes import output_file

    assert output_file("-") == Path("-") and output_file(str(tmp_path / "new" / "deeper" / "r.json"))
    assert not (tmp_path / "new").exists()        # checked, not made


@pytest.mark.parametrize("argv, purpose", [
    (["fit-refiner", "--per-class", "10"], "fitting the refiner's perceptrons"),
    (["fit-sequence"], "fitting the sequence network"),
])
def test_fitting_without_torch_says_so_before_making_any_data(argv, purpose, tmp_path, monkeypatch, capsys):
    """Without the train extra, fit-refiner made its examples for minutes and fit-sequence
    started, then each printed torch's ModuleNotFoundError traceback."""
    import shutil
    import sys

    from rfclassify.model import refiner_fit, sequence_fit

    model_dir = tmp_path / "models"
    shutil.copytree(Path(__file__).resolve().parents[1] / "models", model_dir)
    monkeypatch.setitem(sys.modules, "torch", None)             # import torch now fails as if absent
    monkeypatch.setattr(refiner_fit, "routed_examples", lambda *a, **k: pytest.fail("made examples"))
    monkeypatch.setattr(sequence_fit, "make_sequences", lambda *a, **k: pytest.fail("made data"))
    assert cli.main([*argv, "--model-dir", str(model_dir)]) == 2
    assert capsys.readouterr().err == (f"rfclassify {argv[0]}: error: torch is not installed (needed for {purpose}); "
                                       "pip install 'rfclassify[train]'\n")


# rfclassify.serve.simulate (no test file of its own: its options are tested above, its
# sending end to end in test_serve_daemon.py)

def test_simulated_snr_header_is_the_snr_of_the_samples_sent(monkeypatch):
    """Bursts are made at their length group's longest length and cropped; the SNR held over
    the whole made burst, so the header's ground truth was off by up to 7 dB (AM-SSB-WC) for
    the samples sent (before the sixty-seventh session)."""
    import copy

    import numpy as np

    from rfclassify.serve import simulate

    real = simulate.synthesize
    clean = []

    def synthesize(labels, n, rng, snr_db, channel, **kwargs):
        quiet = real(labels, n, copy.deepcopy(rng), None, channel, **kwargs)   # the same burst without noise
        clean.extend(quiet.iq)
        return real(labels, n, rng, snr_db, channel, **kwargs)

    monkeypatch.setattr(simulate, "synthesize", synthesize)
    opts = simulate.SimulateOptions(classes=("AM-SSB-WC", "AM-DSB-WC", "QPSK"), clean_channel=True,
                                    snr_min_db=10.0, snr_max_db=10.0, length_min_samples=257, length_max_samples=512)
    bursts = simulate.BurstSource(opts).batch(48)
    assert len(clean) == len(bursts) == 48
    for (iq, label, snr_db), c in zip(bursts, clean, strict=True):
        c = c[: iq.size].astype(np.complex128)
        realized = 10 * np.log10(np.mean(np.abs(c) ** 2) / np.mean(np.abs(iq - c) ** 2))
        assert snr_db == 10.0 and realized == pytest.approx(10.0, abs=0.02), label


@pytest.mark.parametrize("clean_channel", [False, True])
@pytest.mark.parametrize("dtype, full_scale", [("ci16_le", 32767), ("ci8", 127)])
def test_simulated_integer_samples_rarely_clip(clean_channel, dtype, full_scale):
    """The default channel's +-20 dB receiver gain (the clean one: none, on unit power plus
    noise) left a fifth of the bursts with more than 10 % of their integers at full scale
    after encode_native (before the sixty-seventh session); the quantizer's AGC sets the level."""
    import numpy as np

    from rfclassify.serve.native import encode_native
    from rfclassify.serve.simulate import BurstSource, SimulateOptions

    source = BurstSource(SimulateOptions(dtype=dtype, seed=1, clean_channel=clean_channel))
    at_full = []
    for iq, _, _ in source.batch(128):
        ints = np.frombuffer(encode_native(iq, {"sample_rate": 1e6}, dtype)[1], "<i2" if dtype == "ci16_le" else "i1")
        at_full.append(np.mean(np.abs(ints.astype(int)) >= full_scale))
        # the samples are on the wire's own grid, so the integers sent are the quantizer's codes:
        # nothing is rounded a second time (the channel's k / 127 read as k / 128 moved half the
        # codes by one before this was rescaled)
        np.testing.assert_allclose(ints / (full_scale + 1.0), iq.view(np.float32), rtol=0, atol=1e-6)
    assert np.mean(at_full) < 1e-3 and max(at_full) < 0.05


def test_simulated_snr_beyond_the_synthesizers_bound_is_refused(capsys):
    """--snr-min -1000 sent NaN bursts with numpy's warnings and exit 0; the options refused
    1e39 with the synthesizer's 'pass None for no noise' (before the sixty-seventh session)."""
    from rfclassify._exceptions import ConfigError
    from rfclassify.serve.simulate import SimulateOptions

    for argv, needle in [(["--snr-min", "-1000", "--snr-max", "-1000"], "--snr-min: must be in -200..200, got -1000"),
                         (["--snr-max", "1e39"], "--snr-max: must be in -200..200, got 1e39")]:
        with pytest.raises(SystemExit) as exc:
            cli.main(["simulate", "--count", "1", *argv])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and needle in err and err.count("\n") == 1, err
    with pytest.raises(ConfigError, match="snr-min and snr-max must lie in -200..200 dB"):
        SimulateOptions(snr_min_db=-1000.0, snr_max_db=-1000.0)
    with pytest.raises(ConfigError, match="dtype must be one of cf32_le, ci16_le, ci8, got 'cu8'"):
        SimulateOptions(dtype="cu8")           # its grid is half a step off the quantizer's
    from rfclassify.commands.dataset import SNR_LIMIT_DB
    from rfclassify.dsp.synth import SNR_LIMIT_DB as SYNTH_LIMIT_DB

    assert SNR_LIMIT_DB == SYNTH_LIMIT_DB


@pytest.mark.parametrize("endpoint, needle", [
    ("tcp://127.0.0.1:70000", "the port must be 0..65535 or *"),     # ZeroMQ bound port 4464 (70000 mod 65536)
    ("bogus", "expected a ZeroMQ endpoint such as tcp://127.0.0.1:5555"),
])
def test_simulate_refuses_an_endpoint_serve_would_refuse(endpoint, needle, capsys):
    """--endpoint goes through serve's check of its input endpoint (rfclassify.serve.config)."""
    assert cli.main(["simulate", "--endpoint", endpoint, "--count", "1", "--quiet", "--warmup", "0"]) == 2
    err = capsys.readouterr().err
    assert err == f"rfclassify simulate: error: --endpoint: {needle}; got {endpoint!r}\n"
