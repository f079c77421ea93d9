//! The key table: every spec key once, with its `Params` field, type, default, rule, its
//! `beaconkv_params` field and its command-line flag. It drives the `Params` struct, parsing,
//! the canonical spec string, each key's own range check, the C conversion and C defaults
//! (`ffi/params.rs`) and [`flag_for_key`].
//!
//! Adding a key: one entry below (its doc comment is the `Params` field's) and its field in
//! `include/beaconkv.h`. The checks then name each remaining edit: the layout test
//! (`tests/c_abi.rs`) wants the same field in `ffi/types.rs`, and `tests/c_abi.rs` the key's row
//! in docs/flags.md and its name in the `--kv-compress-spec` help of the C++ glue.

use super::value::{KeyValue, Rule};
use super::{ConfigError, Params};

/// Calls macro `$m` with the key table, in canonical order. Each entry reads
/// `"key" => field: Type = default, c c_field, flag Option<"--flag">, rule Rule;`.
macro_rules! for_each_key {
    ($m:ident) => {
        $m! {
            /// Which scorer decides the importance of a cell.
            "policy" => policy: Policy = Policy::Beacon,
                c policy, flag Some("--kv-compress"), rule Rule::Any;
            /// Most cells one sequence holds; a compression pass runs when a sequence would pass it.
            "budget" => budget: usize = 1024,
                c budget, flag Some("--kv-budget"), rule Rule::AtLeastOne;
            /// Cells left after a compression; 0 = budget * 7 / 8.
            "min" => budget_min: usize = 0,
                c budget_min, flag None, rule Rule::Any;
            /// FPS beacon queries kept per (layer, query head).
            "beacons" => n_beacons: usize = 16,
                c n_beacons, flag Some("--kv-beacons"), rule Rule::Any;
            /// Most recent queries kept per (layer, query head).
            "recent" => n_recent: usize = 16,
                c n_recent, flag Some("--kv-recent"), rule Rule::Any;
            /// Newest cells always kept.
            "window" => window: usize = 64,
                c window, flag Some("--kv-window"), rule Rule::Any;
            /// Protected leading cells.
            "prefix" => prefix: Prefix = Prefix::Prompt,
                c prefix, flag Some("--kv-prefix"), rule Rule::Any;
            /// Most cells `prefix=prompt` protects (the prompt's first cells); 0 = budget / 4.
            "prefix_max" => prefix_max: usize = 0,
                c prefix_max, flag None, rule Rule::Any;
            /// What the budget bounds of a prompt: `inside` (the prompt counts within the
            /// budget), `keep` (its first `prompt_max` cells are kept on top of it) or `window`
            /// (read into `budget + prompt_max` cells, compressed once at its end).
            "prompt" => prompt_mode: PromptMode = PromptMode::Keep,
                c prompt_mode, flag Some("--kv-prompt"), rule Rule::Any;
            /// Prompt cells beyond the budget with `prompt=keep|window`; 0 = budget.
            "prompt_max" => prompt_max: usize = 0,
                c prompt_max, flag Some("--kv-prompt-max"), rule Rule::Any;
            /// How per-(layer, kv head) scores become one score per cell.
            "reduce" => reduce: Reduce = Reduce::Max,
                c reduce, flag None, rule Rule::Any;
            /// Score pooling width in cells (odd; 1 = off).
            "span" => span: usize = 1,
                c span, flag None, rule Rule::Odd;
            /// Query rows the host captures per ubatch.
            "qcap" => q_capacity: usize = 64,
                c q_capacity, flag None, rule Rule::AtLeastOne;
            /// Seed of the random policy.
            "seed" => seed: u64 = 42,
                c seed, flag None, rule Rule::Any;
            /// Where K is read and scored: `auto` (in place where K is host memory, on K's own
            /// backend elsewhere), `copy` (K and queries through the host's `read_rows`, row by
            /// row) or `backend` (scored on K's backend even in host memory).
            "read" => read_path: ReadPath = ReadPath::Auto,
                c read_path, flag None, rule Rule::Any;
            /// Score cells by attention probability (per-query log-softmax over the sequence's
            /// cells; the default, nearer the full cache than logits in the quality runs) or,
            /// with `score=logit`, by the raw logit q·k/√d of the method as published.
            "score" => score_prob: bool = true,
                c score, flag None, rule Rule::Options(["logit", "prob"]);
            /// Most archived cells per sequence; 0 = no archive.
            "archive" => archive: usize = 0,
                c archive, flag Some("--kv-archive"), rule Rule::Any;
            /// Element type of the archive.
            "archive_type" => archive_type: ArchiveType = ArchiveType::Same,
                c archive_type, flag None, rule Rule::Any;
            /// Consecutive positions per archive page.
            "page" => page: usize = 16,
                c page, flag None, rule Rule::Range { min: 1, max: 4096, note: "" };
            /// Decode steps between recall checks (where the newest tokens repeat an earlier
            /// passage, or, with `recall_match` = 0, the holes after the kept cell the newest
            /// queries attend most; see `engine/archiving/recall.rs`); 0 = none.
            "recall_every" => recall_every: usize = 4,
                c recall_every, flag None, rule Rule::Any;
            /// Logits by which a recall check's best logit must beat the weakest kept cell's.
            "recall_margin" => recall_margin: Hundredths = Hundredths(200),
                c recall_margin, flag None, rule Rule::Any;
            /// Tokens the newest text must repeat of an earlier passage before a check recalls
            /// that passage's archived continuation (and passes let archived pages compete); 0 =
            /// read the position from the queries alone (see `engine/archiving/recall.rs`).
            "recall_match" => recall_match: usize = 8,
                c recall_match, flag None,
                rule Rule::Range { min: 0, max: 1024, note: " (0 = by queries)" };
        }
    };
}
pub(crate) use for_each_key;

/// What the table gives the spec form: the key list, the flags, and per-key parse, check and
/// format on `Params`.
macro_rules! spec_form {
    ($(
        $(#[$attr:meta])*
        $key:literal => $field:ident: $ty:ty = $default:expr,
            c $c:ident, flag $flag:expr, rule $rule:expr;
    )*) => {
        /// Spec keys, in canonical order.
        pub const KEYS: [&str; [$($key),*].len()] = [$($key),*];

        /// Each key with the command-line flag of its own, if it has one.
        pub const KEY_FLAGS: [(&str, Option<&str>); KEYS.len()] = [$(($key, $flag)),*];

        impl Params {
            /// Set `key` from its spec text (syntax and what the type holds; the key's own
            /// rules are [`Params::check_own`]'s).
            pub(super) fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
                match key {
                    $( $key => self.$field = KeyValue::parse($key, value, $rule)?, )*
                    _ => unreachable!("key list and setter disagree: {key}"),
                }
                Ok(())
            }

            /// The rules one key's value must meet on its own (its range, and for some keys a
            /// lower bound or parity), whatever the other keys say.
            pub(super) fn check_own(&self, key: &str) -> Result<(), ConfigError> {
                match key {
                    $( $key => self.$field.check($key, $rule), )*
                    _ => Ok(()),
                }
            }

            /// Canonical spec string: every key in table order, `key=value` joined by commas;
            /// `Params::parse(&p.to_spec()) == Ok(p)` for every valid `p`.
            pub fn to_spec(&self) -> String {
                let items = [$( format!("{}={}", $key, self.$field.format($rule)) ),*];
                items.join(",")
            }
        }
    };
}

for_each_key!(spec_form);

/// The command-line flag of the patched llama.cpp tools that sets `key`, for error messages
/// (`--kv-compress-spec KEY=` for the keys without a flag of their own, and for unknown keys).
pub fn flag_for_key(key: &str) -> String {
    match KEY_FLAGS.iter().find(|(k, _)| *k == key) {
        Some((_, Some(flag))) => flag.to_string(),
        _ => format!("--kv-compress-spec {key}="),
    }
}
