// Helpers shared by the project's C++ tools and tests (header-only, small).
#pragma once

#include "beaconkv.h"
#include "common.h"
#include "kv-compress.h"
#include "llama-kv-plugin.h"
#include "llama.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace bkv_tools {

// llama_batch helpers (llama.cpp's common/ moved to common_batch; the tools keep the plain C batch)
inline void batch_clear(llama_batch & batch) {
    batch.n_tokens = 0;
}

inline void batch_add(llama_batch & batch, llama_token id, llama_pos pos, const std::vector<llama_seq_id> & seq_ids, bool logits) {
    const int32_t i = batch.n_tokens;
    GGML_ASSERT(batch.seq_id[i] && "llama_batch size exceeded"); // llama_batch_init ends seq_id with NULL
    batch.token   [i] = id;
    batch.pos     [i] = pos;
    batch.n_seq_id[i] = (int32_t) seq_ids.size();
    for (size_t j = 0; j < seq_ids.size(); ++j) {
        batch.seq_id[i][j] = seq_ids[j];
    }
    batch.logits  [i] = logits;
    batch.n_tokens++;
}

// Cells sequence `seq` holds now: llama.cpp's own listing when a plugin is attached, else the
// position span (an uncompressed cache has no holes).
inline int32_t seq_cells(llama_context * ctx, llama_seq_id seq = 0) {
    const int32_t n = llama_kv_plugin_seq_cells(ctx, seq, nullptr, nullptr, 0, nullptr);
    if (n >= 0) {
        return n;
    }
    llama_memory_t mem = llama_get_memory(ctx);
    const llama_pos p0 = llama_memory_seq_pos_min(mem, seq);
    const llama_pos p1 = llama_memory_seq_pos_max(mem, seq);
    return p0 < 0 ? 0 : p1 - p0 + 1;
}

// Physical KV cells the context allocated.
inline uint32_t physical_cells(llama_context * ctx) {
    const uint32_t n = llama_kv_plugin_n_cells(ctx);
    return n > 0 ? n : llama_n_ctx(ctx);
}

// K+V bytes one cell costs over all layers of the cache (the evictable layers when a plugin is
// attached; else computed from the model and the cache types).
inline uint64_t bytes_per_cell(llama_context * ctx, const llama_model * model, const common_params & params) {
    uint64_t sum = 0;
    for (int32_t i = 0, n = llama_kv_plugin_n_layers(ctx); i < n; i++) {
        llama_kv_plugin_layer layer{};
        if (llama_kv_plugin_get_layer(ctx, i, &layer) == 0) {
            sum += layer.kv_bytes_per_cell;
        }
    }
    if (sum > 0) {
        return sum;
    }
    const int32_t n_head = llama_model_n_head(model);
    const int32_t head_dim = n_head > 0 ? llama_model_n_embd(model) / n_head : 0;
    beaconkv_model_desc d = {llama_model_n_layer(model), llama_model_n_head_kv(model), head_dim, head_dim,
                             (int32_t) params.cache_type_k, (int32_t) params.cache_type_v};
    return beaconkv_kv_bytes_per_token(&d);
}

// A context for `params` with compression spec `spec` ("" = plain llama.cpp, no plugin), sized
// like common_init_from_params does (logical n_ctx, physical cells from the spec). `n_rs_seq`,
// when given, replaces the recurrent-state snapshots per sequence that `params` asks for
// (rollback of hybrid models).
inline llama_context * make_context(llama_model * model, common_params params, const std::string & spec,
                                    uint32_t n_ctx, ggml_backend_sched_eval_callback cb = nullptr,
                                    void * cb_data = nullptr, std::optional<uint32_t> n_rs_seq = std::nullopt) {
    params.n_ctx = n_ctx;
    params.kv_compress_spec = spec;
    common_kv_compress_adjust(params);
    llama_context_params cp = common_context_params_to_llama(params);
    cp.n_ctx_cells = spec.empty() ? 0 : common_kv_compress_cells(params, model);
    cp.cb_eval = cb;
    cp.cb_eval_user_data = cb_data;
    if (n_rs_seq) {
        cp.n_rs_seq = *n_rs_seq;
    }
    llama_context * ctx = llama_init_from_model(model, cp);
    if (ctx && !spec.empty() && !common_kv_compress_attach(ctx, params)) {
        llama_free(ctx);
        return nullptr;
    }
    return ctx;
}

// prompt wrapped in the model's chat template as one user turn (the prompt itself when it has none)
inline std::string apply_chat_template(const llama_model * model, const std::string & prompt) {
    const char * tmpl = llama_model_chat_template(model, nullptr);
    if (!tmpl) {
        return prompt;
    }
    llama_chat_message msg = {"user", prompt.c_str()};
    std::vector<char> buf(prompt.size() * 2 + 512);
    int32_t n = llama_chat_apply_template(tmpl, &msg, 1, true, buf.data(), (int32_t) buf.size());
    if (n > (int32_t) buf.size()) {
        buf.resize(n);
        n = llama_chat_apply_template(tmpl, &msg, 1, true, buf.data(), (int32_t) buf.size());
    }
    return n < 0 ? prompt : std::string(buf.data(), n);
}

}  // namespace bkv_tools
