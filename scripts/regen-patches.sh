#!/usr/bin/env bash
# Maintainers: regenerate patches/ from a llama.cpp dev repo whose first commit is the pristine
# vendored tree and whose following commits are the patch series (one commit per patch).
#   scripts/regen-patches.sh DEV_REPO
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEV="${1:?usage: $0 DEV_REPO}"
cd "$DEV"
rm -f "$ROOT"/patches/*.patch
git -c user.email=beaconkv@localhost -c user.name=BeaconKV format-patch -q --no-signature --zero-commit -N \
    -o "$ROOT/patches" "$(git rev-list --max-parents=0 HEAD)..HEAD"
ls "$ROOT/patches"
