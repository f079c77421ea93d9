//! Dot-product kernels (AVX2/FMA where the CPU has it, portable otherwise) and CPU feature checks.
//!
//! The crate is built for baseline x86-64 (SSE2) so the static library runs anywhere; on CPUs
//! with AVX2 and FMA (detected once at run time) hand-written kernels take over. Each kernel
//! checks its shapes, then picks the AVX2 path or its portable version:
//!
//! - `dot` (portable, the same bits on every CPU; the fallback and test reference) and
//!   [`dot_fast`] (for hot loops): one pair of vectors.
//! - [`max_dot`] and [`dots`]: one key against many queries, four queries per pass over the key.
//! - [`max_dot_tile`], [`dot_tile_all`], [`transpose_tile`], [`transpose_rows`]: the scoring
//!   pass, [`TILE`] keys stored transposed against many queries.
//! - [`max_dot_lanes`]: the recall bounds, queries stored transposed against keys read in place.
//! - [`sum_exp_minus`]: the sum inside a log-sum-exp (probability scoring); [`add_exp_minus`]:
//!   probabilities added into a row (`rkv`'s importance).
//!
//! This module depends on nothing else in the crate; `ggml` uses its CPU feature checks.

mod dot;
mod exp;
mod lanes;
#[cfg(test)]
mod tests;
mod tile;

#[cfg(test)]
pub(crate) use dot::dot;
pub use dot::{dot_fast, dots, max_dot};
pub use exp::{add_exp_minus, sum_exp_minus};
pub use lanes::{max_dot_lanes, LANE_KEYS, QUERY_LANES};
pub use tile::{dot_tile_all, max_dot_tile, transpose_rows, transpose_tile, TILE};

/// Whether the CPU has the FMA instruction (detected once).
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_fma() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| is_x86_feature_detected!("fma"))
}

/// Whether the CPU converts halves in hardware (F16C with AVX; detected once).
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_f16c() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| is_x86_feature_detected!("f16c") && is_x86_feature_detected!("avx"))
}

/// Whether the CPU has AVX2 and FMA, which every hand-written kernel here needs (detected once).
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx2_fma() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
}
