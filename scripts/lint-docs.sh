#!/usr/bin/env bash
# Documentation lint (part of `make lint`): README.md and docs/**/*.md describe the product, so they
# carry no words of how it was made, and README.md stays short.
#
#   scripts/lint-docs.sh
#
# Fails (exit 1) on words that narrate how the work was organised instead of what the software does
# (the WORDS list below, case-insensitive, whole words), and when README.md has more than
# MAX_README_LINES lines (default 260). Prints each offending file:line, or one OK line.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

MAX_README_LINES="${MAX_README_LINES:-260}"
# spelled in pieces, so that this script does not match its own list
WORDS=( 'sess''ions?\b' 'clos''ing note' 'CI rehears''al' 'the se''ed' 'iss''ue #' 'iss''ue [0-9#]' )
PATTERN="$(printf '\\b%s|' "${WORDS[@]}")"
PATTERN="${PATTERN%|}"

files=( README.md )
while IFS= read -r -d '' f; do
    files+=( "$f" )
done < <(find docs -type f -name '*.md' -print0 | sort -z)

status=0

# grep exits 0 on a match, 1 when nothing matches (the passing case), 2 on an error
rc=0
hits="$(grep -n -H -i -E "$PATTERN" "${files[@]}")" || rc=$?
if (( rc > 1 )); then
    echo "lint-docs: grep failed (exit $rc)" >&2
    exit 2
fi
if (( rc == 0 )); then
    while IFS= read -r hit; do
        file="${hit%%:*}"
        rest="${hit#*:}"
        line="${rest%%:*}"
        text="${rest#*:}"
        echo "lint-docs: $file:$line: process word: $text"
    done <<< "$hits"
    status=1
fi

readme_lines="$(wc -l < README.md)"
if (( readme_lines > MAX_README_LINES )); then
    echo "lint-docs: README.md:$readme_lines: $readme_lines lines, at most $MAX_README_LINES allowed"
    status=1
fi

if (( status == 0 )); then
    echo "lint-docs: OK (${#files[@]} files, README.md $readme_lines lines)"
fi
exit "$status"
