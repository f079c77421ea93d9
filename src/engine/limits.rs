//! A sequence's own budget and policy (one request of a server): set by the host, kept in the
//! sequence's state until the sequence is removed, and read by the hooks and passes in place of
//! the context's (`config::Params::for_sequence` says what may be set); and the prefix a pass
//! protects.

use super::fallback::first;
use super::seq::Phase;
use super::Engine;
use crate::config::{Params, Policy, Prefix, PromptMode};
use crate::host::{Host, LOG_WARN};

/// What the hooks and passes read of the settings a sequence runs with.
#[derive(Clone, Copy, Debug)]
pub(super) struct SeqLimits {
    /// Most cells the sequence may hold now: its budget plus `prompt_cells`.
    pub(super) budget: usize,
    /// Cells left after a pass (`effective_min` plus `prompt_cells`).
    pub(super) min: usize,
    /// The budget alone.
    pub(super) own_budget: usize,
    /// Prompt cells the sequence may hold beyond its budget now: with `prompt=keep` the
    /// prompt's first cells (up to `prompt_max`), kept whole; with `prompt=window` the room to
    /// read the prompt, until its end.
    pub(super) prompt_cells: usize,
    /// Most cells `prefix=prompt` protects (`effective_prefix_max`).
    pub(super) prefix_max: usize,
    pub(super) policy: Policy,
}

impl Engine {
    /// The limits `seq` runs with: its own when the host set them, else the context's.
    pub(super) fn limits(&self, seq: i32) -> SeqLimits {
        let state = self.seqs.get(&seq);
        let p = state.and_then(|s| s.own.as_deref()).unwrap_or(&self.params);
        // the prompt's room is the context's: the host sized its cache with it
        let room = self.params.prompt_room();
        let prompt_cells = match (self.params.prompt_mode, state) {
            (PromptMode::Inside, _) | (_, None) => 0,
            (PromptMode::Keep, Some(s)) => {
                let prompt = match s.phase {
                    Phase::Decode => s.prompt_len,
                    Phase::Prompt => (s.stats.pos_max + 1).max(0) as usize,
                };
                prompt.min(room)
            }
            (PromptMode::Window, Some(s)) => match s.phase {
                Phase::Prompt => room,
                Phase::Decode => 0,
            },
        };
        SeqLimits {
            budget: p.budget + prompt_cells,
            min: p.effective_min() + prompt_cells,
            own_budget: p.budget,
            prompt_cells,
            prefix_max: p.effective_prefix_max(),
            policy: p.policy,
        }
    }

    /// Protected prefix of a sequence. `prefix=N` protects the first N cells; `prefix=prompt`
    /// the prompt (the positions seen so far while it streams in), at most `prefix_max` cells.
    /// Either way it is capped so that everything selection protects (prefix, window, and the
    /// newest cell even when `window` is 0) fits in `budget_min`.
    pub(super) fn effective_prefix(&mut self, seq: i32, host: &mut dyn Host) -> usize {
        // validate() guarantees min >= window + 1 (for a sequence's own settings too), so this
        // does not underflow.
        let limits = self.limits(seq);
        let cap = limits.min - self.params.window.max(1);
        let Some(state) = self.seqs.get(&seq) else {
            return 0;
        };
        let wanted = match self.params.prefix {
            // the kept prompt is protected whole, whatever the prefix setting
            _ if self.params.prompt_mode == PromptMode::Keep => limits.prompt_cells,
            Prefix::First(n) => n,
            Prefix::Prompt => {
                let prompt = match state.phase {
                    Phase::Decode => state.prompt_len,
                    Phase::Prompt => (state.stats.pos_max + 1).max(0) as usize,
                };
                prompt.min(limits.prefix_max)
            }
        };
        if wanted > cap && first(&mut self.warned.prefix_cap) {
            host.log(
                LOG_WARN,
                &format!(
                    "beaconkv: protected prefix of {wanted} cells capped to {cap} (min - window)"
                ),
            );
        }
        wanted.min(cap)
    }

    /// Run `seq` with `budget` cells and `policy` from now on (`None`: the context's; both
    /// `None`: the context's settings again). `n_ctx_seq`: the most positions `seq` may reach,
    /// if known (policy `none` needs it). Nothing changes on error. The setting lasts until the
    /// host removes the whole sequence or sets another.
    #[cfg(any(test, feature = "testing"))]
    pub fn set_seq_override(
        &mut self,
        seq: i32,
        budget: Option<usize>,
        policy: Option<Policy>,
        n_ctx_seq: Option<usize>,
    ) -> Result<(), crate::config::ConfigError> {
        let own = self.params.for_sequence(budget, policy, n_ctx_seq)?;
        self.set_seq_params(seq, own);
        Ok(())
    }

    /// Run `seq` with `own`: settings `Params::for_sequence` derived from the context's (the
    /// caller checked them).
    pub fn set_seq_params(&mut self, seq: i32, own: Params) {
        if own == self.params {
            if let Some(state) = self.seqs.get_mut(&seq) {
                state.own = None;
            }
        } else {
            self.seq_entry(seq).own = Some(Box::new(own));
        }
    }

    /// The settings `seq` runs with (the context's for a sequence without its own).
    pub fn seq_params(&self, seq: i32) -> Params {
        self.seqs
            .get(&seq)
            .and_then(|s| s.own.as_deref())
            .unwrap_or(&self.params)
            .clone()
    }
}
