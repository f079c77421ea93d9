// Query capture: build_attn writes each evictable layer's queries into its query store with one set_rows
// per layer and one shared index input; the RoPE and Hadamard descriptors are recorded from the graph.

#include "llama-kv-plugin-impl.h"
#include "llama-kv-plugin-rope.h"

#include "llama-impl.h"
#include "llama-batch.h"
#include "llama-graph.h"

#include "ggml-backend.h"

#include <cinttypes>
#include <cstring>
#include <memory>

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
        auto & rows = st->q_rows_ubatch;
        rows.resize(n);
        llama_kv_plugin_q_rows(n, q_capacity, rows.data());

        // captured tokens take the next rows of the ring
        const int32_t ring = st->q_ring;
        int32_t captured = 0;
        int64_t * data = (int64_t *) q_idxs->data;
        for (int32_t i = 0; i < n; ++i) {
            if (rows[i] >= 0) {
                rows[i] = (st->q_cursor + rows[i]) % ring;
                captured++;
            }
            data[i] = rows[i] >= 0 ? rows[i] : ring; // last row = trash
        }
        st->q_cursor   = (st->q_cursor + captured) % ring;
        st->q_rows_set = true;
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
            if (L.rope_recorded && kvp_text_mrope_as_neox(L.rope_mode, op + 11, op[15], L.rope_n_dims, L.freq_factors)) {
                L.rope_mode = GGML_ROPE_TYPE_NEOX;  // exact for text tokens (llama-kv-plugin-rope.h)
            }
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
