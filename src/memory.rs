//! KV-cache memory arithmetic: what a token costs, so budgets can be stated in bytes.

use crate::ggml_types::GgmlType;

/// The shape facts of a model's KV cache that determine its size.
#[derive(Clone, Copy, Debug)]
pub struct ModelDesc {
    pub n_layer: usize,
    pub n_head_kv: usize,
    pub head_dim_k: usize,
    pub head_dim_v: usize,
    pub type_k: GgmlType,
    pub type_v: GgmlType,
}

/// K+V bytes per token across all layers (generalises the seed's calc_kv_cache_memory:
/// 2*n_kv_heads*head_dim*dtype_bytes*layers for f16).
///
/// Each head's row is sized with `row_size`, as llama.cpp lays out quantised caches, so block
/// scales count. A head dim that is not a whole number of blocks cannot be cached in that type
/// by llama.cpp; it is rounded up to whole blocks here rather than panicking.
pub fn kv_bytes_per_token(d: &ModelDesc) -> u64 {
    let row = |ty: GgmlType, n: usize| ty.row_size(n.div_ceil(ty.block_size()) * ty.block_size());
    let per_layer = d.n_head_kv * (row(d.type_k, d.head_dim_k) + row(d.type_v, d.head_dim_v));
    (per_layer * d.n_layer) as u64
}

/// K+V bytes for `n_tokens` cached tokens.
pub fn kv_bytes(d: &ModelDesc, n_tokens: u64) -> u64 {
    kv_bytes_per_token(d) * n_tokens
}

#[cfg(test)]
mod tests {
    use super::*;

    fn smollm2(type_k: GgmlType, type_v: GgmlType) -> ModelDesc {
        ModelDesc {
            n_layer: 30,
            n_head_kv: 3,
            head_dim_k: 64,
            head_dim_v: 64,
            type_k,
            type_v,
        }
    }

    /// The seed's formula, for f16 (dtype_bytes = 2).
    fn seed_calc(layers: u64, heads: u64, head_dim: u64, tokens: u64) -> u64 {
        2 * heads * head_dim * 2 * layers * tokens
    }

    #[test]
    fn smollm2_f16_is_23040_bytes_per_token() {
        let d = smollm2(GgmlType::F16, GgmlType::F16);
        assert_eq!(kv_bytes_per_token(&d), 23040);
        assert_eq!(kv_bytes(&d, 4096), 23040 * 4096);
    }

    #[test]
    fn q8_0_k_with_f16_v() {
        // K: 3 heads * 68 bytes, V: 3 heads * 128 bytes, 30 layers
        let d = smollm2(GgmlType::Q8_0, GgmlType::F16);
        assert_eq!(kv_bytes_per_token(&d), 30 * 3 * (68 + 128));
        assert_eq!(kv_bytes_per_token(&d), 17640);
    }

    #[test]
    fn matches_seed_formula_for_f16() {
        for (l, h, hd) in [(30, 3, 64), (32, 8, 128), (28, 4, 128), (1, 1, 2)] {
            let d = ModelDesc {
                n_layer: l,
                n_head_kv: h,
                head_dim_k: hd,
                head_dim_v: hd,
                type_k: GgmlType::F16,
                type_v: GgmlType::F16,
            };
            let seed = seed_calc(l as u64, h as u64, hd as u64, 1000);
            assert_eq!(kv_bytes(&d, 1000), seed, "{l} {h} {hd}");
        }
    }

    #[test]
    fn mixed_head_dims_and_types() {
        let d = ModelDesc {
            n_layer: 2,
            n_head_kv: 4,
            head_dim_k: 192,
            head_dim_v: 128,
            type_k: GgmlType::Q4_0,
            type_v: GgmlType::F32,
        };
        // K: 192/32 = 6 blocks * 18 bytes; V: 128 * 4
        assert_eq!(kv_bytes_per_token(&d), 2 * 4 * (108 + 512));
    }
}
