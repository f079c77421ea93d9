#!/usr/bin/env bash
# Build llama.cpp b10200 with the BeaconKV patch series and link it with libbeaconkv.a.
#
#   scripts/build-llama.sh [build] [options]      copy + patch + cargo build + cmake build (incremental)
#   scripts/build-llama.sh install PREFIX [opts]  build, then copy libs and headers into PREFIX
#
# options:
#   --llama-dir DIR     patch and build YOUR b10200 checkout in place (git apply, skipping applied patches;
#                       tools such as llama-server/llama-cli are built too) instead of the vendored copy
#   --build-dir DIR     CMake build dir (default: build/llama, or DIR/build-beaconkv with --llama-dir)
#   --beaconkv-lib F    use this libbeaconkv.a instead of `cargo build --release` (target/release/libbeaconkv.a)
#   --jobs N            parallel jobs (default: 2)
#   --force             re-copy and re-patch the vendored tree even if the stamp matches
#
# The vendored source comes from the crate llama-cpp-sys-2 =0.1.155 (optional dependency, feature
# `llama-source`; fetched by `cargo fetch`), copied to build/llama.cpp-src and patched there; a stamp file
# records the hash of the patch series so an unchanged series is not copied/patched again.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CRATE=llama-cpp-sys-2
CRATE_VER=0.1.155

MODE=build
PREFIX=""
LLAMA_DIR=""
BUILD_DIR=""
BKV_LIB=""
JOBS=2
FORCE=0

if [[ $# -gt 0 && ( "$1" == build || "$1" == install ) ]]; then
    MODE="$1"; shift
    if [[ "$MODE" == install ]]; then
        [[ $# -gt 0 ]] || { echo "usage: $0 install PREFIX [options]" >&2; exit 2; }
        PREFIX="$1"; shift
    fi
fi
while [[ $# -gt 0 ]]; do
    case "$1" in
        --llama-dir)    LLAMA_DIR="$(cd "$2" && pwd)"; shift 2;;
        --build-dir)    BUILD_DIR="$2"; shift 2;;
        --beaconkv-lib) BKV_LIB="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"; shift 2;;
        --jobs|-j)      JOBS="$2"; shift 2;;
        --force)        FORCE=1; shift;;
        -h|--help)      sed -n '2,20p' "$0"; exit 0;;
        *) echo "unknown option: $1" >&2; exit 2;;
    esac
done

log() { echo "[build-llama] $*" >&2; }
die() { echo "[build-llama] error: $*" >&2; exit 1; }

PATCHES=( "$ROOT"/patches/*.patch )
[[ -e "${PATCHES[0]}" ]] || die "no patches in $ROOT/patches"

# ---- 1. locate the llama.cpp source ---------------------------------------------------------------

find_vendored() {
    local d=""
    if command -v cargo >/dev/null 2>&1; then
        (cd "$ROOT" && cargo fetch >/dev/null 2>&1) || log "cargo fetch failed (offline?); looking for a cached copy"
        d="$(cd "$ROOT" && cargo metadata --all-features --format-version 1 2>/dev/null | python3 -c '
import json, sys, os
m = json.load(sys.stdin)
for p in m["packages"]:
    if p["name"] == "'"$CRATE"'" and p["version"] == "'"$CRATE_VER"'":
        print(os.path.join(os.path.dirname(p["manifest_path"]), "llama.cpp")); break
' 2>/dev/null || true)"
    fi
    local ch="${CARGO_HOME:-$HOME/.cargo}"
    if [[ -z "$d" || ! -f "$d/include/llama.h" ]]; then
        for c in "$ch"/registry/src/*/"$CRATE-$CRATE_VER"/llama.cpp; do
            [[ -f "$c/include/llama.h" ]] && { d="$c"; break; }
        done
    fi
    if [[ -z "$d" || ! -f "$d/include/llama.h" ]]; then
        for c in "$ch"/registry/cache/*/"$CRATE-$CRATE_VER.crate"; do
            if [[ -f "$c" ]]; then
                mkdir -p "$ROOT/build/crate"
                tar -xzf "$c" -C "$ROOT/build/crate"
                d="$ROOT/build/crate/$CRATE-$CRATE_VER/llama.cpp"
                break
            fi
        done
    fi
    [[ -n "$d" && -f "$d/include/llama.h" ]] || die "cannot find $CRATE $CRATE_VER (run cargo fetch with network access)"
    echo "$d"
}

series_hash() {
    cat "${PATCHES[@]}" | sha256sum | cut -d' ' -f1
}

# apply the series in order; patches already applied are skipped (user checkouts)
apply_series() {
    local dir="$1"
    ( cd "$dir"
      for p in "${PATCHES[@]}"; do
          if git apply --check "$p" 2>/dev/null; then
              git apply "$p"
              log "applied $(basename "$p")"
          elif git apply --reverse --check "$p" 2>/dev/null; then
              log "already applied: $(basename "$p")"
          else
              git apply --check "$p" || true
              die "$(basename "$p") does not apply to $dir (is it llama.cpp b10200?)"
          fi
      done )
}

if [[ -n "$LLAMA_DIR" ]]; then
    SRC="$LLAMA_DIR"
    [[ -f "$SRC/include/llama.h" ]] || die "$SRC is not a llama.cpp checkout"
    git -C "$SRC" rev-parse --show-toplevel >/dev/null 2>&1 || die "$SRC must be a git checkout (git apply)"
    apply_series "$SRC"
    BUILD_DIR="${BUILD_DIR:-$SRC/build-beaconkv}"
    USER_TREE=1
else
    SRC="$ROOT/build/llama.cpp-src"
    BUILD_DIR="${BUILD_DIR:-$ROOT/build/llama}"
    USER_TREE=0
    STAMP="$SRC/.beaconkv-patches.sha256"
    HASH="$(series_hash)"
    if [[ $FORCE == 0 && -f "$STAMP" && "$(cat "$STAMP")" == "$HASH" ]]; then
        log "patched tree up to date ($SRC)"
    else
        VENDORED="$(find_vendored)"
        STAGE="$SRC.stage"
        log "copying $VENDORED -> $STAGE"
        rm -rf "$STAGE"
        mkdir -p "$(dirname "$SRC")"
        # cp -a keeps timestamps: files the series does not touch stay older than the build's objects
        cp -a "$VENDORED" "$STAGE"
        chmod -R u+w "$STAGE"
        # own git repo, so that git apply resolves paths here and not in an enclosing repository
        git -C "$STAGE" init -q
        apply_series "$STAGE"
        if [[ -d "$SRC" ]]; then
            # update in place by content: files whose content did not change keep their mtime, so an
            # existing build dir only recompiles what the new series really changed
            python3 - "$STAGE" "$SRC" <<'PY'
import filecmp, os, shutil, sys
stage, src = sys.argv[1], sys.argv[2]
skip = {".git", ".beaconkv-patches.sha256"}
n = 0
for root, dirs, files in os.walk(stage):
    rel = os.path.relpath(root, stage)
    if rel == ".":
        dirs[:] = [d for d in dirs if d not in skip]
    os.makedirs(os.path.join(src, rel), exist_ok=True)
    for f in files:
        if rel == "." and f in skip:
            continue
        a, b = os.path.join(root, f), os.path.join(src, rel, f)
        if not os.path.exists(b) or not filecmp.cmp(a, b, shallow=False):
            shutil.copy2(a, b); os.utime(b)  # changed: new mtime
            n += 1
for root, dirs, files in os.walk(src):
    rel = os.path.relpath(root, src)
    if rel == ".":
        dirs[:] = [d for d in dirs if d not in skip]
    for f in files:
        if rel == "." and f in skip:
            continue
        if not os.path.exists(os.path.join(stage, rel, f)):
            os.remove(os.path.join(root, f)); n += 1
print(f"[build-llama] {n} files updated in {src}", file=sys.stderr)
PY
            rm -rf "$STAGE"
        else
            rm -rf "$SRC"
            mv "$STAGE" "$SRC"
        fi
        [[ -d "$SRC/.git" ]] || git -C "$SRC" init -q
        echo "$HASH" > "$STAMP"
    fi
fi

# ---- 2. libbeaconkv.a -----------------------------------------------------------------------------

if [[ -z "$BKV_LIB" ]]; then
    log "cargo build --release"
    (cd "$ROOT" && cargo build --release)
    BKV_LIB="$ROOT/target/release/libbeaconkv.a"
fi
[[ -f "$BKV_LIB" ]] || die "$BKV_LIB not found"
BKV_INC="$ROOT/include"

# ---- 3. CMake -------------------------------------------------------------------------------------

CMAKE_ARGS=(
    -DGGML_NATIVE=OFF
    -DBUILD_SHARED_LIBS=OFF
    -DLLAMA_BUILD_TESTS=OFF
    -DLLAMA_BUILD_EXAMPLES=OFF
    -DLLAMA_OPENSSL=OFF
    -DLLAMA_BUILD_UI=OFF
    -DCMAKE_BUILD_TYPE=Release
    -DLLAMA_BEACONKV_LIB="$BKV_LIB"
    -DLLAMA_BEACONKV_INCLUDE_DIR="$BKV_INC"
)
if [[ $USER_TREE == 1 ]]; then
    CMAKE_ARGS+=( -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON )
    TARGETS=()   # everything, including llama-server / llama-cli
else
    # the crate ships no tools/, app/ or server sources
    CMAKE_ARGS+=( -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF )
    TARGETS=( --target llama llama-common ggml )
fi

log "configuring $BUILD_DIR"
cmake -S "$SRC" -B "$BUILD_DIR" "${CMAKE_ARGS[@]}" >/dev/null
log "building (${TARGETS[*]:-all}) with -j$JOBS"
T0=$(date +%s)
cmake --build "$BUILD_DIR" -j"$JOBS" "${TARGETS[@]}"
log "build done in $(( $(date +%s) - T0 )) s"

# ---- 4. install -----------------------------------------------------------------------------------

if [[ "$MODE" == install ]]; then
    mkdir -p "$PREFIX/lib" "$PREFIX/include/common"
    PREFIX="$(cd "$PREFIX" && pwd)"
    cp "$BKV_LIB" "$PREFIX/lib/"
    find "$BUILD_DIR" -name '*.a' \( -path '*/src/*' -o -path '*/common/*' -o -path '*/ggml/*' -o -path '*/vendor/*' \) \
        -exec cp {} "$PREFIX/lib/" \;
    cp "$BKV_INC/beaconkv.h" "$PREFIX/include/"
    cp "$SRC"/include/*.h "$PREFIX/include/"
    cp "$SRC"/ggml/include/*.h "$PREFIX/include/"
    cp "$SRC"/common/*.h "$PREFIX/include/common/"
    log "installed into $PREFIX (link order: -lllama-common -lllama-common-base -lcpp-httplib -lllama -lggml -lggml-cpu -lggml-base -lbeaconkv -lpthread -ldl -lm, plus -fopenmp when ggml uses OpenMP)"
fi
