"""jetson_setup.sh cannot run here (no Jetson); its syntax and the steps it would take are checked."""

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
