//! The decode hooks: what the engine does before a batch is placed, after a ubatch and a decode
//! call are computed, and when the host removes or copies positions of a sequence.

use super::fallback::Scoring;
use super::seq::{Phase, SeqState};
use super::{Engine, EngineError};
use crate::config::PromptMode;
use crate::host::Host;

impl Engine {
    /// Cell count of `seq` from the host (a count-only query: no listing, no sorting).
    pub(super) fn cell_count(
        &mut self,
        host: &mut dyn Host,
        seq: i32,
    ) -> Result<usize, EngineError> {
        let mut stream = 0;
        let n = host.seq_cells(seq, &mut [], &mut [], &mut stream);
        if n < 0 {
            return Err(self.host_error(host, format!("seq_cells({seq}) returned {n}")));
        }
        Ok(n as usize)
    }

    /// Hook: `n_new[i]` tokens are about to be placed for `seq_ids[i]`, `n_outputs[i]` of them
    /// requesting logits (when the host knows). Makes room (best effort: never below prefix +
    /// window; the host reports a placement failure itself).
    ///
    /// The prompt phase of a sequence ends at its first generation step: a call bringing one
    /// token, or one asking for logits of more than one token (speculative verification).
    /// A failing sequence does not keep the others from being served; the first error is
    /// returned.
    pub fn before_batch(
        &mut self,
        host: &mut dyn Host,
        seq_ids: &[i32],
        n_new: &[i32],
        n_outputs: Option<&[i32]>,
    ) -> Result<(), EngineError> {
        self.describe_final_layers(host);
        self.refresh_layers(host, false);
        let mut result = Ok(());
        for (i, (&seq, &n)) in seq_ids.iter().zip(n_new).enumerate() {
            let several_logits = n_outputs.is_some_and(|o| o.get(i).is_some_and(|&k| k > 1));
            let generating = n == 1 || several_logits;
            let keep_prompt = self.params.prompt_mode == PromptMode::Keep;
            let state = self.seq_entry(seq);
            if state.phase == Phase::Prompt && generating {
                state.phase = Phase::Decode;
                state.prompt_len = (state.stats.pos_max + 1).max(0) as usize;
            }
            state.verifying = state.phase == Phase::Decode && several_logits;
            // a new user turn (several tokens, no drafts): check the archive once it is computed
            state.recall.after_batch = state.phase == Phase::Decode && n > 1 && !several_logits;
            if state.recall.after_batch && keep_prompt {
                // with prompt=keep a turn's text is prompt too (a server request's prompt is the
                // whole conversation): what precedes the turn's end may be kept
                state.prompt_len = (state.stats.pos_max + 1).max(0) as usize + n.max(0) as usize;
            }
            let limits = self.limits(seq);
            if self.scoring_for(limits.policy) != Scoring::Off {
                let n = n.max(0) as usize;
                let made_room = self.cell_count(host, seq).and_then(|count| {
                    if count + n <= limits.budget {
                        return Ok(());
                    }
                    let target = limits.min.min(limits.budget.saturating_sub(n));
                    self.compress(host, seq, target).map(|_| ())
                });
                if result.is_ok() {
                    result = made_room;
                }
            }
            let span = self.seq_entry(seq).recall.batch_span.take();
            if let Some(span) = self.quote_span(seq, n, n_outputs.and_then(|o| o.get(i)), span) {
                self.batch_recall(host, seq, span);
            }
            let prefix = self.effective_prefix(seq, host);
            let allowed = self.limits(seq).budget;
            let st = &mut self.seq_entry(seq).stats;
            st.prefix_len = prefix;
            st.cells_allowed = allowed;
        }
        // (a span recorded for a sequence this call does not name is stale by the next one)
        for state in self.seqs.values_mut() {
            state.recall.batch_span = None;
        }
        result
    }

    /// Hook (before `before_batch`): the ids of a batch's tokens at their positions, which the
    /// archive's recall reads to tell a passage being re-read (see `tokens.rs`); `before_batch`
    /// then checks the batch's end for a phrase it quotes. Kept only while an archive is on.
    pub fn record_tokens(&mut self, pos: &[i32], seq_id: &[i32], tokens: &[i32]) {
        if self.params.archive == 0 || self.params.recall_match == 0 {
            return;
        }
        for ((&p, &s), &t) in pos.iter().zip(seq_id).zip(tokens) {
            let state = self.seq_entry(s);
            state.trail.record(p, t);
            let span = state.recall.batch_span.get_or_insert((p, p));
            *span = (span.0.min(p), span.1.max(p));
        }
    }

    /// Hook: a ubatch was computed. Records positions and captures queries.
    pub fn after_ubatch(
        &mut self,
        host: &mut dyn Host,
        pos: &[i32],
        seq_id: &[i32],
        q_row: &[i32],
    ) -> Result<(), EngineError> {
        self.describe_final_layers(host);
        for (&p, &s) in pos.iter().zip(seq_id) {
            let st = &mut self.seq_entry(s).stats;
            st.pos_max = st.pos_max.max(p);
            st.n_tokens += 1;
        }
        let captured = self.capture_queries(host, pos, seq_id, q_row);
        if captured.is_ok() && self.params.policy.uses_queries() {
            for &s in seq_id {
                let state = self.seq_entry(s);
                if state.phase == Phase::Prompt {
                    state
                        .marks
                        .after_ubatch(state.stats.pos_max + 1, &state.queries);
                }
            }
        }
        captured
    }

    /// Hook: end of a decode call. Sequences above their budget are compressed to their `min`;
    /// with an archive, the others may run a swap pass (see `archiving/recall.rs`); every
    /// sequence's cell count is refreshed. The first error is returned.
    pub fn after_decode(&mut self, host: &mut dyn Host) -> Result<(), EngineError> {
        let mut ids = std::mem::take(&mut self.scratch.ids);
        ids.clear();
        ids.extend(self.seqs.keys());
        let mut result = Ok(());
        for &seq in &ids {
            let verifying = self.seq_entry(seq).verifying;
            let limits = self.limits(seq);
            let evicting = self.scoring_for(limits.policy) != Scoring::Off;
            let counted = self.cell_count(host, seq).and_then(|count| {
                if evicting && count > limits.budget && !verifying {
                    self.compress(host, seq, limits.min)
                } else if !verifying {
                    self.recall_step(host, seq, count)
                } else {
                    Ok(count)
                }
            });
            match counted {
                Ok(count) => {
                    let st = &mut self.seq_entry(seq).stats;
                    st.cells_in_use = count;
                    // drafts awaiting verification are not kept cells: the peak counts kept ones
                    if !verifying {
                        st.cells_peak = st.cells_peak.max(count);
                    }
                }
                Err(e) if result.is_ok() => result = Err(e),
                Err(_) => {}
            }
        }
        self.scratch.ids = ids;
        result
    }

    pub fn seq_removed(&mut self, seq: i32, p0: i32, p1: i32) {
        let lo = p0.max(0);
        let hi = if p1 < 0 { i32::MAX } else { p1 };
        if hi <= lo {
            return; // the host removed nothing (llama.cpp's seq_rm with p1 <= p0)
        }
        if lo == 0 && hi == i32::MAX {
            if seq < 0 {
                self.seqs.clear();
            } else {
                self.seqs.remove(&seq);
            }
            return;
        }
        let layout = self.archive.as_ref();
        let uses_queries = self.params.policy.uses_queries();
        let trim = |state: &mut SeqState| {
            if hi == i32::MAX {
                state.roll_back(lo, uses_queries);
            }
            state.remove_range(layout, lo, hi)
        };
        if seq < 0 {
            self.seqs.values_mut().for_each(trim);
        } else if let Some(state) = self.seqs.get_mut(&seq) {
            trim(state);
        }
    }

    /// The host copied positions `[p0, p1)` of `seq_src` into `seq_dst` (`p0 < 0`: from 0;
    /// `p1 < 0`: to the end). A whole copy (llama-server's fork) replaces the destination's
    /// state with the source's. A range copy into a sequence the engine does not know gives it
    /// the source's state restricted to the range (beacons carry no position and are kept); a
    /// range copy into a known sequence keeps the destination's query state (two beacon sets
    /// cannot be merged) and raises its `pos_max` to the copied range.
    pub fn seq_copied(&mut self, seq_src: i32, seq_dst: i32, p0: i32, p1: i32) {
        if seq_src == seq_dst || seq_src < 0 || seq_dst < 0 {
            return;
        }
        let Some(src) = self.seqs.get(&seq_src) else {
            return;
        };
        let lo = p0.max(0);
        let hi = if p1 < 0 { i32::MAX } else { p1 };
        let whole = lo == 0 && hi == i32::MAX;
        let copied_max = src.stats.pos_max.min(hi.saturating_sub(1));
        if whole || !self.seqs.contains_key(&seq_dst) {
            let mut state = src.clone();
            if !whole {
                state.queries.remove_positions(0, lo);
                state.queries.remove_positions(hi, i32::MAX);
                if let Some(layout) = &self.archive {
                    state.archive.remove_range(layout, 0, lo);
                    state.archive.remove_range(layout, hi, i32::MAX);
                }
                state.trail.remove_range(0, lo);
                state.trail.remove_range(hi, i32::MAX);
                state.stats.pos_max = copied_max;
                state.prompt_len = state.prompt_len.min(hi as usize);
            }
            self.seqs.insert(seq_dst, state);
        } else if let Some(dst) = self.seqs.get_mut(&seq_dst) {
            dst.stats.pos_max = dst.stats.pos_max.max(copied_max);
        }
    }
}
