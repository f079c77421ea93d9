//! The settings of one sequence that runs with its own budget or policy inside a context (one
//! request of a server): what may change, derived from the context's settings, and why a value is
//! refused.
//!
//! - The budget may only shrink (the host sized its cache for the context's) down to the smallest
//!   one the context's other settings allow; `min` and `prefix_max`, when the context sets them,
//!   scale with the budget.
//! - The policy may be the context's or one that reads nothing the context does not record:
//!   `beacon` keeps FPS beacons, `recent` and `rkv` a ring of the newest queries, the others
//!   nothing, so `streaming` and `random` run on every context and `beacon`, `recent`, `rkv` only
//!   on their own.
//! - `none` keeps every cell, so it is allowed only where a sequence cannot outgrow the cells
//!   sized for the budget: its logical context is known and within the budget (or the context
//!   itself evicts nothing).

use super::{ConfigError, Params, Policy};

impl Params {
    /// The settings of a sequence of a context with these settings that asks for `budget` cells
    /// and `policy` (`None`: the context's). `n_ctx_seq`: the most positions the sequence may
    /// reach, `None` when unknown. Errors name `budget` or `policy` and the allowed values.
    pub fn for_sequence(
        &self,
        budget: Option<usize>,
        policy: Option<Policy>,
        n_ctx_seq: Option<usize>,
    ) -> Result<Params, ConfigError> {
        let policy = policy.unwrap_or(self.policy);
        if let Some(why) = self.refuses_policy(policy, n_ctx_seq) {
            let allowed: Vec<&str> = Policy::ALL
                .into_iter()
                .filter(|&p| self.refuses_policy(p, n_ctx_seq).is_none())
                .map(Policy::name)
                .collect();
            return Err(ConfigError::new(
                "policy",
                format!("{why}; allowed here: {}", allowed.join(", ")),
            ));
        }
        let budget = budget.unwrap_or(self.budget);
        let lo = self.smallest_seq_budget(policy);
        if budget > self.budget || budget < lo {
            let why = if budget > self.budget {
                format!(
                    "{budget} exceeds the context's budget ({}), which the cache is sized for",
                    self.budget
                )
            } else {
                let rule = self
                    .scaled(budget, policy)
                    .validate()
                    .err()
                    .map_or(String::new(), |e| {
                        format!(" ({}: {})", e.key, first_clause(&e))
                    });
                format!("{budget} is below the smallest budget these settings allow, {lo}{rule}")
            };
            return Err(ConfigError::new(
                "budget",
                format!("{why}; allowed range {lo}..={}", self.budget),
            ));
        }
        Ok(self.scaled(budget, policy))
    }

    /// Why a sequence of this context cannot run `policy`, or `None` when it can.
    fn refuses_policy(&self, policy: Policy, n_ctx_seq: Option<usize>) -> Option<String> {
        let records = |p: Policy| match p {
            Policy::Beacon => "FPS beacons",
            Policy::Recent | Policy::Rkv => "a ring of the newest queries",
            _ => "no queries",
        };
        if policy.uses_queries() && policy != self.policy {
            return Some(format!(
                "{} scores with {}, and policy {} records {}",
                policy.name(),
                records(policy),
                self.policy.name(),
                records(self.policy)
            ));
        }
        if policy == Policy::None && self.policy != Policy::None {
            let fits = n_ctx_seq.is_some_and(|n| n <= self.budget);
            if !fits {
                let reach = n_ctx_seq.map_or("an unknown number of".to_string(), |n| n.to_string());
                return Some(format!(
                    "none keeps every cell, and a sequence may reach {reach} positions, more than \
                     the budget of {} cells the cache is sized for",
                    self.budget
                ));
            }
        }
        if let Err(e) = self.scaled(self.budget, policy).validate() {
            return Some(format!(
                "{} cannot run with these settings ({}: {})",
                policy.name(),
                e.key,
                e.message
            ));
        }
        None
    }

    /// The budgets a sequence running `policy` (allowed here) may ask for: from the smallest
    /// that passes every rule to the context's.
    pub fn seq_budget_range(&self, policy: Policy) -> (usize, usize) {
        (self.smallest_seq_budget(policy), self.budget)
    }

    /// The smallest budget with which `policy` (allowed here) passes every rule. Validity only
    /// grows with the budget (the protected cells are fixed, `min` grows with it), and the
    /// context's own budget passes, so a binary search finds it.
    fn smallest_seq_budget(&self, policy: Policy) -> usize {
        let (mut lo, mut hi) = (1, self.budget);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.scaled(mid, policy).validate().is_ok() {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        hi
    }

    /// These settings with `budget` and `policy`; a `min` or `prefix_max` the context sets keeps
    /// its share of the budget (at least 1, which keeps meaning "set").
    fn scaled(&self, budget: usize, policy: Policy) -> Params {
        let share = |v: usize| {
            if v == 0 {
                0
            } else {
                ((v as u128 * budget as u128 / self.budget.max(1) as u128) as usize).max(1)
            }
        };
        Params {
            policy,
            budget,
            budget_min: share(self.budget_min),
            prefix_max: share(self.prefix_max),
            ..self.clone()
        }
    }
}

/// A rule's message without the allowed range of the key it names (which the budget's range
/// replaces).
fn first_clause(e: &ConfigError) -> &str {
    e.message.split("; allowed").next().unwrap_or(&e.message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(spec: &str) -> Params {
        Params::parse(spec).unwrap()
    }

    #[test]
    fn the_context_itself_is_allowed_and_unchanged() {
        for spec in ["beacon", "recent,budget=256", "streaming,min=500", "none"] {
            let ctx = p(spec);
            assert_eq!(
                ctx.for_sequence(None, None, None),
                Ok(ctx.clone()),
                "{spec}"
            );
        }
    }

    #[test]
    fn smallest_budget_is_the_rule_between_min_window_and_prefix() {
        // min = budget*7/8 must hold window + 1 = 65 cells: 75*7/8 = 65, 74*7/8 = 64
        let ctx = p("beacon,budget=1024");
        assert_eq!(ctx.for_sequence(Some(75), None, None).unwrap().budget, 75);
        let e = ctx.for_sequence(Some(74), None, None).unwrap_err();
        assert_eq!(e.key, "budget");
        assert!(e.message.contains("allowed range 75..=1024"), "{e}");
        assert_eq!(
            e.to_string(),
            "beaconkv: budget: 74 is below the smallest budget these settings allow, 75 (min: 64 \
             (budget*7/8 when 0) must be >= window + prefix + 1 = 65); allowed range 75..=1024"
        );
        // a fixed prefix adds to the protected cells
        let ctx = p("streaming,budget=512,prefix=8,window=16");
        // window 16 + prefix 8 + 1 = 25 <= 29*7/8 = 25; 28*7/8 = 24
        assert!(ctx.for_sequence(Some(29), None, None).is_ok());
        let e = ctx.for_sequence(Some(28), None, None).unwrap_err();
        assert!(e.message.contains("allowed range 29..=512"), "{e}");
    }

    #[test]
    fn budget_above_the_context_is_refused() {
        let e = p("beacon,budget=256")
            .for_sequence(Some(257), None, None)
            .unwrap_err();
        assert_eq!(e.key, "budget");
        assert!(
            e.message.contains("sized for; allowed range 75..=256"),
            "{e}"
        );
    }

    #[test]
    fn set_min_and_prefix_max_scale_with_the_budget() {
        let s = p("beacon,budget=1000,min=900,prefix_max=100")
            .for_sequence(Some(500), None, None)
            .unwrap();
        assert_eq!((s.budget, s.budget_min, s.prefix_max), (500, 450, 50));
        let s = p("beacon,budget=1000")
            .for_sequence(Some(500), None, None)
            .unwrap();
        assert_eq!(
            (s.budget_min, s.prefix_max),
            (0, 0),
            "derived ones stay derived"
        );
    }

    #[test]
    fn policies_follow_what_the_context_records() {
        let allowed = |spec: &str, n_ctx: Option<usize>| -> Vec<&str> {
            let ctx = p(spec);
            Policy::ALL
                .into_iter()
                .filter(|&q| ctx.for_sequence(None, Some(q), n_ctx).is_ok())
                .map(Policy::name)
                .collect()
        };
        assert_eq!(allowed("beacon", None), ["beacon", "streaming", "random"]);
        assert_eq!(allowed("recent", None), ["recent", "streaming", "random"]);
        assert_eq!(allowed("streaming", None), ["streaming", "random"]);
        assert_eq!(allowed("beacon,archive=4096", None), ["beacon"]);
        assert_eq!(
            allowed("beacon,budget=1024", Some(1024)),
            ["none", "beacon", "streaming", "random"]
        );
        assert_eq!(
            allowed("beacon,budget=1024", Some(1025)),
            ["beacon", "streaming", "random"]
        );
        assert_eq!(allowed("none", None), ["none", "streaming", "random"]);
        let e = p("streaming")
            .for_sequence(None, Some(Policy::Beacon), None)
            .unwrap_err();
        assert_eq!(e.key, "policy");
        assert!(
            e.message.contains(
                "beacon scores with FPS beacons, and policy streaming records no queries"
            ) && e.message.ends_with("allowed here: streaming, random"),
            "{e}"
        );
        let e = p("beacon")
            .for_sequence(None, Some(Policy::None), Some(8192))
            .unwrap_err();
        assert!(e.message.contains("may reach 8192 positions"), "{e}");
    }
}
