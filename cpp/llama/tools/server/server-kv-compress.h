#pragma once

// KV compression (--kv-*, common/kv-compress.h) in llama-server's responses: the kv_* fields of `timings`,
// `kv_compress` in /slots and /props, and the llamacpp:kv_* series of /metrics. Header-only, so that the server
// build needs no new source file.

#include "server-common.h"

#include "kv-compress.h"

#include <utility>
#include <vector>

// what the plugin did for one sequence (seq >= 0) or for all sequences (seq = -1); null when compression is off
inline json server_kv_compress_json(llama_context * ctx, llama_seq_id seq) {
    common_kv_compress_info info;
    if (!ctx || !common_kv_compress_info_get(ctx, seq, info)) {
        return nullptr;
    }
    return json {
        {"policy",          info.policy},
        {"budget",          info.budget},
        {"cells_in_use",    info.cells_in_use},
        {"cells_peak",      info.cells_peak},
        {"cells_physical",  info.cells_physical},
        {"evicted",         info.evicted},
        {"compress_events", info.compress_events},
        {"archived",        info.archived},
        {"recalled",        info.recalled},
        {"archive_bytes",   info.archive_bytes},
        {"plugin_ms",       info.plugin_ms},
        {"active",          info.active},
    };
}

// cells the sequence holds now (0 when compression is off)
inline int32_t server_kv_compress_cells_in_use(llama_context * ctx, llama_seq_id seq) {
    const json kv = server_kv_compress_json(ctx, seq);
    return kv.is_null() ? 0 : kv.at("cells_in_use").get<int32_t>();
}

// the slot's fields of `timings`; n_cells_cached: cells of the cache_n reused positions still in the cache
inline json server_kv_compress_timings(llama_context * ctx, llama_seq_id seq, int32_t n_cells_cached) {
    const json kv = server_kv_compress_json(ctx, seq);
    if (kv.is_null()) {
        return nullptr;
    }
    return json {
        {"kv_cells",       kv.at("cells_in_use")},
        {"kv_cache_cells", n_cells_cached},
        {"kv_evicted",     kv.at("evicted")},
        {"kv_plugin_ms",   kv.at("plugin_ms")},
    };
}

// /props: the canonical spec, the physical cells per stream and the slot's logical context
inline json server_kv_compress_props(llama_context * ctx, int32_t n_ctx_slot) {
    const json kv = server_kv_compress_json(ctx, -1);
    if (kv.is_null()) {
        return nullptr;
    }
    return json {
        {"spec",           common_kv_compress_spec(ctx)},
        {"cells_physical", kv.at("cells_physical")},
        {"n_ctx_slot",     n_ctx_slot},
    };
}

// /metrics: counters and gauges (Item is server_task_result_metrics::metric_item) from server_kv_compress_json(ctx, -1)
template <typename Item>
std::pair<std::vector<Item>, std::vector<Item>> server_kv_compress_metric_items(const json & kv) {
    if (!kv.is_object()) {
        return {};
    }
    std::vector<Item> counters = {
        {"kv_evicted_total",         "KV cells evicted by compression",             kv.at("evicted").get<double>()},
        {"kv_compress_events_total", "KV compression passes",                       kv.at("compress_events").get<double>()},
        {"kv_plugin_seconds_total",  "Time spent in the KV compression plugin",     kv.at("plugin_ms").get<double>() / 1.e3},
        {"kv_recalled_total",        "KV cells recalled from the archive",          kv.at("recalled").get<double>()},
    };
    std::vector<Item> gauges = {
        {"kv_cells_used",     "KV cells held by all sequences",                  kv.at("cells_in_use").get<double>()},
        {"kv_cells_physical", "Physical KV cells per stream",                    kv.at("cells_physical").get<double>()},
        {"kv_archive_bytes",  "Host memory of the archive of evicted KV cells",  kv.at("archive_bytes").get<double>()},
    };
    return { std::move(counters), std::move(gauges) };
}
