//! A sequence's own budget and policy (one request of a server): set by the host, kept in the
//! sequence's state until the sequence is removed, and read by the hooks and passes in place of
//! the context's (`config::Params::for_sequence` says what may be set).

use super::Engine;
use crate::config::{Params, Policy};

/// What the hooks and passes read of the settings a sequence runs with.
#[derive(Clone, Copy, Debug)]
pub(super) struct SeqLimits {
    pub(super) budget: usize,
    /// Cells left after a pass (`effective_min`).
    pub(super) min: usize,
    /// Most cells `prefix=prompt` protects (`effective_prefix_max`).
    pub(super) prefix_max: usize,
    pub(super) policy: Policy,
}

impl Engine {
    /// The limits `seq` runs with: its own when the host set them, else the context's.
    pub(super) fn limits(&self, seq: i32) -> SeqLimits {
        let p = self
            .seqs
            .get(&seq)
            .and_then(|s| s.own.as_deref())
            .unwrap_or(&self.params);
        SeqLimits {
            budget: p.budget,
            min: p.effective_min(),
            prefix_max: p.effective_prefix_max(),
            policy: p.policy,
        }
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
