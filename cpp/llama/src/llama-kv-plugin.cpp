#include "llama-kv-plugin-impl.h"

#include "llama-impl.h"
#include "llama-io.h"
#include "llama-batch.h"
#include "llama-context.h"
#include "llama-graph.h"
#include "llama-model.h"
#include "llama-kv-cache.h"
#include "llama-kv-cache-iswa.h"
#include "llama-memory-hybrid.h"
#include "llama-memory-hybrid-iswa.h"
#include "llama-memory-hybrid-idx.h"

#include "ggml-backend.h"

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstring>
#include <map>
#include <mutex>

//
// llama_kv_plugin_access: the cache internals the plugin edits (a friend of llama_kv_cache)
//

struct llama_kv_plugin_access {
    // another cache owns the cells (shared with a second context): the plugin must not edit them
    static bool has_shared_cells(const llama_kv_cache & kv) {
        return kv.other != nullptr;
    }

    static ggml_tensor * v_storage(const llama_kv_cache & kv, int32_t il) {
        return kv.layers[kv.map_layer_ids.at(il)].v;
    }

    static bool v_trans(const llama_kv_cache & kv) {
        return kv.v_trans;
    }

    // remove seq_id from the given cells of its stream, O(n); returns the number of cells affected
    static int32_t seq_rm_cells(llama_kv_cache & kv, llama_seq_id seq_id, const uint32_t * idxs, int32_t n) {
        if (kv.other || n <= 0) {
            return 0;
        }

        const uint32_t strm = kv.get_stream(seq_id);

        auto & cells = kv.v_cells[strm];
        auto & head  = kv.v_heads[strm];

        uint32_t new_head = cells.size();
        int32_t  n_rm     = 0;

        for (int32_t j = 0; j < n; ++j) {
            const uint32_t i = idxs[j];
            if (i >= cells.size() || cells.is_empty(i) || !cells.seq_has(i, seq_id)) {
                continue;
            }

            n_rm++;

            if (cells.seq_rm(i, seq_id)) {
                new_head = std::min(new_head, i);
            }
        }

        // as llama_kv_cache::seq_rm does: the next slot search starts at the first freed cell
        if (new_head != cells.size() && new_head < head) {
            head = new_head;
        }

        return n_rm;
    }

    // give n empty cells of seq_id's stream the positions pos[] for seq_id (all or nothing); returns n or -1
    static int32_t seq_place_cells(llama_kv_cache & kv, llama_seq_id seq_id, const llama_pos * pos, int32_t n, uint32_t * idxs) {
        if (kv.other || n < 0) {
            return -1;
        }

        auto & cells = kv.v_cells[kv.get_stream(seq_id)];

        int32_t found = 0;
        for (uint32_t i = 0; i < cells.size() && found < n; ++i) {
            if (cells.is_empty(i)) {
                idxs[found++] = i;
            }
        }
        if (found < n) {
            return -1;
        }

        for (int32_t j = 0; j < n; ++j) {
            cells.pos_set(idxs[j], pos[j]);
            cells.seq_add(idxs[j], seq_id);
        }

        return n;
    }
};


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

void llama_kv_plugin_q_rows(int32_t n_tokens, int32_t q_capacity, int32_t * rows) {
    if (n_tokens <= q_capacity) {
        for (int32_t i = 0; i < n_tokens; ++i) {
            rows[i] = i;
        }
        return;
    }
    // token i is captured iff floor(i*cap/n) changes: q_capacity tokens spread evenly over the ubatch
    int64_t prev = -1;
    for (int32_t i = 0; i < n_tokens; ++i) {
        const int64_t r = ((int64_t) i * q_capacity) / n_tokens;
        rows[i] = r != prev ? (int32_t) r : -1;
        prev = r;
    }
}

//
// graph side
//

class llm_graph_input_kv_plugin_q : public llm_graph_input_i {
public:
    llm_graph_input_kv_plugin_q(llama_kv_plugin_state * st) : st(st), generation(st->generation), q_capacity(st->plugin.q_capacity) {}
    ~llm_graph_input_kv_plugin_q() = default;

    void set_input(const llama_ubatch * ubatch) override {
        GGML_ASSERT(q_idxs && ggml_backend_buffer_is_host(q_idxs->buffer));
        GGML_ASSERT(q_idxs->ne[0] == (int64_t) ubatch->n_tokens);

        const int32_t n = ubatch->n_tokens;
        rows.resize(n);
        llama_kv_plugin_q_rows(n, q_capacity, rows.data());

        int64_t * data = (int64_t *) q_idxs->data;
        for (int32_t i = 0; i < n; ++i) {
            data[i] = rows[i] >= 0 ? rows[i] : q_capacity; // last row = trash
        }
    }

    bool can_reuse(const llm_graph_params & params) override {
        // the state pointer is compared before it is dereferenced
        return params.cparams.kv_plugin == st && st != nullptr && st->generation == generation &&
               q_idxs->ne[0] == (int64_t) params.ubatch.n_tokens;
    }

    ggml_tensor * q_idxs = nullptr; // I64 [n_tokens]

    llama_kv_plugin_state * st;
    const uint64_t generation;
    const int32_t  q_capacity;

    std::vector<int32_t> rows;
};

static const ggml_tensor * kvp_find_rope(const ggml_tensor * t) {
    for (int depth = 0; t && depth < 32; ++depth) {
        switch (t->op) {
            case GGML_OP_ROPE:
                return t;
            case GGML_OP_SCALE:
            case GGML_OP_RMS_NORM:
            case GGML_OP_NORM:
            case GGML_OP_MUL:
            case GGML_OP_VIEW:
            case GGML_OP_CONT:
            case GGML_OP_RESHAPE:
            case GGML_OP_PERMUTE:
            case GGML_OP_TRANSPOSE:
            case GGML_OP_CPY:
                t = t->src[0];
                break;
            default:
                return nullptr;
        }
    }
    return nullptr;
}

void llama_kv_plugin_capture(const llm_graph_context & g, ggml_tensor * q_cur, const ggml_tensor * k_rot, int il) {
    llama_kv_plugin_state * st = g.cparams.kv_plugin;
    if (!st) {
        return;
    }

    auto it = st->il_to_layer.find(il);
    if (it == st->il_to_layer.end()) {
        return;
    }

    auto & L = st->layers[it->second];

    const int64_t n_embd_q = L.q_store->ne[0];
    if (q_cur->ne[0]*q_cur->ne[1] != n_embd_q || ggml_nelements(q_cur) != n_embd_q*g.n_tokens) {
        if (!st->warned_hook) {
            st->warned_hook = true;
            LLAMA_LOG_WARN("%s: layer %d: query shape [%" PRId64 ", %" PRId64 ", %" PRId64 "] does not match the query store (%" PRId64 " x %" PRId64 " tokens); queries not captured\n",
                    __func__, il, q_cur->ne[0], q_cur->ne[1], q_cur->ne[2], n_embd_q, g.n_tokens);
        }
        return;
    }

    // descriptors (cheap; refreshed on every build, freq_factors copied once)
    L.hadamard_n = k_rot ? (int32_t) k_rot->ne[0] : 0;

    if (!L.rope_recorded) {
        const ggml_tensor * rope = kvp_find_rope(q_cur);
        if (rope) {
            const int32_t * op = (const int32_t *) rope->op_params;
            L.rope_n_dims     = op[1];
            L.rope_mode       = op[2];
            L.rope_n_ctx_orig = op[4];
            memcpy(L.rope_f, op + 5, sizeof(L.rope_f));

            const ggml_tensor * ff = rope->src[2];
            L.freq_factors.clear();
            if (ff && ff->type == GGML_TYPE_F32 && ff->buffer && ggml_is_contiguous(ff)) {
                L.freq_factors.resize(ggml_nelements(ff));
                ggml_backend_tensor_get(ff, L.freq_factors.data(), 0, ggml_nbytes(ff));
            }
            L.rope_recorded = !ff || !L.freq_factors.empty();
        } else {
            L.rope_n_dims = 0; // no RoPE: scored as captured
        }
    }

    // one index input per graph, shared by all layers
    llm_graph_input_kv_plugin_q * inp = nullptr;
    for (auto & in : g.res->inputs) {
        if ((inp = dynamic_cast<llm_graph_input_kv_plugin_q *>(in.get()))) {
            break;
        }
    }
    if (!inp) {
        auto p = std::make_unique<llm_graph_input_kv_plugin_q>(st);
        p->q_idxs = ggml_new_tensor_1d(g.ctx0, GGML_TYPE_I64, g.n_tokens);
        ggml_set_input(p->q_idxs);
        ggml_set_name(p->q_idxs, "kvp_q_idxs");
        inp = (llm_graph_input_kv_plugin_q *) g.res->add_input(std::move(p));
    }

    ggml_tensor * q = q_cur;
    if (q->type != GGML_TYPE_F32) {
        q = ggml_cast(g.ctx0, q, GGML_TYPE_F32);
    }
    if (!ggml_is_contiguous(q)) {
        q = ggml_cont(g.ctx0, q);
    }
    q = ggml_reshape_2d(g.ctx0, q, n_embd_q, g.n_tokens);

    ggml_tensor * cpy = ggml_set_rows(g.ctx0, L.q_store, q, inp->q_idxs);
    ggml_format_name(cpy, "kvp_q_store-%d", il);
    ggml_build_forward_expand(g.gf, cpy);
}

//
// decode hooks
//

uint32_t llama_kv_plugin_n_cells(const llama_kv_plugin_state * st) {
    return st && st->kv ? st->kv->get_size() : 0;
}

static void kvp_check(llama_kv_plugin_state * st, const char * hook, int32_t rc) {
    if (rc < 0 && !st->warned_hook) {
        st->warned_hook = true;
        LLAMA_LOG_WARN("%s: KV plugin hook %s returned %d (further errors are not logged)\n", __func__, hook, rc);
    }
}

int32_t llama_kv_plugin_before_batch(llama_kv_plugin_state * st, const llama_batch & batch) {
    if (!st || !st->plugin.before_batch) {
        return 0;
    }

    // tokens and requested outputs per sequence (no logits array: only the last token has one)
    std::map<llama_seq_id, std::pair<int32_t, int32_t>> per_seq;
    for (int32_t i = 0; i < batch.n_tokens; ++i) {
        const int32_t ns  = batch.n_seq_id ? batch.n_seq_id[i] : 1;
        const bool    out = batch.logits ? batch.logits[i] != 0 : i == batch.n_tokens - 1;
        for (int32_t s = 0; s < ns; ++s) {
            auto & c = per_seq[batch.seq_id ? batch.seq_id[i][s] : 0];
            c.first++;
            c.second += out;
        }
    }

    std::vector<llama_seq_id> seqs;
    std::vector<int32_t>      cnts;
    std::vector<int32_t>      outs;
    for (const auto & [s, c] : per_seq) {
        seqs.push_back(s);
        cnts.push_back(c.first);
        outs.push_back(c.second);
    }

    // each token's first sequence (the batch allocator has filled in positions and sequences)
    std::vector<llama_seq_id> first(batch.n_tokens);
    for (int32_t i = 0; i < batch.n_tokens; ++i) {
        first[i] = batch.seq_id ? batch.seq_id[i][0] : 0;
    }

    const int32_t rc = st->plugin.before_batch(st->plugin.ud, (int32_t) seqs.size(), seqs.data(), cnts.data(), outs.data(),
                                               batch.n_tokens, batch.pos, first.data(), batch.token);
    kvp_check(st, "before_batch", rc);
    return rc;
}

int32_t llama_kv_plugin_after_ubatch(llama_kv_plugin_state * st, const llama_ubatch & ubatch) {
    if (!st || !st->plugin.after_ubatch) {
        return 0;
    }

    const int32_t n = ubatch.n_tokens;

    st->q_epoch++; // the query stores hold this ubatch's rows now

    std::vector<int32_t>      rows(n);
    std::vector<llama_seq_id> seq(n);

    llama_kv_plugin_q_rows(n, st->plugin.q_capacity, rows.data());
    for (int32_t i = 0; i < n; ++i) {
        seq[i] = ubatch.seq_id[i][0];
    }

    // ubatch.pos: the first n_tokens entries are the sequential positions (also for M-RoPE)
    const int32_t rc = st->plugin.after_ubatch(st->plugin.ud, n, ubatch.pos, seq.data(), rows.data());
    kvp_check(st, "after_ubatch", rc);
    return rc;
}

int32_t llama_kv_plugin_after_decode(llama_kv_plugin_state * st) {
    if (!st || !st->plugin.after_decode) {
        return 0;
    }
    const int32_t rc = st->plugin.after_decode(st->plugin.ud);
    kvp_check(st, "after_decode", rc);
    return rc;
}

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
// sequence state
//

// "BKVP": the block before the memory's own sequence state
static constexpr uint32_t KVP_STATE_TAG = 0x50564b42u;

void llama_kv_plugin_state_write(llama_kv_plugin_state * st, llama_io_write_i & io, llama_seq_id seq) {
    std::vector<uint8_t> buf;
    if (st->plugin.state_get) {
        const int64_t n = st->plugin.state_get(st->plugin.ud, seq, nullptr, 0);
        if (n < 0) {
            throw std::runtime_error("KV plugin: cannot size the sequence state");
        }
        buf.resize((size_t) n);
        if (n > 0 && st->plugin.state_get(st->plugin.ud, seq, buf.data(), buf.size()) != n) {
            throw std::runtime_error("KV plugin: cannot save the sequence state");
        }
    }
    const uint32_t tag  = KVP_STATE_TAG;
    const uint64_t size = buf.size();
    io.write(&tag,  sizeof(tag));
    io.write(&size, sizeof(size));
    if (size > 0) {
        io.write(buf.data(), buf.size());
    }
}

void llama_kv_plugin_state_read(llama_kv_plugin_state * st, llama_io_read_i & io, llama_seq_id seq) {
    uint32_t tag = 0;
    io.read(&tag, sizeof(tag));
    if (tag != KVP_STATE_TAG) {
        // e.g. saved by a context without the plugin: its cells were never bounded by the budget
        throw std::runtime_error("sequence state has no KV-plugin block (saved without KV compression?)");
    }
    uint64_t size = 0;
    io.read(&size, sizeof(size));
    std::vector<uint8_t> buf(size);
    if (size > 0) {
        io.read(buf.data(), buf.size());
    }
    if (st->plugin.state_set) {
        if (st->plugin.state_set(st->plugin.ud, seq, buf.data(), buf.size()) < 0) {
            throw std::runtime_error("KV plugin: the saved sequence state was refused");
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
        G.store = ggml_new_tensor_2d(c, GGML_TYPE_F32, group_width[g], p->q_capacity + 1);
        ggml_format_name(G.store, "kvp_q_store_g%d", (int) g);
        for (auto & L : st->layers) {
            if (L.q_group == (int32_t) g) {
                const int64_t n_embd_q = (int64_t) hparams.n_embd_head_k(L.il)*hparams.n_head(L.il);
                L.q_store = ggml_view_2d(c, G.store, n_embd_q, p->q_capacity + 1, G.store->nb[1], L.q_offset*sizeof(float));
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
            st->layers.size(), protect_last ? " (hybrid: newest cell kept)" : "", p->q_capacity, total/1024.0/1024.0);

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

static bool kvp_seq_ok(llama_context * ctx, llama_seq_id seq) {
    const auto & cparams = ctx->get_cparams();
    const uint32_t n_seq = cparams.kv_unified ? LLAMA_MAX_SEQ : cparams.n_seq_max;
    return seq >= 0 && (uint32_t) seq < n_seq;
}

int32_t llama_kv_plugin_seq_cells(llama_context * ctx, llama_seq_id seq, llama_pos * pos, uint32_t * cells, int32_t cap, uint32_t * stream) {
    auto * st = ctx ? ctx->get_kv_plugin() : nullptr;
    if (!st || !kvp_seq_ok(ctx, seq) || cap < 0 || (cap > 0 && (!pos || !cells))) {
        return -1;
    }

    if (stream) {
        *stream = st->kv->get_stream(seq);
    }

    const auto & kc = st->kv->get_cells(seq);
    const uint32_t i0 = kc.used_min();
    const uint32_t i1 = kc.used_max_p1();

    if (cap == 0) {
        // count only: the per-token path, no allocation, no sort
        int32_t n = 0;
        for (uint32_t i = i0; i < i1; ++i) {
            n += !kc.is_empty(i) && kc.seq_has(i, seq);
        }
        return n;
    }

    auto & pc = st->list_buf; // reused between calls
    pc.clear();
    for (uint32_t i = i0; i < i1; ++i) {
        if (!kc.is_empty(i) && kc.seq_has(i, seq)) {
            pc.emplace_back(kc.pos_get(i), i);
        }
    }
    std::sort(pc.begin(), pc.end());

    const int32_t n = std::min<int32_t>(cap, (int32_t) pc.size());
    for (int32_t i = 0; i < n; ++i) {
        pos[i]   = pc[i].first;
        cells[i] = pc[i].second;
    }

    return (int32_t) pc.size();
}

int32_t llama_kv_plugin_seq_evict(llama_context * ctx, llama_seq_id seq, const uint32_t * cells, int32_t n) {
    auto * st = ctx ? ctx->get_kv_plugin() : nullptr;
    if (!st || !kvp_seq_ok(ctx, seq) || n < 0 || (n > 0 && !cells)) {
        return -1;
    }
    if (n == 0) {
        return 0;
    }

    if (st->protect_last) {
        // hybrid: the recurrent part rolls back to the newest token; never evict its cell
        const llama_pos pmax = st->kv->seq_pos_max(seq);
        const auto & kcells  = st->kv->get_cells(seq);

        std::vector<uint32_t> keep;
        keep.reserve(n);
        for (int32_t i = 0; i < n; ++i) {
            const uint32_t c = cells[i];
            if (c < kcells.size() && !kcells.is_empty(c) && kcells.pos_get(c) == pmax) {
                continue;
            }
            keep.push_back(c);
        }
        return llama_kv_plugin_access::seq_rm_cells(*st->kv, seq, keep.data(), (int32_t) keep.size());
    }

    return llama_kv_plugin_access::seq_rm_cells(*st->kv, seq, cells, n);
}

int32_t llama_kv_plugin_read_rows(llama_context * ctx, int32_t layer, int32_t what, uint32_t stream, const uint32_t * rows, int32_t n, float * out) {
    auto * st = ctx ? ctx->get_kv_plugin() : nullptr;
    if (!st || layer < 0 || layer >= (int32_t) st->layers.size() || n < 0 || (n > 0 && (!rows || !out))) {
        return -1;
    }

    const auto & L = st->layers[layer];

    if (what == 1) {
        // rows lo..hi of the layer's group, read once per ubatch for every layer of the group
        auto & G = st->q_groups[L.q_group];
        const int64_t ne0 = L.q_store->ne[0];
        int64_t lo = INT64_MAX, hi = -1;
        for (int32_t i = 0; i < n; ++i) {
            if ((int64_t) rows[i] >= L.q_store->ne[1]) {
                return -1;
            }
            lo = std::min(lo, (int64_t) rows[i]);
            hi = std::max(hi, (int64_t) rows[i]);
        }
        if (n == 0) {
            return 0;
        }
        if (G.epoch != st->q_epoch || lo < G.lo || hi > G.hi) {
            const size_t row_floats = (size_t) G.store->ne[0];
            G.mirror.resize((size_t) (hi - lo + 1)*row_floats);
            llama_kv_plugin_get(st, G.store, (size_t) lo*G.store->nb[1], G.mirror.size()*sizeof(float), G.mirror.data());
            G.lo = lo;
            G.hi = hi;
            G.epoch = st->q_epoch;
        }
        const size_t row_floats = (size_t) G.store->ne[0];
        for (int32_t i = 0; i < n; ++i) {
            const float * src = G.mirror.data() + (size_t) (rows[i] - G.lo)*row_floats + L.q_offset;
            memcpy(out + (size_t) i*ne0, src, ne0*sizeof(float));
        }
        return n;
    }

    if (what != 0) {
        return -1;
    }

    const ggml_tensor * k = st->kv->get_k_storage(L.il);
    const int64_t ne0 = k->ne[0]; // n_embd_k_gqa
    if ((int64_t) stream >= k->ne[2]) {
        return -1;
    }

    const size_t row_size = ggml_row_size(k->type, ne0);
    const auto * traits   = ggml_get_type_traits(k->type);
    if (k->type != GGML_TYPE_F32 && !traits->to_float) {
        return -1;
    }

    std::vector<uint8_t> tmp(row_size);
    for (int32_t i = 0; i < n; ++i) {
        if ((int64_t) rows[i] >= k->ne[1]) {
            return -1;
        }
        const size_t offs = (size_t) stream*k->nb[2] + (size_t) rows[i]*k->nb[1];
        float * dst = out + (size_t) i*ne0;
        if (k->type == GGML_TYPE_F32) {
            llama_kv_plugin_get(st, k, offs, row_size, dst);
        } else {
            llama_kv_plugin_get(st, k, offs, row_size, tmp.data());
            traits->to_float(tmp.data(), dst, ne0);
        }
    }

    return n;
}

void llama_kv_plugin_get(llama_kv_plugin_state * st, const ggml_tensor * t, size_t offs, size_t size, void * dst) {
    if (t->buffer && ggml_backend_buffer_is_host(t->buffer)) {
        memcpy(dst, (const char *) t->data + offs, size);
        return;
    }
    ggml_backend_tensor_get(t, dst, offs, size);
    if (st) {
        st->n_reads++;
        st->bytes_read += size;
    }
}

static void kvp_set(ggml_tensor * t, size_t offs, size_t size, const void * src) {
    if (t->buffer && ggml_backend_buffer_is_host(t->buffer)) {
        memcpy((char *) t->data + offs, src, size);
    } else {
        ggml_backend_tensor_set(t, src, offs, size);
    }
}

// K and V tensors of plugin layer `layer`, checked against stream and cells; nullptr on bad input
struct kvp_kv_view {
    ggml_tensor * k = nullptr;
    ggml_tensor * v = nullptr;
    int64_t n_embd_k = 0;
    int64_t n_embd_v = 0;
    bool    v_trans  = false;
    uint32_t kv_size = 0;
};

static bool kvp_kv_view_get(llama_context * ctx, int32_t layer, uint32_t stream, const uint32_t * cells, int32_t n, kvp_kv_view & out) {
    auto * st = ctx ? ctx->get_kv_plugin() : nullptr;
    if (!st || layer < 0 || layer >= (int32_t) st->layers.size() || n < 0 || (n > 0 && !cells)) {
        return false;
    }
    const auto & hparams = ctx->get_model().hparams;
    const int32_t il = st->layers[layer].il;

    out.k        = st->kv->get_k_storage(il);
    out.v        = llama_kv_plugin_access::v_storage(*st->kv, il);
    out.n_embd_k = hparams.n_embd_k_gqa(il);
    out.n_embd_v = hparams.n_embd_v_gqa(il);
    out.v_trans  = llama_kv_plugin_access::v_trans(*st->kv);
    out.kv_size  = st->kv->get_size();

    if (!out.k || !out.v || (int64_t) stream >= out.k->ne[2]) {
        return false;
    }
    for (int32_t i = 0; i < n; ++i) {
        if (cells[i] >= out.kv_size) {
            return false;
        }
    }
    return true;
}

int32_t llama_kv_plugin_read_kv(llama_context * ctx, int32_t layer, uint32_t stream, const uint32_t * cells, int32_t n, void * k_out, void * v_out) {
    kvp_kv_view w;
    if (!kvp_kv_view_get(ctx, layer, stream, cells, n, w)) {
        return -1;
    }

    llama_kv_plugin_state * st = ctx->get_kv_plugin();
    const auto kvp_get = [st](const ggml_tensor * t, size_t offs, size_t size, void * dst) {
        llama_kv_plugin_get(st, t, offs, size, dst);
    };

    const size_t k_row = ggml_row_size(w.k->type, w.n_embd_k);
    const size_t v_row = ggml_row_size(w.v->type, w.n_embd_v);
    const size_t v_el  = ggml_type_size(w.v->type);

    for (int32_t i = 0; i < n; ++i) {
        const size_t c = cells[i];
        if (k_out) {
            kvp_get(w.k, stream*w.k->nb[2] + c*w.k->nb[1], k_row, (char *) k_out + i*k_row);
        }
        if (v_out) {
            char * dst = (char *) v_out + i*v_row;
            if (!w.v_trans) {
                kvp_get(w.v, stream*w.v->nb[2] + c*w.v->nb[1], v_row, dst);
            } else {
                // transposed: value j of cell c at (c + j*kv_size) elements into the stream
                for (int64_t j = 0; j < w.n_embd_v; ++j) {
                    kvp_get(w.v, stream*w.v->nb[2] + (c + j*w.kv_size)*v_el, v_el, dst + j*v_el);
                }
            }
        }
    }

    return n;
}

int32_t llama_kv_plugin_write_kv(llama_context * ctx, int32_t layer, uint32_t stream, const uint32_t * cells, int32_t n, int32_t format, const void * k, const void * v) {
    kvp_kv_view w;
    if (!kvp_kv_view_get(ctx, layer, stream, cells, n, w) || (format != 0 && format != 1)) {
        return -1;
    }

    const size_t k_row = ggml_row_size(w.k->type, w.n_embd_k);
    const size_t v_row = ggml_row_size(w.v->type, w.n_embd_v);
    const size_t v_el  = ggml_type_size(w.v->type);

    // F32 input: convert each row to the cache's type first
    std::vector<uint8_t> k_tmp;
    std::vector<uint8_t> v_tmp;
    const auto convert = [](ggml_type type, const float * src, int64_t ne, std::vector<uint8_t> & dst) {
        dst.resize(ggml_row_size(type, ne));
        if (type == GGML_TYPE_F32) {
            memcpy(dst.data(), src, ne*sizeof(float));
            return true;
        }
        const auto * traits = ggml_get_type_traits(type);
        if (!traits->from_float_ref) {
            return false;
        }
        traits->from_float_ref(src, dst.data(), ne);
        return true;
    };

    for (int32_t i = 0; i < n; ++i) {
        const size_t c = cells[i];
        if (k) {
            const void * src = (const char *) k + i*(format == 0 ? k_row : w.n_embd_k*sizeof(float));
            if (format == 1) {
                if (!convert(w.k->type, (const float *) src, w.n_embd_k, k_tmp)) {
                    return -1;
                }
                src = k_tmp.data();
            }
            kvp_set(w.k, stream*w.k->nb[2] + c*w.k->nb[1], k_row, src);
        }
        if (v) {
            const void * src = (const char *) v + i*(format == 0 ? v_row : w.n_embd_v*sizeof(float));
            if (format == 1) {
                if (!convert(w.v->type, (const float *) src, w.n_embd_v, v_tmp)) {
                    return -1;
                }
                src = v_tmp.data();
            }
            if (!w.v_trans) {
                kvp_set(w.v, stream*w.v->nb[2] + c*w.v->nb[1], v_row, src);
            } else {
                for (int64_t j = 0; j < w.n_embd_v; ++j) {
                    kvp_set(w.v, stream*w.v->nb[2] + (c + j*w.kv_size)*v_el, v_el, (const char *) src + j*v_el);
                }
            }
        }
    }

    return n;
}

int32_t llama_kv_plugin_seq_place(llama_context * ctx, llama_seq_id seq, const llama_pos * pos, int32_t n, uint32_t * cells) {
    auto * st = ctx ? ctx->get_kv_plugin() : nullptr;
    if (!st || !kvp_seq_ok(ctx, seq) || n < 0 || (n > 0 && (!pos || !cells))) {
        return -1;
    }
    for (int32_t i = 0; i < n; ++i) {
        if (pos[i] < 0) {
            return -1;
        }
    }
    return n == 0 ? 0 : llama_kv_plugin_access::seq_place_cells(*st->kv, seq, pos, n, cells);
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
