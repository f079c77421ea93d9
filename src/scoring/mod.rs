//! Scorers: one importance value per (scored layer, kv head) and cell of one sequence.
//!
//! Every policy is a scorer; `reduce` folds the rows into one score per cell and `select` decides
//! what to evict, so policies differ only here. `attention.rs` serves the query-driven policies
//! (`beacon`, `recent`), `position.rs` those that read positions only (`streaming`, `random`,
//! `none`).

mod attention;
pub mod position;
pub mod reduce;
pub mod select;

use crate::config::Policy;
use crate::host::{Host, LayerDesc};
use crate::queries::SeqQueries;

pub use attention::{AttentionKernel, QueryScorer};
pub use position::PositionScorer;

/// What a scorer sees of one sequence during a compression pass.
pub struct ScoreCtx<'a> {
    pub seq: i32,
    pub stream: u32,
    /// Cells of the sequence, sorted by position, and their positions.
    pub cells: &'a [u32],
    pub pos: &'a [i32],
    /// Scoring position: the sequence's largest position + 1 (where the next query will sit).
    pub m_pos: i32,
    /// Scored layers; `queries.layers[i]` belongs to `layers[i]`.
    pub layers: &'a [LayerDesc],
    pub queries: &'a SeqQueries,
    pub seed: u64,
    /// Score by attention probability (per-query log-softmax over the cells) instead of logit.
    pub prob: bool,
    /// Archived cells scored after the cache's (recall candidates); their columns follow the
    /// cells' in every row.
    pub extra: Option<ExtraKeys<'a>>,
    /// `Some(e)`: the pass evicts at most `e` of these cells, chosen by the largest score over
    /// the rows (`reduce=max`), and reads no score otherwise. A scorer may then stop scoring a
    /// cell once it provably ranks above the `e` lowest; such a cell's rows hold a lower bound
    /// (`-inf` where unscored), which changes no eviction.
    pub prune_evict: Option<usize>,
}

/// Keys of archived cells: per scored layer, `n` rows of `n_head_kv * head_dim` values
/// (dequantised, as the cache stores them: post-RoPE, Hadamard-rotated when it is).
#[derive(Clone, Copy)]
pub struct ExtraKeys<'a> {
    pub n: usize,
    pub k: &'a [Vec<f32>],
}

/// A page's key summary for scored layer `li`: the element-wise box of its keys as (centre,
/// radius), `n_head_kv * head_dim` values each (see `archive.rs`).
pub type PageSummary<'s> = dyn Fn(usize, usize) -> (&'s [f32], &'s [f32]) + 's;

/// Rows of scores, each `n_cols` (= cells) long, stored contiguously and reused between passes.
#[derive(Debug, Default)]
pub struct ScoreRows {
    n_cols: usize,
    n_rows: usize,
    data: Vec<f32>,
}

impl ScoreRows {
    /// Drop all rows and set the row length.
    pub fn reset(&mut self, n_cols: usize) {
        self.n_cols = n_cols;
        self.n_rows = 0;
    }

    /// Append `k` zeroed rows and return them as one slice of `k * n_cols`.
    pub fn add_rows(&mut self, k: usize) -> &mut [f32] {
        let start = self.n_rows * self.n_cols;
        let end = start + k * self.n_cols;
        if self.data.len() < end {
            self.data.resize(end, 0.0);
        }
        self.n_rows += k;
        let rows = &mut self.data[start..end];
        rows.fill(0.0);
        rows
    }

    pub fn n_rows(&self) -> usize {
        self.n_rows
    }

    pub fn n_cols(&self) -> usize {
        self.n_cols
    }

    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.n_cols..(i + 1) * self.n_cols]
    }

    /// `out[c]` = the largest value of column c over the rows (`-inf` without rows); `out` is
    /// resized to `n_cols`.
    pub fn max_into(&self, out: &mut Vec<f32>) {
        out.clear();
        out.resize(self.n_cols, f32::NEG_INFINITY);
        fold_column_max(&self.data[..self.n_rows * self.n_cols], out);
    }
}

/// `out[c] = max(out[c], rows[r][c])` over the rows of `rows` (rows of `out.len()` values laid
/// end to end): the column maximum every reduction of score rows needs.
pub fn fold_column_max(rows: &[f32], out: &mut [f32]) {
    if out.is_empty() {
        return;
    }
    for row in rows.chunks_exact(out.len()) {
        out.iter_mut().zip(row).for_each(|(m, &v)| *m = m.max(v));
    }
}

/// Failure of a host callback while scoring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScoreError(pub String);

/// A policy's way of valuing cells.
pub trait Scorer: Send {
    fn score(
        &mut self,
        ctx: &ScoreCtx,
        host: &mut dyn Host,
        rows: &mut ScoreRows,
    ) -> Result<(), ScoreError>;

    /// Rows per (scored layer, kv head), in layer order, over `n_pages` archive pages: an upper
    /// bound of the logit the newest positioned queries (`attention::RECALL_QUERIES` of them)
    /// of the group give any key of the page, from `summary(page, layer)`. Returns false
    /// (nothing written) for a scorer that reads no queries.
    fn page_bounds(
        &mut self,
        _ctx: &ScoreCtx,
        _n_pages: usize,
        _summary: &PageSummary,
        _rows: &mut ScoreRows,
    ) -> bool {
        false
    }

    /// Rows as `page_bounds`'s, over the keys of `ctx.extra`: the largest logit the same
    /// queries give the key (the exact scores the bounds bound). Returns false (nothing
    /// written) for a scorer that reads no queries.
    fn extra_rows(&mut self, _ctx: &ScoreCtx, _rows: &mut ScoreRows) -> bool {
        false
    }

    /// Rows as `page_bounds`'s (reset first), over the cache's `ctx.cells`: the largest logit
    /// the same newest queries give each cell, which tells where the sequence reads from now.
    /// `ctx.prob`, `extra` and `prune_evict` are ignored. Returns false (nothing written) for a
    /// scorer that reads no queries.
    fn cell_rows(
        &mut self,
        _ctx: &ScoreCtx,
        _host: &mut dyn Host,
        _rows: &mut ScoreRows,
    ) -> Result<bool, ScoreError> {
        Ok(false)
    }

    /// After a `score` with `ctx.prob`: each column's largest raw logit over every row and
    /// query (the rows hold log probabilities then). The archive's per-step recall compares
    /// raw logits, so it needs these for the cells a pass keeps. `None` for a scorer that
    /// keeps no logits or after a pass without `prob`.
    fn raw_max(&self) -> Option<&[f32]> {
        None
    }
}

/// The scorer of a policy.
pub fn for_policy(policy: Policy) -> Box<dyn Scorer> {
    match policy {
        Policy::None => Box::new(PositionScorer::none()),
        Policy::Beacon => Box::new(QueryScorer::beacon()),
        Policy::Recent => Box::new(QueryScorer::recent()),
        Policy::Streaming => Box::new(PositionScorer::streaming()),
        Policy::Random => Box::new(PositionScorer::random()),
    }
}
