#!/usr/bin/env bash
# The CUDA side of the sixty-eighth and sixty-ninth sessions' training changes, for the lent GPU
# host (torch with CUDA, Python 3.12, no network): a wsd run paused and resumed (must exit), SIGTERM
# with --cuda-graphs then a graphed resume, a CPU checkpoint resumed on CUDA eager and graphed
# (train._on_device moves the optimizer state), NaN bursts in --data, a diverging loss (exit 2),
# and the CUDA-marked tests. About 7 minutes. The working tree as copied runs (not stashed: the
# device's copy of .git may hold an older HEAD, and a stash there reverted to it).
# Run in parts by the seventy-first session on an H100 (its note has the results): the tests,
# SIGTERM with graphs and its resume, CPU -> CUDA graphed resume, NaN --data graphed, divergence.
# Carried wheels (the host lacks pyzmq and sigmf), made here in the repo root:
#   echo /.whl/ >> .git/info/exclude
#   P="--no-deps --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
#      --platform manylinux_2_26_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
#   pip download $P -d .whl pyzmq==27.3.0
#   pip download $P -d .whl/sigmf sigmf==1.14.0 defusedxml jsonschema jsonschema_specifications referencing rpds_py
# Then: run(command="bash benchmarks/cuda_training_checks.sh > $OUT/log 2>&1", carry=[".whl"]).
set -x
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/sigmf/*.whl .whl/pyzmq-*.whl 2>&1 | tail -2
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name --format=csv,noheader
python3 -c 'import torch, onnxruntime; print(torch.__version__, onnxruntime.__version__, torch.cuda.is_available())'
git log --oneline | head -1
O=/tmp/gtrain; rm -rf $O; mkdir -p $O
T="--batch-size 64 --buckets 128 1024 --val-per-bucket 64 --workers 2 --log-every 10"
echo "== 1 wsd pause on CUDA, resume with the checkpoint's settings: must exit"
timeout -s INT 120 rfclassify train --out $O/w --device cuda $T --schedule wsd --warmup-steps 0 --steps 60 --lr 0.002 --stop-after-s 8; echo "pause rc=$?"
timeout -s INT 120 rfclassify train --out $O/w --device cuda --resume $O/w/checkpoint.pt --seed 5 --workers 2 --log-every 10 --val-per-bucket 64; echo "resume rc=$? (124: hang)"
pgrep -af "rfclassify train" && echo "LEFTOVER PROCESSES" || echo "no leftover processes"
echo "== 2 SIGTERM with --cuda-graphs, then resume with graphs"
rfclassify train --out $O/g --device cuda --cuda-graphs $T --steps 200000 & P=$!
sleep 45; kill -TERM $P; timeout 90 tail --pid=$P -f /dev/null; wait $P; echo "sigterm rc=$?"
ls -la $O/g
timeout -s INT 120 rfclassify train --out $O/g --device cuda --cuda-graphs --resume $O/g/checkpoint.pt --workers 2 --log-every 20 --val-per-bucket 64 --steps 80; echo "graph resume rc=$?"
echo "== 3 CPU checkpoint resumed on CUDA, eager and graphed"
timeout -s INT 150 rfclassify train --out $O/c --device cpu $T --steps 200 --stop-after-s 15; echo "cpu pause rc=$?"
cp -r $O/c $O/c2
timeout -s INT 120 rfclassify train --out $O/c --device cuda --resume $O/c/checkpoint.pt --workers 2 --log-every 20 --val-per-bucket 64 --steps 60; echo "cpu->cuda eager rc=$?"
timeout -s INT 120 rfclassify train --out $O/c2 --device cuda --cuda-graphs --resume $O/c2/checkpoint.pt --workers 2 --log-every 20 --val-per-bucket 64 --steps 60; echo "cpu->cuda graphs rc=$?"
echo "== 4 NaN --data on CUDA"
rfclassify dataset generate --out $O/d.h5 --per-cell 8 --lengths 128,1024 --workers 4 --seed 3 | tail -2
python3 - <<'PY'
import h5py, numpy as np
with h5py.File("/tmp/gtrain/d.h5", "r+") as f:
    off, ln = f["offset"][:], f["length"][:]
    rng = np.random.default_rng(0); bad = rng.choice(len(off), len(off) // 5, replace=False)
    for i in bad: f["iq"][off[i]:off[i] + ln[i]] = np.complex64(complex("nan+nanj"))
    print("NaN bursts", len(bad), "of", len(off))
PY
timeout -s INT 150 rfclassify train --out $O/n --device cuda --data $O/d.h5 $T --steps 60; echo "nan data eager rc=$?"
timeout -s INT 150 rfclassify train --out $O/n2 --device cuda --cuda-graphs --data $O/d.h5 $T --steps 60; echo "nan data graphs rc=$?"
echo "== 5 divergence on CUDA (exit 2 with the message)"
for G in "" "--cuda-graphs"; do
timeout -s INT 120 python3 -c 'import sys
from rfclassify.model import train as t
t.augment = lambda x, gen: x * float("nan")
from rfclassify.cli import main
sys.exit(main(sys.argv[1:]))' train --out $O/x$G --device cuda $G --batch-size 64 --buckets 128 1024 --val-per-bucket 64 --workers 0 --log-every 1 --steps 20; echo "diverge $G rc=$? (want 2)"
done
pgrep -af "rfclassify" && echo "LEFTOVER PROCESSES" || echo "no leftover processes"
echo "== 6 CUDA-marked tests"
timeout 200 python3 -m pytest -q -m cuda -p no:cacheprovider tests/test_engine_backends.py tests/test_engine_classifier.py tests/test_model_train_step.py tests/test_engine_tensorrt_pycuda.py 2>&1 | tail -15
