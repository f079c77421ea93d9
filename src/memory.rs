//! KV-cache memory accounting (the seed's calc_kv_cache_memory, generalised to ggml types).
//!
//! PLACEHOLDER written by the engine branch so it compiles; replaced at merge.

use crate::ggml_types::GgmlType;

/// Shape of a model's KV cache.
#[derive(Clone, Copy, Debug)]
pub struct ModelDesc {
    pub n_layer: usize,
    pub n_head_kv: usize,
    pub head_dim_k: usize,
    pub head_dim_v: usize,
    pub type_k: GgmlType,
    pub type_v: GgmlType,
}

/// K+V bytes one token costs over all layers.
pub fn kv_bytes_per_token(d: &ModelDesc) -> u64 {
    let per_layer =
        d.n_head_kv * (d.type_k.row_size(d.head_dim_k) + d.type_v.row_size(d.head_dim_v));
    (d.n_layer * per_layer) as u64
}

/// K+V bytes of `n_tokens` tokens.
pub fn kv_bytes(d: &ModelDesc, n_tokens: u64) -> u64 {
    kv_bytes_per_token(d) * n_tokens
}
