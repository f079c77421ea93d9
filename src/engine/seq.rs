//! Per-sequence state: phase, query stores, statistics, archive, recall bookkeeping and token
//! ids, built in one place and trimmed when the host removes positions.

use super::reuse::PromptMarks;
use super::Engine;
use crate::archive::tokens::TokenTrail;
use crate::archive::{Layout, SeqArchive, SeqRecall};
use crate::config::Params;
use crate::host::LayerDesc;
use crate::persist::{SavedSeq, SeqParts};
use crate::queries::SeqQueries;
use crate::scoring::ScoreCtx;
use crate::stats::SeqStats;

/// Prompt until the first decode call that brings exactly one token to the sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    Prompt,
    Decode,
}

#[derive(Clone, Debug)]
pub(super) struct SeqState {
    pub(super) phase: Phase,
    /// The last batch asked for logits of several tokens in the decode phase (speculative
    /// verification): the host may roll the rejected ones back with seq_rm, so compression waits
    /// for the next batch (compressing now could evict accepted tokens and keep rejected ones).
    pub(super) verifying: bool,
    /// Prompt length, fixed when the decode phase starts.
    pub(super) prompt_len: usize,
    pub(super) queries: SeqQueries,
    pub(super) stats: SeqStats,
    /// Evicted cells kept for recall (empty without an archive).
    pub(super) archive: SeqArchive,
    /// Recall bookkeeping of the sequence.
    pub(super) recall: SeqRecall,
    /// Token ids by position (recorded only while the archive recalls by tokens).
    pub(super) trail: TokenTrail,
    /// Query stores at grid positions of the prompt, for exact prompt reuse (`reuse.rs`).
    pub(super) marks: PromptMarks,
    /// The sequence's own budget and policy when the host set them (`limits.rs`).
    pub(super) own: Option<Box<Params>>,
}

impl SeqState {
    /// A sequence that has seen nothing, with the context's (empty) query stores.
    pub(super) fn new(queries: SeqQueries) -> Self {
        SeqState {
            phase: Phase::Prompt,
            verifying: false,
            prompt_len: 0,
            queries,
            stats: SeqStats::new(),
            archive: SeqArchive::default(),
            recall: SeqRecall::default(),
            trail: TokenTrail::default(),
            marks: PromptMarks::default(),
            own: None,
        }
    }

    /// A sequence restored from its saved parts (no verification pending).
    pub(super) fn restored(saved: SavedSeq) -> Self {
        let mut state = SeqState::new(saved.queries);
        state.phase = if saved.decode {
            Phase::Decode
        } else {
            Phase::Prompt
        };
        state.prompt_len = saved.prompt_len;
        state.stats = saved.stats;
        state.archive = saved.archive;
        state.trail = saved.trail;
        state.recall = saved.recall;
        state
    }

    /// The parts a saved state holds.
    pub(super) fn parts(&self) -> SeqParts<'_> {
        SeqParts {
            decode: self.phase == Phase::Decode,
            prompt_len: self.prompt_len,
            stats: &self.stats,
            queries: &self.queries,
            archive: &self.archive,
            trail: &self.trail,
            recall: &self.recall,
        }
    }

    /// The scoring context of this sequence (over no cells yet) with the scored `layers`: the
    /// scoring position follows both the largest position seen and the listed cells' `pos`
    /// (position order; empty between passes).
    pub(super) fn score_ctx<'a>(
        &'a self,
        layers: &'a [LayerDesc],
        stream: u32,
        pos: &[i32],
        seed: u64,
    ) -> ScoreCtx<'a> {
        let after_seen = self.stats.pos_max + 1;
        let m_pos = pos.last().map_or(after_seen, |&p| (p + 1).max(after_seen));
        ScoreCtx::new(stream, layers, &self.queries, m_pos, seed)
    }

    /// The counters, with the archive's figures read from the archive itself.
    pub(super) fn stats(&self) -> SeqStats {
        SeqStats {
            archived: self.archive.n_cells() as u64,
            archive_bytes: (self.archive.bytes() + self.trail.bytes()) as u64,
            archive_dropped: self.archive.dropped,
            ..self.stats.clone()
        }
    }

    /// Forget positions `lo <= pos < hi` (`hi == i32::MAX`: to the end), which the host
    /// removed: from the query stores, the archive (with `layout`), the held recalls and the
    /// token ids; a removed tail also lowers `pos_max` and the prompt length.
    pub(super) fn remove_range(&mut self, layout: Option<&Layout>, lo: i32, hi: i32) {
        self.queries.remove_positions(lo, hi);
        if let Some(layout) = layout {
            self.archive.remove_range(layout, lo, hi);
        }
        self.recall.held.retain(|&p| p < lo || p >= hi);
        self.trail.remove_range(lo, hi);
        self.marks.truncate(lo);
        if hi == i32::MAX {
            self.stats.pos_max = self.stats.pos_max.min(lo - 1);
            self.prompt_len = self.prompt_len.min(lo as usize);
        }
    }
}

impl Engine {
    /// The state of `seq`, created on first use.
    pub(super) fn seq_entry(&mut self, seq: i32) -> &mut SeqState {
        if !self.seqs.contains_key(&seq) {
            let state = SeqState::new(self.new_queries());
            self.seqs.insert(seq, state);
        }
        self.seqs.get_mut(&seq).expect("inserted above")
    }
}
