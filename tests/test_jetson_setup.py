"""jetson_setup.sh cannot run here (no Jetson); its syntax and the steps it would take are checked."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "jetson_setup.sh"


def _run(*args):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_script_parses():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], timeout=30).returncode == 0


@pytest.mark.skipif(Path("/etc/nv_tegra_release").exists(), reason="a real Jetson: the refusal path does not apply")
def test_refuses_a_machine_that_is_not_a_jetson():
    proc = _run("--dry-run")
    assert proc.returncode == 2
    assert "not a Jetson" in proc.stderr


def test_unknown_option_is_a_usage_error():
    proc = _run("--bogus")
    assert proc.returncode == 2 and "unknown option --bogus" in proc.stderr


@pytest.mark.skipif(shutil.which("getent") is None, reason="needs getent")
def test_dry_run_lists_every_provisioning_step(tmp_path):
    proc = _run("--dry-run", "--force", "--prefix", str(tmp_path / "rfc"), "--power-mode", "0")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    prefix = tmp_path / "rfc"
    expected = [
        "python3-libnvinfer",                                      # TensorRT bindings from apt
        f"python3 -m venv --system-site-packages {prefix}/venv",   # so the venv sees them
        "[cpu,jetson]",
        f"{prefix}/venv/bin/rfclassify engine build --plan --model-dir {prefix}/models",   # what TensorRT builds
        "rfclassify",                                              # service user
        "video",                                                   # GPU/DLA device group
        "install -m 0644",
        f"Environment=RFCLASSIFY_MODEL_DIR={prefix}/models",
        "nvpmodel -m 0",
        "systemctl enable --now rfclassify",
    ]
    for piece in expected:
        assert piece in out, piece
    assert not prefix.exists()  # a dry run changes nothing


def test_the_cuda_toolkit_pycuda_compiles_against_is_checked_and_put_first_on_path(tmp_path):
    missing = _run("--dry-run", "--force", "--prefix", str(tmp_path / "rfc"), "--cuda-dir", str(tmp_path / "none"))
    assert missing.returncode == 0, missing.stderr     # a real run stops here, before changing anything
    assert f"(dry run) jetson_setup.sh: no CUDA toolkit in {tmp_path / 'none'}" in missing.stdout
    toolkit = tmp_path / "cuda-12.6"
    (toolkit / "bin").mkdir(parents=True)
    (toolkit / "include").mkdir()
    (toolkit / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (toolkit / "bin" / "nvcc").chmod(0o755)
    (toolkit / "include" / "cuda.h").write_text("")
    found = _run("--dry-run", "--force", "--prefix", str(tmp_path / "rfc"), "--cuda-dir", str(toolkit))
    assert found.returncode == 0, found.stderr
    assert f"CUDA toolkit: {toolkit}" in found.stdout and "no CUDA toolkit" not in found.stdout
    (install,) = [line for line in found.stdout.splitlines() if "[cpu,jetson]" in line]
    assert f"PATH={toolkit}/bin:" in install      # pycuda takes its CUDA root from the first nvcc on PATH


def test_an_old_python_is_refused_before_anything_changes(tmp_path):
    """JetPack 5's python3 is 3.8; the package needs 3.10. The run stopped at the pip install,
    after apt and the virtualenv, before the sixty-seventh session."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python3"
    fake.write_text("#!/bin/sh\ncase \"$1\" in -V) echo 'Python 3.8.10' ;; *) exit 1 ;; esac\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc = subprocess.run(["bash", str(SCRIPT), "--dry-run", "--force", "--prefix", str(tmp_path / "rfc")],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr          # a real run exits 2 here
    assert ("(dry run) jetson_setup.sh: rfclassify needs Python >= 3.10 (JetPack 6.x); "
            "python3 here is Python 3.8.10") in proc.stdout
    assert proc.stdout.index("needs Python >= 3.10") < proc.stdout.index("apt-get install")


def test_the_installed_command_runs_with_the_services_model_and_engine_cache(tmp_path):
    """From a shell, `rfclassify serve --check-config` and `engine build` used the model in
    site-packages and ~/.cache, not the service's (a symlink to the venv before the sixty-seventh
    session); the wrapper sets both unless the environment names others, and passes arguments through."""
    prefix = tmp_path / "rfc"
    proc = _run("--dry-run", "--force", "--prefix", str(prefix))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split("+ write /usr/local/bin/rfclassify (mode 0755):\n", 1)[1].splitlines()
    wrapper = tmp_path / "rfclassify"
    wrapper.write_text("\n".join(lines[:lines.index(next(x for x in lines if x.startswith("exec "))) + 1]) + "\n")
    wrapper.chmod(0o755)
    (prefix / "venv" / "bin").mkdir(parents=True)
    real = prefix / "venv" / "bin" / "rfclassify"
    real.write_text('#!/bin/sh\necho "model=$RFCLASSIFY_MODEL_DIR cache=$RFCLASSIFY_ENGINE_CACHE"\n'
                    'for a in "$@"; do echo "arg=$a"; done\n')
    real.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RFCLASSIFY_")}
    out = subprocess.run([str(wrapper), "serve", "--config", "a b.toml"], capture_output=True, text=True,
                         timeout=30, env=env).stdout.splitlines()
    assert out == [f"model={prefix}/models cache=/var/lib/rfclassify/engines", "arg=serve", "arg=--config",
                   "arg=a b.toml"]
    mine = subprocess.run([str(wrapper)], capture_output=True, text=True, timeout=30,
                          env={**env, "RFCLASSIFY_MODEL_DIR": "/elsewhere"}).stdout
    assert mine.startswith("model=/elsewhere cache=")


@pytest.mark.skipif(shutil.which("getent") is None, reason="needs getent")
def test_render_is_added_in_the_drop_in_only_where_the_group_exists(tmp_path):
    proc = _run("--dry-run", "--force", "--prefix", str(tmp_path / "rfc"))
    dropin = proc.stdout.split("prefix.conf:\n", 1)[1].split("\n+ ", 1)[0]
    has_render = subprocess.run(["getent", "group", "render"], capture_output=True).returncode == 0
    assert ("SupplementaryGroups=render" in dropin) == has_render


@pytest.mark.parametrize("prefix", ["/opt/rf classify", "/opt/rf\"c", "opt/rfclassify", "/opt/$HOME"])
def test_a_prefix_the_drop_in_cannot_hold_is_refused_before_anything(prefix):
    """The prefix is written into the unit's drop-in and the wrapper: a space split
    Environment= ("Invalid environment assignment") and ExecStart, a quote broke the wrapper
    (the review of the sixty-seventh session)."""
    proc = _run("--dry-run", "--force", "--prefix", prefix)
    assert proc.returncode == 2 and "--prefix" in proc.stderr and "checking the machine" not in proc.stdout
