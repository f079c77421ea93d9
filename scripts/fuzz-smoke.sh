#!/usr/bin/env bash
# Build both cargo-fuzz targets and run each for N seconds (default 30), one job each.
#
#   scripts/fuzz-smoke.sh [SECONDS]
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`). Only the stable toolchain is required:
# RUSTC_BOOTSTRAP=1 lets cargo-fuzz pass its nightly-only flags (-Zsanitizer=address, ...).
# The committed seeds in fuzz/corpus/<target>/ are read but never written: new inputs go to
# fuzz/target/corpus/<target>/ (ignored), crashes to fuzz/artifacts/<target>/ (ignored).
# Not run by CI (installing cargo-fuzz takes minutes); see docs/testing.md.
set -euo pipefail

SECONDS_PER_TARGET="${1:-30}"
TARGETS=(spec_parser c_abi_sequence)
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz-smoke: cargo-fuzz is not installed; run: cargo install cargo-fuzz" >&2
    exit 2
fi

export RUSTC_BOOTSTRAP=1
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-1}"

for t in "${TARGETS[@]}"; do
    cargo fuzz build "$t"
done

for t in "${TARGETS[@]}"; do
    work="fuzz/target/corpus/$t"
    mkdir -p "$work"
    echo "fuzz-smoke: $t for ${SECONDS_PER_TARGET}s"
    cargo fuzz run "$t" "$work" "fuzz/corpus/$t" -- \
        -max_total_time="$SECONDS_PER_TARGET" -print_final_stats=1
done
echo "fuzz-smoke: no crash in ${#TARGETS[@]} targets"
