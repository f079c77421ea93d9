//! The query-driven scorers, `beacon` and `recent`, over one shared attention kernel, and
//! `rkv` (`rkv.rs`), which scores with the same kernel's queries and K reads.
//!
//! Per layer and kv head, a cell's score is the largest scaled attention logit any of the
//! group's queries gives it.
//!
//! - `beacon` (the method): FPS beacons rotated to the scoring position plus the recent queries of
//!   the FPS buffer at their own positions.
//! - `recent` (the RPC / R-KV / SnapKV-at-decode family): the last `n_recent` queries only, each
//!   at its own position.
//!
//! Queries are prepared once per pass into one contiguous matrix per layer (rotated to their
//! scoring position, Hadamard-rotated like the stored K, scaled by 1/sqrt(head_dim)); each K row
//! is then read and dequantised once and dotted against every query of its group, 16 cells at a
//! time (`kernels::max_dot_tile`; `kernels::dot_tile_all` when `score=prob` needs every logit). When
//! the pass only needs to know which cells are lowest, `run_pruned` stops scoring cells that can
//! no longer be among them.

mod backend;
mod kernel;
mod pruned;
mod rkv;
mod sources;

use crate::host::Host;
use crate::scoring::{ScoreCtx, ScoreError, ScoreRows, Scorer};
use sources::{beacon_queries, positioned_queries, recent_queries, QuerySource};

pub use kernel::{AttentionKernel, PageSummary};
pub use rkv::RkvScorer;

/// A policy scoring with captured queries: the kernel plus which queries it reads.
pub struct QueryScorer {
    kernel: AttentionKernel,
    source: QuerySource,
}

impl QueryScorer {
    pub fn beacon() -> Self {
        QueryScorer {
            kernel: AttentionKernel::default(),
            source: beacon_queries,
        }
    }

    pub fn recent() -> Self {
        QueryScorer {
            kernel: AttentionKernel::default(),
            source: recent_queries,
        }
    }
}

impl Scorer for QueryScorer {
    fn score(
        &mut self,
        ctx: &ScoreCtx,
        host: &mut dyn Host,
        rows: &mut ScoreRows,
    ) -> Result<(), ScoreError> {
        self.kernel.run(ctx, host, rows, self.source)
    }
}

/// What the archive's recall reads: the logits the `RECALL_QUERIES` newest positioned queries
/// give archived pages, archived keys and cached cells. Rows are per (scored layer, kv head), in
/// layer order.
impl QueryScorer {
    /// Rows over `n_pages` archive pages: an upper bound of the logit the newest positioned
    /// queries of the group give any key of the page, from `summary(page, layer)`.
    pub fn page_bounds(
        &mut self,
        ctx: &ScoreCtx,
        n_pages: usize,
        summary: &PageSummary,
        rows: &mut ScoreRows,
    ) {
        self.kernel
            .page_bound_rows(ctx, positioned_queries, n_pages, summary, rows);
    }

    /// Rows as `page_bounds`'s, over the keys of `ctx.extra`: the largest logit the same
    /// queries give the key (the exact scores the bounds bound).
    pub fn key_rows(&mut self, ctx: &ScoreCtx, rows: &mut ScoreRows) {
        self.kernel.extra_rows(ctx, positioned_queries, rows);
    }

    /// Rows as `page_bounds`'s (reset first), over the cache's `ctx.cells`: the largest logit
    /// the same newest queries give each cell, which tells where the sequence reads from now.
    /// `ctx.prob`, `extra` and `prune_evict` are ignored.
    pub fn cell_rows(
        &mut self,
        ctx: &ScoreCtx,
        host: &mut dyn Host,
        rows: &mut ScoreRows,
    ) -> Result<(), ScoreError> {
        rows.reset(ctx.cells.len());
        let ctx = ctx.with_prob(false).with_extra(None).with_prune_evict(None);
        self.kernel.run(&ctx, host, rows, positioned_queries)
    }
}
