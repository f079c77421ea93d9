//! `beacon` (the method): FPS beacons rotated to the scoring position plus the recent queries of
//! the FPS buffer at their own positions; per kv head, the max attention logit over the group's
//! query heads and queries.

use super::{AttentionKernel, ScoreCtx, ScoreError, ScoreRows, Scorer};
use crate::host::Host;
use crate::queries::LayerQueries;

#[derive(Default)]
pub struct BeaconScorer {
    kernel: AttentionKernel,
}

fn beacon_queries(l: &LayerQueries, h: usize, m_pos: i32, each: &mut dyn FnMut(&[f32], i32)) {
    let d = l.head_dim();
    for q in l.beacons(h).chunks_exact(d) {
        each(q, m_pos);
    }
    let (qs, pos) = l.recent(h);
    for (q, &p) in qs.chunks_exact(d).zip(pos) {
        each(q, p);
    }
}

impl Scorer for BeaconScorer {
    fn score(
        &mut self,
        ctx: &ScoreCtx,
        host: &mut dyn Host,
        rows: &mut ScoreRows,
    ) -> Result<(), ScoreError> {
        self.kernel.run(ctx, host, rows, beacon_queries)
    }
}
