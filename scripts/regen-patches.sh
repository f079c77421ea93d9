#!/usr/bin/env bash
# Maintainers: regenerate patches/ from a llama.cpp dev repo whose first commit is the pristine tree and
# whose following commits are the patch series (one commit per patch). The plugin's own files, which live
# in cpp/llama/ and are copied into the tree by scripts/build-llama.sh, are left out of the patches.
#   scripts/regen-patches.sh DEV_REPO
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEV="${1:?usage: $0 DEV_REPO}"
cd "$DEV"
excludes=()
while IFS= read -r f; do excludes+=( ":(exclude)${f#./}" ); done < <(cd "$ROOT/cpp/llama" && find . -type f)
rm -f "$ROOT"/patches/*.patch
git -c user.email=beaconkv@localhost -c user.name=BeaconKV format-patch -q --no-signature --zero-commit -N \
    -o "$ROOT/patches" "$(git rev-list --max-parents=0 HEAD)..HEAD" -- . "${excludes[@]}"
ls "$ROOT/patches"
