#!/usr/bin/env bash
# README's first command (`make demo`): a long compressed generation with the real llama-completion, then
# the same generation with the full KV cache, and what compression saved: the start of the text, then a
# table of KV memory, cells and decode speed, and one sentence on what it means.
#
#   scripts/demo.sh MODEL PROMPT [llama-completion flags...]     (BUDGET=256 by default)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${BEACONKV_BIN_DIR:-$ROOT/build/bin}"
MODEL="$1"; PROMPT="$2"; shift 2
BUDGET="${BUDGET:-256}"
OUT="$ROOT/build/demo"
mkdir -p "$OUT"

run() {  # run NAME [extra flags]: generation to stdout, llama.cpp's log to $OUT/NAME.log
    local name="$1"; shift
    # -lv 4: the log also carries llama_kv_cache's size line
    "$BIN/llama-completion" -m "$MODEL" -p "$PROMPT" -no-cnv --ignore-eos -c 8192 -lv 4 "$@" \
        2> "$OUT/$name.log" < /dev/null
}

echo "== llama-completion --kv-compress beacon --kv-budget $BUDGET (the start of the text; all of it in build/demo/beacon.txt) =="
run beacon "$@" --kv-compress beacon --kv-budget "$BUDGET" > "$OUT/beacon.txt"
head -c 700 "$OUT/beacon.txt" | fold -s -w 100
echo " [...]"
echo
echo "== the same generation with the full KV cache (build/demo/full.txt) =="
run full "$@" > "$OUT/full.txt"
echo

# the summary also goes to $OUT/summary.txt (docs/results/demo/ holds a copy that docs/results.md renders)
python3 - "$OUT/beacon.log" "$OUT/full.log" "$BUDGET" <<'PY' | tee "$OUT/summary.txt"
import re, sys

def facts(path):
    log = open(path, errors="replace").read()
    kv = re.findall(r"llama_kv_cache: size = +([\d.]+) MiB \( *(\d+) cells", log)
    ev = re.findall(r"eval time = +[\d.]+ ms / +(\d+) runs .*?([\d.]+) tokens per second", log)
    peak = re.search(r"kv compression summary: cells peak (\d+) over all sequences, (\d+) cells evicted in (\d+) passes, plugin ([\d.]+) ms", log)
    if not kv or not ev:
        sys.exit(f"demo: could not read the figures from {path}")
    return {"kv_mib": float(kv[0][0]), "cells": int(kv[0][1]), "tokens": int(ev[-1][0]),
            "tok_s": float(ev[-1][1]), "summary": peak}

b, f = facts(sys.argv[1]), facts(sys.argv[2])
s = b["summary"]
print("== BeaconKV summary (llama-completion, %d generated tokens) ==" % b["tokens"])
print(f"{'':22}{'beacon, budget ' + sys.argv[3]:>22}{'full cache':>14}")
print(f"{'KV cells allocated':22}{b['cells']:>22}{f['cells']:>14}")
print(f"{'KV memory (MiB)':22}{b['kv_mib']:>22.1f}{f['kv_mib']:>14.1f}")
print(f"{'decode tok/s':22}{b['tok_s']:>22.1f}{f['tok_s']:>14.1f}")
if s:
    print(f"{'cells in use (peak)':22}{int(s.group(1)):>22}{'-':>14}")
    print(f"evicted {s.group(2)} cells in {s.group(3)} compression passes; plugin time {float(s.group(4)):.0f} ms")
print(f"KV memory saved: {f['kv_mib'] - b['kv_mib']:.1f} MiB ({f['kv_mib'] / max(b['kv_mib'], 1e-9):.1f}x less); "
      f"logs in build/demo/")
speed = b["tok_s"] / max(f["tok_s"], 1e-9)
pace = (f"decoded {speed:.1f}x as fast as" if speed >= 1.05 else
        "decoded as fast as" if speed > 0.95 else f"decoded at {speed:.2f}x the speed of")
print(f"\nOver {b['tokens']} tokens the compressed cache stayed at {b['cells']} cells ({b['kv_mib']:.1f} MiB) and {pace} "
      f"the full cache, whose every token attends to all the text before it.")
PY
