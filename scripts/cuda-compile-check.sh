#!/usr/bin/env bash
# Compile the CUDA build of the patched llama.cpp 11434 (ggml-cuda, libllama with the plugin,
# libllama-common) on a machine without a GPU or a CUDA installation: the compiler comes from
# NVIDIA's PyPI wheels. It checks that the tree scripts/gpu-check.sh builds on a GPU machine
# compiles with GGML_CUDA=ON; it links no executable (the wheels ship no libcuda.so) and runs
# nothing. Optional: not part of `make test` or CI (ggml-cuda alone is about an hour on 2 cores).
#
#   scripts/cuda-compile-check.sh [--jobs N] [--arch NN]     (make cuda-compile-check)
#
# The wheels (nvcc, runtime, cuBLAS, CCCL, CRT, NVVM, NVRTC of CUDA 13.5: about 730 MB) are fetched
# once with `pip download --no-deps` into $BEACONKV_CACHE/cuda/wheels and unzipped, never installed,
# into $BEACONKV_CACHE/cuda/13.5 (their shared prefix, nvidia/cu13, is laid out like a toolkit).
# The build dir is build/cuda-check; a second run recompiles only what changed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${BEACONKV_CACHE:-$HOME/.cache/beaconkv}"
JOBS=2
ARCH=90   # one architecture keeps the compile short; 90 = H100/H200
while [[ $# -gt 0 ]]; do
    case "$1" in
        --jobs) JOBS="$2"; shift 2 ;;
        --arch) ARCH="$2"; shift 2 ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        *) echo "cuda-compile-check: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[[ "$JOBS" =~ ^[1-9][0-9]*$ ]] || { echo "cuda-compile-check: --jobs needs a positive number, got '$JOBS'" >&2; exit 2; }
[[ "$ARCH" =~ ^[1-9][0-9]+a?$ ]] || { echo "cuda-compile-check: --arch needs a compute capability like 90, got '$ARCH'" >&2; exit 2; }

log() { echo "[cuda-compile-check] $*" >&2; }

CUDA_VERSION=13.5.37
WHEELS=(
    "nvidia-cuda-nvcc==$CUDA_VERSION"
    "nvidia-cuda-runtime==$CUDA_VERSION"
    "nvidia-cuda-crt==$CUDA_VERSION"
    "nvidia-nvvm==$CUDA_VERSION"
    "nvidia-cuda-nvrtc==$CUDA_VERSION"
    "nvidia-cuda-cccl==13.3.5.0.6"
    "nvidia-cublas==13.10.0.20"
)
WHEEL_DIR="$CACHE/cuda/wheels"
PREFIX="$CACHE/cuda/13.5"
TK="$PREFIX/nvidia/cu13"
PY="$ROOT/build/venv/bin/python"
[[ -x "$PY" ]] || PY=python3

if [[ ! -x "$TK/bin/nvcc" ]]; then
    mkdir -p "$WHEEL_DIR"
    log "downloading ${#WHEELS[@]} CUDA $CUDA_VERSION wheels (about 730 MB) into $WHEEL_DIR"
    "$PY" -m pip download --quiet --no-deps --only-binary :all: -d "$WHEEL_DIR" "${WHEELS[@]}"
    rm -rf "$PREFIX.tmp" && mkdir -p "$PREFIX.tmp"
    for spec in "${WHEELS[@]}"; do
        name="${spec%%==*}"; version="${spec##*==}"
        whl=$(ls "$WHEEL_DIR"/"${name//-/_}"-"$version"-*.whl 2>/dev/null | head -1)
        [[ -n "$whl" ]] || { log "no wheel for $spec in $WHEEL_DIR"; exit 1; }
        "$PY" -m zipfile -e "$whl" "$PREFIX.tmp"
    done
    chmod +x "$PREFIX.tmp"/nvidia/cu13/bin/* "$PREFIX.tmp"/nvidia/cu13/nvvm/bin/* 2>/dev/null || true
    rm -rf "$PREFIX" && mv "$PREFIX.tmp" "$PREFIX"
fi
# CMake's FindCUDAToolkit looks for the unversioned names a toolkit installs
for lib in "$TK"/lib/lib*.so.*; do
    base="${lib%%.so.*}.so"
    [[ -e "$base" ]] || ln -s "$(basename "$lib")" "$base"
done
# ggml-cuda names the driver library; the wheels have none, and nothing is linked here: an empty
# stub, where a toolkit keeps its own (lib/stubs)
if [[ ! -e "$TK/lib/stubs/libcuda.so" ]]; then
    mkdir -p "$TK/lib/stubs"
    echo "" | cc -x c -shared -o "$TK/lib/stubs/libcuda.so" -
fi
"$TK/bin/nvcc" --version | tail -1 >&2

log "compiling ggml-cuda, libllama (with the plugin) and libllama-common for sm_$ARCH, -j$JOBS"
T0=$(date +%s)
"$ROOT/scripts/build-llama.sh" --build-dir "$ROOT/build/cuda-check" --libs-only --jobs "$JOBS" \
    --cmake "-DGGML_CUDA=ON -DCMAKE_CUDA_COMPILER=$TK/bin/nvcc -DCUDAToolkit_ROOT=$TK -DCMAKE_CUDA_ARCHITECTURES=$ARCH"
log "compiled in $(( $(date +%s) - T0 )) s: build/cuda-check (static libraries; nothing linked or run)"
