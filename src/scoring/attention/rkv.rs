//! `rkv`: R-KV's score (Cai et al. 2025, "R-KV: Redundancy-aware KV Cache Compression for
//! Training-Free Reasoning Models Acceleration"), per layer and kv head:
//! `LAMBDA * importance - (1 - LAMBDA) * redundancy`.
//!
//! - importance: the attention the recent queries (the ring of the last `recent` queries, each
//!   at its own position) pay each cell: per query, the largest logit over the heads of the GQA
//!   group, a softmax over the cells, then the mean over the queries, max-pooled over `POOL`
//!   neighbouring cells.
//! - redundancy (`scoring::redundancy`): each key's mean cosine similarity to the other cells'
//!   keys, the newest of a near-duplicate group counted as least redundant, as a softmax over
//!   the cells, so both terms are distributions over the cells as in R-KV.
//!
//! Keys are compared before RoPE: the cache stores them rotated by position (and
//! Hadamard-rotated when K is quantised), and a rotation by position would make two equal keys a
//! few positions apart look unlike (their high-frequency pairs turn by different angles), so each
//! key is un-rotated by its cell's position first. (R-KV's reference compares the cache's rotated
//! keys.) Layers without a supported RoPE are compared as stored. The Hadamard rotation is
//! orthonormal and leaves cosines as they are, but it sits outside RoPE, so it is undone first.
//!
//! Every cell of the sequence is scored (prefix and window too): each cell's redundancy reads
//! all the others' keys.

use super::kernel::{load_tile, AttentionKernel};
use super::sources::recent_queries;
use crate::ggml::hadamard::hadamard_inplace;
use crate::host::Host;
use crate::kernels::{add_exp_minus, dot_fast, dot_tile_all, sum_exp_minus, TILE};
use crate::scoring::reduce::{span_pool, ReduceScratch};
use crate::scoring::redundancy::Redundancy;
use crate::scoring::{ScoreCtx, ScoreError, ScoreRows, Scorer};

/// Weight of the importance term (R-KV's paper: 0.1); the redundancy gets `1 - LAMBDA`.
pub const LAMBDA: f32 = 0.1;

/// Cells the importance is max-pooled over (R-KV's kernel size).
pub const POOL: usize = 7;

/// The `rkv` scorer: the shared attention kernel prepares the queries; buffers are reused
/// between passes.
pub struct RkvScorer {
    kernel: AttentionKernel,
    lambda: f32,
    /// All K rows of a layer when they come from `Host::read_rows`.
    k_rows: Vec<f32>,
    /// One tile of K: rows `[cell of the tile][kv head][dim]`, and transposed per kv head.
    staging: Vec<f32>,
    k_tile: Vec<f32>,
    /// The logits of one tile, `[query of the group][TILE]`.
    tile_logits: Vec<f32>,
    /// One layer's logits, `[kv head][recent query][cell]` (largest over the group's heads).
    logits: Vec<f32>,
    /// One layer's keys, `[kv head][cell, padded to TILE][dim]`: pre-RoPE, unit length.
    keys: Vec<f32>,
    importance: Vec<f32>,
    redundancy: Vec<f32>,
    similarity: Redundancy,
    pool: ReduceScratch,
}

impl RkvScorer {
    /// R-KV with the paper's weight ([`LAMBDA`]).
    pub fn new() -> Self {
        Self::with_lambda(LAMBDA)
    }

    /// R-KV weighting importance by `lambda` (in 0..=1) and redundancy by `1 - lambda`.
    pub fn with_lambda(lambda: f32) -> Self {
        RkvScorer {
            kernel: AttentionKernel::default(),
            lambda,
            k_rows: Vec::new(),
            staging: Vec::new(),
            k_tile: Vec::new(),
            tile_logits: Vec::new(),
            logits: Vec::new(),
            keys: Vec::new(),
            importance: Vec::new(),
            redundancy: Vec::new(),
            similarity: Redundancy::default(),
            pool: ReduceScratch::default(),
        }
    }
}

impl Default for RkvScorer {
    fn default() -> Self {
        Self::new()
    }
}

impl Scorer for RkvScorer {
    /// One row per (layer, kv head) of a layer with recent queries; archived keys
    /// (`ctx.extra`: `rkv` runs without the archive) get `-inf`.
    fn score(
        &mut self,
        ctx: &ScoreCtx,
        host: &mut dyn Host,
        rows: &mut ScoreRows,
    ) -> Result<(), ScoreError> {
        self.kernel.rotations.clear();
        let n = ctx.cells.len();
        let n_cols = rows.n_cols();
        let n_pad = n.next_multiple_of(TILE);
        for (layer, lq) in ctx.layers.iter().zip(&ctx.queries.layers) {
            let per_group = self
                .kernel
                .prepare_queries(layer, lq, ctx.m_pos, recent_queries);
            if per_group == 0 || n == 0 {
                continue;
            }
            let (d, n_kv) = (layer.head_dim, layer.n_head_kv);
            let per_head = per_group / layer.group_size();
            let group_len = per_group * d;
            if !layer.k_direct {
                self.k_rows.resize(n * n_kv * d, 0.0);
                let rc =
                    host.read_rows(layer.host_index, 0, ctx.stream, ctx.cells, &mut self.k_rows);
                if rc < 0 {
                    return Err(ScoreError(format!(
                        "read_rows(layer {}, K) failed with {rc}",
                        layer.host_index
                    )));
                }
            }
            self.logits.resize(n_kv * per_head * n, 0.0);
            self.tile_logits.resize(per_group * TILE, 0.0);
            self.keys.resize(n_kv * n_pad * d, 0.0);
            let row_len = n_kv * d;
            for c0 in (0..n).step_by(TILE) {
                let tile: [u32; TILE] = std::array::from_fn(|t| (c0 + t) as u32);
                let tile = &tile[..TILE.min(n - c0)];
                load_tile(
                    ctx,
                    layer,
                    tile,
                    &self.k_rows,
                    &mut self.staging,
                    &mut self.k_tile,
                );
                for g in 0..n_kv {
                    let kt = &self.k_tile[g * d * TILE..(g + 1) * d * TILE];
                    let group = &self.kernel.queries[g * group_len..(g + 1) * group_len];
                    dot_tile_all(group, kt, &mut self.tile_logits);
                    // queries are [head of the group][recent query]: the largest over the heads
                    for t in 0..per_head {
                        let at = (g * per_head + t) * n + c0;
                        let dst = &mut self.logits[at..at + tile.len()];
                        dst.fill(f32::NEG_INFINITY);
                        for lanes in self
                            .tile_logits
                            .chunks_exact(TILE)
                            .skip(t)
                            .step_by(per_head)
                        {
                            dst.iter_mut().zip(lanes).for_each(|(m, &v)| *m = m.max(v));
                        }
                    }
                    for (lane, &col) in tile.iter().enumerate() {
                        let src =
                            &self.staging[lane * row_len + g * d..lane * row_len + (g + 1) * d];
                        let at = (g * n_pad + col as usize) * d;
                        self.keys[at..at + d].copy_from_slice(src);
                    }
                }
            }
            let out = rows.add_rows(n_kv);
            self.importance.resize(n, 0.0);
            self.redundancy.resize(n, 0.0);
            for g in 0..n_kv {
                // importance: the window's mean attention, max-pooled over neighbours
                self.importance.fill(0.0);
                for row in self.logits[g * per_head * n..(g + 1) * per_head * n].chunks_exact(n) {
                    let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
                    let lse = max + sum_exp_minus(row, max).ln();
                    add_exp_minus(row, lse, 1.0 / per_head as f32, &mut self.importance);
                }
                span_pool(&mut self.importance, POOL, &mut self.pool);
                // redundancy of the pre-RoPE unit keys, as a distribution over the cells
                let keys = &mut self.keys[g * n_pad * d..(g + 1) * n_pad * d];
                for (c, k) in keys.chunks_exact_mut(d).enumerate() {
                    if c >= n {
                        k.fill(0.0);
                        continue;
                    }
                    if layer.hadamard_n > 0 {
                        hadamard_inplace(k, layer.hadamard_n);
                    }
                    if let Some(rope) = &layer.rope {
                        let inverse =
                            self.kernel
                                .rotations
                                .get_inverse(layer.rope_id, rope, ctx.pos[c]);
                        rope.unrotate_with(k, inverse);
                    }
                    let norm = dot_fast(k, k).sqrt();
                    if norm > 0.0 {
                        k.iter_mut().for_each(|v| *v /= norm);
                    }
                }
                self.similarity.redundancy(keys, n, d, &mut self.redundancy);
                let max = self
                    .redundancy
                    .iter()
                    .fold(f32::NEG_INFINITY, |m, &v| m.max(v));
                let lse = max + sum_exp_minus(&self.redundancy, max).ln();
                let row = &mut out[g * n_cols..(g + 1) * n_cols];
                let (imp_w, red_w) = (self.lambda, 1.0 - self.lambda);
                for ((o, &imp), &red) in row.iter_mut().zip(&self.importance).zip(&self.redundancy)
                {
                    *o = imp_w * imp - red_w * (red - lse).exp();
                }
                row[n..].fill(f32::NEG_INFINITY);
            }
        }
        Ok(())
    }
}
