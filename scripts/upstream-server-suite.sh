#!/usr/bin/env bash
# Run llama.cpp's own server test suite (tools/server/tests, pytest) against the patched llama-server,
# offline, in two modes:
#   plain       the binary as built, no --kv flags
#   compressed  the same binary through tests/upstream/kv-wrapper.sh, which appends
#               --kv-compress beacon --kv-budget $BKV_KV_BUDGET (default 128) to every server start
#   tight       as compressed with --kv-budget 48 --kv-window 16, so that nearly every test evicts
#               (the suite's prompts are short: with budget 128 few sequences outgrow the budget)
#
#   scripts/upstream-server-suite.sh [plain|compressed|tight|both|all]   (default: both)
#   both = plain + compressed; all = plain + compressed + tight
#
# The upstream tree is not edited: the suite is copied to build/upstream-tests (fresh each run) and
# adapted there (tests/upstream/: suite_conftest.py, beaconkv_upstream.py maps the Hugging Face presets to
# local models and skips what cannot run offline; skip-model-specific.tsv skips expectations that
# only the upstream stories260K model meets). Results: build/upstream-results/<mode>/ (run-info.txt,
# pytest.log, junit.xml, one server log per server start; a mode's folder is replaced when that mode
# runs, the others are kept) and build/upstream-results/summary.md (every mode present vs plain).
#
# Environment:
#   UPSTREAM_MODEL      model standing in for stories260K: smollm2 (default) | tiny
#   BKV_KV_BUDGET       --kv-budget in compressed mode (default 128; must be > window 64 + prefix)
#   BKV_KV_POLICY       --kv-compress policy in compressed mode (default beacon)
#   BKV_KV_EXTRA        more flags for compressed mode (e.g. "--kv-window 16")
#   BKV_TIGHT_BUDGET    --kv-budget in tight mode (default 48; window 16)
#   UPSTREAM_TESTS      test files or node ids (default: the whole unit/ folder; skips are listed)
#   UPSTREAM_TIMEOUT    per-test timeout in seconds (default 300, pytest-timeout)
#   UPSTREAM_MODE_LIMIT wall-clock limit per mode in seconds (default 2700)
#   BKV_SKIP_MODEL_SPECIFIC=0  also run the stories260K-specific tests
#   LLAMA_SERVER        the binary (default build/bin/llama-server)
#   PYTEST_ARGS         more pytest arguments (e.g. "-x" or "-k slot")
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

MODE="${1:-both}"
case "$MODE" in
    plain) MODES=(plain) ;;
    compressed) MODES=(compressed) ;;
    tight) MODES=(tight) ;;
    both) MODES=(plain compressed) ;;
    all) MODES=(plain compressed tight) ;;
    *) echo "usage: $0 [plain|compressed|tight|both|all]" >&2; exit 2 ;;
esac

log() { echo "[upstream-suite] $*" >&2; }

SRC="$ROOT/build/llama.cpp-src"
UP="$SRC/tools/server/tests"
WORK="$ROOT/build/upstream-tests"
VENV="$ROOT/build/venv"
SERVER="${LLAMA_SERVER:-$ROOT/build/bin/llama-server}"
[ -x "$SERVER" ] || { log "no $SERVER: build the patched llama.cpp first (scripts/build-llama.sh)"; exit 1; }
[ -d "$UP/unit" ] || { log "no $UP: the patched source tree is missing"; exit 1; }
[ -x "$VENV/bin/python" ] || { log "no venv at $VENV"; exit 1; }
SERVER="$(cd "$(dirname "$SERVER")" && pwd)/$(basename "$SERVER")"

# ---- python packages: upstream's requirements.txt, minus aiohttp (unused by the tests) and the
# numpy pin (numpy is only used by test_embedding, skipped; the venv's numpy stays); plus pytest-timeout
if ! "$VENV/bin/python" -c 'import pytest, pytest_timeout, openai, prometheus_client, wget, requests' 2>/dev/null; then
    log "installing the suite's python packages into $VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check \
        "pytest~=8.3.3" "openai~=2.14.0" "prometheus-client~=0.20.0" "requests~=2.32" "wget~=3.2" pytest-timeout
fi

# ---- models
SMOLLM2="$(scripts/fetch-models.sh smollm2)"
GEMMA3="$(scripts/fetch-models.sh gemma3)"
# the infill preset needs a model with FIM tokens: Qwen2.5-Coder-0.5B (491 MB; test_infill skips without it)
QWEN="$(scripts/fetch-models.sh qwen 2>/dev/null)" || { log "no Qwen2.5-Coder: test_infill will be skipped"; QWEN=""; }
case "${UPSTREAM_MODEL:-smollm2}" in
    smollm2) STANDIN="$SMOLLM2" ;;
    tiny)
        # random weights: its non-UTF-8 output makes every completion a 500 (see docs/testing.md)
        STANDIN="$ROOT/build/models/tiny.gguf"
        if [ ! -f "$STANDIN" ]; then
            STANDIN="$ROOT/build/upstream-models/tiny.gguf"
            if [ ! -f "$STANDIN" ]; then
                mkdir -p "$(dirname "$STANDIN")"
                "$VENV/bin/python" scripts/make_tiny_gguf.py "$STANDIN" >&2
            fi
        fi
        ;;
    *) log "UPSTREAM_MODEL must be smollm2 or tiny"; exit 2 ;;
esac
export BKV_TINYLLAMA="$STANDIN" BKV_INFILL="$QWEN" BKV_MOE="$STANDIN" BKV_DRAFT="$STANDIN" BKV_GEMMA3="$GEMMA3"

# ---- fresh copy of the suite, adapted
rm -rf "$WORK"
mkdir -p "$WORK"
cp -r "$UP/." "$WORK/"
rm -rf "$WORK/tmp" "$WORK/.pytest_cache"
mkdir -p "$WORK/tmp"
cp tests/upstream/suite_conftest.py "$WORK/conftest.py"
cp tests/upstream/beaconkv_upstream.py "$WORK/"
cp tests/upstream/skip-model-specific.tsv "$WORK/"
# model-agnostic versions of some of the skipped tests (token counts from /tokenize)
cp tests/upstream/adapted_tests.py "$WORK/unit/test_adapted.py"
# relative paths into the source tree (chat templates, media) -> absolute, since the copy lives elsewhere
sed -i "s#\.\./\.\./\.\./models/templates#$SRC/models/templates#g; s#\"\.\./\.\./\.\./tools\"#\"$SRC/tools\"#g" "$WORK"/unit/*.py

# ---- a free block of ports (the suite uses 8080..8085)
PORT_BASE="$("$VENV/bin/python" - <<'EOF'
import socket, random
for _ in range(200):
    base = random.randrange(20000, 60000, 10)
    ok = True
    for p in range(base, base + 10):
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", p))
        except OSError:
            ok = False
        finally:
            s.close()
    if ok:
        print(base)
        break
EOF
)"
export BKV_PORT_BASE="$PORT_BASE"

RESULTS="$ROOT/build/upstream-results"
mkdir -p "$RESULTS"

COMPRESSED_BUDGET="${BKV_KV_BUDGET:-128}"
COMPRESSED_EXTRA="${BKV_KV_EXTRA:-}"
status=0
for mode in "${MODES[@]}"; do
    out="$RESULTS/$mode"
    rm -rf "$out"
    mkdir -p "$out/server-logs"
    if [ "$mode" != plain ]; then
        export BKV_REAL_SERVER="$SERVER"
        export LLAMA_SERVER_BIN_PATH="$ROOT/tests/upstream/kv-wrapper.sh"
        if [ "$mode" = tight ]; then
            export BKV_KV_BUDGET="${BKV_TIGHT_BUDGET:-48}" BKV_KV_EXTRA="--kv-window 16"
        else
            export BKV_KV_BUDGET="$COMPRESSED_BUDGET" BKV_KV_EXTRA="$COMPRESSED_EXTRA"
        fi
    else
        export LLAMA_SERVER_BIN_PATH="$SERVER"
    fi
    export BKV_LOG_DIR="$out/server-logs"
    {
        echo "date: $(date -u +%FT%TZ)"
        echo "server: $SERVER ($(stat -c '%y' "$SERVER"))"
        echo "stand-in for stories260K: $STANDIN"
        [ "$mode" = plain ] || echo "flags: --kv-compress ${BKV_KV_POLICY:-beacon} --kv-budget $BKV_KV_BUDGET $BKV_KV_EXTRA"
        echo "tests: ${UPSTREAM_TESTS:-unit/}  (-m 'not slow')"
    } > "$out/run-info.txt"
    sed "s/^/[upstream-suite] $mode: /" "$out/run-info.txt" >&2
    log "mode $mode: pytest (log: $out/pytest.log)"
    t0=$(date +%s)
    bin_before="$(stat -c '%Y %s' "$SERVER")"
    rc=0
    # shellcheck disable=SC2086
    (cd "$WORK" && timeout -k 30 "${UPSTREAM_MODE_LIMIT:-2700}" "$VENV/bin/python" -m pytest \
        -m "not slow" -p no:cacheprovider -rfEs --durations=15 \
        --timeout "${UPSTREAM_TIMEOUT:-300}" --junitxml "$out/junit.xml" \
        ${PYTEST_ARGS:-} ${UPSTREAM_TESTS:-unit/}) > "$out/pytest.log" 2>&1 || rc=$?
    t1=$(date +%s)
    echo "$((t1 - t0))" > "$out/seconds"
    if [ "$(stat -c '%Y %s' "$SERVER")" != "$bin_before" ]; then
        log "WARNING: $SERVER changed during mode $mode (relinked?): rerun for a clean comparison"
        echo "WARNING: the server binary changed during this mode" >> "$out/run-info.txt"
    fi
    log "mode $mode: pytest exit $rc after $((t1 - t0)) s; $(tail -n 1 "$out/pytest.log")"
    # exit 1 = some tests failed (reported in the summary); anything else is a broken run
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 1 ]; then
        status=1
    fi
done

"$VENV/bin/python" tests/upstream/summarize.py "$RESULTS" plain compressed tight
for mode in plain compressed tight; do
    [ -f "$RESULTS/$mode/seconds" ] && echo "$mode: $(cat "$RESULTS/$mode/seconds") s ($(head -1 "$RESULTS/$mode/run-info.txt"))"
done
log "summary: $RESULTS/summary.md"
exit "$status"
