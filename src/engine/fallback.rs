//! Who scores a pass (the policy's scorer, or position-only eviction once it cannot), and the
//! warnings the host log hears once per context.

use std::collections::BTreeSet;

use super::{Engine, EngineError};
use crate::config::Policy;
use crate::host::{Host, LOG_ERROR};
use crate::scoring::{self, PolicyScorer, PositionScorer};

/// How compression passes score cells now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Scoring {
    /// Policy `none`: nothing is evicted.
    Off,
    /// The configured policy's scorer.
    Policy,
    /// Position only (prefix + newest cells), in place of a policy that cannot score.
    Positions,
}

/// The scorers of a context.
pub(super) struct Scorers {
    /// The configured policy (`policy` is its scorer).
    own: Policy,
    pub(super) policy: PolicyScorer,
    /// Scorers of other policies that sequences run (`limits.rs`), made on first use.
    others: Vec<(Policy, PolicyScorer)>,
    /// Scores by position when the configured policy cannot.
    pub(super) positions: PositionScorer,
    /// Why the configured policy stopped for good (a panic or a failed read); `None` while it
    /// runs.
    pub(super) failure: Option<String>,
}

impl Scorers {
    pub(super) fn new(policy: Policy) -> Self {
        Scorers {
            own: policy,
            policy: scoring::for_policy(policy),
            others: Vec::new(),
            positions: PositionScorer::streaming(),
            failure: None,
        }
    }

    /// The scorer of `policy`: the configured one, or another a sequence runs.
    pub(super) fn of(&mut self, policy: Policy) -> &mut PolicyScorer {
        if policy == self.own {
            return &mut self.policy;
        }
        let i = match self.others.iter().position(|(p, _)| *p == policy) {
            Some(i) => i,
            None => {
                self.others.push((policy, scoring::for_policy(policy)));
                self.others.len() - 1
            }
        };
        &mut self.others[i].1
    }
}

/// Warnings given once per context (each flag is set when its warning is logged).
#[derive(Default)]
pub(super) struct Warnings {
    pub(super) prefix_cap: bool,
    pub(super) no_layers: bool,
    /// The first failing host callback is logged; later ones only reach the caller.
    pub(super) host: bool,
    /// Layers already reported as unusable (each is reported once).
    pub(super) layers: BTreeSet<i32>,
    pub(super) archive: bool,
}

/// True the first time it is called on `flag` (which it sets): "warn now".
pub(super) fn first(flag: &mut bool) -> bool {
    !std::mem::replace(flag, true)
}

impl Engine {
    /// Whether the configured policy runs: not replaced by position-only eviction after a
    /// failure, and (for a query-driven policy) with at least one layer it can read.
    pub fn is_enabled(&self) -> bool {
        self.scorers.failure.is_none()
            && (!self.params.policy.uses_queries() || !self.layers.descs.is_empty())
    }

    /// Whether compression passes evict by position only in place of the configured policy.
    pub fn in_fallback(&self) -> bool {
        self.scoring() == Scoring::Positions
    }

    /// Why the configured policy stopped for good, if it did.
    #[cfg(any(test, feature = "testing"))]
    pub fn failure(&self) -> Option<&str> {
        self.scorers.failure.as_deref()
    }

    pub(super) fn scoring(&self) -> Scoring {
        self.scoring_for(self.params.policy)
    }

    /// How passes score the cells of a sequence that runs `policy` (see `limits.rs`): a policy a
    /// sequence may run reads nothing the configured one does not, so it runs while that one does.
    pub(super) fn scoring_for(&self, policy: Policy) -> Scoring {
        if policy == Policy::None {
            Scoring::Off
        } else if self.is_enabled() {
            Scoring::Policy
        } else {
            Scoring::Positions
        }
    }

    /// The configured policy cannot go on (`reason`): from now on passes evict by position
    /// only. Said once through the host log; later calls change nothing.
    pub fn enter_fallback(&mut self, host: &mut dyn Host, reason: &str) {
        if self.scorers.failure.is_some() {
            return;
        }
        self.scorers.failure = Some(reason.to_string());
        if self.params.policy != Policy::None {
            host.log(
                LOG_ERROR,
                &format!(
                    "{reason}; policy {} is replaced by position-only eviction (prefix + newest \
                     cells) for the rest of this context",
                    self.params.policy.name()
                ),
            );
        }
    }

    /// A failed host callback that does not stop the policy (counting, listing or evicting
    /// cells): the first is logged, every one is returned to the caller.
    pub(super) fn host_error(&mut self, host: &mut dyn Host, msg: String) -> EngineError {
        let err = EngineError::Host(msg);
        if first(&mut self.warned.host) {
            host.log(
                LOG_ERROR,
                &format!("{err} (further host errors are only returned, not logged)"),
            );
        }
        err
    }
}
