//! `none`: never compresses; the engine only keeps statistics. Scores are all equal.

use super::{ScoreCtx, ScoreError, ScoreRows, Scorer};
use crate::host::Host;

pub struct NoneScorer;

impl Scorer for NoneScorer {
    fn score(
        &mut self,
        _: &ScoreCtx,
        _: &mut dyn Host,
        rows: &mut ScoreRows,
    ) -> Result<(), ScoreError> {
        rows.add_rows(1);
        Ok(())
    }
}
