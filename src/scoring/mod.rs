//! Scorers: one importance value per (scored layer, kv head) and cell of one sequence.
//!
//! Every policy is a scorer; `reduce` folds the rows into one score per cell and `select` decides
//! what to evict, so policies differ only here. `attention/` serves the query-driven policies
//! (`beacon`, `recent`, and `rkv` with its key-similarity term from `redundancy.rs`),
//! `position.rs` those that read positions only (`streaming`, `random`, `none`). `rows.rs`,
//! `reduce.rs`, `redundancy.rs` and `select.rs` know nothing of scorers.

mod attention;
pub mod position;
pub mod reduce;
mod redundancy;
mod rows;
pub mod select;

use crate::config::Policy;
use crate::host::{Host, LayerDesc};
use crate::queries::SeqQueries;

pub use attention::{PageSummary, QueryScorer, RkvScorer};
pub use position::PositionScorer;
pub use rows::{fold_column_max, ScoreRows};

/// What a scorer sees of one sequence during a compression pass. Built by [`ScoreCtx::new`]
/// (no cells, logits, nothing archived, no pruning) and the `with_*` methods.
#[derive(Clone, Copy)]
pub struct ScoreCtx<'a> {
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

impl<'a> ScoreCtx<'a> {
    /// A context over no cells at scoring position `m_pos`, scoring logits, with no archived
    /// keys and no pruning.
    pub fn new(
        stream: u32,
        layers: &'a [LayerDesc],
        queries: &'a SeqQueries,
        m_pos: i32,
        seed: u64,
    ) -> Self {
        ScoreCtx {
            stream,
            cells: &[],
            pos: &[],
            m_pos,
            layers,
            queries,
            seed,
            prob: false,
            extra: None,
            prune_evict: None,
        }
    }

    /// The same context over `cells` at positions `pos` (equal lengths, position order).
    pub fn with_cells(self, cells: &'a [u32], pos: &'a [i32]) -> Self {
        debug_assert_eq!(cells.len(), pos.len());
        ScoreCtx { cells, pos, ..self }
    }

    pub fn with_prob(self, prob: bool) -> Self {
        ScoreCtx { prob, ..self }
    }

    pub fn with_extra(self, extra: Option<ExtraKeys<'a>>) -> Self {
        ScoreCtx { extra, ..self }
    }

    pub fn with_prune_evict(self, prune_evict: Option<usize>) -> Self {
        ScoreCtx {
            prune_evict,
            ..self
        }
    }
}

/// Keys of archived cells: per scored layer, `n` rows of `n_head_kv * head_dim` values
/// (dequantised, as the cache stores them: post-RoPE, Hadamard-rotated when it is).
#[derive(Clone, Copy)]
pub struct ExtraKeys<'a> {
    pub n: usize,
    pub k: &'a [Vec<f32>],
}

/// Failure of a host callback while scoring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScoreError(pub String);

/// A policy's way of valuing cells.
pub trait Scorer: Send {
    /// Append rows of scores to `rows`, which the caller reset to one column per cell of
    /// `ctx.cells` and per key of `ctx.extra` (in that order). A scorer whose rows are not its
    /// raw logits says so on `rows` (`keep_raw_max`, `raw_unknown`).
    fn score(
        &mut self,
        ctx: &ScoreCtx,
        host: &mut dyn Host,
        rows: &mut ScoreRows,
    ) -> Result<(), ScoreError>;
}

/// The scorer of a configured policy. The query-driven one of `beacon` and `recent` stays
/// reachable as a [`QueryScorer`], which the archive also asks where the sequence reads from.
pub enum PolicyScorer {
    Queries(Box<QueryScorer>),
    Rkv(Box<RkvScorer>),
    Positions(PositionScorer),
}

impl PolicyScorer {
    /// The query-driven scorer of `beacon` and `recent`, `None` for the other policies.
    pub fn query_scorer(&mut self) -> Option<&mut QueryScorer> {
        match self {
            PolicyScorer::Queries(q) => Some(q.as_mut()),
            PolicyScorer::Rkv(_) | PolicyScorer::Positions(_) => None,
        }
    }
}

impl Scorer for PolicyScorer {
    fn score(
        &mut self,
        ctx: &ScoreCtx,
        host: &mut dyn Host,
        rows: &mut ScoreRows,
    ) -> Result<(), ScoreError> {
        match self {
            PolicyScorer::Queries(q) => q.score(ctx, host, rows),
            PolicyScorer::Rkv(r) => r.score(ctx, host, rows),
            PolicyScorer::Positions(p) => p.score(ctx, host, rows),
        }
    }
}

/// The scorer of a policy.
pub fn for_policy(policy: Policy) -> PolicyScorer {
    match policy {
        Policy::None => PolicyScorer::Positions(PositionScorer::none()),
        Policy::Beacon => PolicyScorer::Queries(Box::new(QueryScorer::beacon())),
        Policy::Recent => PolicyScorer::Queries(Box::new(QueryScorer::recent())),
        Policy::Streaming => PolicyScorer::Positions(PositionScorer::streaming()),
        Policy::Random => PolicyScorer::Positions(PositionScorer::random()),
        Policy::Rkv => PolicyScorer::Rkv(Box::default()),
    }
}
