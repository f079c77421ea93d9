//! The attention kernel: per layer and kv head, the largest scaled logit any query of the
//! group gives each cell, each archived key, or (as a bound) each archived page's key box.
//! Pruned passes are in `pruned.rs`, scoring on the host's backend in `backend.rs`.

use super::backend::BackendScores;
use super::pruned::Pruning;
use super::sources::{queries_per_head, QuerySource};
use crate::ggml::dequant::read_k_row;
use crate::ggml::hadamard::hadamard_inplace;
use crate::ggml::rope::RotationMemo;
use crate::host::{Host, LayerDesc};
use crate::kernels::{
    dot_tile_all, dots, max_dot, max_dot_lanes, max_dot_tile, sum_exp_minus, transpose_rows,
    transpose_tile, LANE_KEYS, QUERY_LANES, TILE,
};
use crate::queries::LayerQueries;
use crate::scoring::{fold_column_max, ScoreCtx, ScoreError, ScoreRows};

/// A page's key summary for scored layer `li`: the element-wise box of its keys as (centre,
/// radius), `n_head_kv * head_dim` values each (see `archive/`).
pub type PageSummary<'s> = dyn Fn(usize, usize) -> (&'s [f32], &'s [f32]) + 's;

/// K row of `cell`, kv head `g`, dequantised straight from the layer's tensor into `dst`.
fn read_direct(ctx: &ScoreCtx, layer: &LayerDesc, cell: u32, g: usize, dst: &mut [f32]) {
    // SAFETY: the host described this tensor (k_direct) and listed this cell as in use.
    unsafe {
        read_k_row(
            layer.k_data.0,
            layer.k_type,
            layer.k_nb1,
            layer.k_nb2,
            ctx.stream as usize,
            cell as usize,
            g,
            dst,
        )
    };
}

/// Scratch reused across passes so the hot loop never allocates.
#[derive(Default)]
pub struct AttentionKernel {
    /// `[kv head][query of the group][dim]`.
    pub(super) queries: Vec<f32>,
    /// `[kv head][dim][TILE]`: the keys of one tile of cells, transposed for `max_dot_tile`.
    pub(super) k_tile: Vec<f32>,
    /// `[cell of the tile][kv head][dim]`: K rows of one tile before the transposition.
    pub(super) k_tile_rows: Vec<f32>,
    /// All K rows of a layer when they come from `Host::read_rows`.
    k_rows: Vec<f32>,
    /// `0..n` for the cells of a pass, in tiles for `load_tile`.
    all_cols: Vec<u32>,
    /// Probability scoring: `[kv head][query of the group][cell]` logits of one layer, and
    /// `[query][TILE]` of one tile (or one archived key's, per query).
    logits: Vec<f32>,
    tile_logits: Vec<f32>,
    /// Rotations of one call (`run`, `page_bounds`, `extra_rows`), shared across its layers.
    pub(super) rotations: RotationMemo,
    /// Pruned passes (`ScoreCtx::prune_evict`): see [`Pruning`].
    pub(super) pruning: Pruning,
    /// Page bounds: per kv head, `[q; |q|]` of the group's queries transposed for
    /// `max_dot_lanes` (`[kv head][2 * dim][query, padded to QUERY_LANES]`).
    bound_queries: Vec<f32>,
    /// Scoring on the host's backend (`LayerDesc::k_backend`): see [`BackendScores`].
    pub(super) backend: BackendScores,
}

impl AttentionKernel {
    /// Fill `queries` for one layer; returns the number of queries per kv-head group.
    pub(super) fn prepare_queries(
        &mut self,
        layer: &LayerDesc,
        lq: &LayerQueries,
        m_pos: i32,
        source: QuerySource,
    ) -> usize {
        let d = layer.head_dim;
        let per_head = queries_per_head(lq, m_pos, source);
        self.queries.resize(layer.n_head * per_head * d, 0.0);
        let scale = 1.0 / (d as f32).sqrt();
        let mut slot = 0;
        // Heads of group g are g*gs .. (g+1)*gs, so head-major order is also group-major.
        for h in 0..layer.n_head {
            source(lq, h, m_pos, &mut |q, p| {
                let dst = &mut self.queries[slot * d..(slot + 1) * d];
                dst.copy_from_slice(q);
                if let Some(rope) = &layer.rope {
                    rope.rotate_with(dst, self.rotations.get(layer.rope_id, rope, p));
                }
                if layer.hadamard_n > 0 {
                    hadamard_inplace(dst, layer.hadamard_n);
                }
                dst.iter_mut().for_each(|v| *v *= scale);
                slot += 1;
            });
        }
        debug_assert_eq!(
            slot,
            layer.n_head * per_head,
            "heads disagree on query count"
        );
        per_head * layer.group_size()
    }

    /// One row per (layer, kv head), in layer order, over the pages: the bound of page p under
    /// the group's `source` queries (a layer without queries gives rows of `-inf`).
    pub fn page_bound_rows(
        &mut self,
        ctx: &ScoreCtx,
        source: QuerySource,
        n_pages: usize,
        summary: &PageSummary,
        rows: &mut ScoreRows,
    ) {
        rows.reset(n_pages);
        self.rotations.clear();
        for (li, (layer, lq)) in ctx.layers.iter().zip(&ctx.queries.layers).enumerate() {
            let per_group = self.prepare_queries(layer, lq, ctx.m_pos, source);
            let out = rows.add_rows(layer.n_head_kv);
            if per_group == 0 {
                out.fill(f32::NEG_INFINITY);
                continue;
            }
            // the bound q·centre + |q|·radius is a dot product of [q, |q|] with [centre,
            // radius]: the queries go transposed into the lanes of `max_dot_lanes`, which reads
            // the boxes where they lie (a check reads every archived page once)
            let (d, n_kv) = (layer.head_dim, layer.n_head_kv);
            let nqp = per_group.next_multiple_of(QUERY_LANES);
            let group_len = 2 * d * nqp;
            self.bound_queries.clear();
            self.bound_queries.resize(n_kv * group_len, 0.0);
            for (i, q) in self.queries.chunks_exact(d).enumerate() {
                let (g, qi) = (i / per_group, i % per_group);
                let qt = &mut self.bound_queries[g * group_len..(g + 1) * group_len];
                for (j, &x) in q.iter().enumerate() {
                    qt[j * nqp + qi] = x;
                    qt[(d + j) * nqp + qi] = x.abs();
                }
            }
            let mut best = [0.0f32; LANE_KEYS];
            let mut centres: [&[f32]; LANE_KEYS] = [&[]; LANE_KEYS];
            let mut radii: [&[f32]; LANE_KEYS] = [&[]; LANE_KEYS];
            for p0 in (0..n_pages).step_by(LANE_KEYS) {
                let chunk = p0..(p0 + LANE_KEYS).min(n_pages);
                let empty: (&[f32], &[f32]) = (&[], &[]);
                let boxes: [(&[f32], &[f32]); LANE_KEYS] = std::array::from_fn(|t| {
                    if p0 + t < n_pages {
                        summary(p0 + t, li)
                    } else {
                        empty
                    }
                });
                for g in 0..n_kv {
                    for t in 0..chunk.len() {
                        centres[t] = &boxes[t].0[g * d..(g + 1) * d];
                        radii[t] = &boxes[t].1[g * d..(g + 1) * d];
                    }
                    let qt = &self.bound_queries[g * group_len..(g + 1) * group_len];
                    let n = chunk.len();
                    max_dot_lanes(qt, per_group, &centres[..n], &radii[..n], &mut best);
                    out[g * n_pages + chunk.start..g * n_pages + chunk.end]
                        .copy_from_slice(&best[..n]);
                }
            }
        }
    }

    /// One row per (layer, kv head), in layer order, over the keys of `ctx.extra`: the largest
    /// logit the group's `source` queries give the key (`-inf` for a layer without queries).
    pub fn extra_rows(&mut self, ctx: &ScoreCtx, source: QuerySource, rows: &mut ScoreRows) {
        let Some(extra) = ctx.extra else { return };
        rows.reset(extra.n);
        self.rotations.clear();
        for (li, (layer, lq)) in ctx.layers.iter().zip(&ctx.queries.layers).enumerate() {
            let per_group = self.prepare_queries(layer, lq, ctx.m_pos, source);
            let queries = self.queries.as_slice();
            let (d, n_kv) = (layer.head_dim, layer.n_head_kv);
            let out = rows.add_rows(n_kv);
            if per_group == 0 {
                out.fill(f32::NEG_INFINITY);
                continue;
            }
            let group_len = per_group * d;
            // TILE keys at a time through the tile kernel, as a pass scores cells
            self.k_tile.resize(d * TILE, 0.0);
            let mut best = [0.0f32; TILE];
            let mut rows: [&[f32]; TILE] = [&[]; TILE];
            let keys = &extra.k[li];
            for c0 in (0..extra.n).step_by(TILE) {
                let tile = c0..(c0 + TILE).min(extra.n);
                for g in 0..n_kv {
                    for (t, c) in tile.clone().enumerate() {
                        rows[t] = &keys[(c * n_kv + g) * d..(c * n_kv + g + 1) * d];
                    }
                    transpose_rows(&rows[..tile.len()], &mut self.k_tile);
                    let group = &queries[g * group_len..(g + 1) * group_len];
                    max_dot_tile(group, &self.k_tile, &mut best);
                    out[g * extra.n + tile.start..g * extra.n + tile.end]
                        .copy_from_slice(&best[..tile.len()]);
                }
            }
        }
    }

    /// Append one row per (layer, kv head) to `rows`; layers without queries add none. Each
    /// row covers the cells, then the archived `ctx.extra` keys. With `ctx.prob` the rows hold
    /// log probabilities and `rows` keeps each column's largest logit (unknown when the logits
    /// were computed on the host's backend).
    pub fn run(
        &mut self,
        ctx: &ScoreCtx,
        host: &mut dyn Host,
        rows: &mut ScoreRows,
        source: QuerySource,
    ) -> Result<(), ScoreError> {
        self.rotations.clear();
        let n_cells = ctx.cells.len();
        let n_extra = ctx.extra.map_or(0, |e| e.n);
        let n = n_cells + n_extra;
        if ctx.prob {
            rows.keep_raw_max();
        }
        if let Some(evict) = ctx.prune_evict {
            if !ctx.prob && n_extra == 0 && ctx.layers.iter().all(|l| l.k_direct) {
                self.run_pruned(ctx, rows, source, evict);
                return Ok(());
            }
        }
        // archived keys are scored on the host, beside the cells' rows read the same way
        let on_backend = n_extra == 0 && ctx.layers.iter().any(|l| l.k_backend);
        if on_backend {
            self.score_on_backend(ctx, host, source)?;
            if ctx.prob {
                // the logits stay on the backend
                rows.raw_unknown();
            }
        }
        for (li, (layer, lq)) in ctx.layers.iter().zip(&ctx.queries.layers).enumerate() {
            if on_backend && layer.k_backend {
                if let Some(at) = self.backend.at[li] {
                    let len = layer.n_head_kv * n_cells;
                    rows.add_rows(layer.n_head_kv)
                        .copy_from_slice(&self.backend.out[at..at + len]);
                }
                continue;
            }
            let per_group = self.prepare_queries(layer, lq, ctx.m_pos, source);
            if per_group == 0 {
                continue;
            }
            let d = layer.head_dim;
            let n_kv = layer.n_head_kv;
            let group_len = per_group * d;
            if !layer.k_direct {
                self.k_rows.resize(n_cells * n_kv * d, 0.0);
                let rc =
                    host.read_rows(layer.host_index, 0, ctx.stream, ctx.cells, &mut self.k_rows);
                if rc < 0 {
                    return Err(ScoreError(format!(
                        "read_rows(layer {}, K) failed with {rc}",
                        layer.host_index
                    )));
                }
            }
            if ctx.prob {
                self.logits.resize(n_kv * per_group * n, 0.0);
                self.tile_logits.resize(per_group * TILE, 0.0);
            }
            let out = rows.add_rows(n_kv);
            // TILE cells at a time, keys transposed into the lanes of the tile kernel
            self.all_cols.clear();
            self.all_cols.extend(0..n_cells as u32);
            let mut best = [0.0f32; TILE];
            for tile in self.all_cols.chunks(TILE) {
                let c0 = tile[0] as usize;
                load_tile(
                    ctx,
                    layer,
                    tile,
                    &self.k_rows,
                    &mut self.k_tile_rows,
                    &mut self.k_tile,
                );
                for g in 0..n_kv {
                    let kt = &self.k_tile[g * d * TILE..(g + 1) * d * TILE];
                    let group = &self.queries[g * group_len..(g + 1) * group_len];
                    if ctx.prob {
                        // every logit of the tile, into each query's row of the layer
                        dot_tile_all(group, kt, &mut self.tile_logits);
                        for (q, lanes) in self.tile_logits.chunks_exact(TILE).enumerate() {
                            let at = (g * per_group + q) * n + c0;
                            self.logits[at..at + tile.len()].copy_from_slice(&lanes[..tile.len()]);
                        }
                    } else {
                        max_dot_tile(group, kt, &mut best);
                        out[g * n + c0..g * n + c0 + tile.len()]
                            .copy_from_slice(&best[..tile.len()]);
                    }
                }
            }
            if let Some(extra) = ctx.extra {
                let keys = &extra.k[li];
                for c in 0..n_extra {
                    for g in 0..n_kv {
                        let k = &keys[(c * n_kv + g) * d..(c * n_kv + g + 1) * d];
                        let group = &self.queries[g * group_len..(g + 1) * group_len];
                        let col = n_cells + c;
                        if ctx.prob {
                            let logits = &mut self.tile_logits[..per_group];
                            dots(group, k, logits);
                            for (q, &v) in logits.iter().enumerate() {
                                self.logits[(g * per_group + q) * n + col] = v;
                            }
                        } else {
                            out[g * n + col] = max_dot(group, k);
                        }
                    }
                }
            }
            if ctx.prob {
                log_probabilities(&self.logits, (n, n_kv, per_group), out);
                fold_column_max(&self.logits, rows.raw_max_mut());
            }
        }
        Ok(())
    }
}

/// K of the cells `ctx.cells[col]` for the columns of `tile` (at most [`TILE`]), transposed per
/// kv head into `k_tile` (`[kv head][dim][TILE]`) for the tile kernels: read through the tensor
/// pointer, or copied from `k_rows` (every listed cell's rows, fetched through the host) when the
/// layer is not `k_direct`. `staging` holds the rows before the transposition.
pub(super) fn load_tile(
    ctx: &ScoreCtx,
    layer: &LayerDesc,
    tile: &[u32],
    k_rows: &[f32],
    staging: &mut Vec<f32>,
    k_tile: &mut Vec<f32>,
) {
    let (d, n_kv) = (layer.head_dim, layer.n_head_kv);
    let row_len = n_kv * d; // one cell's K: [kv head][dim]
    staging.resize(TILE * row_len, 0.0);
    k_tile.resize(n_kv * d * TILE, 0.0);
    for (&col, dst) in tile.iter().zip(staging.chunks_exact_mut(row_len)) {
        let col = col as usize;
        if layer.k_direct {
            for (g, head) in dst.chunks_exact_mut(d).enumerate() {
                read_direct(ctx, layer, ctx.cells[col], g, head);
            }
        } else {
            dst.copy_from_slice(&k_rows[col * row_len..(col + 1) * row_len]);
        }
    }
    for (g, kt) in k_tile.chunks_exact_mut(d * TILE).enumerate() {
        transpose_tile(&staging[g * d..], row_len, kt);
    }
}

/// From one layer's logits (`[kv head][query of the group][column]`, `n` columns), `out[g*n + c]`
/// = the largest log attention probability any query of group g gives column c (each query
/// normalised over the sequence's cells), so queries with large norms no longer dominate and
/// heads become comparable.
fn log_probabilities(logits: &[f32], (n, n_kv, per_group): (usize, usize, usize), out: &mut [f32]) {
    if n == 0 {
        return;
    }
    for (g, best) in out.chunks_exact_mut(n).take(n_kv).enumerate() {
        best.fill(f32::NEG_INFINITY);
        for row in logits[g * per_group * n..(g + 1) * per_group * n].chunks_exact(n) {
            let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            let lse = max + sum_exp_minus(row, max).ln();
            best.iter_mut()
                .zip(row)
                .for_each(|(b, &v)| *b = b.max(v - lse));
        }
    }
}
