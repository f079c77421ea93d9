#pragma once

// A multi-section RoPE (M-RoPE, IMRoPE: Qwen2-VL, Qwen3-VL, Qwen3.5) read as NEOX for text tokens.
//
// llama.cpp gives a text token the positions [p, p, p, 0] (llama_batch_allocr). ggml's
// ggml_mrope_cache_init then turns every pair by the running product p * theta_scale^i of the
// section it falls in (t, h and w all start at p, so they are the same product NEOX computes) or
// by 0 (the fourth section, e, starts at 0), with NEOX's pairing and the same YaRN angle and
// magnitude. A pair that does not turn is NEOX with a frequency factor of +inf (theta / inf = 0,
// then rope_yarn as ggml applies it). So for text tokens such a layer is exactly NEOX with those
// factors, and the plugin's host rotation un-rotates and re-rotates its queries bit for bit.
// Tokens of other positions (image embeddings) are not text: their queries are un-rotated as if
// they were, which only moves the beacons sampled from them.

#include "ggml.h"

#include <cmath>
#include <cstdint>
#include <vector>

// When `mode` is M-RoPE or IMRoPE with sections and no offset, rewrites `freq_factors` (empty:
// none; else at least n_dims/2 values) as the NEOX factors described above and returns true.
static inline bool kvp_text_mrope_as_neox(int32_t mode, const int32_t sections[4], int32_t n_offs, int32_t n_dims,
                                          std::vector<float> & freq_factors) {
    const bool imrope = mode == GGML_ROPE_TYPE_IMROPE;
    if ((mode != GGML_ROPE_TYPE_MROPE && !imrope) || n_offs != 0 || n_dims < 2) {
        return false;
    }
    const int32_t s0 = sections[0], s1 = sections[1], s2 = sections[2];
    const int32_t sect_dims = s0 + s1 + s2 + sections[3];
    if (sect_dims <= 0 || s0 < 0 || s1 < 0 || s2 < 0 || sections[3] < 0) {
        return false;
    }
    const size_t n_pairs = (size_t) n_dims / 2;
    if (!freq_factors.empty() && freq_factors.size() < n_pairs) {
        return false;
    }
    std::vector<float> ff(n_pairs);
    for (size_t i = 0; i < n_pairs; i++) {
        const int32_t sector = (int32_t) (i % (size_t) sect_dims);
        bool text;  // the pair's section starts at p (t, h or w), not at 0 (e)
        if (imrope) {
            text = (sector % 3 == 1 && sector < 3 * s1) || (sector % 3 == 2 && sector < 3 * s2) ||
                   (sector % 3 == 0 && sector < 3 * s0);
        } else {
            text = sector < s0 + s1 + s2;
        }
        const float base = freq_factors.empty() ? 1.0f : freq_factors[i];
        ff[i] = text ? base : INFINITY;
    }
    freq_factors = std::move(ff);
    return true;
}
