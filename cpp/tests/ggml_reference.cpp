// ggml_reference: computes RoPE and dequantisation with ggml itself (the build the project links)
// and prints them as JSON, so tests/ggml_crosscheck.rs can compare BeaconKV's Rust versions.
//
// Output: {"rope": [{mode, n_dims, head_dim, n_ctx_orig, freq_base, freq_scale, ext_factor,
//   attn_factor, beta_fast, beta_slow, freq_factors|null, pos, input, output}],
//   (M-RoPE and IMRoPE cases are computed by ggml_rope_multi at text positions [p, p, p, 0] and
//   printed as the NEOX parameters the plugin reads them as, llama-kv-plugin-rope.h; +inf
//   factors print as 1e39, which is +inf as an f32)
//   "dequant": [{type, n, bytes_hex, values}]}

#include "ggml-cpu.h"
#include "ggml.h"
#include "llama/src/llama-kv-plugin-rope.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace {

void print_floats(const float * v, int n) {
    printf("[");
    for (int i = 0; i < n; i++) {
        if (std::isinf(v[i])) {
            printf("%s%s1e39", i ? "," : "", v[i] < 0 ? "-" : "");
        } else {
            printf("%s%.9g", i ? "," : "", v[i]);
        }
    }
    printf("]");
}

struct rope_case {
    int mode, n_dims, head_dim, n_ctx_orig;
    float freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow;
    bool freq_factors;
    int sections[4];  // M-RoPE / IMRoPE only
};

void run_rope(const rope_case & rc, bool first, std::mt19937 & rng) {
    const int positions[] = {0, 1, 7, 100, 4095, 20000};
    const int n_pos = 6;
    ggml_init_params ip = {64 * 1024 * 1024, nullptr, false};
    ggml_context * ctx = ggml_init(ip);
    ggml_tensor * x = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, rc.head_dim, 1, n_pos);
    const bool multi = rc.mode == GGML_ROPE_TYPE_MROPE || rc.mode == GGML_ROPE_TYPE_IMROPE;
    ggml_tensor * pos = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, multi ? 4 * n_pos : n_pos);
    ggml_tensor * ff = rc.freq_factors ? ggml_new_tensor_1d(ctx, GGML_TYPE_F32, rc.n_dims / 2) : nullptr;
    std::normal_distribution<float> nd(0.0f, 1.0f);
    float * xd = (float *) x->data;
    for (int i = 0; i < rc.head_dim * n_pos; i++) {
        xd[i] = nd(rng);
    }
    for (int i = 0; i < n_pos; i++) {
        ((int32_t *) pos->data)[i] = positions[i];
        if (multi) {  // a text token: [p, p, p, 0]
            ((int32_t *) pos->data)[i + n_pos] = positions[i];
            ((int32_t *) pos->data)[i + 2 * n_pos] = positions[i];
            ((int32_t *) pos->data)[i + 3 * n_pos] = 0;
        }
    }
    if (ff) {
        for (int i = 0; i < rc.n_dims / 2; i++) {
            ((float *) ff->data)[i] = 1.0f + 0.37f * (i % 5);
        }
    }
    int sections[4] = {rc.sections[0], rc.sections[1], rc.sections[2], rc.sections[3]};
    ggml_tensor * y = multi ? ggml_rope_multi(ctx, x, pos, ff, rc.n_dims, sections, rc.mode, rc.n_ctx_orig, rc.freq_base,
                                              rc.freq_scale, rc.ext_factor, rc.attn_factor, rc.beta_fast, rc.beta_slow)
                            : ggml_rope_ext(ctx, x, pos, ff, rc.n_dims, rc.mode, rc.n_ctx_orig, rc.freq_base, rc.freq_scale,
                                            rc.ext_factor, rc.attn_factor, rc.beta_fast, rc.beta_slow);
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, y);
    ggml_graph_compute_with_ctx(ctx, gf, 1);
    // what the plugin reads the layer as
    int mode = rc.mode;
    std::vector<float> factors;
    if (ff) {
        factors.assign((float *) ff->data, (float *) ff->data + rc.n_dims / 2);
    }
    if (multi) {
        if (!kvp_text_mrope_as_neox(rc.mode, sections, 0, rc.n_dims, factors)) {
            fprintf(stderr, "mode %d not read as NEOX\n", rc.mode);
            exit(1);
        }
        mode = GGML_ROPE_TYPE_NEOX;
    }
    for (int p = 0; p < n_pos; p++) {
        printf("%s{\"mode\":%d,\"n_dims\":%d,\"head_dim\":%d,\"n_ctx_orig\":%d,\"freq_base\":%.9g,"
               "\"freq_scale\":%.9g,\"ext_factor\":%.9g,\"attn_factor\":%.9g,\"beta_fast\":%.9g,\"beta_slow\":%.9g,"
               "\"freq_factors\":",
               first && p == 0 ? "" : ",", mode, rc.n_dims, rc.head_dim, rc.n_ctx_orig, rc.freq_base,
               rc.freq_scale, rc.ext_factor, rc.attn_factor, rc.beta_fast, rc.beta_slow);
        if (!factors.empty()) {
            print_floats(factors.data(), rc.n_dims / 2);
        } else {
            printf("null");
        }
        printf(",\"pos\":%d,\"input\":", positions[p]);
        print_floats(xd + p * rc.head_dim, rc.head_dim);
        printf(",\"output\":");
        print_floats((float *) y->data + p * rc.head_dim, rc.head_dim);
        printf("}\n");
    }
    ggml_free(ctx);
}

void run_dequant(ggml_type type, bool first, std::mt19937 & rng) {
    const int n = 256;
    std::vector<float> src(n);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    for (float & v : src) {
        v = nd(rng);
    }
    std::vector<uint8_t> q(ggml_row_size(type, n));
    ggml_quantize_chunk(type, src.data(), q.data(), 0, 1, n, nullptr);
    std::vector<float> out(n);
    ggml_get_type_traits(type)->to_float(q.data(), out.data(), n);
    printf("%s{\"type\":%d,\"name\":\"%s\",\"n\":%d,\"bytes_hex\":\"", first ? "" : ",", (int) type,
           ggml_type_name(type), n);
    for (uint8_t b : q) {
        printf("%02x", b);
    }
    printf("\",\"values\":");
    print_floats(out.data(), n);
    printf("}\n");
}

}  // namespace

int main() {
    std::mt19937 rng(7);
    ggml_cpu_init();
    const rope_case cases[] = {
        {0, 64, 64, 0, 10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f, false},     // NORM, llama
        {2, 64, 64, 0, 1000000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f, false},   // NEOX, qwen2
        {2, 32, 64, 0, 10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f, false},     // partial rotary
        {0, 64, 64, 4096, 10000.0f, 0.25f, 1.0f, 1.0f, 32.0f, 1.0f, false}, // YaRN
        {2, 128, 128, 8192, 500000.0f, 0.125f, 1.0f, 1.0f, 32.0f, 1.0f, false},
        {0, 64, 64, 0, 500000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f, true},     // llama3 freq_factors
        {2, 256, 256, 0, 1000000.0f, 0.125f, 0.0f, 1.0f, 32.0f, 1.0f, false}, // gemma3 global, linear
        // Qwen3-VL / Qwen3.5 IMRoPE (sections 24/20/20 of 64 pairs, partial rotary), Qwen2-VL M-RoPE,
        // with the fourth section and pairs past the sections, YaRN, freq_factors
        {GGML_ROPE_TYPE_IMROPE, 128, 128, 0, 5000000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f, false, {24, 20, 20, 0}},
        {GGML_ROPE_TYPE_IMROPE, 64, 256, 0, 10000000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f, false, {11, 11, 10, 0}},
        {GGML_ROPE_TYPE_MROPE, 128, 128, 0, 1000000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f, false, {16, 24, 24, 0}},
        {GGML_ROPE_TYPE_MROPE, 64, 64, 0, 10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f, true, {8, 8, 8, 4}},
        {GGML_ROPE_TYPE_IMROPE, 64, 64, 4096, 10000.0f, 0.25f, 1.0f, 1.0f, 32.0f, 1.0f, true, {6, 6, 6, 2}},
        {GGML_ROPE_TYPE_IMROPE, 64, 64, 0, 10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f, false, {4, 4, 4, 0}},
    };
    printf("{\"rope\":[\n");
    bool first = true;
    for (const rope_case & rc : cases) {
        run_rope(rc, first, rng);
        first = false;
    }
    printf("],\"dequant\":[\n");
    const ggml_type types[] = {GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,
                               GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_IQ4_NL};
    first = true;
    for (ggml_type t : types) {
        run_dequant(t, first, rng);
        first = false;
    }
    printf("]}\n");
    return 0;
}
