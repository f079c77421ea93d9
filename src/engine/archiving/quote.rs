//! Recall at the end of a prompt or user turn: when the turn quotes a phrase that occurred once
//! before, the archived positions of that passage come back before the turn is computed.

use super::recall::archived_in;
use crate::engine::fallback::Scoring;
use crate::engine::Engine;
use crate::host::Host;

/// The last positions of a batch whose phrases a batch check looks up (a question's words
/// sit at the end of a user turn, before the chat template's few tokens).
const BATCH_TAIL: i32 = 32;

impl Engine {
    /// The positions whose end `batch_recall` looks up before a call of `n` tokens asking for
    /// `outputs` logits, whose ids span `span`: the end of a prompt or user turn, a batch of
    /// several tokens asking for one output (or an unknown number); or a lone token after
    /// chunks that asked for none (the last token of a prompt read in chunks: llama-server's
    /// 32k + 1), with the chunk before it. Not a chunk in the middle of a prompt (no output),
    /// a generation step or a batch asking for several tokens' logits.
    pub(in crate::engine) fn quote_span(
        &mut self,
        seq: i32,
        n: i32,
        outputs: Option<&i32>,
        span: Option<(i32, i32)>,
    ) -> Option<(i32, i32)> {
        let recall = &mut self.seq_entry(seq).recall;
        let chunk = recall.chunk_start.take();
        let span = span?;
        if n > 1 && outputs == Some(&0) {
            recall.chunk_start = Some(span.0);
        }
        match n {
            1 => chunk.map(|first| (first, span.1)),
            _ if outputs.is_none_or(|&k| k == 1) => Some(span),
            _ => None,
        }
    }

    /// Before the end of a prompt or user turn is computed (positions `first..=last` of `seq`,
    /// see `quote_span`): when one of the last `BATCH_TAIL` tokens ends a phrase of
    /// `recall_match / 2` tokens (rounded up) that occurred exactly once before `first`, the
    /// archived positions of that phrase and of the `page` positions after it come back in place
    /// of the weakest cells the last pass kept, so that the question is read with the passage it
    /// quotes (the phrase's own archived tokens come back too). The phrase nearest the end with
    /// something archived after it wins.
    /// A decode step's check needs `recall_match` tokens: it runs every few steps of running
    /// text, where short phrases recur by chance; a turn's end is checked once, and a phrase
    /// that occurred only once points at one passage.
    pub(in crate::engine) fn batch_recall(
        &mut self,
        host: &mut dyn Host,
        seq: i32,
        (first, last): (i32, i32),
    ) {
        let n_match = self.params.recall_match.div_ceil(2);
        if n_match == 0 || self.scoring() != Scoring::Policy {
            return;
        }
        let (Some(layout), Some(state)) = (self.archive.as_ref(), self.seqs.get(&seq)) else {
            return;
        };
        if state.archive.is_empty() || state.recall.victims.is_empty() {
            return;
        }
        // (positions come from the host: no arithmetic that could overflow on them)
        let tail = last.saturating_sub(BATCH_TAIL - 1).max(first)..=last;
        let read_at = tail.rev().find_map(|p| {
            let q = state.trail.unique_earlier(p, n_match, first)?;
            let holes = q + 1 - n_match as i32..=q + layout.page as i32;
            let any = archived_in(&holes, layout, &state.archive).next().is_some();
            any.then_some(holes)
        });
        if read_at.is_some() {
            self.recall_at(host, seq, read_at);
        }
    }
}
