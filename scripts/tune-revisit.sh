#!/usr/bin/env bash
# The revisit-perplexity experiments behind the revisit decisions in docs/design.md: every variant of the beacon
# policy (the method's logit scores and the default probability scores) and the
# baselines on the same lockstep runs, per budget. Results: results/tuning/*.json
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${MODEL:-$(scripts/fetch-models.sh smollm2)}"
TEXT="${TEXT:-/usr/share/common-licenses/GPL-3}"
OUT=results/tuning
mkdir -p "$OUT"
run() {  # name configs
    build/bin/beaconkv-eval -m "$MODEL" -t "${THREADS:-2}" --mode revisit --text "$TEXT" --passage 256 --gap 1024 \
        --prompt-tokens 32 --configs "$2" --out "$OUT/$1.json" 2> "$OUT/$1.log"
    python3 - "$OUT/$1.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"{sys.argv[1]}: reference perplexity {d['ppl_ref']:.2f}")
for r in d["results"]:
    print(f"  {r['config']:36s} top1 {r['top1']:.3f}  KL {r['kl']:.4f}  revisit ppl {r['ppl']:.2f}")
PY
}
run revisit128 "beacon:128/score=logit,beacon:128/score=logit/reduce=zmean,beacon:128/score=logit/reduce=rank,beacon:128/score=logit/span=5,beacon:128/score=logit/beacons=32/recent=32,beacon:128/score=logit/min=120,recent:128/score=logit,streaming:128,random:128"
for B in 256 512; do
    run "revisit$B" "beacon:$B/score=logit,beacon:$B/score=logit/reduce=rank,beacon:$B/score=logit/span=5,beacon:$B/score=logit/span=9,beacon:$B/score=logit/span=5/reduce=rank,recent:$B/score=logit,streaming:$B,random:$B"
done
for B in 128 256 512; do
    run "revisit-prob$B" "beacon:$B/score=logit,beacon:$B/score=prob,beacon:$B/score=prob/reduce=rank,beacon:$B/score=prob/span=5,recent:$B/score=prob,streaming:$B,random:$B"
done
