//! `Params`, the compression settings (fields and defaults from the key table), and the rules
//! between keys.

use super::enums::{ArchiveType, Policy, Prefix, PromptMode, ReadPath, Reduce};
use super::keys::{for_each_key, KEYS};
use super::value::Hundredths;
use super::ConfigError;

/// The `Params` struct and its defaults, one field per key of the table.
macro_rules! define_params {
    ($(
        $(#[$attr:meta])*
        $key:literal => $field:ident: $ty:ty = $default:expr,
            c $c:ident, flag $flag:expr, rule $rule:expr;
    )*) => {
        /// Compression settings; mirrors `beaconkv_params` (one field per spec key).
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub struct Params {
            $( $(#[$attr])* pub $field: $ty, )*
        }

        impl Params {
            /// The defaults of the method.
            pub const DEFAULT: Params = Params { $( $field: $default, )* };
        }
    };
}
for_each_key!(define_params);

impl Default for Params {
    fn default() -> Self {
        Params::DEFAULT
    }
}

impl Params {
    /// The recall margin in logits.
    pub fn recall_margin(&self) -> f32 {
        self.recall_margin.get()
    }

    /// Cells left after a compression pass.
    pub fn effective_min(&self) -> usize {
        if self.budget_min == 0 {
            self.budget * 7 / 8
        } else {
            self.budget_min
        }
    }

    /// Prompt cells a sequence may hold beyond its budget (`prompt=keep|window`; 0 with
    /// `prompt=inside`).
    pub fn prompt_room(&self) -> usize {
        match self.prompt_mode {
            PromptMode::Inside => 0,
            PromptMode::Keep | PromptMode::Window if self.prompt_max == 0 => self.budget,
            PromptMode::Keep | PromptMode::Window => self.prompt_max,
        }
    }

    /// Most cells `prefix=prompt` protects.
    pub fn effective_prefix_max(&self) -> usize {
        if self.prefix_max == 0 {
            self.budget / 4
        } else {
            self.prefix_max
        }
    }

    /// Check every rule: each key's own range, then the rules between keys; the error names
    /// the key to change.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for key in KEYS {
            self.check_own(key)?;
        }
        match self.policy {
            Policy::Beacon if self.n_beacons + self.n_recent == 0 => {
                return Err(ConfigError::new(
                    "beacons",
                    "beacons + recent must be >= 1 for policy beacon",
                ));
            }
            Policy::Recent | Policy::Rkv if self.n_recent == 0 => {
                return Err(ConfigError::new(
                    "recent",
                    format!(
                        "must be >= 1 for policy {} (it scores with the recent queries only)",
                        self.policy.name()
                    ),
                ));
            }
            _ => {}
        }
        if self.archive > 0 && !self.policy.archives() {
            return Err(ConfigError::new(
                "archive",
                format!(
                    "needs policy beacon or recent (their scores rank what it keeps), not {}; 0 = off",
                    self.policy.name()
                ),
            ));
        }
        if self.prompt_max > 0 && self.prompt_mode == PromptMode::Inside {
            return Err(ConfigError::new(
                "prompt_max",
                "needs prompt=keep or prompt=window (with prompt=inside the budget bounds the prompt)",
            ));
        }
        let protected = self.window + self.prefix.cells();
        if protected >= self.budget {
            let key = match self.prefix {
                Prefix::First(n) if n > 0 => "prefix",
                _ => "window",
            };
            return Err(ConfigError::new(
                key,
                format!(
                    "window + prefix = {protected} must be < budget ({}); allowed range 0..={}",
                    self.budget,
                    self.budget - 1
                ),
            ));
        }
        let min = self.effective_min();
        if min > self.budget {
            return Err(ConfigError::new(
                "min",
                format!(
                    "{min} exceeds budget; allowed range {}..={} (0 = budget*7/8)",
                    protected + 1,
                    self.budget
                ),
            ));
        }
        if min < protected + 1 {
            return Err(ConfigError::new(
                "min",
                format!(
                    "{min} (budget*7/8 when 0) must be >= window + prefix + 1 = {}; allowed range {}..={}",
                    protected + 1,
                    protected + 1,
                    self.budget
                ),
            ));
        }
        Ok(())
    }
}
