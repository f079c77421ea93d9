#!/bin/sh
# LLAMA_SERVER_BIN_PATH for the compressed mode of scripts/upstream-server-suite.sh: runs the
# patched llama-server with the test's own arguments plus the KV compression flags.
#   BKV_REAL_SERVER  the real binary (required)
#   BKV_KV_POLICY    --kv-compress policy (default beacon)
#   BKV_KV_BUDGET    --kv-budget (default 128)
#   BKV_KV_EXTRA     more flags, word-split (e.g. "--kv-window 16")
# shellcheck disable=SC2086
exec "$BKV_REAL_SERVER" "$@" --kv-compress "${BKV_KV_POLICY:-beacon}" --kv-budget "${BKV_KV_BUDGET:-128}" ${BKV_KV_EXTRA:-}
