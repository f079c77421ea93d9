// The KV plugin host: the registry from memory to plugin and its notifications, attach/detach, the layer
// description, the host table, and the context's side (physical cells, the no-slot warning, set_kv_plugin).

#include "llama-kv-plugin-impl.h"

#include "llama-impl.h"
#include "llama-context.h"
#include "llama-model.h"
#include "llama-kv-cache.h"
#include "llama-kv-cache-iswa.h"
#include "llama-memory-hybrid.h"
#include "llama-memory-hybrid-iswa.h"
#include "llama-memory-hybrid-idx.h"

#include "ggml-backend.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>

//
// registry: memory -> attached plugin (the public llama_memory_* API only sees the memory)
//

static std::mutex g_kvp_mutex;
static std::unordered_map<const llama_memory_i *, llama_kv_plugin_state *> g_kvp_by_mem;
static std::atomic<uint64_t> g_kvp_generation { 0 };

static llama_kv_plugin_state * kvp_find(const llama_memory_i * mem) {
    if (!mem) {
        return nullptr;
    }
    std::lock_guard<std::mutex> lock(g_kvp_mutex);
    auto it = g_kvp_by_mem.find(mem);
    return it == g_kvp_by_mem.end() ? nullptr : it->second;
}

llama_kv_plugin_state::llama_kv_plugin_state(llama_context * lctx, const llama_kv_plugin & plugin) :
    lctx(lctx), plugin(plugin), generation(++g_kvp_generation) {
}

llama_kv_plugin_state::~llama_kv_plugin_state() {
    {
        std::lock_guard<std::mutex> lock(g_kvp_mutex);
        auto it = g_kvp_by_mem.find(mem);
        if (it != g_kvp_by_mem.end() && it->second == this) {
            g_kvp_by_mem.erase(it);
        }
    }
    if (plugin.free) {
        plugin.free(plugin.ud);
    }
}

//
// memory notifications
//

void llama_kv_plugin_notify_seq_rm(const llama_memory_i * mem, llama_seq_id seq, llama_pos p0, llama_pos p1) {
    llama_kv_plugin_state * st = kvp_find(mem);
    if (st && st->plugin.seq_removed) {
        st->plugin.seq_removed(st->plugin.ud, seq, p0, p1);
    }
}

void llama_kv_plugin_notify_seq_cp(const llama_memory_i * mem, llama_seq_id src, llama_seq_id dst, llama_pos p0, llama_pos p1) {
    llama_kv_plugin_state * st = kvp_find(mem);
    if (st && st->plugin.seq_copied) {
        st->plugin.seq_copied(st->plugin.ud, src, dst, p0, p1);
    }
}

bool llama_kv_plugin_attached(const llama_memory_i * mem) {
    return kvp_find(mem) != nullptr;
}

void llama_kv_plugin_notify_seq_shift(const llama_memory_i * mem, llama_seq_id seq) {
    llama_kv_plugin_state * st = kvp_find(mem);
    if (!st) {
        return;
    }
    if (!st->warned_shift) {
        st->warned_shift = true;
        LLAMA_LOG_WARN("%s: positions of sequence %d shifted while a KV plugin is attached (llama_memory_can_shift() "
                "is false): the plugin's state of the sequence is reset\n", __func__, seq);
    }
    if (st->plugin.state_set) {
        st->plugin.state_set(st->plugin.ud, seq, nullptr, 0);
    }
}

void llama_kv_plugin_notify_seq_keep(const llama_memory_i * mem, llama_seq_id seq) {
    llama_kv_plugin_state * st = kvp_find(mem);
    if (!st || !st->plugin.seq_removed) {
        return;
    }
    const auto & cparams = st->lctx->get_cparams();
    const llama_seq_id n_seq = (llama_seq_id) (cparams.kv_unified ? LLAMA_MAX_SEQ : cparams.n_seq_max);
    for (llama_seq_id s = 0; s < n_seq; ++s) {
        if (s != seq) {
            st->plugin.seq_removed(st->plugin.ud, s, -1, -1);
        }
    }
}

//
// public API
//

static int32_t kvp_refuse(const char * reason) {
    LLAMA_LOG_WARN("llama_kv_plugin_attach: KV plugin not attached, %s; running with the uncompressed KV cache\n", reason);
    return -1;
}

int32_t llama_kv_plugin_attach(llama_context * ctx, const llama_kv_plugin * p) {
    if (!ctx || !p) {
        return kvp_refuse("NULL context or plugin");
    }
    if (p->q_capacity < 1) {
        return kvp_refuse("q_capacity must be >= 1");
    }

    ctx->set_kv_plugin(nullptr); // detach a previous plugin

    llama_memory_i * mem = ctx->get_memory();
    if (!mem) {
        return kvp_refuse("the context has no memory");
    }

    llama_kv_cache * kv = nullptr;
    bool protect_last = false;

    if (dynamic_cast<llama_memory_hybrid_idx *>(mem)) {
        // its indexer cache mirrors the attention cells one to one: evicting from one would desynchronise them
        return kvp_refuse("the memory type is not supported (hybrid with a sparse-attention indexer cache)");
    } else if (auto * m = dynamic_cast<llama_kv_cache *>(mem)) {
        kv = m;
    } else if (auto * m = dynamic_cast<llama_kv_cache_iswa *>(mem)) {
        kv = m->get_base();
    } else if (auto * m = dynamic_cast<llama_memory_hybrid *>(mem)) {
        kv = m->get_mem_attn();
        protect_last = true;
    } else if (auto * m = dynamic_cast<llama_memory_hybrid_iswa *>(mem)) {
        kv = m->get_mem_attn() ? m->get_mem_attn()->get_base() : nullptr;
        protect_last = true;
    } else {
        return kvp_refuse("the memory type is not supported (recurrent-only, DSA, DSA-iSWA, DSv4, MSA or another cache layout)");
    }

    if (!kv) {
        return kvp_refuse("the model has no evictable attention cache");
    }
    if (llama_kv_plugin_access::has_shared_cells(*kv)) {
        return kvp_refuse("the attention cache shares its cells with another context");
    }

    const auto & model   = ctx->get_model();
    const auto & hparams = model.hparams;

    // until attach succeeds the caller keeps ownership of p->ud: free is not called on failure
    llama_kv_plugin pcopy = *p;
    pcopy.free = nullptr;

    auto st = std::make_unique<llama_kv_plugin_state>(ctx, pcopy);
    st->mem          = mem;
    st->kv           = kv;
    st->protect_last = protect_last;

    // query stores, on the buffer type of each layer's K cache: one store per buffer type whose rows hold
    // every layer of that type side by side, each layer a view of it
    std::map<ggml_backend_buffer_type_t, int32_t> group_of;
    std::vector<ggml_backend_buffer_type_t>      group_buft;
    std::vector<int64_t>                         group_width;

    const auto layer_ids = kv->get_layer_ids();
    for (uint32_t il : layer_ids) {
        ggml_tensor * k = kv->get_k_storage(il);
        if (!k || !k->buffer) {
            continue;
        }
        ggml_backend_buffer_type_t buft = ggml_backend_buffer_get_type(k->buffer);
        auto itg = group_of.find(buft);
        if (itg == group_of.end()) {
            itg = group_of.emplace(buft, (int32_t) group_buft.size()).first;
            group_buft.push_back(buft);
            group_width.push_back(0);
        }

        llama_kv_plugin_state::layer L;
        L.il       = (int32_t) il;
        L.q_group  = itg->second;
        L.q_offset = (size_t) group_width[itg->second];
        group_width[itg->second] += (int64_t) hparams.n_embd_head_k(il)*hparams.n_head(il);

        st->il_to_layer[(int32_t) il] = (int32_t) st->layers.size();
        st->layers.push_back(std::move(L));
    }

    if (st->layers.empty()) {
        return kvp_refuse("the attention cache has no layers");
    }

    // two ubatches of captured rows: the plugin may leave up to one ubatch's rows unread
    st->q_ring = 2*p->q_capacity;

    size_t total = 0;
    for (size_t g = 0; g < group_buft.size(); ++g) {
        ggml_init_params params = {
            /*.mem_size   =*/ size_t(st->layers.size() + 2)*ggml_tensor_overhead(),
            /*.mem_buffer =*/ NULL,
            /*.no_alloc   =*/ true,
        };
        ggml_context * c = ggml_init(params);
        if (!c) {
            return kvp_refuse("failed to create a ggml context for the query store");
        }
        st->ctxs_bufs.emplace_back(c, nullptr);

        llama_kv_plugin_state::q_group G;
        G.store = ggml_new_tensor_2d(c, GGML_TYPE_F32, group_width[g], st->q_ring + 1);
        ggml_format_name(G.store, "kvp_q_store_g%d", (int) g);
        for (auto & L : st->layers) {
            if (L.q_group == (int32_t) g) {
                const int64_t n_embd_q = (int64_t) hparams.n_embd_head_k(L.il)*hparams.n_head(L.il);
                L.q_store = ggml_view_2d(c, G.store, n_embd_q, st->q_ring + 1, G.store->nb[1], L.q_offset*sizeof(float));
                ggml_format_name(L.q_store, "kvp_q_store_l%d", (int) L.il);
            }
        }
        st->q_groups.push_back(std::move(G));

        ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors_from_buft(c, group_buft[g]);
        if (!buf) {
            return kvp_refuse("failed to allocate the query store");
        }
        ggml_backend_buffer_clear(buf, 0);
        total += ggml_backend_buffer_get_size(buf);
        st->ctxs_bufs.back().second.reset(buf);
    }

    LLAMA_LOG_INFO("%s: KV plugin attached: %zu evictable attention layers%s, query store %d rows, %.2f MiB\n", __func__,
            st->layers.size(), protect_last ? " (hybrid: newest cell kept)" : "", st->q_ring, total/1024.0/1024.0);

    st->plugin.free = p->free;

    llama_kv_plugin_state * raw = st.get();
    ctx->set_kv_plugin(std::move(st));

    {
        std::lock_guard<std::mutex> lock(g_kvp_mutex);
        g_kvp_by_mem[mem] = raw;
    }

    return 0;
}

void llama_kv_plugin_detach(llama_context * ctx) {
    if (ctx) {
        ctx->set_kv_plugin(nullptr);
    }
}

int32_t llama_kv_plugin_n_layers(llama_context * ctx) {
    auto * st = ctx ? ctx->get_kv_plugin() : nullptr;
    return st ? (int32_t) st->layers.size() : 0;
}

uint32_t llama_kv_plugin_n_cells(llama_context * ctx) {
    auto * st = ctx ? ctx->get_kv_plugin() : nullptr;
    return st ? st->kv->get_size() : 0;
}

int32_t llama_kv_plugin_get_layer(llama_context * ctx, int32_t i, llama_kv_plugin_layer * out) {
    auto * st = ctx ? ctx->get_kv_plugin() : nullptr;
    if (!st || !out || i < 0 || i >= (int32_t) st->layers.size()) {
        return -1;
    }

    const auto & L       = st->layers[i];
    const auto & hparams = ctx->get_model().hparams;
    const ggml_tensor * k = st->kv->get_k_storage(L.il);

    memset(out, 0, sizeof(*out));

    out->il        = L.il;
    out->head_dim  = (int32_t) hparams.n_embd_head_k(L.il);
    out->n_head    = (int32_t) hparams.n_head(L.il);
    out->n_head_kv = (int32_t) hparams.n_head_kv(L.il);

    out->k_data    = k->data;
    out->k_type    = (int32_t) k->type;
    out->k_nb1     = k->nb[1];
    out->k_nb2     = k->nb[2];
    out->k_on_host = k->buffer && ggml_backend_buffer_is_host(k->buffer);

    out->q_data    = L.q_store->data;
    out->q_nb1     = L.q_store->nb[1];
    out->q_on_host = L.q_store->buffer && ggml_backend_buffer_is_host(L.q_store->buffer);
    out->q_rows    = st->q_ring;

    out->rope_n_dims     = L.rope_n_dims;
    out->rope_mode       = L.rope_mode;
    out->rope_n_ctx_orig = L.rope_n_ctx_orig;
    out->freq_base       = L.rope_f[0];
    out->freq_scale      = L.rope_f[1];
    out->ext_factor      = L.rope_f[2];
    out->attn_factor     = L.rope_f[3];
    out->beta_fast       = L.rope_f[4];
    out->beta_slow       = L.rope_f[5];
    out->freq_factors    = L.freq_factors.empty() ? nullptr : L.freq_factors.data();

    out->hadamard_n = L.hadamard_n;
    out->v_type     = (int32_t) st->kv->type_v();
    out->v_dim      = (int32_t) hparams.n_embd_v_gqa(L.il);
    out->kv_bytes_per_cell = ggml_row_size(k->type, hparams.n_embd_k_gqa(L.il)) +
                             ggml_row_size(st->kv->type_v(), hparams.n_embd_v_gqa(L.il));

    return 0;
}

//
// the host table
//

static int32_t kvp_host_n_layers(void * u) {
    return llama_kv_plugin_n_layers((llama_context *) u);
}

static int32_t kvp_host_get_layer(void * u, int32_t i, llama_kv_plugin_layer * out) {
    return llama_kv_plugin_get_layer((llama_context *) u, i, out);
}

static int32_t kvp_host_seq_cells(void * u, llama_seq_id seq, llama_pos * pos, uint32_t * cells, int32_t cap, uint32_t * stream) {
    return llama_kv_plugin_seq_cells((llama_context *) u, seq, pos, cells, cap, stream);
}

static int32_t kvp_host_seq_evict(void * u, llama_seq_id seq, const uint32_t * cells, int32_t n) {
    return llama_kv_plugin_seq_evict((llama_context *) u, seq, cells, n);
}

static void kvp_host_synchronize(void * u) {
    llama_synchronize((llama_context *) u);
}

static int32_t kvp_host_read_rows(void * u, int32_t layer, int32_t what, uint32_t stream, const uint32_t * rows, int32_t n, float * out) {
    return llama_kv_plugin_read_rows((llama_context *) u, layer, what, stream, rows, n, out);
}

static int32_t kvp_host_read_kv(void * u, int32_t layer, uint32_t stream, const uint32_t * cells, int32_t n, void * k_out, void * v_out) {
    return llama_kv_plugin_read_kv((llama_context *) u, layer, stream, cells, n, k_out, v_out);
}

static int32_t kvp_host_write_kv(void * u, int32_t layer, uint32_t stream, const uint32_t * cells, int32_t n, int32_t format, const void * k, const void * v) {
    return llama_kv_plugin_write_kv((llama_context *) u, layer, stream, cells, n, format, k, v);
}

static int32_t kvp_host_seq_place(void * u, llama_seq_id seq, const llama_pos * pos, int32_t n, uint32_t * cells) {
    return llama_kv_plugin_seq_place((llama_context *) u, seq, pos, n, cells);
}

static int32_t kvp_host_score_keys(void * u, uint32_t stream, const uint32_t * cells, int32_t n_cells, int32_t n_layers,
                                   const int32_t * layers, const int32_t * n_query, const float * queries, int32_t mode, float * out) {
    return llama_kv_plugin_score_keys((llama_context *) u, stream, cells, n_cells, n_layers, layers, n_query, queries, mode, out);
}

static void kvp_host_transfers(void * u, uint64_t * n_reads, uint64_t * bytes) {
    llama_kv_plugin_transfers((llama_context *) u, n_reads, bytes);
}

static void kvp_host_log(void * /*u*/, int32_t level, const char * msg) {
    msg = msg ? msg : "";
    if (level >= 3) {
        LLAMA_LOG_ERROR("%s\n", msg);
    } else if (level == 2) {
        LLAMA_LOG_WARN("%s\n", msg);
    } else {
        LLAMA_LOG_INFO("%s\n", msg);
    }
}

llama_kv_plugin_host llama_kv_plugin_get_host(llama_context * ctx) {
    return llama_kv_plugin_host {
        /*.user        =*/ ctx,
        /*.n_layers    =*/ kvp_host_n_layers,
        /*.get_layer   =*/ kvp_host_get_layer,
        /*.seq_cells   =*/ kvp_host_seq_cells,
        /*.seq_evict   =*/ kvp_host_seq_evict,
        /*.synchronize =*/ kvp_host_synchronize,
        /*.read_rows   =*/ kvp_host_read_rows,
        /*.log         =*/ kvp_host_log,
        /*.read_kv     =*/ kvp_host_read_kv,
        /*.write_kv    =*/ kvp_host_write_kv,
        /*.seq_place   =*/ kvp_host_seq_place,
        /*.score_keys  =*/ kvp_host_score_keys,
        /*.transfers   =*/ kvp_host_transfers,
    };
}

void * llama_kv_plugin_get_ud(const llama_context * ctx) {
    auto * st = ctx ? ctx->get_kv_plugin() : nullptr;
    return st ? st->plugin.ud : nullptr;
}

//
// context construction and decode diagnostics (llama_context)
//

llama_cparams llama_kv_plugin_memory_cparams(const llama_context_params & params, const llama_cparams & cparams, const llama_hparams & hparams) {
    llama_cparams res = cparams;
    if (params.n_ctx_cells == 0) {
        return res;
    }

    uint32_t n_cells_seq = cparams.kv_unified ? params.n_ctx_cells : params.n_ctx_cells / cparams.n_seq_max;
    if (hparams.swa_type != LLAMA_SWA_TYPE_NONE && hparams.n_swa > 0) {
        // the SWA cache is sized min(kv_size, n_swa + n_ubatch): keep it as large as with the logical size
        n_cells_seq = std::max(n_cells_seq, hparams.n_swa*(cparams.kv_unified ? cparams.n_seq_max : 1) + cparams.n_ubatch);
    }
    n_cells_seq = std::max(n_cells_seq, 1u); // the plugin's size as it is: the cache pads only what it attends
    res.n_ctx_seq = std::min(n_cells_seq, cparams.n_ctx_seq);
    res.n_ctx     = cparams.kv_unified ? res.n_ctx_seq : res.n_ctx_seq*cparams.n_seq_max;
    LLAMA_LOG_INFO("%s: n_ctx_cells           = %u (physical KV cells per stream = %u, logical n_ctx_seq = %u)\n",
            __func__, params.n_ctx_cells, res.n_ctx_seq, cparams.n_ctx_seq);

    return res;
}

void llama_kv_plugin_warn_no_slot(const llama_kv_plugin_state * st, int32_t n_tokens, uint32_t n_ctx_seq) {
    if (st && llama_kv_plugin_n_cells(st) < n_ctx_seq) {
        // the cache was sized for the budget: say which knob gives it room (callers may still recover)
        LLAMA_LOG_WARN("%s: KV plugin attached but the batch of %d tokens does not fit in the %u physical KV cells: "
                "raise --kv-cells (physical cells) or lower --kv-budget (cells kept per sequence) or the batch size\n",
                __func__, n_tokens, llama_kv_plugin_n_cells(st));
    }
}

// a member of llama_context, defined here so that llama-context.cpp only declares it
void llama_context::set_kv_plugin(std::unique_ptr<llama_kv_plugin_state> st) {
    if (!kv_plugin && !st) {
        return;
    }

    // the query stores of the old plugin may still be written by a pending graph
    synchronize();

    kv_plugin = std::move(st);
    cparams.kv_plugin = kv_plugin.get();

    // the graph changes (query capture on/off): reserve again and drop the previous graph
    sched_need_reserve = true;
}
