//! `recent` (the RPC / R-KV / SnapKV-at-decode family): the last `n_recent` queries only, each at
//! its own position.

use super::{AttentionKernel, ScoreCtx, ScoreError, ScoreRows, Scorer};
use crate::host::Host;
use crate::queries::LayerQueries;

#[derive(Default)]
pub struct RecentScorer {
    kernel: AttentionKernel,
}

fn recent_queries(l: &LayerQueries, h: usize, _m_pos: i32, each: &mut dyn FnMut(&[f32], i32)) {
    let (qs, pos) = l.ring(h);
    for (q, &p) in qs.chunks_exact(l.head_dim()).zip(pos) {
        each(q, p);
    }
}

impl Scorer for RecentScorer {
    fn score(
        &mut self,
        ctx: &ScoreCtx,
        host: &mut dyn Host,
        rows: &mut ScoreRows,
    ) -> Result<(), ScoreError> {
        self.kernel.run(ctx, host, rows, recent_queries)
    }
}
