#pragma once

// KV compression (--kv-*, common/kv-compress.h) in llama-server's responses: the kv_* fields of `timings`,
// `kv_compress` in /slots and /props, and the llamacpp:kv_* series of /metrics. Header-only, so that the server
// build needs no new source file.

#include "server-common.h"

#include "kv-compress.h"

#include <cstdint>
#include <stdexcept>
#include <string>
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
        {"scoring",         info.scoring},
        {"prompt_cells",    info.prompt_cells},
        {"cells_allowed",   info.cells_allowed},
        // reads from device/remote buffers (what K's backend sends the host) in passes and in query capture
        {"reads_pass",      info.reads_pass},
        {"bytes_pass",      info.bytes_pass},
        {"reads_capture",   info.reads_capture},
        {"bytes_capture",   info.bytes_capture},
        {"reads_per_pass",  info.compress_events ? (double) info.reads_pass / info.compress_events : 0.0},
        {"bytes_per_token", info.n_tokens ? (double) (info.bytes_pass + info.bytes_capture) / info.n_tokens : 0.0},
    };
}

// the reused prompt positions of a slot (n_past of n_tokens): with compression, only as many as continue as on a fresh
// slot (common_kv_compress_reuse_point). The last prompt token is always computed again, so the check is made at
// n_tokens - 1 when the whole prompt is cached; positions follow tokens only without multimodal chunks
inline int32_t server_kv_compress_reuse_point(llama_context * ctx, llama_seq_id seq, int32_t n_past, int32_t n_tokens,
                                              bool has_mtmd) {
    if (has_mtmd || n_past <= 0) {
        return n_past;
    }
    const int32_t evaluated_from = (n_tokens > 0 && n_past >= n_tokens) ? n_tokens - 1 : n_past;
    const int32_t keep = common_kv_compress_reuse_point(ctx, seq, evaluated_from);
    return keep < evaluated_from ? keep : n_past;
}

// the slots in the order their prompts fill the next batch. With compression the batch is one ubatch (n_batch is
// lowered to n_ubatch, common_kv_compress_adjust), often 32 or 64 tokens, so upstream's fixed order lets the first
// slots' prompts take every batch while new requests keep arriving there, and a later slot's prompt waits without
// bound. The order rotates by one slot per batch instead, so every prompt gets the whole batch at least once in
// n_slots batches. Without compression, upstream's order
template <typename Slot> std::vector<Slot *> server_kv_compress_prompt_order(llama_context * ctx, std::vector<Slot> & slots) {
    static size_t next_first = 0; // one server context per process
    std::vector<Slot *> order;
    order.reserve(slots.size());
    const size_t first = (common_kv_compress_get(ctx) && !slots.empty()) ? next_first++ % slots.size() : 0;
    for (size_t i = 0; i < slots.size(); ++i) {
        order.push_back(&slots[(first + i) % slots.size()]);
    }
    return order;
}

// a request's own KV compression: `kv_budget` (cells) and `kv_compress` (a policy name) of a completion request,
// checked against the server's settings (props: server_kv_compress_props, null when compression is off). Throws
// std::invalid_argument (HTTP 400) naming the field and the allowed range or values. budget 0 / policy -1 when the
// request leaves them to the server (absent or null; kv_budget 0 too)
inline void server_kv_compress_request(const json & data, const json & props, int32_t & budget, int32_t & policy) {
    budget = 0;
    policy = -1;
    const bool has_budget = data.contains("kv_budget") && !data.at("kv_budget").is_null();
    const bool has_policy = data.contains("kv_compress") && !data.at("kv_compress").is_null();
    if (!has_budget && !has_policy) {
        return;
    }
    if (!props.is_object()) {
        throw std::invalid_argument(std::string(has_budget ? "kv_budget" : "kv_compress") +
                                    ": KV compression is off on this server (start it with --kv-budget N or "
                                    "--kv-compress POLICY to set a budget or policy per request)");
    }
    if (has_budget) {
        const json & b = data.at("kv_budget");
        if (!b.is_number_integer() || b.get<int64_t>() < INT32_MIN || b.get<int64_t>() > INT32_MAX) {
            throw std::invalid_argument("kv_budget: must be an integer number of cells (0 = the server's budget), got " +
                                        b.dump());
        }
        budget = b.get<int32_t>();
    }
    std::string name;
    if (has_policy) {
        const json & p = data.at("kv_compress");
        if (!p.is_string() || p.get<std::string>().empty()) {
            throw std::invalid_argument("kv_compress: must be a policy name, got " + p.dump());
        }
        name = p.get<std::string>();
    }
    const std::string why = common_kv_compress_seq_check(props.at("spec").get<std::string>(),
                                                         props.at("n_ctx_slot").get<uint32_t>(), budget, name, policy);
    if (!why.empty()) {
        const bool on_budget = why.rfind("budget: ", 0) == 0;
        const bool on_policy = why.rfind("policy: ", 0) == 0;
        throw std::invalid_argument(on_budget ? "kv_budget: "   + why.substr(8) :
                                    on_policy ? "kv_compress: " + why.substr(8) :
                                    std::string(has_budget ? "kv_budget: " : "kv_compress: ") + why);
    }
}

// the slot's sequence runs with the request's kv_budget / kv_compress (0 / -1: the server's), from its prompt on;
// called after the slot's cache was trimmed for the new prompt (a removed sequence forgets its own values)
inline void server_kv_compress_seq_apply(llama_context * ctx, llama_seq_id seq, int32_t budget, int32_t policy) {
    if (common_kv_compress_get(ctx) != nullptr) {
        common_kv_compress_seq_override(ctx, seq, budget, policy);
    }
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
        {"kv_prompt_cells", kv.at("prompt_cells")},
        {"kv_cells_allowed", kv.at("cells_allowed")},
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
        {"scoring",        kv.at("scoring")},
        {"cells_physical", kv.at("cells_physical")},
        {"n_ctx_slot",     n_ctx_slot},
    };
}

// /metrics: the gauges of all live sequences plus server-lifetime counters. The plugin's counters belong
// to a sequence and go down when its history is replaced (slot erase or restore, a new prompt that clears
// it, a new context after sleep), while Prometheus counters must never decrease. So every call remembers,
// per sequence, the counters it saw last; when one of them went down since, the sequence's previous values
// move to a retired total. The `_total` series export retired + last seen. Counts that a sequence gains and
// loses between two calls are missed (never double counted): the server calls this at each scrape and at
// the end of each request, and a slot's counters only grow while it serves one.
// prev: what the previous call returned (null at first); n_seq: the server's sequences (slots).
inline json server_kv_compress_metrics(llama_context * ctx, int32_t n_seq, const json & prev) {
    json cur = server_kv_compress_json(ctx, -1);
    if (cur.is_null()) {
        return prev; // compression off, or no context while the server sleeps: keep the last figures
    }
    static const char * const counters[] = { "evicted", "compress_events", "plugin_ms", "recalled" };

    json retired = prev.is_object() ? prev.at("retired") : json::object();
    json seen    = prev.is_object() ? prev.at("seen")    : json::array();
    json total   = json::object();
    for (const char * c : counters) {
        if (!retired.contains(c)) {
            retired[c] = 0.0;
        }
    }
    for (int32_t seq = 0; seq < n_seq; ++seq) {
        if ((int32_t) seen.size() <= seq) {
            seen.push_back(json::object());
        }
        json & last = seen[seq];
        const json now = server_kv_compress_json(ctx, seq);
        if (now.is_null()) {
            continue;
        }
        bool went_down = false;
        for (const char * c : counters) {
            went_down |= now.at(c).get<double>() < last.value(c, 0.0);
        }
        for (const char * c : counters) {
            if (went_down) {
                retired[c] = retired[c].get<double>() + last.value(c, 0.0);
            }
            last[c] = now.at(c).get<double>();
        }
    }
    for (const char * c : counters) {
        double sum = retired[c].get<double>();
        for (const auto & last : seen) {
            sum += last.value(c, 0.0);
        }
        total[c] = sum;
    }
    cur["retired"]  = std::move(retired);
    cur["seen"]     = std::move(seen);
    cur["lifetime"] = std::move(total);
    return cur;
}

// /metrics: counters and gauges (Item is server_task_result_metrics::metric_item) from server_kv_compress_metrics
template <typename Item>
std::pair<std::vector<Item>, std::vector<Item>> server_kv_compress_metric_items(const json & kv) {
    if (!kv.is_object()) {
        return {};
    }
    const json & life = kv.at("lifetime");
    std::vector<Item> counters = {
        {"kv_evicted_total",         "KV cells evicted by compression",             life.at("evicted").get<double>()},
        {"kv_compress_events_total", "KV compression passes",                       life.at("compress_events").get<double>()},
        {"kv_plugin_seconds_total",  "Time spent in the KV compression plugin",     life.at("plugin_ms").get<double>() / 1.e3},
        {"kv_recalled_total",        "KV cells recalled from the archive",          life.at("recalled").get<double>()},
    };
    std::vector<Item> gauges = {
        {"kv_cells_used",     "KV cells held by all sequences",                  kv.at("cells_in_use").get<double>()},
        {"kv_cells_physical", "Physical KV cells per stream",                    kv.at("cells_physical").get<double>()},
        {"kv_archive_bytes",  "Host memory of the archive of evicted KV cells",  kv.at("archive_bytes").get<double>()},
    };
    return { std::move(counters), std::move(gauges) };
}
