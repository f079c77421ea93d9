//! `beaconkv-eval`'s task and trace rows: reading its JSON, joining rows with their documents,
//! scoring and checking them.

use crate::tasks::{self, Doc, Task};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct EvalTaskRow {
    pub id: String,
    pub question: usize,
    pub config: String,
    pub policy: String,
    pub budget: i64,
    pub n_doc: u64,
    pub n_question: u64,
    pub n_gen: u64,
    pub stopped: bool,
    pub output: String,
    pub cells_doc: i64,
    pub cells_peak: i64,
    pub evicted: u64,
    pub compress_events: u64,
    pub plugin_ms: f64,
    pub prefill_ms: f64,
    pub answer_ms: f64,
}

/// One answered question, scored.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Scored {
    pub task: Task,
    pub length: u32,
    pub doc: u32,
    pub depth: f64,
    pub answer: String,
    pub correct: bool,
    pub partial: f64,
    #[serde(flatten)]
    pub row: EvalTaskRow,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct Bucket {
    pub from: u64,
    pub to: u64,
    pub n: u64,
    pub top1: f64,
    pub kl: f64,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct TraceRow {
    pub id: String,
    pub config: String,
    pub policy: String,
    pub budget: i64,
    pub n_tokens: u64,
    pub top1: f64,
    pub kl: f64,
    pub first_mismatch: i64,
    pub diverge_free: Option<i64>,
    pub free_limit: i64,
    pub buckets: Vec<Bucket>,
    pub cells_peak: i64,
    pub evicted: u64,
    pub compress_events: u64,
    pub plugin_ms: f64,
    pub decode_ms: f64,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct TracePrompt {
    pub id: String,
    pub n_prompt: u64,
    pub n_tokens: u64,
    pub first_eog: i64,
    pub ref_ms: f64,
    pub text: String,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct TraceRun {
    pub prompts: Vec<TracePrompt>,
    pub rows: Vec<TraceRow>,
}

pub(super) fn read_json(path: &Path, mode: &str) -> Result<Value, String> {
    let bytes = std::fs::read(path)
        .map_err(|e| format!("beaconkv-eval wrote no {}: {e}", path.display()))?;
    let v: Value = serde_json::from_slice(&bytes)
        .map_err(|e| format!("{}: invalid JSON: {e}", path.display()))?;
    if v.get("mode").and_then(Value::as_str) != Some(mode) {
        return Err(format!("{}: not a {mode} result", path.display()));
    }
    Ok(v)
}

pub(super) fn results_of<T: for<'de> Deserialize<'de>>(
    v: &Value,
    what: &str,
) -> Result<Vec<T>, String> {
    serde_json::from_value(v.get("results").cloned().unwrap_or(Value::Null))
        .map_err(|e| format!("unexpected {what} result: {e}"))
}

pub fn parse_trace(v: &Value) -> Result<TraceRun, String> {
    Ok(TraceRun {
        prompts: serde_json::from_value(v.get("prompts").cloned().unwrap_or(Value::Null))
            .map_err(|e| format!("unexpected trace prompts: {e}"))?,
        rows: results_of(v, "trace")?,
    })
}

/// Joins the tool's rows with their documents, scores them, and checks that every question of
/// every document has exactly one well-formed row per config.
pub fn score_rows(
    docs: &[Doc],
    rows: Vec<EvalTaskRow>,
    configs: &[String],
) -> Result<Vec<Scored>, String> {
    let by_id: BTreeMap<&str, &Doc> = docs.iter().map(|d| (d.id.as_str(), d)).collect();
    let mut seen: BTreeMap<(String, usize, String), usize> = BTreeMap::new();
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let doc = by_id
            .get(row.id.as_str())
            .ok_or_else(|| format!("row for unknown document '{}'", row.id))?;
        let q = doc.questions.get(row.question).ok_or_else(|| {
            format!(
                "row for question {} of '{}' ({} questions)",
                row.question,
                row.id,
                doc.questions.len()
            )
        })?;
        if !configs.contains(&row.config) {
            return Err(format!("row for unknown config '{}'", row.config));
        }
        if row.n_doc == 0 || row.n_question == 0 || row.n_gen > q.max_tokens as u64 {
            return Err(format!(
                "malformed row for '{}' question {} config {}: n_doc {}, n_question {}, n_gen {}",
                row.id, row.question, row.config, row.n_doc, row.n_question, row.n_gen
            ));
        }
        if row.policy != "none" && row.cells_peak > row.budget + 1024 {
            return Err(format!(
                "'{}' held {} cells with budget {}",
                row.config, row.cells_peak, row.budget
            ));
        }
        *seen
            .entry((row.id.clone(), row.question, row.config.clone()))
            .or_default() += 1;
        let s = tasks::score(&q.expected, &row.output);
        out.push(Scored {
            task: doc.task,
            length: doc.length,
            doc: doc.index,
            depth: q.depth,
            answer: q.expected.answer(),
            correct: s.correct,
            partial: s.partial,
            row,
        });
    }
    for d in docs {
        for qi in 0..d.questions.len() {
            for c in configs {
                match seen.get(&(d.id.clone(), qi, c.clone())) {
                    Some(1) => {}
                    Some(n) => {
                        return Err(format!("{n} rows for '{}' question {qi} config {c}", d.id))
                    }
                    None => return Err(format!("no row for '{}' question {qi} config {c}", d.id)),
                }
            }
        }
    }
    Ok(out)
}

/// Checks a trace result: one row per prompt and config, buckets covering the trace, a free-run
/// result for every compressed config when `free_runs`.
pub fn check_trace(
    t: &TraceRun,
    n_prompts: usize,
    configs: &[String],
    n_tokens: u64,
    free_runs: bool,
) -> Result<(), String> {
    if t.prompts.len() != n_prompts {
        return Err(format!(
            "trace: {} prompts, expected {n_prompts}",
            t.prompts.len()
        ));
    }
    for p in &t.prompts {
        if p.n_tokens != n_tokens || p.n_prompt == 0 {
            return Err(format!(
                "trace prompt '{}': {} tokens generated",
                p.id, p.n_tokens
            ));
        }
        for c in configs {
            let rows: Vec<&TraceRow> = t
                .rows
                .iter()
                .filter(|r| r.id == p.id && &r.config == c)
                .collect();
            let [r] = rows.as_slice() else {
                return Err(format!(
                    "trace '{}': {} rows for config {c}",
                    p.id,
                    rows.len()
                ));
            };
            let covered: u64 = r.buckets.iter().map(|b| b.n).sum();
            if r.n_tokens != n_tokens || covered != n_tokens || !(0.0..=1.0).contains(&r.top1) {
                return Err(format!(
                    "trace '{}' config {c}: {} tokens scored, {covered} in buckets, top-1 {}",
                    p.id, r.n_tokens, r.top1
                ));
            }
            if free_runs && r.policy != "none" && r.diverge_free.is_none() {
                return Err(format!("trace '{}' config {c}: no free-run result", p.id));
            }
        }
    }
    Ok(())
}
