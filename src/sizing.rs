//! KV-cache memory arithmetic: what a token costs, and how many physical cells a host should
//! allocate for a budget.

use crate::config::{Params, Policy};
use crate::ggml::types::GgmlType;

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

/// K+V bytes per token across all layers (generalises the reference implementation's calc_kv_cache_memory:
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

/// Most cells of slack a stream gets beyond its sequences' budgets: `max(budget / 8, 32)`.
///
/// The slack holds the tokens of one ubatch while they are placed (every token of a decode
/// call is placed before any is computed, and `before_batch` makes room before placement), so
/// it is also the largest ubatch a host should use: see [`physical_cells`].
pub fn max_slack(budget: usize) -> usize {
    (budget / 8).max(32)
}

/// Physical KV cells a host should allocate (all streams together) for `p`, `n_seq`
/// sequences and ubatches of `n_ubatch` tokens; 0 = no gain, allocate the logical context.
///
/// Per stream: the budget of every sequence the stream holds (`n_seq` with a unified cache, one
/// otherwise) plus a slack of `n_ubatch` cells: one ubatch is placed before it is computed. The
/// host clamps `n_ubatch` to `max_slack(budget)` unless it needs larger batches (speculative
/// verification batches of 1 + drafts); the slack follows. Each stream is rounded up to a
/// multiple of 256 cells (what ggml's CUDA flash attention prefers), or else of 32, only while
/// that stays within the largest slack; otherwise it is left as computed.
/// `kv_cells_override > 0` is taken as given (the user's `--kv-cells`). `n_ctx_logical` is the
/// logical context over all sequences, as llama.cpp's `n_ctx` (0 = unknown); when the physical
/// size of a stream would reach the logical one (llama.cpp pads `n_ctx` and `n_ctx / n_seq`
/// to 256), there is nothing to gain and the result is 0. Policy `none` evicts nothing: 0.
pub fn physical_cells(
    p: &Params,
    n_seq: usize,
    n_ubatch: usize,
    unified: bool,
    n_ctx_logical: u64,
    kv_cells_override: usize,
) -> u64 {
    if p.policy == Policy::None {
        return 0;
    }
    let n_seq = n_seq.max(1) as u64;
    let streams = if unified { 1 } else { n_seq };
    let per_stream = if kv_cells_override > 0 {
        (kv_cells_override as u64).div_ceil(streams)
    } else {
        // a sequence may hold its prompt's room beyond the budget (`prompt=keep|window`)
        let budget = (p.budget + p.prompt_room()) as u64;
        let seqs_per_stream = if unified { n_seq } else { 1 };
        let slack = n_ubatch.max(1) as u64;
        let need = seqs_per_stream * budget + slack;
        let bound = seqs_per_stream * budget + slack.max(max_slack(p.budget) as u64);
        [256u64, 32]
            .into_iter()
            .map(|granule| need.div_ceil(granule) * granule)
            .find(|&rounded| rounded <= bound)
            .unwrap_or(need)
    };
    if n_ctx_logical > 0 {
        let pad = |v: u64| v.div_ceil(256) * 256;
        let logical_total = pad(n_ctx_logical);
        let logical_per_stream = if unified {
            logical_total
        } else {
            pad(logical_total / n_seq)
        };
        if per_stream >= logical_per_stream {
            return 0;
        }
    }
    if kv_cells_override > 0 {
        kv_cells_override as u64
    } else {
        per_stream * streams
    }
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

    /// The reference implementation's formula for f16 (dtype_bytes = 2): K and V, each
    /// `heads * head_dim` values of 2 bytes, per layer and token.
    fn reference_formula(layers: u64, heads: u64, head_dim: u64, tokens: u64) -> u64 {
        2 * heads * head_dim * 2 * layers * tokens
    }

    #[test]
    fn smollm2_f16_is_23040_bytes_per_token() {
        let d = smollm2(GgmlType::F16, GgmlType::F16);
        assert_eq!(kv_bytes_per_token(&d), 23040);
    }

    #[test]
    fn q8_0_k_with_f16_v() {
        // K: 3 heads * 68 bytes, V: 3 heads * 128 bytes, 30 layers
        let d = smollm2(GgmlType::Q8_0, GgmlType::F16);
        assert_eq!(kv_bytes_per_token(&d), 30 * 3 * (68 + 128));
        assert_eq!(kv_bytes_per_token(&d), 17640);
    }

    #[test]
    fn matches_reference_formula_for_f16() {
        for (l, h, hd) in [(30, 3, 64), (32, 8, 128), (28, 4, 128), (1, 1, 2)] {
            let d = ModelDesc {
                n_layer: l,
                n_head_kv: h,
                head_dim_k: hd,
                head_dim_v: hd,
                type_k: GgmlType::F16,
                type_v: GgmlType::F16,
            };
            let want = reference_formula(l as u64, h as u64, hd as u64, 1000);
            assert_eq!(kv_bytes_per_token(&d) * 1000, want, "{l} {h} {hd}");
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

    fn params(spec: &str) -> Params {
        Params::parse(spec).unwrap()
    }

    #[test]
    fn slack_is_an_eighth_of_the_budget_or_32() {
        assert_eq!(max_slack(64), 32);
        assert_eq!(max_slack(256), 32);
        assert_eq!(max_slack(1024), 128);
        assert_eq!(max_slack(4096), 512);
    }

    #[test]
    fn physical_cells_per_stream_and_unified() {
        let b256 = params("prompt=inside,budget=256");
        // one sequence, ubatches clamped to max_slack: 256 + 32 = 288 (256-rounding would pass it)
        assert_eq!(physical_cells(&b256, 1, 32, false, 8192, 0), 288);
        assert_eq!(
            physical_cells(&b256, 1, 16, false, 8192, 0),
            288,
            "272 -> 288"
        );
        // a larger ubatch (speculative verification) gets its slack: 256 + 49, exact (320 > bound)
        assert_eq!(physical_cells(&b256, 1, 49, false, 8192, 0), 305);
        let b2048 = params("prompt=inside,budget=2048,window=64");
        assert_eq!(physical_cells(&b2048, 1, 256, false, 65536, 0), 2304);
        assert_eq!(
            physical_cells(&b2048, 1, 100, false, 65536, 0),
            2304,
            "2148 -> 2304"
        );
        // four split streams: each 1024 + 128; unified: 4 * 1024 + 128 once
        let b1024 = params("prompt=inside,budget=1024");
        assert_eq!(physical_cells(&b1024, 4, 128, false, 65536, 0), 4 * 1152);
        assert_eq!(physical_cells(&b1024, 4, 128, true, 65536, 0), 4224);
        // a budget that is not a multiple of 32 stays as computed
        let odd = params("prompt=inside,budget=200,window=16");
        assert_eq!(physical_cells(&odd, 1, 32, false, 8192, 0), 232);
        // every ubatch fits; with ubatches clamped to max_slack, never more than budget + max_slack
        for budget in [64usize, 100, 256, 300, 1000, 1024, 3000, 4096] {
            let p = params(&format!("prompt=inside,budget={budget},window=8"));
            for n_ub in [1usize, 32, 64, 512, 4096] {
                let cells = physical_cells(&p, 1, n_ub, false, 1 << 30, 0) as usize;
                assert!(cells >= budget + n_ub, "{budget} {n_ub}: {cells}");
                assert!(
                    cells <= budget + n_ub.max(max_slack(budget)),
                    "{budget} {n_ub}: {cells}"
                );
            }
        }
    }

    #[test]
    fn the_kept_prompt_has_room_beside_the_budget() {
        // prompt=keep (the default): room for a prompt of prompt_max cells (0 = the budget)
        assert_eq!(
            physical_cells(&params("budget=256"), 1, 32, false, 8192, 0),
            544
        );
        let capped = params("budget=256,prompt_max=64");
        assert_eq!(physical_cells(&capped, 1, 32, false, 8192, 0), 352);
        let window = params("budget=1024,prompt=window,prompt_max=1024");
        assert_eq!(
            physical_cells(&window, 4, 128, true, 65536, 0),
            4 * 2048 + 128
        );
    }

    #[test]
    fn no_gain_and_overrides() {
        let b256 = params("prompt=inside,budget=256");
        assert_eq!(
            physical_cells(&b256, 1, 32, false, 300, 0),
            288,
            "logical 300 pads to 512"
        );
        assert_eq!(physical_cells(&b256, 1, 32, false, 256, 0), 0, "288 >= 256");
        assert_eq!(
            physical_cells(&b256, 1, 32, false, 0, 0),
            288,
            "unknown logical size"
        );
        assert_eq!(physical_cells(&params("none"), 1, 512, false, 8192, 0), 0);
        assert_eq!(physical_cells(&b256, 2, 512, false, 8192, 1000), 1000);
        assert_eq!(
            physical_cells(&b256, 2, 512, false, 1024, 1000),
            1000,
            "500 < 512 a stream"
        );
        assert_eq!(
            physical_cells(&b256, 2, 512, false, 512, 1000),
            0,
            "500 >= 256 a stream"
        );
    }
}
