// A sequence's cells: listing, eviction and placement (the cache internals edited through
// llama_kv_plugin_access), and reads and writes of their K, V and query rows.

#include "llama-kv-plugin-impl.h"

#include "llama-context.h"
#include "llama-model.h"
#include "llama-kv-cache.h"

#include "ggml-backend.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

//
// llama_kv_plugin_access: the cache internals the plugin edits (a friend of llama_kv_cache)
//

bool llama_kv_plugin_access::has_shared_cells(const llama_kv_cache & kv) {
    return kv.other != nullptr;
}

ggml_tensor * llama_kv_plugin_access::v_storage(const llama_kv_cache & kv, int32_t il) {
    return kv.layers[kv.map_layer_ids.at(il)].v;
}

bool llama_kv_plugin_access::v_trans(const llama_kv_cache & kv) {
    return kv.v_trans;
}

int32_t llama_kv_plugin_access::seq_rm_cells(llama_kv_cache & kv, llama_seq_id seq_id, const uint32_t * idxs, int32_t n) {
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

int32_t llama_kv_plugin_access::seq_place_cells(llama_kv_cache & kv, llama_seq_id seq_id, const llama_pos * pos, int32_t n, uint32_t * idxs) {
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

//
// cells of a sequence: listing, eviction, placement
//

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

//
// rows: reads of K and query rows, reads and writes of K/V rows by cell
//

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
