// test_e2e score_keys: the scores of llama_kv_plugin_score_keys (one ggml graph on K's backend) against a
// reference computed here in double from the K rows llama_kv_plugin_read_rows returns.
//
// Per KV head and cell: mode 0, the largest q.k over the group's queries; mode 1, the largest log attention
// probability (q.k less the query's log-sum-exp over the listed cells). Cell counts on and off the graph's
// padding (a multiple of 16), one and several queries per group, a layer subset, and queries large enough
// that some probabilities underflow F32.
//
// Tolerance, with M the largest sum of |q_i k_i| of a KV head's products (what F32 rounding scales with):
// mode 0 within 1e-6 + 1e-5 M; mode 1 within 1e-4 + 4e-5 M where the reference log probability is above -80,
// and at most -80 (or -inf) below -87, where F32 cannot represent the probability.

#include "beaconkv.h"
#include "kv-compress.h"
#include "llama-kv-plugin.h"
#include "llama.h"
#include "tool-common.h"

#include "driver.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

using namespace bkv_test;

namespace {

struct layer_shape {
    int32_t head_dim;
    int32_t n_head_kv;
};

// reference scores of one layer, [n_head_kv][n_cells]; magnitude[h]: M of KV head h
std::vector<double> reference_scores(const std::vector<float> & k_rows, const layer_shape & s, int n_cells,
                                     const float * queries, int n_query, int mode, std::vector<double> & magnitude) {
    const int d = s.head_dim;
    std::vector<double> out((size_t) s.n_head_kv * n_cells, -INFINITY);
    magnitude.assign((size_t) s.n_head_kv, 0.0);
    std::vector<double> logits((size_t) n_cells);
    for (int h = 0; h < s.n_head_kv; ++h) {
        for (int q = 0; q < n_query; ++q) {
            const float * qv = queries + ((size_t) h * n_query + q) * d;
            double lse = -INFINITY;
            for (int c = 0; c < n_cells; ++c) {
                const float * kv = k_rows.data() + (size_t) c * s.n_head_kv * d + (size_t) h * d;
                double dot = 0.0, mag = 0.0;
                for (int i = 0; i < d; ++i) {
                    dot += (double) qv[i] * kv[i];
                    mag += std::fabs((double) qv[i] * kv[i]);
                }
                magnitude[h] = std::max(magnitude[h], mag);
                logits[c] = dot;
                lse = std::max(lse, dot);
            }
            if (mode == 1) {
                double sum = 0.0;
                for (int c = 0; c < n_cells; ++c) {
                    sum += std::exp(logits[c] - lse);
                }
                lse += std::log(sum);
            }
            for (int c = 0; c < n_cells; ++c) {
                const double v = mode == 1 ? logits[c] - lse : logits[c];
                out[(size_t) h * n_cells + c] = std::max(out[(size_t) h * n_cells + c], v);
            }
        }
    }
    return out;
}

}  // namespace

bool test_score_keys(env & e) {
    // a budget above the prompt: no pass runs, the cache holds every cell
    ctx_ptr c(bkv_tools::make_context(e.model, e.params, "policy=beacon,budget=4096,read=backend", 4096));
    CHECK(c, "context creation failed");
    llama_context * ctx = c.get();
    auto prompt = prompt_tokens(e, 100);
    for (size_t i = 0; i < prompt.size(); i += llama_n_batch(ctx)) {
        const int n = (int) std::min<size_t>(llama_n_batch(ctx), prompt.size() - i);
        CHECK(llama_decode(ctx, llama_batch_get_one(prompt.data() + i, n)) == 0, "decode");
    }
    const cell_list all = list_cells(ctx, 0);
    CHECK(all.cell.size() == prompt.size(), "%zu cells for %zu tokens", all.cell.size(), prompt.size());

    const int n_layers = llama_kv_plugin_n_layers(ctx);
    CHECK(n_layers > 0, "no plugin layers");
    std::vector<layer_shape> shapes;
    for (int i = 0; i < n_layers; ++i) {
        llama_kv_plugin_layer L{};
        CHECK(llama_kv_plugin_get_layer(ctx, i, &L) == 0, "layer %d", i);
        shapes.push_back({ L.head_dim, L.n_head_kv });
    }

    std::mt19937 rng(7);
    int n_checked = 0, n_underflow = 0;
    for (int n_cells : { 1, 7, 16, 37, 100 }) {
        // every other cell first, then the rest: a listing that is not the cache's order
        std::vector<uint32_t> cells;
        for (int pass = 0; pass < 2; ++pass) {
            for (size_t i = pass; i < all.cell.size() && (int) cells.size() < n_cells; i += 2) {
                cells.push_back(all.cell[i]);
            }
        }
        for (int n_query : { 1, 5 }) {
            for (float scale : { 0.5f, 20.0f }) {
                // every layer, then the odd layers alone
                for (int subset = 0; subset < 2; ++subset) {
                    std::vector<int32_t> layers, nq;
                    for (int i = subset; i < n_layers; i += 1 + subset) {
                        layers.push_back(i);
                        nq.push_back(n_query);
                    }
                    std::vector<float> queries;
                    std::normal_distribution<float> normal(0.0f, scale);
                    for (int32_t il : layers) {
                        const size_t nf = (size_t) shapes[il].n_head_kv * n_query * shapes[il].head_dim;
                        for (size_t i = 0; i < nf; ++i) {
                            queries.push_back(normal(rng));
                        }
                    }
                    for (int mode : { 0, 1 }) {
                        size_t n_out = 0;
                        for (int32_t il : layers) {
                            n_out += (size_t) shapes[il].n_head_kv * n_cells;
                        }
                        std::vector<float> out(n_out, NAN);
                        const int32_t rc = llama_kv_plugin_score_keys(ctx, 0, cells.data(), n_cells, (int32_t) layers.size(),
                                                                      layers.data(), nq.data(), queries.data(), mode, out.data());
                        CHECK(rc == (int32_t) layers.size(), "score_keys returned %d", rc);
                        size_t q_at = 0, o_at = 0;
                        for (int32_t il : layers) {
                            const layer_shape & s = shapes[il];
                            std::vector<float> k_rows((size_t) n_cells * s.n_head_kv * s.head_dim);
                            CHECK(llama_kv_plugin_read_rows(ctx, il, 0, 0, cells.data(), n_cells, k_rows.data()) == n_cells,
                                  "read_rows layer %d", il);
                            std::vector<double> mag;
                            const auto ref = reference_scores(k_rows, s, n_cells, queries.data() + q_at, n_query, mode, mag);
                            for (size_t j = 0; j < ref.size(); ++j) {
                                const double got = out[o_at + j], want = ref[j], m = mag[j / n_cells];
                                if (mode == 0) {
                                    CHECK(std::fabs(got - want) <= 1e-6 + 1e-5 * m,
                                          "mode 0, %d cells, %d queries, layer %d, row %zu: %g vs %g", n_cells, n_query, il, j, got, want);
                                } else if (want > -80.0) {
                                    CHECK(std::fabs(got - want) <= 1e-4 + 4e-5 * m,
                                          "mode 1, %d cells, %d queries, layer %d, row %zu: %g vs %g", n_cells, n_query, il, j, got, want);
                                } else if (want < -87.0) {
                                    CHECK(got <= -80.0, "mode 1, %d cells, layer %d, row %zu: %g for an underflowing %g",
                                          n_cells, il, j, got, want);
                                    n_underflow++;
                                }
                                n_checked++;
                            }
                            q_at += (size_t) s.n_head_kv * n_query * s.head_dim;
                            o_at += ref.size();
                        }
                    }
                }
            }
        }
    }
    CHECK(n_underflow > 0, "no probability underflowed: the large queries did not reach the F32 limit");
    // a bad argument changes nothing and says so
    const int32_t l0 = 0, q1 = 1;
    std::vector<float> q(shapes[0].n_head_kv * shapes[0].head_dim, 1.0f), o(shapes[0].n_head_kv);
    const uint32_t bad_cell = llama_kv_plugin_n_cells(ctx);
    CHECK(llama_kv_plugin_score_keys(ctx, 0, &bad_cell, 1, 1, &l0, &q1, q.data(), 0, o.data()) < 0, "a cell past the cache");
    CHECK(llama_kv_plugin_score_keys(ctx, 0, all.cell.data(), 1, 1, &l0, &q1, q.data(), 2, o.data()) < 0, "mode 2");
    printf("score_keys: %d scores within tolerance of the host reference (%d underflowing)\n", n_checked, n_underflow);
    return true;
}
