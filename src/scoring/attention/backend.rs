//! Scoring on the host's backend (`LayerDesc::k_backend`): the prepared queries of every such
//! layer go to the host in one `Host::score_keys` call per pass, and one row per (layer, kv head)
//! comes back.

use super::kernel::AttentionKernel;
use super::sources::QuerySource;
use crate::host::Host;
use crate::scoring::{ScoreCtx, ScoreError};

/// The lowest log probability a backend's score reports: ln of f32's smallest subnormal. The
/// backend takes the log of the largest probability, so a cell whose probability underflows under
/// every query of its group would score -inf (and make `reduce=zmean`'s mean NaN); it scores this
/// instead, below every cell with a representable probability.
pub(super) const LOG_PROB_FLOOR: f32 = -103.28;

/// One `Host::score_keys` call per pass for every layer scored on the host's backend: the
/// prepared queries of those layers end to end, and the rows that come back.
#[derive(Default)]
pub(super) struct BackendScores {
    pub(super) layers: Vec<i32>,
    pub(super) n_query: Vec<i32>,
    pub(super) queries: Vec<f32>,
    pub(super) out: Vec<f32>,
    /// Per scored layer: where its `[n_head_kv][cells]` rows start in `out` (`None`: not
    /// scored there).
    pub(super) at: Vec<Option<usize>>,
}

impl AttentionKernel {
    /// Every `k_backend` layer's rows of the pass's cells in one `Host::score_keys` call, into
    /// `backend.out` (`backend.at` says where each layer's rows start).
    pub(super) fn score_on_backend(
        &mut self,
        ctx: &ScoreCtx,
        host: &mut dyn Host,
        source: QuerySource,
    ) -> Result<(), ScoreError> {
        let n = ctx.cells.len();
        let mut b = std::mem::take(&mut self.backend);
        b.layers.clear();
        b.n_query.clear();
        b.queries.clear();
        b.at.clear();
        let mut rows_len = 0;
        for (layer, lq) in ctx.layers.iter().zip(&ctx.queries.layers) {
            let per_group = if layer.k_backend {
                self.prepare_queries(layer, lq, ctx.m_pos, source)
            } else {
                0
            };
            if per_group == 0 {
                b.at.push(None);
                continue;
            }
            b.at.push(Some(rows_len));
            rows_len += layer.n_head_kv * n;
            b.layers.push(layer.host_index);
            b.n_query.push(per_group as i32);
            b.queries.extend_from_slice(&self.queries);
        }
        b.out.resize(rows_len, 0.0);
        let rc = if b.layers.is_empty() || n == 0 {
            0
        } else {
            host.score_keys(
                ctx.stream, ctx.cells, &b.layers, &b.n_query, &b.queries, ctx.prob, &mut b.out,
            )
        };
        let ok = rc >= 0;
        if ok && ctx.prob {
            // a cell whose probability underflows f32 under every query comes back as log(0)
            for v in &mut b.out {
                *v = v.max(LOG_PROB_FLOOR);
            }
        }
        let layers = b.layers.len();
        self.backend = b;
        if ok {
            Ok(())
        } else {
            Err(ScoreError(format!(
                "score_keys({layers} layers, {n} cells) failed with {rc}"
            )))
        }
    }
}
