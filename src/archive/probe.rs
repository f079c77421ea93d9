//! What the archive asks of a scorer: where the newest queries point among archived pages,
//! archived keys and cached cells. Only a scorer that reads queries can answer; position-only
//! policies have no probe and never recall.

use crate::host::Host;
use crate::scoring::{PageSummary, QueryScorer, ScoreCtx, ScoreError, ScoreRows};

/// The recall probe. Rows are per (scored layer, kv head), in layer order, under the
/// `scoring::RECALL_QUERIES` newest queries that carry a position.
pub trait RecallProbe {
    /// Rows over `n_pages` archive pages: an upper bound of the logit the queries of the group
    /// give any key of the page, from `summary(page, layer)`.
    fn page_bounds(
        &mut self,
        ctx: &ScoreCtx,
        n_pages: usize,
        summary: &PageSummary,
        rows: &mut ScoreRows,
    );

    /// Rows as `page_bounds`'s over the keys of `ctx.extra`: the largest logit the queries give
    /// each key (the exact scores the bounds bound).
    fn key_rows(&mut self, ctx: &ScoreCtx, rows: &mut ScoreRows);

    /// Rows as `page_bounds`'s (reset first) over the cache's `ctx.cells`: the largest logit
    /// the queries give each cell, which tells where the sequence reads from now.
    fn cell_rows(
        &mut self,
        ctx: &ScoreCtx,
        host: &mut dyn Host,
        rows: &mut ScoreRows,
    ) -> Result<(), ScoreError>;
}

impl RecallProbe for QueryScorer {
    fn page_bounds(
        &mut self,
        ctx: &ScoreCtx,
        n_pages: usize,
        summary: &PageSummary,
        rows: &mut ScoreRows,
    ) {
        QueryScorer::page_bounds(self, ctx, n_pages, summary, rows)
    }

    fn key_rows(&mut self, ctx: &ScoreCtx, rows: &mut ScoreRows) {
        QueryScorer::key_rows(self, ctx, rows)
    }

    fn cell_rows(
        &mut self,
        ctx: &ScoreCtx,
        host: &mut dyn Host,
        rows: &mut ScoreRows,
    ) -> Result<(), ScoreError> {
        QueryScorer::cell_rows(self, ctx, host, rows)
    }
}
