//! Pruned passes (`ScoreCtx::prune_evict`): when a pass only has to find the lowest cells, stop
//! scoring the cells that provably rank above them.

use super::kernel::{load_tile, AttentionKernel};
use super::sources::{queries_per_head, QuerySource};
use crate::kernels::{max_dot_tile, TILE};
use crate::scoring::{fold_column_max, ScoreCtx, ScoreRows};

/// Layers every cell is scored on before a pruned pass stops scoring cells that cannot be
/// evicted; the rest only for the cells that still could be.
const PRUNE_FIRST_LAYERS: usize = 8;

/// State and buffers of pruned passes.
#[derive(Default)]
pub(super) struct Pruning {
    /// Layers, those where most cells took their largest score in the last pass first.
    order: Vec<usize>,
    wins: Vec<usize>,
    /// First row of each layer in the pass's rows (`None`: the layer has no queries), and the
    /// layer of each row.
    first_row: Vec<Option<usize>>,
    row_layer: Vec<usize>,
    /// Each cell's largest score so far.
    partial: Vec<f32>,
    /// Cells (columns) by partial score, the columns one step scores, and which are the lowest.
    by_score: Vec<u32>,
    cols: Vec<u32>,
    lowest: Vec<bool>,
}

impl AttentionKernel {
    /// A pass that only has to find the `evict` lowest cells (largest score over the rows):
    /// every cell is scored on [`PRUNE_FIRST_LAYERS`] layers (those that held the most maxima
    /// last time), then the `evict` cells lowest so far on the other layers; their largest final
    /// score `u` bounds the eviction threshold from above (at least `evict` cells score at most
    /// `u`), so a cell whose partial score already exceeds `u` is kept whatever its other
    /// layers say and is not scored further. Only the cells at or below `u` are. The evicted set
    /// is the full pass's; kept cells' rows may hold lower bounds (`-inf` where unscored).
    pub(super) fn run_pruned(
        &mut self,
        ctx: &ScoreCtx,
        rows: &mut ScoreRows,
        source: QuerySource,
        evict: usize,
    ) {
        let n = ctx.cells.len();
        let n_layers = ctx.layers.len();
        let mut pr = std::mem::take(&mut self.pruning);
        pr.first_row.clear();
        pr.row_layer.clear();
        for (li, (layer, lq)) in ctx.layers.iter().zip(&ctx.queries.layers).enumerate() {
            if queries_per_head(lq, ctx.m_pos, source) > 0 {
                pr.first_row.push(Some(pr.row_layer.len()));
                pr.row_layer
                    .extend(std::iter::repeat_n(li, layer.n_head_kv));
            } else {
                pr.first_row.push(None);
            }
        }
        let out = rows.add_rows(pr.row_layer.len());
        out.fill(f32::NEG_INFINITY);
        if pr.order.len() != n_layers {
            pr.order.clear();
            pr.order.extend(0..n_layers);
        }
        let first = PRUNE_FIRST_LAYERS.min(n_layers);
        let (head, tail) = pr.order.split_at(first);
        // 1. every cell on the first layers
        pr.cols.clear();
        pr.cols.extend(0..n as u32);
        for &li in head {
            self.score_layer_columns(ctx, li, source, &pr.cols, pr.first_row[li], out);
        }
        if !tail.is_empty() && n > 0 {
            pr.partial.clear();
            pr.partial.resize(n, f32::NEG_INFINITY);
            fold_column_max(out, &mut pr.partial);
            // 2. the `evict` lowest so far, on the other layers: their finals bound the threshold
            let evict = evict.min(n);
            pr.by_score.clear();
            pr.by_score.extend(0..n as u32);
            let partial = &pr.partial;
            let by = |a: &u32, b: &u32| partial[*a as usize].total_cmp(&partial[*b as usize]);
            if evict > 0 && evict < n {
                pr.by_score.select_nth_unstable_by(evict - 1, by);
            }
            pr.cols.clear();
            pr.cols.extend_from_slice(&pr.by_score[..evict]);
            pr.cols.sort_unstable();
            for &li in tail {
                self.score_layer_columns(ctx, li, source, &pr.cols, pr.first_row[li], out);
            }
            let mut u = f32::NEG_INFINITY;
            for &c in &pr.cols {
                let c = c as usize;
                u = u.max(
                    (0..pr.row_layer.len()).fold(f32::NEG_INFINITY, |m, r| m.max(out[r * n + c])),
                );
            }
            // 3. the other cells that could still fall to the threshold
            pr.lowest.clear();
            pr.lowest.resize(n, false);
            pr.cols.iter().for_each(|&c| pr.lowest[c as usize] = true);
            pr.cols.clear();
            pr.cols.extend((0..n as u32).filter(|&c| {
                !pr.lowest[c as usize]
                    // at or below u (or NaN): could still be evicted
                    && pr.partial[c as usize].partial_cmp(&u) != Some(std::cmp::Ordering::Greater)
            }));
            for &li in tail {
                self.score_layer_columns(ctx, li, source, &pr.cols, pr.first_row[li], out);
            }
        }
        // next pass: the layers where most cells take their largest score first
        pr.wins.clear();
        pr.wins.resize(n_layers, 0);
        for c in 0..n {
            let mut best = (0, f32::NEG_INFINITY);
            for (r, &li) in pr.row_layer.iter().enumerate() {
                if out[r * n + c] > best.1 {
                    best = (li, out[r * n + c]);
                }
            }
            pr.wins[best.0] += 1;
        }
        let wins = &pr.wins;
        pr.order.sort_by_key(|&li| std::cmp::Reverse(wins[li]));
        self.pruning = pr;
    }

    /// Logit scores of layer `li` (whose rows start at row `first_row`) for the listed columns
    /// of `ctx.cells`: `out[(first_row + g) * n + col]`, K read through the tensor pointer.
    fn score_layer_columns(
        &mut self,
        ctx: &ScoreCtx,
        li: usize,
        source: QuerySource,
        cols: &[u32],
        first_row: Option<usize>,
        out: &mut [f32],
    ) {
        let Some(first_row) = first_row else { return };
        if cols.is_empty() {
            return;
        }
        let (layer, lq) = (&ctx.layers[li], &ctx.queries.layers[li]);
        let per_group = self.prepare_queries(layer, lq, ctx.m_pos, source);
        let (d, n_kv) = (layer.head_dim, layer.n_head_kv);
        let n = ctx.cells.len();
        let group_len = per_group * d;
        let mut best = [0.0f32; TILE];
        for tile in cols.chunks(TILE) {
            load_tile(
                ctx,
                layer,
                tile,
                &[],
                &mut self.k_tile_rows,
                &mut self.k_tile,
            );
            for g in 0..n_kv {
                let kt = &self.k_tile[g * d * TILE..(g + 1) * d * TILE];
                let group = &self.queries[g * group_len..(g + 1) * group_len];
                max_dot_tile(group, kt, &mut best);
                let row = &mut out[(first_row + g) * n..(first_row + g + 1) * n];
                for (&col, &b) in tile.iter().zip(&best) {
                    row[col as usize] = b;
                }
            }
        }
    }
}
