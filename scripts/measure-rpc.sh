#!/usr/bin/env bash
# Decode time with the KV cache on a loopback ggml RPC backend, compressed and not, against the same runs
# in host memory: upstream's llama-completion, greedy, one thread each, prints one table row per run.
#
#   scripts/measure-rpc.sh [MODEL] [N_TOKENS] [CONFIGS]
#
# MODEL: default SmolLM2-135M (scripts/fetch-models.sh smollm2); N_TOKENS: default 2048; CONFIGS: a
# space-separated list of where:spec, where = rpc|host, spec = none or a --kv-compress-spec (default
# "rpc:none rpc:beacon,budget=512 host:none host:beacon,budget=512"). "unaccounted" is llama.cpp's own
# figure (total less sampling, prompt and decode), where the plugin's hooks fall. Never time two jobs at
# once on a 2-core machine: the server and the client each take one core here.
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL="${1:-$(scripts/fetch-models.sh smollm2)}"
N="${2:-2048}"
CONFIGS="${3:-rpc:none rpc:policy=beacon,budget=512 host:none host:policy=beacon,budget=512}"
PROMPT="Explain, step by step, how a lighthouse keeper would plan the supplies for a long winter on a remote island."
BIN=build/bin
OUT="${MEASURE_RPC_OUT:-build/measure-rpc}"
mkdir -p "$OUT"

port=$((20000 + RANDOM % 20000))
"$BIN/ggml-rpc-server" -t 1 -p "$port" > "$OUT/rpc-server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 50); do
    (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.2
done

ctx=$(( (N + 256 + 255) / 256 * 256 ))
[ "$ctx" -lt 8192 ] && ctx=8192
printf '%-6s %-28s %9s %9s %11s %13s %s\n' where spec "total s" "eval ms" "unaccounted" "text md5" "K scored"
for cfg in $CONFIGS; do
    where="${cfg%%:*}"
    spec="${cfg#*:}"
    args=(-m "$MODEL" -n "$N" -t 1 --temp 0 --ignore-eos -c "$ctx" -no-cnv -p "$PROMPT")
    [ "$where" = rpc ] && args+=(-ngl 99 --rpc "127.0.0.1:$port")
    [ "$spec" != none ] && args+=(--kv-compress-spec "$spec")
    tag="${where}-${spec//[^a-z0-9=]/_}-$N"
    "$BIN/llama-completion" "${args[@]}" > "$OUT/$tag.txt" 2> "$OUT/$tag.log"
    total=$(grep -o 'total time = *[0-9.]*' "$OUT/$tag.log" | grep -o '[0-9.]*$')
    eval_ms=$(grep -o 'eval time = *[0-9.]* ms / *[0-9]* runs *( *[0-9.]*' "$OUT/$tag.log" | grep -o '[0-9.]*$')
    unacc=$(grep -o 'unaccounted time = *[0-9.]* ms / *[0-9.]* %' "$OUT/$tag.log" | grep -o '[0-9.]* %$')
    scored=$(grep -o 'K is scored: .*' "$OUT/$tag.log" | sed 's/K is scored: //' || true)
    md5=$(md5sum < "$OUT/$tag.txt" | cut -c1-12)
    printf '%-6s %-28s %9.1f %9s %11s %13s %s\n' "$where" "$spec" "$(awk "BEGIN{print $total/1000}")" \
        "$eval_ms" "$unacc" "$md5" "${scored:--}"
done
