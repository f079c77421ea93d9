#!/usr/bin/env bash
# The closing-note figures of the llama.cpp integration, on SmolLM2-135M (2 threads):
#  1. 4096 generated tokens, --kv-budget 512 (beacon) vs --kv-compress none: cells, KV bytes, decode tok/s
#  2. teacher-forced top-1 agreement with the uncompressed run's own greedy output:
#     4096 tokens at budget 512, and 2048 tokens at budget 256
# Results: results/smollm2-measure/*.json and summary.md
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-results/smollm2-measure}"
mkdir -p "$OUT"
MODEL="$(scripts/fetch-models.sh smollm2)"
PROMPT="Explain, step by step, how a lighthouse keeper would plan the supplies for a long winter on a remote island."
T="${THREADS:-2}"

run_cli() {  # name, flags...
    local name="$1"; shift
    build/bin/beaconkv-cli -m "$MODEL" -t "$T" --chat -p "$PROMPT" -n 4096 --temp 0 --ignore-eos -c 8192 \
        --stats-json "$OUT/$name.json" "$@" > "$OUT/$name.txt" 2> "$OUT/$name.log"
}
run_cli none --kv-compress none
run_cli beacon512 --kv-compress beacon --kv-budget 512

build/bin/beaconkv-eval -m "$MODEL" -t "$T" --mode generate -p "$PROMPT" --n-tokens 4096 \
    --configs beacon:512,recent:512,streaming:512,random:512 --out "$OUT/agree4096.json" 2> "$OUT/agree4096.log"
build/bin/beaconkv-eval -m "$MODEL" -t "$T" --mode generate -p "$PROMPT" --n-tokens 2048 \
    --configs beacon:256,recent:256,streaming:256,random:256 --out "$OUT/agree2048.json" 2> "$OUT/agree2048.log"

python3 - "$OUT" <<'PY'
import json, sys, os
out = sys.argv[1]
rows = ["| run | cells_peak | cells_physical | KV MiB physical | KV MiB uncompressed | decode tok/s | plugin ms |", "|---|---|---|---|---|---|---|"]
for name in ("none", "beacon512"):
    s = json.load(open(os.path.join(out, name + ".json")))
    rows.append(f"| {name} | {s['cells_peak']} | {s['cells_physical']} | {s['kv_bytes_physical']/2**20:.1f} | {s['kv_bytes_uncompressed']/2**20:.1f} | {s['decode_tok_s']:.1f} | {s['plugin_ms']:.0f} |")
rows += ["", "| agreement run | config | top-1 | mean KL | cells_peak |", "|---|---|---|---|---|"]
for f in ("agree4096", "agree2048"):
    d = json.load(open(os.path.join(out, f + ".json")))
    for r in d["results"]:
        rows.append(f"| {f} | {r['config']} | {r['top1']:.3f} | {r['kl']:.4f} | {r['cells_peak']} |")
open(os.path.join(out, "summary.md"), "w").write("\n".join(rows) + "\n")
print("\n".join(rows))
PY
