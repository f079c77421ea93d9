// Scoring on K's own backend: the attention scores of a compression pass as one ggml graph over the
// cache's K tensors, so that K never leaves the backend that holds it (CPU, CUDA, Metal, Vulkan, RPC) and
// only one score per (KV head, cell) comes back to the host.
//
// Per layer: get_rows gathers (and dequantises) the K rows of the listed cells, one mul_mat with the
// plugin's prepared queries (rotated, Hadamard-rotated like K, scaled) gives every logit, and a max pool
// over the queries of each GQA group folds them; mode 1 folds each query's attention probabilities over the
// cells (soft_max) and returns the log of their maximum. Every node is pinned to the backend of the layer's K
// buffer; the inputs (cell ids, queries, the padding mask's row) are set once on the host and the scheduler moves
// them.

#include "llama-kv-plugin-impl.h"

#include "llama-context.h"
#include "llama-impl.h"
#include "llama-kv-cache.h"
#include "llama-model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

struct llama_kv_plugin_state::scorer {
    std::vector<ggml_backend_ptr> backends;      // one per distinct device of the layers' K buffers, then the CPU
    std::vector<ggml_backend_t>   layer_backend; // per plugin layer
    ggml_backend_sched_ptr        sched;
    std::vector<uint8_t>          meta;          // the graph context's tensor and graph memory
    size_t                        graph_size = 0;
    bool                          failed = false;
};

static void kvp_scorer_free(llama_kv_plugin_state::scorer * s) {
    delete s;
}

static void kvp_set_threads(ggml_backend_t backend, int n_threads) {
    ggml_backend_dev_t dev = ggml_backend_get_device(backend);
    ggml_backend_reg_t reg = dev ? ggml_backend_dev_backend_reg(dev) : nullptr;
    if (!reg) {
        return;
    }
    auto fn = (ggml_backend_set_n_threads_t) ggml_backend_reg_get_proc_address(reg, "ggml_backend_set_n_threads");
    if (fn) {
        fn(backend, n_threads);
    }
}

// the backends and the scheduler, once per attach; nullptr (logged once) when a backend cannot be created
static llama_kv_plugin_state::scorer * kvp_scorer(llama_context * ctx, llama_kv_plugin_state * st) {
    if (st->score_state) {
        return st->score_state->failed ? nullptr : st->score_state.get();
    }
    st->score_state = { new llama_kv_plugin_state::scorer(), kvp_scorer_free };
    auto * s = st->score_state.get();

    const int n_threads = (int) llama_n_threads(ctx);
    std::vector<ggml_backend_dev_t> devs;
    for (const auto & L : st->layers) {
        const ggml_tensor * k = st->kv->get_k_storage(L.il);
        ggml_backend_dev_t dev = ggml_backend_buft_get_device(ggml_backend_buffer_get_type(k->buffer));
        if (!dev) {
            dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
        }
        size_t i = 0;
        while (i < devs.size() && devs[i] != dev) {
            ++i;
        }
        if (i == devs.size()) {
            ggml_backend_t b = ggml_backend_dev_init(dev, nullptr);
            if (!b) {
                LLAMA_LOG_WARN("%s: cannot create a backend for %s: K is read to the host instead\n", __func__, ggml_backend_dev_name(dev));
                s->failed = true;
                return nullptr;
            }
            kvp_set_threads(b, n_threads);
            devs.push_back(dev);
            s->backends.emplace_back(b);
        }
        s->layer_backend.push_back(s->backends[i].get());
    }
    // the scheduler's last backend must be the CPU (it holds the inputs)
    ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (devs.empty() || devs.back() != cpu) {
        ggml_backend_t b = cpu ? ggml_backend_dev_init(cpu, nullptr) : nullptr;
        if (!b) {
            LLAMA_LOG_WARN("%s: cannot create a CPU backend: K is read to the host instead\n", __func__);
            s->failed = true;
            return nullptr;
        }
        kvp_set_threads(b, n_threads);
        // the CPU must come last: layers split between the CPU and another device are not scored here
        for (size_t i = 0; i + 1 < devs.size(); ++i) {
            if (devs[i] == cpu) {
                s->failed = true;
                LLAMA_LOG_WARN("%s: K buffers on the CPU and on another device: K is read to the host instead\n", __func__);
                return nullptr;
            }
        }
        s->backends.emplace_back(b);
    }

    std::vector<ggml_backend_t> raw;
    for (auto & b : s->backends) {
        raw.push_back(b.get());
    }
    s->graph_size = 24*st->layers.size() + 64; // at most ~20 tensors per layer
    s->sched.reset(ggml_backend_sched_new(raw.data(), nullptr, (int) raw.size(), s->graph_size, false, false));
    s->meta.resize(ggml_tensor_overhead()*s->graph_size + ggml_graph_overhead_custom(s->graph_size, false));
    if (!s->sched) {
        s->failed = true;
        return nullptr;
    }
    return s;
}

int32_t llama_kv_plugin_score_keys(llama_context * ctx, uint32_t stream, const uint32_t * cells, int32_t n_cells,
                                   int32_t n_layers, const int32_t * layers, const int32_t * n_query,
                                   const float * queries, int32_t mode, float * out) {
    auto * st = ctx ? ctx->get_kv_plugin() : nullptr;
    if (!st || n_cells < 0 || n_layers < 0 || (mode != 0 && mode != 1) ||
        (n_cells > 0 && !cells) || (n_layers > 0 && (!layers || !n_query || !queries || !out))) {
        return -1;
    }
    if (n_cells == 0 || n_layers == 0) {
        return 0;
    }
    const auto & hparams = ctx->get_model().hparams;
    for (int32_t i = 0; i < n_layers; ++i) {
        if (layers[i] < 0 || layers[i] >= (int32_t) st->layers.size() || n_query[i] < 1) {
            return -1;
        }
        const ggml_tensor * k = st->kv->get_k_storage(st->layers[layers[i]].il);
        if ((int64_t) stream >= k->ne[2]) {
            return -1;
        }
    }
    for (int32_t c = 0; c < n_cells; ++c) {
        if (cells[c] >= st->kv->get_size()) {
            return -1;
        }
    }

    auto * s = kvp_scorer(ctx, st);
    if (!s) {
        return -1;
    }

    ggml_init_params params = {
        /*.mem_size   =*/ s->meta.size(),
        /*.mem_buffer =*/ s->meta.data(),
        /*.no_alloc   =*/ true,
    };
    // (a reset also clears the backends the nodes are pinned to below)
    ggml_backend_sched_reset(s->sched.get());
    ggml_context_ptr gctx { ggml_init(params) };
    ggml_context * g = gctx.get();
    ggml_cgraph * gf = ggml_new_graph_custom(g, s->graph_size, false);

    const int64_t n = n_cells;
    // the cells are padded to a multiple of 16 with copies of the last one: ggml's CPU mul_mat takes its
    // tiled sgemm only for a row count divisible by 4 (its row-by-row dot products are about twice as slow),
    // and every backend multiplies padded rows as cheaply. The copies change no maximum; the soft_max mask
    // keeps them out of the probabilities, and only the first n cells are read back.
    const int64_t np = GGML_PAD(n, 16);
    ggml_tensor * idx = ggml_new_tensor_1d(g, GGML_TYPE_I32, np);
    ggml_set_input(idx);
    // [np, max_query]: 0 on the listed cells, -inf on the copies; one row goes to the device and is
    // repeated there (soft_max wants a mask row per query row)
    ggml_tensor * pad_row  = nullptr;
    ggml_tensor * pad_mask = nullptr;
    if (mode == 1) {
        const int32_t max_query = *std::max_element(n_query, n_query + n_layers);
        pad_row = ggml_new_tensor_1d(g, GGML_TYPE_F32, np);
        ggml_set_input(pad_row);
        pad_mask = ggml_repeat_4d(g, pad_row, np, max_query, 1, 1);
        ggml_backend_t be = s->layer_backend[layers[0]];
        if (ggml_backend_supports_op(be, pad_mask)) {
            ggml_backend_sched_set_tensor_backend(s->sched.get(), pad_mask, be);
        }
    }

    std::vector<ggml_tensor *> res(n_layers);
    std::vector<size_t> q_off(n_layers + 1, 0), out_off(n_layers + 1, 0);
    for (int32_t i = 0; i < n_layers; ++i) {
        const int32_t il = st->layers[layers[i]].il;
        q_off[i + 1]   = q_off[i] + (size_t) (hparams.n_embd_head_k(il)*n_query[i]*hparams.n_head_kv(il));
        out_off[i + 1] = out_off[i] + (size_t) (n*hparams.n_head_kv(il));
    }
    // when one backend scores every layer, the layers' rows go into one output tensor: one read per pass
    bool one_backend = true;
    for (int32_t i = 1; i < n_layers; ++i) {
        one_backend = one_backend && s->layer_backend[layers[i]] == s->layer_backend[layers[0]];
    }
    // every layer's queries in one input, set once
    ggml_tensor * q_all = ggml_new_tensor_1d(g, GGML_TYPE_F32, (int64_t) q_off[n_layers]);
    ggml_set_input(q_all);
    ggml_tensor * all = nullptr;
    if (one_backend) {
        all = ggml_new_tensor_1d(g, GGML_TYPE_F32, (int64_t) out_off[n_layers]);
        ggml_set_output(all);
        ggml_backend_sched_set_tensor_backend(s->sched.get(), all, s->layer_backend[layers[0]]);
    }
    for (int32_t i = 0; i < n_layers; ++i) {
        const auto &  L      = st->layers[layers[i]];
        ggml_backend_t be    = s->layer_backend[layers[i]];
        const int64_t d      = hparams.n_embd_head_k(L.il);
        const int64_t n_kv   = hparams.n_head_kv(L.il);
        const int64_t per_g  = n_query[i];
        ggml_tensor * k      = st->kv->get_k_storage(L.il);

        std::vector<ggml_tensor *> nodes;
        const auto pin = [&](ggml_tensor * t) { nodes.push_back(t); return t; };

        ggml_tensor * kv   = ggml_view_2d(g, k, k->ne[0], k->ne[1], k->nb[1], (size_t) stream*k->nb[2]);
        ggml_tensor * rows = pin(ggml_get_rows(g, kv, idx));                              // [d*n_kv, np] F32
        ggml_tensor * kc   = pin(ggml_cont(g, ggml_permute(g, ggml_reshape_3d(g, rows, d, n_kv, np), 0, 2, 1, 3))); // [d, np, n_kv]
        ggml_tensor * q    = ggml_view_3d(g, q_all, d, per_g, n_kv, d*sizeof(float), d*per_g*sizeof(float),
                                          q_off[i]*sizeof(float));                          // [d, per_g, n_kv]
        ggml_tensor * sc   = pin(ggml_mul_mat(g, kc, q));                                  // [np, per_g, n_kv]
        ggml_tensor * r = nullptr;                                                        // [np, 1, n_kv]
        if (mode == 1) {
            // log attention probabilities, max over the group's queries: log(max_q p) = max_q (logit - lse),
            // with soft_max's vectorised exponentials and one log per cell and KV head. A cell whose
            // probability underflows F32 under every query of its group scores -inf: it ranks
            // below every cell with a representable probability, and ties only with such cells.
            ggml_tensor * mask = ggml_view_2d(g, pad_mask, np, per_g, pad_mask->nb[1], 0);
            ggml_tensor * p    = pin(ggml_soft_max_ext(g, sc, mask, 1.0f, 0.0f));
            ggml_tensor * pmax = pin(ggml_pool_2d(g, p, GGML_OP_POOL_MAX, 1, (int) per_g, 1, (int) per_g, 0, 0));
            r = pin(ggml_log(g, pmax));
        } else {
            r = pin(ggml_pool_2d(g, sc, GGML_OP_POOL_MAX, 1, (int) per_g, 1, (int) per_g, 0, 0));
        }
        r = ggml_view_3d(g, r, n, 1, n_kv, r->nb[1], r->nb[2], 0);                         // the listed cells
        if (all) {
            ggml_tensor * dst = ggml_view_3d(g, all, n, 1, n_kv, n*sizeof(float), n*sizeof(float), out_off[i]*sizeof(float));
            r = pin(ggml_cpy(g, r, dst));
        } else {
            r = pin(ggml_cont(g, r));
            ggml_set_output(r);
        }
        ggml_build_forward_expand(gf, r);
        for (ggml_tensor * t : nodes) {
            // an op the layer's backend cannot run goes where the scheduler puts it
            if (ggml_backend_supports_op(be, t)) {
                ggml_backend_sched_set_tensor_backend(s->sched.get(), t, be);
            }
        }
        res[i] = r;
    }

    const int64_t t0 = ggml_time_us();
    if (!ggml_backend_sched_alloc_graph(s->sched.get(), gf)) {
        LLAMA_LOG_WARN("%s: cannot allocate the scoring graph (%d layers, %d cells)\n", __func__, n_layers, n_cells);
        return -1;
    }
    static_assert(sizeof(uint32_t) == sizeof(int32_t), "cell ids as I32");
    {
        std::vector<int32_t> padded(cells, cells + n);
        padded.resize((size_t) np, (int32_t) cells[n - 1]);
        ggml_backend_tensor_set(idx, padded.data(), 0, padded.size()*sizeof(int32_t));
    }
    if (pad_row) {
        std::vector<float> row((size_t) np, 0.0f);
        std::fill(row.begin() + n, row.end(), -INFINITY);
        ggml_backend_tensor_set(pad_row, row.data(), 0, row.size()*sizeof(float));
    }
    ggml_backend_tensor_set(q_all, queries, 0, ggml_nbytes(q_all));
    const int64_t t1 = ggml_time_us();
    if (ggml_backend_sched_graph_compute(s->sched.get(), gf) != GGML_STATUS_SUCCESS) {
        return -1;
    }
    ggml_backend_sched_synchronize(s->sched.get());
    const int64_t t2 = ggml_time_us();
    if (all) {
        llama_kv_plugin_get(st, all, 0, ggml_nbytes(all), out);
    } else {
        for (int32_t i = 0; i < n_layers; ++i) {
            llama_kv_plugin_get(st, res[i], 0, ggml_nbytes(res[i]), out + out_off[i]);
        }
    }
    LLAMA_LOG_DEBUG("%s: %d layers, %d cells: allocation and inputs %.3f ms, compute %.3f ms, read %.3f ms (%d splits)\n",
            __func__, n_layers, n_cells, (t1 - t0)/1e3, (t2 - t1)/1e3, (ggml_time_us() - t2)/1e3,
            ggml_backend_sched_get_n_splits(s->sched.get()));
    // the next graph may reuse this one's memory
    ggml_backend_sched_reset(s->sched.get());
    return n_layers;
}

void llama_kv_plugin_transfers(llama_context * ctx, uint64_t * n_reads, uint64_t * bytes) {
    auto * st = ctx ? ctx->get_kv_plugin() : nullptr;
    if (n_reads) {
        *n_reads = st ? st->n_reads : 0;
    }
    if (bytes) {
        *bytes = st ? st->bytes_read : 0;
    }
}
