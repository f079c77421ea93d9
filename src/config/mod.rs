//! Compression settings (`Params`), their spec-string form and their checks.
//!
//! Spec grammar: comma-separated `key=value` items, whitespace around items tolerated, keys
//! case-sensitive; a bare item that names a policy means `policy=<name>`. Every error names the
//! offending key and the allowed range, so a user reading a llama.cpp log can fix the flag.
//!
//! - `keys.rs`: the key table, the one list of keys that everything else is generated from;
//! - `value.rs`: the value kinds (count, seed, two-valued flag, prefix, two-decimal number,
//!   named enum) and their parse/format/check/C-conversion rules;
//! - `enums.rs`: the named settings; `params.rs`: `Params` and the rules between keys;
//! - `parse.rs`: the spec grammar; `error.rs`: `ConfigError`;
//! - `seq_override.rs`: the settings of a sequence with its own budget or policy.

mod enums;
mod error;
mod keys;
mod params;
mod parse;
mod seq_override;
pub(crate) mod value;

pub use enums::{ArchiveType, Policy, Prefix, PromptMode, ReadPath, Reduce};
pub use error::ConfigError;
pub use keys::flag_for_key;
pub(crate) use keys::for_each_key;
#[cfg(feature = "testing")]
pub use keys::{KEYS, KEY_FLAGS};
pub use params::Params;
pub use value::{Hundredths, KeyValue, Rule};

#[cfg(test)]
mod tests;
