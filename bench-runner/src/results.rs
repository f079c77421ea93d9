//! The results of `beaconkv-eval`: JSON parsing (typed rows per mode), CSV and markdown tables.
//!
//! The JSON shapes follow `cpp/eval/quality.cpp`, `passkey.cpp` and `speed.cpp` (the rows have
//! more keys than are read here):
//! - agree/revisit: `{"mode", "n_tokens", "prompt_tokens", "ppl_from", "ppl_ref", "results": [
//!   {config, policy, budget, top1, kl, ppl, ppl_ref, cells_peak, evicted, compress_events,
//!   plugin_ms, decode_ms}]}`
//! - passkey: `{"mode", "length", "results": [{config, policy, budget, depth, n_tokens, found,
//!   answer, cells_peak, needle_tokens, needle_kept}]}` (the needle fields are not read here)
//! - speed: `{"mode", "results": [{config, policy, budget, context, ms_per_token, cells,
//!   cells_physical, kv_bytes_per_cell, plugin_ms, decode_ms}]}`
//!
//! The tool writes its JSON with nlohmann::json, so it is valid as it is: a non-finite number is
//! `null` (read here as NaN), strings are escaped, and invalid UTF-8 (a passkey answer can end
//! inside a character) is replaced by U+FFFD.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// One measurement mode of `beaconkv-eval`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Agree,
    Revisit,
    Passkey,
    Speed,
}

impl Mode {
    pub const ALL: [Mode; 4] = [Mode::Agree, Mode::Revisit, Mode::Passkey, Mode::Speed];

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Agree => "agree",
            Mode::Revisit => "revisit",
            Mode::Passkey => "passkey",
            Mode::Speed => "speed",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// A double that may be null (the tool writes a non-finite number as null): read as NaN.
fn num<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// agree/revisit: one compressed config against the uncompressed reference.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct QualityRow {
    pub config: String,
    pub policy: String,
    pub budget: i64,
    #[serde(deserialize_with = "num")]
    pub top1: f64,
    #[serde(deserialize_with = "num")]
    pub kl: f64,
    #[serde(deserialize_with = "num")]
    pub ppl: f64,
    #[serde(deserialize_with = "num")]
    pub ppl_ref: f64,
    pub cells_peak: i64,
    pub evicted: u64,
    pub compress_events: u64,
    #[serde(deserialize_with = "num")]
    pub plugin_ms: f64,
    #[serde(deserialize_with = "num")]
    pub decode_ms: f64,
}

/// passkey: one config at one depth.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct PasskeyRow {
    pub config: String,
    pub policy: String,
    pub budget: i64,
    #[serde(deserialize_with = "num")]
    pub depth: f64,
    pub n_tokens: u64,
    pub found: bool,
    pub answer: String,
    pub cells_peak: i64,
}

/// speed: one config at one context length (checkpoint).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct SpeedRow {
    pub config: String,
    pub policy: String,
    pub budget: i64,
    pub context: i64,
    #[serde(deserialize_with = "num")]
    pub ms_per_token: f64,
    #[serde(deserialize_with = "num")]
    pub cells: f64,
    #[serde(deserialize_with = "num")]
    pub cells_physical: f64,
    #[serde(deserialize_with = "num")]
    pub kv_bytes_per_cell: f64,
    #[serde(deserialize_with = "num")]
    pub plugin_ms: f64,
    #[serde(deserialize_with = "num")]
    pub decode_ms: f64,
    /// Host memory of the archive of evicted cells (configs with `+archive`), bytes.
    #[serde(default)]
    pub archive_bytes: f64,
}

impl SpeedRow {
    /// The archive's host memory at this point, MiB.
    pub fn archive_mib(&self) -> f64 {
        self.archive_bytes / (1024.0 * 1024.0)
    }

    /// KV cache memory allocated at this point, MiB.
    pub fn kv_mib(&self) -> f64 {
        self.cells_physical * self.kv_bytes_per_cell / (1024.0 * 1024.0)
    }

    /// Share of the decode time spent in the plugin (0..1).
    pub fn plugin_share(&self) -> f64 {
        if self.decode_ms > 0.0 {
            self.plugin_ms / self.decode_ms
        } else {
            f64::NAN
        }
    }
}

/// speed, with `--prompt-len`: one prompt processed by one config.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct PromptRow {
    pub config: String,
    pub policy: String,
    pub budget: i64,
    pub prompt_tokens: i64,
    /// The physical batch the context ran with (compression clamps it).
    pub n_ubatch: i64,
    #[serde(deserialize_with = "num")]
    pub prompt_ms: f64,
    #[serde(deserialize_with = "num")]
    pub plugin_ms: f64,
}

impl PromptRow {
    pub fn tokens_per_s(&self) -> f64 {
        if self.prompt_ms > 0.0 {
            self.prompt_tokens as f64 * 1000.0 / self.prompt_ms
        } else {
            f64::NAN
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Parsed {
    Quality {
        ppl_ref: f64,
        rows: Vec<QualityRow>,
    },
    Passkey(Vec<PasskeyRow>),
    /// Decode checkpoints, and prompt processing when it was measured.
    Speed {
        rows: Vec<SpeedRow>,
        prompt: Vec<PromptRow>,
    },
}

/// One `beaconkv-eval` invocation and what it measured.
#[derive(Clone, Debug)]
pub struct ModeRun {
    pub mode: Mode,
    /// The text file (agree/revisit), else None.
    pub text: Option<String>,
    /// The JSON file it wrote, relative to the output folder.
    pub file: String,
    /// The JSON as written.
    pub raw: Value,
    pub parsed: Parsed,
}

/// Parses one JSON file written by `beaconkv-eval --mode MODE`.
pub fn parse_eval_json(mode: Mode, bytes: &[u8]) -> Result<(Value, Parsed), String> {
    let raw: Value = serde_json::from_slice(bytes).map_err(|e| format!("invalid JSON: {e}"))?;
    if let Some(m) = raw.get("mode").and_then(Value::as_str) {
        if m != mode.as_str() {
            return Err(format!("expected mode '{mode}', the file says '{m}'"));
        }
    }
    let results = raw
        .get("results")
        .cloned()
        .ok_or_else(|| "no \"results\" array".to_string())?;
    let err = |e: serde_json::Error| format!("unexpected {mode} result: {e}");
    let parsed = match mode {
        Mode::Agree | Mode::Revisit => {
            let rows: Vec<QualityRow> = serde_json::from_value(results).map_err(err)?;
            let ppl_ref = raw
                .get("ppl_ref")
                .and_then(Value::as_f64)
                .or_else(|| rows.first().map(|r| r.ppl_ref))
                .unwrap_or(f64::NAN);
            Parsed::Quality { ppl_ref, rows }
        }
        Mode::Passkey => Parsed::Passkey(serde_json::from_value(results).map_err(err)?),
        Mode::Speed => Parsed::Speed {
            rows: serde_json::from_value(results).map_err(err)?,
            prompt: match raw.get("prompt") {
                Some(p) => serde_json::from_value(p.clone()).map_err(err)?,
                None => Vec::new(),
            },
        },
    };
    Ok((raw, parsed))
}

// ---------------------------------------------------------------------------------------------
// Formatting helpers

/// A number with `digits` decimals, or "n/a" when not finite.
pub fn fmt_num(v: f64, digits: usize) -> String {
    if v.is_finite() {
        format!("{v:.digits$}")
    } else {
        "n/a".to_string()
    }
}

/// Policies in order of first appearance.
fn policies_in_order<'a>(it: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for p in it {
        if !out.iter().any(|q| q == p) {
            out.push(p.to_string());
        }
    }
    out
}

fn md_row(cells: &[String]) -> String {
    format!("| {} |\n", cells.join(" | "))
}

fn md_header(cells: &[String]) -> String {
    let mut s = md_row(cells);
    s.push_str(&md_row(&vec!["---".to_string(); cells.len()]));
    s
}

/// Quality table: rows = policy, columns = budgets. agree: "top1 / KL"; revisit: "ppl (ref X)".
pub fn quality_table(mode: Mode, ppl_ref: f64, rows: &[QualityRow]) -> String {
    let budgets: BTreeSet<i64> = rows.iter().map(|r| r.budget).collect();
    let policies = policies_in_order(rows.iter().map(|r| r.policy.as_str()));
    let mut head = vec!["policy".to_string()];
    head.extend(budgets.iter().map(|b| b.to_string()));
    let mut s = md_header(&head);
    for p in &policies {
        let mut cells = vec![p.clone()];
        for b in &budgets {
            let cell = rows
                .iter()
                .find(|r| &r.policy == p && r.budget == *b)
                .map(|r| match mode {
                    Mode::Revisit => format!("{} (ref {})", fmt_num(r.ppl, 2), fmt_num(ppl_ref, 2)),
                    _ => format!("{} / {}", fmt_num(r.top1, 3), fmt_num(r.kl, 4)),
                });
            cells.push(cell.unwrap_or_else(|| "–".to_string()));
        }
        s.push_str(&md_row(&cells));
    }
    s
}

/// Passkey accuracy over depths: rows = policy, columns = budgets (+ "full cache" for `none`).
pub fn passkey_table(rows: &[PasskeyRow]) -> String {
    let budgets: BTreeSet<i64> = rows
        .iter()
        .filter(|r| r.policy != "none")
        .map(|r| r.budget)
        .collect();
    let has_none = rows.iter().any(|r| r.policy == "none");
    let policies = policies_in_order(rows.iter().map(|r| r.policy.as_str()));
    let mut head = vec!["policy".to_string()];
    head.extend(budgets.iter().map(|b| b.to_string()));
    if has_none {
        head.push("full cache".to_string());
    }
    let cell = |sel: Vec<&PasskeyRow>| {
        if sel.is_empty() {
            return "–".to_string();
        }
        let found = sel.iter().filter(|r| r.found).count();
        format!(
            "{:.0}% ({}/{})",
            100.0 * found as f64 / sel.len() as f64,
            found,
            sel.len()
        )
    };
    let mut s = md_header(&head);
    for p in &policies {
        let mut cells = vec![p.clone()];
        let none = p == "none";
        for b in &budgets {
            cells.push(if none {
                "–".to_string()
            } else {
                cell(
                    rows.iter()
                        .filter(|r| &r.policy == p && r.budget == *b)
                        .collect(),
                )
            });
        }
        if has_none {
            cells.push(if none {
                cell(rows.iter().filter(|r| &r.policy == p).collect())
            } else {
                "–".to_string()
            });
        }
        s.push_str(&md_row(&cells));
    }
    s
}

/// Speed: one row per context × config.
pub fn speed_table(rows: &[SpeedRow]) -> String {
    let configs = policies_in_order(rows.iter().map(|r| r.config.as_str()));
    let mut sorted: Vec<&SpeedRow> = rows.iter().collect();
    sorted.sort_by_key(|r| (r.context, configs.iter().position(|c| c == &r.config)));
    let head: Vec<String> = [
        "context",
        "config",
        "ms/token",
        "tok/s",
        "KV MiB",
        "archive MiB",
        "plugin share",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut s = md_header(&head);
    for r in sorted {
        let tps = if r.ms_per_token > 0.0 {
            1000.0 / r.ms_per_token
        } else {
            f64::NAN
        };
        let share = r.plugin_share();
        s.push_str(&md_row(&[
            r.context.to_string(),
            r.config.clone(),
            fmt_num(r.ms_per_token, 2),
            fmt_num(tps, 1),
            fmt_num(r.kv_mib(), 2),
            fmt_num(r.archive_mib(), 2),
            if share.is_finite() {
                format!("{:.1}%", share * 100.0)
            } else {
                "n/a".to_string()
            },
        ]));
    }
    s
}

/// Prompt processing: one row per config, against the uncompressed run when there is one.
pub fn prompt_table(rows: &[PromptRow]) -> String {
    let base = rows
        .iter()
        .find(|r| r.policy == "none")
        .map(|r| r.tokens_per_s());
    let head: Vec<String> = [
        "config",
        "n_ubatch",
        "prompt tok/s",
        "vs none",
        "plugin share",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut s = md_header(&head);
    for r in rows {
        let tps = r.tokens_per_s();
        let vs = match base {
            Some(b) if r.policy != "none" && b > 0.0 => format!("{:+.0}%", (tps / b - 1.0) * 100.0),
            _ => "–".to_string(),
        };
        let share = if r.prompt_ms > 0.0 {
            format!("{:.1}%", r.plugin_ms / r.prompt_ms * 100.0)
        } else {
            "n/a".to_string()
        };
        s.push_str(&md_row(&[
            r.config.clone(),
            r.n_ubatch.to_string(),
            fmt_num(tps, 1),
            vs,
            share,
        ]));
    }
    s
}

/// All tables as one markdown document (also printed to stdout).
pub fn summary_markdown(runs: &[ModeRun]) -> String {
    let mut s = String::new();
    for run in runs {
        let title = match (&run.mode, &run.text) {
            (Mode::Agree, Some(t)) => {
                format!("Quality: top-1 agreement / KL vs the full cache ({t})")
            }
            (Mode::Revisit, Some(t)) => format!("Quality: perplexity of a revisited passage ({t})"),
            (Mode::Agree, None) => "Quality: top-1 agreement / KL vs the full cache".to_string(),
            (Mode::Revisit, None) => "Quality: perplexity of a revisited passage".to_string(),
            (Mode::Passkey, _) => "Passkey retrieval accuracy (over depths)".to_string(),
            (Mode::Speed, _) => "Decode speed and KV memory vs context".to_string(),
        };
        let _ = writeln!(s, "## {title}\n");
        let table = match &run.parsed {
            Parsed::Quality { ppl_ref, rows } => quality_table(run.mode, *ppl_ref, rows),
            Parsed::Passkey(rows) => passkey_table(rows),
            Parsed::Speed { rows, prompt } => {
                let mut t = speed_table(rows);
                if !prompt.is_empty() {
                    let n = prompt[0].prompt_tokens;
                    let _ = write!(
                        t,
                        "\n### Prompt processing ({n} tokens)\n\n{}",
                        prompt_table(prompt)
                    );
                }
                t
            }
        };
        s.push_str(&table);
        s.push('\n');
    }
    s
}

// ---------------------------------------------------------------------------------------------
// CSV

pub const CSV_COLUMNS: [&str; 27] = [
    "mode",
    "text",
    "config",
    "policy",
    "budget",
    "top1",
    "kl",
    "ppl",
    "ppl_ref",
    "cells_peak",
    "evicted",
    "compress_events",
    "plugin_ms",
    "decode_ms",
    "depth",
    "n_tokens",
    "found",
    "answer",
    "context",
    "ms_per_token",
    "cells",
    "cells_physical",
    "kv_bytes_per_cell",
    "kv_mib",
    "prompt_tokens",
    "n_ubatch",
    "prompt_ms",
];

/// One CSV field, quoted when needed (RFC 4180).
pub fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn csv_num(v: f64) -> String {
    if v.is_finite() {
        format!("{v}")
    } else {
        String::new()
    }
}

/// One row per result, with a mode column; fields a mode does not have are empty.
pub fn to_csv(runs: &[ModeRun]) -> String {
    let mut s = CSV_COLUMNS.join(",");
    s.push('\n');
    for run in runs {
        let text = run.text.clone().unwrap_or_default();
        let mut emit = |pairs: Vec<(&str, String)>| {
            let fields: Vec<String> = CSV_COLUMNS
                .iter()
                .map(|col| match *col {
                    "mode" => run.mode.to_string(),
                    "text" => csv_field(&text),
                    _ => pairs
                        .iter()
                        .find(|(k, _)| k == col)
                        .map(|(_, v)| csv_field(v))
                        .unwrap_or_default(),
                })
                .collect();
            s.push_str(&fields.join(","));
            s.push('\n');
        };
        match &run.parsed {
            Parsed::Quality { rows, .. } => {
                for r in rows {
                    emit(vec![
                        ("config", r.config.clone()),
                        ("policy", r.policy.clone()),
                        ("budget", r.budget.to_string()),
                        ("top1", csv_num(r.top1)),
                        ("kl", csv_num(r.kl)),
                        ("ppl", csv_num(r.ppl)),
                        ("ppl_ref", csv_num(r.ppl_ref)),
                        ("cells_peak", r.cells_peak.to_string()),
                        ("evicted", r.evicted.to_string()),
                        ("compress_events", r.compress_events.to_string()),
                        ("plugin_ms", csv_num(r.plugin_ms)),
                        ("decode_ms", csv_num(r.decode_ms)),
                    ]);
                }
            }
            Parsed::Passkey(rows) => {
                for r in rows {
                    emit(vec![
                        ("config", r.config.clone()),
                        ("policy", r.policy.clone()),
                        ("budget", r.budget.to_string()),
                        ("depth", csv_num(r.depth)),
                        ("n_tokens", r.n_tokens.to_string()),
                        ("found", r.found.to_string()),
                        ("answer", r.answer.clone()),
                        ("cells_peak", r.cells_peak.to_string()),
                    ]);
                }
            }
            Parsed::Speed { rows, prompt } => {
                for r in rows {
                    emit(vec![
                        ("config", r.config.clone()),
                        ("policy", r.policy.clone()),
                        ("budget", r.budget.to_string()),
                        ("context", r.context.to_string()),
                        ("ms_per_token", csv_num(r.ms_per_token)),
                        ("cells", csv_num(r.cells)),
                        ("cells_physical", csv_num(r.cells_physical)),
                        ("kv_bytes_per_cell", csv_num(r.kv_bytes_per_cell)),
                        ("kv_mib", csv_num(r.kv_mib())),
                        ("plugin_ms", csv_num(r.plugin_ms)),
                        ("decode_ms", csv_num(r.decode_ms)),
                    ]);
                }
                for r in prompt {
                    emit(vec![
                        ("config", r.config.clone()),
                        ("policy", r.policy.clone()),
                        ("budget", r.budget.to_string()),
                        ("prompt_tokens", r.prompt_tokens.to_string()),
                        ("n_ubatch", r.n_ubatch.to_string()),
                        ("prompt_ms", csv_num(r.prompt_ms)),
                        ("plugin_ms", csv_num(r.plugin_ms)),
                    ]);
                }
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shaped like beaconkv-eval's output (spacing aside: the tool writes compact JSON).
    const AGREE: &str = r#"{"mode": "agree", "n_tokens": 160, "prompt_tokens": 16, "ppl_from": 16, "ppl_ref": 12.5, "results": [{"config": "beacon:32", "policy": "beacon", "budget": 32, "top1": 0.95, "kl": 0.0123, "ppl": 13.1, "ppl_ref": 12.5, "cells_peak": 40, "evicted": 120, "compress_events": 15, "plugin_ms": 1.5, "decode_ms": 30.25}, {"config": "recent:32", "policy": "recent", "budget": 32, "top1": 0.8, "kl": 0.2, "ppl": 15, "ppl_ref": 12.5, "cells_peak": 40, "evicted": 120, "compress_events": 15, "plugin_ms": 0.5, "decode_ms": 29}, {"config": "beacon:64", "policy": "beacon", "budget": 64, "top1": 0.99, "kl": 1e-05, "ppl": 12.6, "ppl_ref": 12.5, "cells_peak": 72, "evicted": 80, "compress_events": 8, "plugin_ms": 1, "decode_ms": 31}]}"#;

    const REVISIT: &str = r#"{"mode": "revisit", "n_tokens": 191, "prompt_tokens": 16, "ppl_from": 144, "ppl_ref": 3.25, "results": [{"config": "beacon:32/span=3", "policy": "beacon", "budget": 32, "top1": 0.7, "kl": 0.5, "ppl": null, "ppl_ref": 3.25, "cells_peak": 40, "evicted": 150, "compress_events": 18, "plugin_ms": 2, "decode_ms": 40}, {"config": "random:32", "policy": "random", "budget": 32, "top1": 0.5, "kl": null, "ppl": 9.5, "ppl_ref": 3.25, "cells_peak": 40, "evicted": 150, "compress_events": 18, "plugin_ms": 0.1, "decode_ms": 39}]}"#;

    // A newline inside the answer string, escaped as the tool writes it.
    const PASSKEY: &str = "{\"mode\": \"passkey\", \"length\": 256, \"results\": [{\"config\": \"beacon:32\", \"policy\": \"beacon\", \"budget\": 32, \"depth\": 0.5, \"n_tokens\": 270, \"found\": true, \"answer\": \" 14271.\\nThe\", \"cells_peak\": 64}, {\"config\": \"beacon:32\", \"policy\": \"beacon\", \"budget\": 32, \"depth\": 0.9, \"n_tokens\": 270, \"found\": false, \"answer\": \" 1, \\\"inf\\\"\", \"cells_peak\": 64}, {\"config\": \"none\", \"policy\": \"none\", \"budget\": 0, \"depth\": 0.5, \"n_tokens\": 270, \"found\": true, \"answer\": \" 14271\", \"cells_peak\": 278}]}";

    const SPEED: &str = r#"{"mode": "speed", "results": [{"config": "none", "policy": "none", "budget": 0, "context": 128, "ms_per_token": 2.5, "cells": 128, "cells_physical": 264, "kv_bytes_per_cell": 4096, "plugin_ms": 0, "decode_ms": 300}, {"config": "beacon:64", "policy": "beacon", "budget": 64, "context": 128, "ms_per_token": 2, "cells": 64, "cells_physical": 81, "kv_bytes_per_cell": 4096, "plugin_ms": 30, "decode_ms": 240}, {"config": "none", "policy": "none", "budget": 0, "context": 256, "ms_per_token": 4, "cells": 256, "cells_physical": 1048576, "kv_bytes_per_cell": 4096, "plugin_ms": 0, "decode_ms": 700}], "prompt": [{"config": "none", "policy": "none", "budget": 0, "prompt_tokens": 256, "n_ubatch": 512, "prompt_ms": 640, "plugin_ms": 0, "cells": 256}, {"config": "beacon:64", "policy": "beacon", "budget": 64, "prompt_tokens": 256, "n_ubatch": 32, "prompt_ms": 1280, "plugin_ms": 128, "cells": 64}]}"#;

    fn run(mode: Mode, json: &str) -> ModeRun {
        let (raw, parsed) = parse_eval_json(mode, json.as_bytes()).unwrap();
        ModeRun {
            mode,
            text: None,
            file: format!("{mode}.json"),
            raw,
            parsed,
        }
    }

    #[test]
    fn parses_agree() {
        let r = run(Mode::Agree, AGREE);
        let Parsed::Quality { ppl_ref, rows } = r.parsed else {
            panic!("not quality")
        };
        assert_eq!(ppl_ref, 12.5);
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].config, "beacon:32");
        assert_eq!(rows[0].budget, 32);
        assert_eq!(rows[2].kl, 1e-5);
        assert_eq!(rows[1].ppl, 15.0);
        assert_eq!(rows[0].evicted, 120);
        assert_eq!(r.raw["n_tokens"], 160);
    }

    #[test]
    fn parses_null_as_nan() {
        let r = run(Mode::Revisit, REVISIT);
        let Parsed::Quality { ppl_ref, rows } = r.parsed else {
            panic!("not quality")
        };
        assert_eq!(ppl_ref, 3.25);
        assert!(rows[0].ppl.is_nan());
        assert!(rows[1].kl.is_nan());
        assert_eq!(rows[1].ppl, 9.5);
        assert_eq!(rows[0].config, "beacon:32/span=3");
    }

    #[test]
    fn parses_passkey_with_a_newline() {
        let r = run(Mode::Passkey, PASSKEY);
        let Parsed::Passkey(rows) = r.parsed else {
            panic!("not passkey")
        };
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].answer, " 14271.\nThe");
        assert!(rows[0].found);
        assert!(!rows[1].found);
        // "inf" inside a string stays text.
        assert_eq!(rows[1].answer, " 1, \"inf\"");
        assert_eq!(rows[2].policy, "none");
    }

    #[test]
    fn parses_speed() {
        let r = run(Mode::Speed, SPEED);
        let Parsed::Speed { rows, prompt } = r.parsed else {
            panic!("not speed")
        };
        assert_eq!(rows.len(), 3);
        assert_eq!(prompt.len(), 2);
        assert_eq!(prompt[1].tokens_per_s(), 200.0);
        assert_eq!(rows[2].kv_mib(), 4096.0);
        assert_eq!(rows[1].plugin_share(), 0.125);
    }

    #[test]
    fn rejects_wrong_mode_and_bad_json() {
        assert!(parse_eval_json(Mode::Speed, AGREE.as_bytes())
            .unwrap_err()
            .contains("agree"));
        assert!(parse_eval_json(Mode::Agree, b"{\"mode\": \"agree\"").is_err());
        // a bare nan is not JSON (the tool writes null)
        assert!(parse_eval_json(Mode::Revisit, REVISIT.replace("null", "nan").as_bytes()).is_err());
        assert!(parse_eval_json(
            Mode::Agree,
            b"{\"mode\": \"agree\", \"results\": [{\"config\": 1}]}"
        )
        .is_err());
    }

    #[test]
    fn agree_table() {
        let r = run(Mode::Agree, AGREE);
        let Parsed::Quality { ppl_ref, rows } = &r.parsed else {
            panic!()
        };
        let t = quality_table(Mode::Agree, *ppl_ref, rows);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "| policy | 32 | 64 |");
        assert_eq!(lines[1], "| --- | --- | --- |");
        assert_eq!(lines[2], "| beacon | 0.950 / 0.0123 | 0.990 / 0.0000 |");
        assert_eq!(lines[3], "| recent | 0.800 / 0.2000 | – |");
        assert_eq!(lines.len(), 4);
    }

    #[test]
    fn revisit_table() {
        let r = run(Mode::Revisit, REVISIT);
        let Parsed::Quality { ppl_ref, rows } = &r.parsed else {
            panic!()
        };
        let t = quality_table(Mode::Revisit, *ppl_ref, rows);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "| policy | 32 |");
        assert_eq!(lines[2], "| beacon | n/a (ref 3.25) |");
        assert_eq!(lines[3], "| random | 9.50 (ref 3.25) |");
    }

    #[test]
    fn passkey_table_accuracy() {
        let r = run(Mode::Passkey, PASSKEY);
        let Parsed::Passkey(rows) = &r.parsed else {
            panic!()
        };
        let t = passkey_table(rows);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "| policy | 32 | full cache |");
        assert_eq!(lines[2], "| beacon | 50% (1/2) | – |");
        assert_eq!(lines[3], "| none | – | 100% (1/1) |");
    }

    #[test]
    fn speed_table_rows() {
        let r = run(Mode::Speed, SPEED);
        let Parsed::Speed { rows, prompt } = &r.parsed else {
            panic!()
        };
        let p = prompt_table(prompt);
        let plines: Vec<&str> = p.lines().collect();
        assert_eq!(
            plines[0],
            "| config | n_ubatch | prompt tok/s | vs none | plugin share |"
        );
        assert_eq!(plines[2], "| none | 512 | 400.0 | – | 0.0% |");
        assert_eq!(plines[3], "| beacon:64 | 32 | 200.0 | -50% | 10.0% |");
        let t = speed_table(rows);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "| context | config | ms/token | tok/s | KV MiB | archive MiB | plugin share |"
        );
        assert_eq!(
            lines[2],
            "| 128 | none | 2.50 | 400.0 | 1.03 | 0.00 | 0.0% |"
        );
        assert_eq!(
            lines[3],
            "| 128 | beacon:64 | 2.00 | 500.0 | 0.32 | 0.00 | 12.5% |"
        );
        assert_eq!(
            lines[4],
            "| 256 | none | 4.00 | 250.0 | 4096.00 | 0.00 | 0.0% |"
        );
    }

    #[test]
    fn csv_rows_and_quoting() {
        let runs = vec![
            run(Mode::Agree, AGREE),
            run(Mode::Passkey, PASSKEY),
            run(Mode::Speed, SPEED),
        ];
        let csv = to_csv(&runs);
        let header = csv.lines().next().unwrap();
        assert_eq!(header, CSV_COLUMNS.join(","));
        // 3 + 3 + 3 + 2 (prompt) rows; the newline in the quoted answer adds one physical line.
        assert_eq!(csv.lines().count(), 1 + 11 + 1);
        let first = csv.lines().nth(1).unwrap();
        assert_eq!(
            first,
            "agree,,beacon:32,beacon,32,0.95,0.0123,13.1,12.5,40,120,15,1.5,30.25,,,,,,,,,,,,,"
        );
        assert!(csv.contains(",\" 14271.\nThe\","));
        assert!(csv.contains(",\" 1, \"\"inf\"\"\","));
        let speed = csv
            .lines()
            .find(|l| l.starts_with("speed,,beacon:64"))
            .unwrap();
        assert_eq!(speed.split(',').count(), CSV_COLUMNS.len());
        assert!(speed.ends_with(",128,2,64,81,4096,0.31640625,,,"));
        let prompt = csv.lines().last().unwrap();
        assert_eq!(
            prompt,
            "speed,,beacon:64,beacon,64,,,,,,,,128,,,,,,,,,,,,256,32,1280"
        );
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("plain"), "plain");
    }

    #[test]
    fn summary_has_every_table() {
        let runs = vec![
            run(Mode::Agree, AGREE),
            run(Mode::Revisit, REVISIT),
            run(Mode::Passkey, PASSKEY),
            run(Mode::Speed, SPEED),
        ];
        let md = summary_markdown(&runs);
        assert_eq!(md.lines().filter(|l| l.starts_with("## ")).count(), 4);
        assert!(md.contains("### Prompt processing (256 tokens)"));
        assert!(md.contains("| beacon | 0.950 / 0.0123 |"));
        assert!(md.contains("(ref 3.25)"));
        assert!(md.contains("| none | – | 100% (1/1) |"));
        assert!(md.contains("| 256 | none |"));
    }
}
