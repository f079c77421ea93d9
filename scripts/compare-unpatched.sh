#!/usr/bin/env bash
# Check that the patch series changes nothing while no plugin is attached: build the vendored
# llama.cpp 11434 WITHOUT the plugin (the same options, cmake/llama-options.cmake), run the same
# greedy generation against both builds with plain llama.h, and compare every logit bit for bit.
# Run once (takes a llama.cpp build).
#   scripts/compare-unpatched.sh [MODEL] [STEPS]
# UNPATCHED_BUILD=DIR reuses an existing unpatched CMake build (with DIR/../include etc. = source).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
MODEL="${1:-$(scripts/fetch-models.sh smollm2)}"
STEPS="${2:-32}"
PATCHED_SRC=build/llama.cpp-src
PATCHED_BUILD=build/llama
[ -f "$PATCHED_BUILD/src/libllama.a" ] || { echo "run make build first" >&2; exit 1; }

if [ -n "${UNPATCHED_BUILD:-}" ]; then
    UB="$UNPATCHED_BUILD"; US="$(cd "$UB/.." && pwd)"
else
    US=build/llama.cpp-unpatched-src; UB=build/llama-unpatched
    if [ ! -f "$UB/src/libllama.a" ]; then
        rm -rf "$US"
        src="$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/llama-cpp-sys-2-0.1.161/llama.cpp | head -1)"
        cp -r "$src" "$US"
        # the options of the patched build (cmake/llama-options.cmake); the crate's vendored tree
        # has no tools, and only libllama is built
        cmake -C "$ROOT/cmake/llama-options.cmake" -S "$US" -B "$UB" \
            -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF > /dev/null
        cmake --build "$UB" -j "$(nproc)" --target llama > /dev/null
    fi
fi

build_dump() {  # src build out
    g++ -O1 -x c "$ROOT/cpp/tests/logits_dump.c" -x none -I"$1/include" -I"$1/ggml/include" \
        "$2/src/libllama.a" "$2/ggml/src/libggml.a" "$2/ggml/src/libggml-cpu.a" "$2/ggml/src/libggml-base.a" \
        -lstdc++ -lgomp -lm -lpthread -o "$3"
}
build_dump "$PATCHED_SRC" "$PATCHED_BUILD" build/logits_dump_patched
build_dump "$US" "$UB" build/logits_dump_unpatched
build/logits_dump_patched "$MODEL" "$STEPS" > build/logits_patched.txt
build/logits_dump_unpatched "$MODEL" "$STEPS" > build/logits_unpatched.txt
if cmp -s build/logits_patched.txt build/logits_unpatched.txt; then
    echo "identical: $STEPS steps x $(head -1 build/logits_patched.txt | awk '{print length($0)/8}') logits, patched vs unpatched ($MODEL)"
else
    echo "DIFFERENT logits between patched and unpatched builds" >&2
    exit 1
fi
