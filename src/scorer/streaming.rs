//! `streaming` (StreamingLLM): score = position, so selection keeps the sink prefix and the
//! newest cells.

use super::{ScoreCtx, ScoreError, ScoreRows, Scorer};
use crate::host::Host;

pub struct StreamingScorer;

impl Scorer for StreamingScorer {
    fn score(
        &mut self,
        ctx: &ScoreCtx,
        _: &mut dyn Host,
        rows: &mut ScoreRows,
    ) -> Result<(), ScoreError> {
        for (s, &p) in rows.add_rows(1).iter_mut().zip(ctx.pos) {
            *s = p as f32;
        }
        Ok(())
    }
}
