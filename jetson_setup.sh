#!/usr/bin/env bash
# One-shot provisioning of a Jetson AGX Orin for rfclassify (JetPack 6.x: Python >= 3.10).
#
#   sudo ./jetson_setup.sh [--prefix /opt/rfclassify] [--power-mode N] [--no-start] [--dry-run] [--force]
#                          [--cuda-dir /usr/local/cuda]
#
# What it does, in order:
#   1. checks it runs as root on a Jetson (/etc/nv_tegra_release), reports the L4T release, and
#      checks python3 is 3.10 or newer (JetPack 5.x has 3.8) and the CUDA toolkit pycuda
#      compiles against (CUDA_DIR: nvcc and cuda.h);
#   2. installs from apt: python3-venv, python3-pip, the TensorRT Python bindings
#      (python3-libnvinfer) and build tools for pycuda;
#   3. creates a virtualenv in PREFIX/venv with --system-site-packages (TensorRT's bindings come
#      from apt, not PyPI) and installs this checkout with the 'cpu' and 'jetson' extras, and
#      /usr/local/bin/rfclassify, which runs it with the service's model and engine cache
#      (RFCLASSIFY_MODEL_DIR, RFCLASSIFY_ENGINE_CACHE) unless the environment names others;
#   4. copies models/ and docs/ to PREFIX, prints the TensorRT engines the first start will build
#      (`rfclassify engine build --plan`: stops here if a file they need is missing), creates the
#      system user/group "rfclassify" in the video (and, where it exists, render) groups so the
#      service can reach the GPU and DLA;
#   5. installs systemd/rfclassify.service, a drop-in pointing at PREFIX (and adding the render
#      group where it exists), and the example config
#      as /etc/rfclassify/rfclassify.toml (an existing config is kept); enables and starts it.
#
# NOT RUN ON A JETSON: no Jetson was available when this was written. The script was checked with
# `bash -n` and its --dry-run output is tested in CI (tests/test_jetson_setup.py); every step
# follows NVIDIA's and systemd's documented commands, but treat the first real run as a test.
set -euo pipefail

PREFIX=/opt/rfclassify
POWER_MODE=""
START=1
DRY_RUN=0
FORCE=0
CUDA_DIR=/usr/local/cuda
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

usage() { sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) PREFIX="${2:?--prefix needs a directory}"; shift 2 ;;
        --power-mode) POWER_MODE="${2:?--power-mode needs a number (nvpmodel -q lists them)}"; shift 2 ;;
        --no-start) START=0; shift ;;
        --dry-run) DRY_RUN=1; shift ;;
        --force) FORCE=1; shift ;;
        --cuda-dir) CUDA_DIR="${2:?--cuda-dir needs a directory (the CUDA toolkit)}"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "jetson_setup.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
done

# run CMD...: execute, or print it under --dry-run
run() {
    if [ "$DRY_RUN" = 1 ]; then
        printf '+ %s\n' "$*"
    else
        "$@"
    fi
}

step() { printf '\n== %s\n' "$*"; }

# The prefix goes into a systemd drop-in (Environment=, ExecStart=) and a shell wrapper, where
# a space or a quote would split or break it: an absolute path of plain characters only.
case "$PREFIX" in
    /*) ;;
    *) echo "jetson_setup.sh: --prefix must be an absolute path, got $PREFIX" >&2; exit 2 ;;
esac
case "$PREFIX" in
    *[!A-Za-z0-9/._+-]*)
        echo "jetson_setup.sh: --prefix may hold letters, digits and / . _ + - only (it is written into the unit's drop-in), got $PREFIX" >&2
        exit 2 ;;
esac

step "checking the machine"
if [ "$DRY_RUN" = 0 ] && [ "$(id -u)" != 0 ]; then
    echo "jetson_setup.sh: run as root (sudo)" >&2
    exit 2
fi
if [ -r /etc/nv_tegra_release ]; then
    echo "L4T: $(head -n 1 /etc/nv_tegra_release)"
elif [ "$FORCE" = 1 ]; then
    echo "not a Jetson (/etc/nv_tegra_release missing); continuing because of --force"
else
    echo "jetson_setup.sh: /etc/nv_tegra_release not found: this is not a Jetson (use --force to continue anyway)" >&2
    exit 2
fi
# the package needs Python 3.10 (JetPack 6); JetPack 5's python3 is 3.8, and TensorRT's apt
# bindings exist only for the system python3, so a newer interpreter cannot stand in for it
if python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    echo "Python: $(python3 -V 2>&1)"
else
    old_python="jetson_setup.sh: rfclassify needs Python >= 3.10 (JetPack 6.x); python3 here is $(python3 -V 2>&1 || echo missing)"
    if [ "$DRY_RUN" = 1 ]; then
        echo "(dry run) $old_python"
    else
        echo "$old_python" >&2
        exit 2
    fi
fi
# pycuda is compiled here, against the toolkit of the first nvcc on PATH (pycuda 2026.1 takes its
# CUDA root from there and ignores a CUDA_ROOT variable), so check for it before changing anything.
if [ -x "$CUDA_DIR/bin/nvcc" ] && [ -f "$CUDA_DIR/include/cuda.h" ]; then
    echo "CUDA toolkit: $CUDA_DIR"
else
    missing="jetson_setup.sh: no CUDA toolkit in $CUDA_DIR (bin/nvcc and include/cuda.h), which pycuda compiles against; install JetPack's SDK components (apt-get install nvidia-jetpack) or pass --cuda-dir"
    if [ "$DRY_RUN" = 1 ]; then
        echo "(dry run) $missing"
    else
        echo "$missing" >&2
        exit 2
    fi
fi

step "installing system packages (TensorRT Python bindings come from JetPack's apt repository)"
run apt-get update
run env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
    python3-venv python3-pip python3-dev python3-libnvinfer build-essential

step "creating the virtualenv in $PREFIX/venv (system site packages: tensorrt)"
run mkdir -p "$PREFIX"
run python3 -m venv --system-site-packages "$PREFIX/venv"
run "$PREFIX/venv/bin/python" -m pip install --upgrade pip
# pycuda compiles against the toolkit of the nvcc first on PATH (checked above).
run env PATH="$CUDA_DIR/bin:$PATH" "$PREFIX/venv/bin/python" -m pip install "$SRC[cpu,jetson]"
# From a shell, the service's model and engine cache (the unit sets its own): without them
# `serve --check-config` looked for the model in site-packages and `engine build` filled
# ~/.cache, which the service never reads.
wrapper="#!/bin/sh
# rfclassify as jetson_setup.sh installed it: the service's model and engine cache by default.
: \"\${RFCLASSIFY_MODEL_DIR:=$PREFIX/models}\"
: \"\${RFCLASSIFY_ENGINE_CACHE:=/var/lib/rfclassify/engines}\"
export RFCLASSIFY_MODEL_DIR RFCLASSIFY_ENGINE_CACHE
exec \"$PREFIX/venv/bin/rfclassify\" \"\$@\""
if [ "$DRY_RUN" = 1 ]; then
    printf '+ write /usr/local/bin/rfclassify (mode 0755):\n%s\n' "$wrapper"
else
    rm -f /usr/local/bin/rfclassify      # the symlink earlier versions made would be written through
    printf '%s\n' "$wrapper" > /usr/local/bin/rfclassify
    chmod 0755 /usr/local/bin/rfclassify
fi

step "copying the shipped model and docs"
run mkdir -p "$PREFIX/models" "$PREFIX/docs"
run cp -r "$SRC/models/." "$PREFIX/models/"
run cp -r "$SRC/docs/." "$PREFIX/docs/"

step "the TensorRT engines the service builds on its first start (minutes; then cached)"
run "$PREFIX/venv/bin/rfclassify" engine build --plan --model-dir "$PREFIX/models" --cache-dir /var/lib/rfclassify/engines

step "service identity: user and group rfclassify, in the GPU groups"
groups="video"
if getent group render >/dev/null 2>&1; then groups="video,render"; fi
if ! getent passwd rfclassify >/dev/null 2>&1; then
    run useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
        --user-group --groups "$groups" rfclassify
else
    run usermod -a -G "$groups" rfclassify
fi

step "systemd unit, drop-in and config"
run install -m 0644 "$SRC/systemd/rfclassify.service" /etc/systemd/system/rfclassify.service
run mkdir -p /etc/systemd/system/rfclassify.service.d
dropin="[Service]
Environment=RFCLASSIFY_MODEL_DIR=$PREFIX/models
ExecStart=
ExecStart=$PREFIX/venv/bin/rfclassify serve --config \${RFCLASSIFY_CONFIG}"
if [ "$groups" = "video,render" ]; then
    dropin="$dropin
SupplementaryGroups=render"
fi
if [ "$DRY_RUN" = 1 ]; then
    printf '+ write /etc/systemd/system/rfclassify.service.d/prefix.conf:\n%s\n' "$dropin"
else
    printf '%s\n' "$dropin" > /etc/systemd/system/rfclassify.service.d/prefix.conf
fi
run mkdir -p /etc/rfclassify
if [ -e /etc/rfclassify/rfclassify.toml ]; then
    echo "keeping the existing /etc/rfclassify/rfclassify.toml"
else
    run install -m 0640 -g rfclassify "$SRC/systemd/rfclassify.toml" /etc/rfclassify/rfclassify.toml
fi

if [ -n "$POWER_MODE" ]; then
    step "power mode $POWER_MODE (nvpmodel)"
    run nvpmodel -m "$POWER_MODE"
fi

step "enabling the service"
run systemctl daemon-reload
if [ "$START" = 1 ]; then
    run systemctl enable --now rfclassify
    echo "check it with: rfclassify status"
else
    run systemctl enable rfclassify
    echo "not started (--no-start): systemctl start rfclassify"
fi
