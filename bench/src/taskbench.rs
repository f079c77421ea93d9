//! `beaconkv-bench tasks`: task accuracy on synthetic long-context tasks ([`crate::tasks`]) and
//! own-trace fidelity, for the full cache and every policy × budget.
//!
//! The run: calibrate characters per token on the model (`beaconkv-eval --mode count`), one
//! document per task and length with every config (the measured per-document cost), the trace
//! test, then further rounds of one document per task and length while they fit in `--minutes`
//! (or exactly `--docs` documents). Tables (accuracy with its Wilson interval and sample count),
//! CSV, JSON and plots go to the output folder.

use crate::plot::{draw_chart, init_fonts, Chart, Series};
use crate::results::{csv_field, sanitize_json};
use crate::run::{run_eval, EvalJob};
use crate::tasks::{self, fmt_accuracy, wilson, Doc, Task, TRACE_PROMPTS};
use plotters::prelude::SeriesLabelPosition;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

const DEFAULT_POLICIES: [&str; 4] = ["beacon", "recent", "streaming", "random"];
/// --quick: one short prompt (the tiny model's byte vocabulary makes the long ones slow).
const QUICK_TRACE_PROMPTS: [(&str, &str); 1] = [("short", "Tell a story.")];

/// What the task suite runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Part {
    Task,
    Trace,
}

#[derive(clap::Args, Debug)]
pub struct TasksCli {
    /// CI run: the tiny test model, budgets 32,64, one short document per task, a short trace
    /// (checks the pipeline and the row format, not accuracy)
    #[arg(long)]
    pub quick: bool,
    /// Model GGUF [default: Qwen2.5-Coder-0.5B-Instruct from scripts/fetch-models.sh qwen;
    /// --quick: build/models/tiny.gguf]
    #[arg(short = 'm', long = "model", value_name = "MODEL")]
    pub model: Option<PathBuf>,
    /// KV budgets in cells [default: 256,512,1024; --quick: 32,64]
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub budgets: Option<Vec<u32>>,
    /// Eviction policies [default: beacon,recent,streaming,random]
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub policies: Option<Vec<String>>,
    /// Tasks [default: niah,multikey,vt,chain]
    #[arg(long, value_delimiter = ',', value_enum, value_name = "LIST")]
    pub tasks: Option<Vec<Task>>,
    /// Haystack lengths in tokens [default: 2048 (4096 fits the hour only on more cores); --quick: 160]
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub lengths: Option<Vec<u32>>,
    /// Documents per task and length [default: as many rounds as fit in --minutes; --quick: 1]
    #[arg(long, value_name = "N")]
    pub docs: Option<u32>,
    /// Time budget of the whole run, in minutes (sizes the number of documents)
    #[arg(long, value_name = "M", default_value_t = 60.0)]
    pub minutes: f64,
    /// Seed of the task generators
    #[arg(long, value_name = "N", default_value_t = 12)]
    pub seed: u64,
    /// Trace: tokens the full cache generates per prompt [default: 2048; --quick: 48]
    #[arg(long, value_name = "N")]
    pub trace_tokens: Option<u32>,
    /// Trace: number of prompts (word problem, program, plan) [default: 1; --quick: 1, a short one]
    #[arg(long, value_name = "N")]
    pub trace_prompts: Option<u32>,
    /// Trace: position bucket in tokens [default: 256; --quick: 8]
    #[arg(long, value_name = "N")]
    pub bucket: Option<u32>,
    /// Trace: longest free run per config, tokens (0 = the whole trace) [default: 256; --quick: 0]
    #[arg(long, value_name = "N")]
    pub free_max: Option<u32>,
    /// Largest chunk a compressed context is fed per decode call (also at most budget/8, the
    /// hysteresis gap, so compression runs where decoding would run it)
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub chunk: u32,
    /// Most tokens per answer, for every task [default: the task's own (16 needle, 40 vt, 96
    /// chain); --quick: 8]
    #[arg(long, value_name = "N")]
    pub max_answer: Option<u32>,
    /// Parts to run [default: task,trace]
    #[arg(long, value_delimiter = ',', value_enum, value_name = "LIST")]
    pub only: Option<Vec<Part>>,
    /// Output folder [default: results/tasks-<model-stem>-<unix time> in the repository]
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub run: crate::run::EvalArgs,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TaskSettings {
    pub quick: bool,
    pub model: Option<PathBuf>,
    pub budgets: Vec<u32>,
    pub policies: Vec<String>,
    pub tasks: Vec<Task>,
    pub lengths: Vec<u32>,
    pub docs: Option<u32>,
    pub minutes: f64,
    pub seed: u64,
    pub trace_tokens: u32,
    pub trace_prompts: u32,
    pub bucket: u32,
    pub free_max: u32,
    pub chunk: u32,
    /// Overrides every task's answer length (None: the task's own).
    pub max_answer: Option<u32>,
    pub parts: Vec<Part>,
    pub out: Option<PathBuf>,
    /// How beaconkv-eval runs (its fields appear at the top level of results.json).
    #[serde(flatten)]
    pub run: crate::run::EvalOptions,
}

fn pick<T>(given: Option<T>, quick: bool, q: T, full: T) -> T {
    given.unwrap_or(if quick { q } else { full })
}

pub fn resolve(cli: TasksCli, root: &Path) -> Result<TaskSettings, String> {
    let quick = cli.quick;
    let budgets = pick(cli.budgets, quick, vec![32, 64], vec![256, 512, 1024]);
    let policies = cli
        .policies
        .unwrap_or_else(|| DEFAULT_POLICIES.iter().map(|s| s.to_string()).collect());
    let mut tasks = cli.tasks.unwrap_or_else(|| Task::ALL.to_vec());
    tasks.sort();
    tasks.dedup();
    let lengths = pick(cli.lengths, quick, vec![160], vec![2048]);
    let mut parts = cli.only.unwrap_or_else(|| vec![Part::Task, Part::Trace]);
    parts.sort();
    parts.dedup();
    if budgets.is_empty() || budgets.iter().any(|&b| b < 8) {
        return Err("--budgets needs numbers of at least 8, e.g. 256,512".into());
    }
    crate::check_policies(&policies)?;
    if tasks.is_empty() || lengths.is_empty() || lengths.iter().any(|&l| l < 64) {
        return Err("--tasks and --lengths (at least 64 tokens) must not be empty".into());
    }
    if cli.docs == Some(0) || cli.minutes.is_nan() || cli.minutes <= 0.0 || cli.chunk == 0 {
        return Err("--docs, --minutes and --chunk must be positive".into());
    }
    let trace_prompts = pick(cli.trace_prompts, quick, 1, 1);
    if trace_prompts == 0 || trace_prompts as usize > TRACE_PROMPTS.len() {
        return Err(format!(
            "--trace-prompts must be 1..={}",
            TRACE_PROMPTS.len()
        ));
    }
    let trace_tokens = pick(cli.trace_tokens, quick, 48, 2048);
    let bucket = pick(cli.bucket, quick, 8, 256);
    if trace_tokens < 2 || bucket == 0 {
        return Err("--trace-tokens must be at least 2 and --bucket positive".into());
    }
    let run = cli.run.resolve(root)?;
    Ok(TaskSettings {
        quick,
        model: cli.model,
        budgets,
        policies,
        tasks,
        lengths,
        docs: cli.docs.or(if quick { Some(1) } else { None }),
        minutes: cli.minutes,
        seed: cli.seed,
        trace_tokens,
        trace_prompts,
        bucket,
        free_max: pick(cli.free_max, quick, 0, 256),
        chunk: cli.chunk,
        max_answer: cli.max_answer.or(if quick { Some(8) } else { None }),
        parts,
        out: cli.out,
        run,
    })
}

/// "none" then every policy × budget.
pub fn configs(s: &TaskSettings) -> Vec<String> {
    let mut c = vec!["none".to_string()];
    for p in &s.policies {
        for b in &s.budgets {
            c.push(format!("{p}:{b}{}", s.run.extra));
        }
    }
    c
}

fn base_args(s: &TaskSettings, mode: &str, model: &Path, input: &Path, out: &Path) -> Vec<String> {
    let configs = if mode == "count" {
        "none".to_string()
    } else {
        configs(s).join(",")
    };
    let mut a: Vec<String> = [
        "--mode",
        mode,
        "--configs",
        &configs,
        "--tasks",
        &input.display().to_string(),
        "--out",
        &out.display().to_string(),
        "-m",
        &model.display().to_string(),
        "-t",
        &s.run.threads.to_string(),
    ]
    .iter()
    .map(|x| x.to_string())
    .collect();
    match mode {
        "task" => a.extend(["--chunk".to_string(), s.chunk.to_string()]),
        "trace" => a.extend(
            [
                "--chunk",
                &s.chunk.to_string(),
                "--n-tokens",
                &s.trace_tokens.to_string(),
                "--bucket",
                &s.bucket.to_string(),
                "--free-max",
                &s.free_max.to_string(),
            ]
            .iter()
            .map(|x| x.to_string()),
        ),
        _ => {}
    }
    a.extend(s.run.llama_args.iter().cloned());
    a
}

// ---------------------------------------------------------------------------------------------
// The tool's rows

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

fn read_json(path: &Path, mode: &str) -> Result<Value, String> {
    let bytes = std::fs::read(path)
        .map_err(|e| format!("beaconkv-eval wrote no {}: {e}", path.display()))?;
    let v: Value = serde_json::from_str(&sanitize_json(&bytes))
        .map_err(|e| format!("{}: invalid JSON: {e}", path.display()))?;
    if v.get("mode").and_then(Value::as_str) != Some(mode) {
        return Err(format!("{}: not a {mode} result", path.display()));
    }
    Ok(v)
}

fn results_of<T: for<'de> Deserialize<'de>>(v: &Value, what: &str) -> Result<Vec<T>, String> {
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

/// Checks a trace result: one row per prompt and config, buckets covering the trace.
pub fn check_trace(
    t: &TraceRun,
    n_prompts: usize,
    configs: &[String],
    n_tokens: u64,
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
            if r.policy != "none" && r.diverge_free.is_none() {
                return Err(format!("trace '{}' config {c}: no free-run result", p.id));
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Aggregates and tables

/// k correct of n, for one (task, length or all, policy, budget).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Acc {
    pub k: u64,
    pub n: u64,
    pub partial: f64,
}

impl Acc {
    pub fn rate(&self) -> f64 {
        if self.n == 0 {
            f64::NAN
        } else {
            self.k as f64 / self.n as f64
        }
    }
}

/// Key: (task, length; 0 = all lengths, policy, budget; 0 for none).
pub type AccKey = (Task, u32, String, i64);

pub fn aggregate(rows: &[Scored]) -> BTreeMap<AccKey, Acc> {
    let mut m: BTreeMap<AccKey, Acc> = BTreeMap::new();
    for r in rows {
        for len in [r.length, 0] {
            let a = m
                .entry((r.task, len, r.row.policy.clone(), r.row.budget))
                .or_default();
            a.n += 1;
            a.k += r.correct as u64;
            a.partial += r.partial;
        }
    }
    m
}

fn policy_order(policies: &[String]) -> Vec<String> {
    policies.to_vec()
}

fn length_label(len: u32) -> String {
    if len == 0 {
        "all lengths".into()
    } else {
        format!("{len} tokens")
    }
}

/// The full-cache accuracy: rows tasks, columns lengths then all.
pub fn full_cache_table(acc: &BTreeMap<AccKey, Acc>, tasks: &[Task], lengths: &[u32]) -> String {
    let mut cols: Vec<u32> = lengths.to_vec();
    cols.push(0);
    let mut s = String::from("| task |");
    for &l in &cols {
        let _ = write!(s, " {} |", length_label(l));
    }
    s.push('\n');
    s.push_str(&"| --- ".repeat(cols.len() + 1));
    s.push_str("|\n");
    for &t in tasks {
        let _ = write!(s, "| {t} |");
        for &l in &cols {
            let a = acc
                .get(&(t, l, "none".into(), 0))
                .cloned()
                .unwrap_or_default();
            let _ = write!(s, " {} |", fmt_accuracy(a.k, a.n));
        }
        s.push('\n');
    }
    s
}

/// One task at one length (0 = all): rows policies, columns budgets, plus the full cache.
pub fn task_table(
    acc: &BTreeMap<AccKey, Acc>,
    task: Task,
    length: u32,
    policies: &[String],
    budgets: &[u32],
) -> String {
    let mut s = String::from("| policy |");
    for b in budgets {
        let _ = write!(s, " {b} |");
    }
    s.push_str(" full cache |\n");
    s.push_str(&"| --- ".repeat(budgets.len() + 2));
    s.push_str("|\n");
    for p in policy_order(policies) {
        let _ = write!(s, "| {p} |");
        for &b in budgets {
            let a = acc
                .get(&(task, length, p.clone(), b as i64))
                .cloned()
                .unwrap_or_default();
            let _ = write!(s, " {} |", fmt_accuracy(a.k, a.n));
        }
        s.push_str(" – |\n");
    }
    let none = acc
        .get(&(task, length, "none".into(), 0))
        .cloned()
        .unwrap_or_default();
    let _ = writeln!(
        s,
        "| none |{} {} |",
        " – |".repeat(budgets.len()),
        fmt_accuracy(none.k, none.n)
    );
    s
}

/// Per config, pooled over prompts (token-weighted): top-1, KL, first mismatch, free run.
pub fn trace_table(t: &TraceRun, configs: &[String]) -> String {
    let mut s = String::from(
        "| config | top-1 | mean KL | first top-1 miss (teacher-forced) | free run: tokens before divergence |\n| --- | --- | --- | --- | --- |\n",
    );
    for c in configs {
        let rows: Vec<&TraceRow> = t.rows.iter().filter(|r| &r.config == c).collect();
        if rows.is_empty() {
            continue;
        }
        let n: u64 = rows.iter().map(|r| r.n_tokens).sum();
        let top1 = rows.iter().map(|r| r.top1 * r.n_tokens as f64).sum::<f64>() / n.max(1) as f64;
        let kl = rows.iter().map(|r| r.kl * r.n_tokens as f64).sum::<f64>() / n.max(1) as f64;
        let miss: Vec<String> = rows
            .iter()
            .map(|r| {
                if r.first_mismatch < 0 {
                    "none".into()
                } else {
                    r.first_mismatch.to_string()
                }
            })
            .collect();
        let free: Vec<String> = rows
            .iter()
            .map(|r| match r.diverge_free {
                None => "–".into(),
                Some(d) if d >= r.free_limit => format!("≥{d}"),
                Some(d) => d.to_string(),
            })
            .collect();
        let _ = writeln!(
            s,
            "| {c} | {top1:.3} | {kl:.4} | {} | {} |",
            miss.join(", "),
            free.join(", ")
        );
    }
    s
}

/// Top-1 (or KL) per position bucket, pooled over prompts: rows configs, columns buckets.
pub fn bucket_table(t: &TraceRun, configs: &[String], kl: bool) -> String {
    let edges: Vec<(u64, u64)> = t
        .rows
        .first()
        .map(|r| r.buckets.iter().map(|b| (b.from, b.to)).collect())
        .unwrap_or_default();
    let mut s = String::from("| config |");
    for (a, b) in &edges {
        let _ = write!(s, " {a}–{} |", b.saturating_sub(1));
    }
    s.push('\n');
    s.push_str(&"| --- ".repeat(edges.len() + 1));
    s.push_str("|\n");
    for c in configs {
        let rows: Vec<&TraceRow> = t.rows.iter().filter(|r| &r.config == c).collect();
        if rows.is_empty() {
            continue;
        }
        let _ = write!(s, "| {c} |");
        for i in 0..edges.len() {
            let (mut sum, mut n) = (0.0, 0u64);
            for r in &rows {
                if let Some(b) = r.buckets.get(i) {
                    sum += if kl { b.kl } else { b.top1 } * b.n as f64;
                    n += b.n;
                }
            }
            let v = if n > 0 { sum / n as f64 } else { f64::NAN };
            if kl {
                let _ = write!(s, " {v:.4} |");
            } else {
                let _ = write!(s, " {v:.3} |");
            }
        }
        s.push('\n');
    }
    s
}

pub fn summary_markdown(
    s: &TaskSettings,
    acc: &BTreeMap<AccKey, Acc>,
    trace: Option<&TraceRun>,
) -> String {
    let mut md = String::new();
    if !acc.is_empty() {
        md.push_str("## Full-cache accuracy (exact match, 95% Wilson interval, correct/asked)\n\n");
        md.push_str(&full_cache_table(acc, &s.tasks, &s.lengths));
        md.push('\n');
        for &t in &s.tasks {
            let mut lens = vec![0];
            if s.lengths.len() > 1 {
                lens.extend(&s.lengths);
            }
            for l in lens {
                let _ = writeln!(
                    md,
                    "## {t}: {} — accuracy vs KV budget ({})\n",
                    t.describe(),
                    length_label(if s.lengths.len() > 1 { l } else { s.lengths[0] })
                );
                md.push_str(&task_table(acc, t, l, &s.policies, &s.budgets));
                md.push('\n');
            }
        }
    }
    if let Some(tr) = trace {
        let cfgs = configs(s);
        let _ = writeln!(
            md,
            "## Own-trace fidelity: {} tokens of the full cache's greedy answer ({})\n",
            s.trace_tokens,
            tr.prompts
                .iter()
                .map(|p| p.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        md.push_str("Top-1 agreement with the trace and KL(full || config), teacher-forced; first miss and free-run divergence per prompt.\n\n");
        md.push_str(&trace_table(tr, &cfgs));
        md.push_str("\n### Top-1 agreement by position in the answer\n\n");
        md.push_str(&bucket_table(tr, &cfgs, false));
        md.push_str("\n### Mean KL by position in the answer\n\n");
        md.push_str(&bucket_table(tr, &cfgs, true));
        md.push('\n');
    }
    md
}

// ---------------------------------------------------------------------------------------------
// CSV

pub const TASK_CSV_COLUMNS: [&str; 20] = [
    "task",
    "length",
    "doc",
    "question",
    "depth",
    "config",
    "policy",
    "budget",
    "n_doc",
    "n_question",
    "n_gen",
    "correct",
    "partial",
    "answer",
    "output",
    "cells_peak",
    "evicted",
    "compress_events",
    "prefill_ms",
    "answer_ms",
];

pub fn tasks_csv(rows: &[Scored]) -> String {
    let mut s = TASK_CSV_COLUMNS.join(",");
    s.push('\n');
    for r in rows {
        let f = [
            r.task.to_string(),
            r.length.to_string(),
            r.doc.to_string(),
            r.row.question.to_string(),
            format!("{:.3}", r.depth),
            r.row.config.clone(),
            r.row.policy.clone(),
            r.row.budget.to_string(),
            r.row.n_doc.to_string(),
            r.row.n_question.to_string(),
            r.row.n_gen.to_string(),
            r.correct.to_string(),
            format!("{}", r.partial),
            r.answer.clone(),
            r.row.output.clone(),
            r.row.cells_peak.to_string(),
            r.row.evicted.to_string(),
            r.row.compress_events.to_string(),
            format!("{:.1}", r.row.prefill_ms),
            format!("{:.1}", r.row.answer_ms),
        ];
        let line: Vec<String> = f.iter().map(|x| csv_field(x)).collect();
        s.push_str(&line.join(","));
        s.push('\n');
    }
    s
}

pub fn accuracy_csv(acc: &BTreeMap<AccKey, Acc>) -> String {
    let mut s =
        String::from("task,length,policy,budget,correct,n,accuracy,wilson_lo,wilson_hi,partial\n");
    for ((t, l, p, b), a) in acc {
        let (lo, hi) = wilson(a.k, a.n);
        let _ = writeln!(
            s,
            "{t},{},{p},{b},{},{},{:.4},{lo:.4},{hi:.4},{:.4}",
            if *l == 0 {
                "all".to_string()
            } else {
                l.to_string()
            },
            a.k,
            a.n,
            a.rate(),
            a.partial / a.n.max(1) as f64
        );
    }
    s
}

pub fn trace_csv(t: &TraceRun) -> String {
    let mut s = String::from(
        "prompt,config,policy,budget,from,to,n,top1,kl,first_mismatch,diverge_free,free_limit\n",
    );
    for r in &t.rows {
        for b in &r.buckets {
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{},{},{},{},{},{}",
                csv_field(&r.id),
                csv_field(&r.config),
                r.policy,
                r.budget,
                b.from,
                b.to,
                b.n,
                b.top1,
                b.kl,
                r.first_mismatch,
                r.diverge_free.map(|d| d.to_string()).unwrap_or_default(),
                r.free_limit
            );
        }
    }
    s
}

// ---------------------------------------------------------------------------------------------
// Plots

pub fn plot_tasks(
    s: &TaskSettings,
    acc: &BTreeMap<AccKey, Acc>,
    trace: Option<&TraceRun>,
    dir: &Path,
) -> Result<Vec<PathBuf>, String> {
    init_fonts()?;
    let mut written = Vec::new();
    let (lo, hi) = (
        *s.budgets.iter().min().unwrap_or(&1) as f64,
        *s.budgets.iter().max().unwrap_or(&1) as f64,
    );
    for &t in &s.tasks {
        if !acc.keys().any(|k| k.0 == t) {
            continue;
        }
        let mut series: Vec<Series> = s
            .policies
            .iter()
            .map(|p| Series {
                label: p.clone(),
                points: s
                    .budgets
                    .iter()
                    .filter_map(|&b| {
                        acc.get(&(t, 0, p.clone(), b as i64))
                            .map(|a| (b as f64, a.rate()))
                    })
                    .collect(),
                dashed: false,
            })
            .collect();
        if let Some(a) = acc.get(&(t, 0, "none".into(), 0)) {
            series.push(Series {
                label: format!("full cache ({:.0}%)", 100.0 * a.rate()),
                points: vec![(lo, a.rate()), (hi, a.rate())],
                dashed: true,
            });
        }
        let path = dir.join(format!("accuracy_{t}.png"));
        let title = format!("{}: accuracy vs KV budget", t.describe());
        draw_chart(&Chart {
            path: &path,
            title: &title,
            x_desc: "KV budget (cells)",
            y_desc: "exact-match accuracy",
            x_log2: true,
            y_min: Some(0.0),
            y_max: Some(1.05),
            series,
            legend: SeriesLabelPosition::LowerRight,
        })?;
        written.push(path);
    }
    if let Some(tr) = trace {
        for &b in &s.budgets {
            for kl in [false, true] {
                let mut series = Vec::new();
                let mut cfgs: Vec<String> = s
                    .policies
                    .iter()
                    .map(|p| format!("{p}:{b}{}", s.run.extra))
                    .collect();
                if !kl {
                    cfgs.push("none".into());
                }
                for c in cfgs {
                    let rows: Vec<&TraceRow> = tr.rows.iter().filter(|r| r.config == c).collect();
                    let Some(first) = rows.first() else { continue };
                    let points = (0..first.buckets.len())
                        .map(|i| {
                            let (mut sum, mut n) = (0.0, 0u64);
                            let mut mid = 0.0;
                            for r in &rows {
                                if let Some(bk) = r.buckets.get(i) {
                                    sum += if kl { bk.kl } else { bk.top1 } * bk.n as f64;
                                    n += bk.n;
                                    mid = (bk.from + bk.to) as f64 / 2.0;
                                }
                            }
                            (mid, if n > 0 { sum / n as f64 } else { f64::NAN })
                        })
                        .collect();
                    let none = c == "none";
                    series.push(Series {
                        label: if none {
                            "full cache, teacher-forced (noise floor)".into()
                        } else {
                            c.clone()
                        },
                        points,
                        dashed: none,
                    });
                }
                let what = if kl { "kl" } else { "top1" };
                let path = dir.join(format!("trace_{what}_{b}.png"));
                let title = format!(
                    "Own trace, budget {b}: {} by position",
                    if kl {
                        "KL(full || config)"
                    } else {
                        "top-1 agreement"
                    }
                );
                draw_chart(&Chart {
                    path: &path,
                    title: &title,
                    x_desc: "position in the generated answer (tokens)",
                    y_desc: if kl { "mean KL" } else { "top-1 agreement" },
                    x_log2: false,
                    y_min: Some(0.0),
                    y_max: if kl { None } else { Some(1.02) },
                    series,
                    legend: if kl {
                        SeriesLabelPosition::UpperLeft
                    } else {
                        SeriesLabelPosition::LowerLeft
                    },
                })?;
                written.push(path);
            }
        }
    }
    Ok(written)
}

// ---------------------------------------------------------------------------------------------
// The run

/// Writes documents as the `--tasks` file of one run.
fn write_jsonl(path: &Path, docs: &[Doc]) -> Result<(), String> {
    let mut s = String::new();
    for d in docs {
        s.push_str(&d.to_jsonl());
        s.push('\n');
    }
    std::fs::write(path, s).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn run_job(
    s: &TaskSettings,
    name: &str,
    label: &str,
    mode: &str,
    model: &Path,
    input: &Path,
    out: &Path,
) -> Result<(Value, f64), String> {
    let json_path = out.join(format!("{name}.json"));
    let job = EvalJob {
        eval: s.run.eval.clone(),
        args: base_args(s, mode, model, input, &json_path),
        label: label.to_string(),
        log: out.join(format!("{name}.log")),
    };
    let elapsed = run_eval(&job)?;
    let v = read_json(&json_path, mode)?;
    eprintln!("{label:>16}: done in {:.1} s", elapsed.as_secs_f64());
    Ok((v, elapsed.as_secs_f64()))
}

pub fn run(
    cli: TasksCli,
    root: &Path,
    resolve_model: impl Fn(&Option<PathBuf>, bool) -> Result<PathBuf, String>,
) -> Result<(), String> {
    let started = Instant::now();
    let command_line: Vec<String> = std::env::args().collect();
    let s = resolve(cli, root)?;
    s.run.check_binary()?;
    let model = resolve_model(&s.model, s.quick)?;
    let unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let out = s.out.clone().unwrap_or_else(|| {
        let stem = model
            .file_stem()
            .map(|x| x.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into());
        root.join("results").join(format!("tasks-{stem}-{unix}"))
    });
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let cfgs = configs(&s);
    eprintln!("model:   {}", model.display());
    eprintln!("out:     {}", out.display());
    eprintln!("configs: {}", cfgs.join(","));
    let budget_s = s.minutes * 60.0;

    let mut failure: Option<String> = None;
    let mut docs: Vec<Doc> = Vec::new();
    let mut rows: Vec<EvalTaskRow> = Vec::new();
    let mut trace: Option<TraceRun> = None;
    let mut timings: Vec<Value> = Vec::new();
    let mut cpt = 4.0;
    let mut costs: BTreeMap<String, f64> = BTreeMap::new();

    let do_tasks = s.parts.contains(&Part::Task);
    let mut attempt = || -> Result<(), String> {
        if do_tasks {
            // 1. characters per token of this model on these documents
            let probe: Vec<Doc> = s
                .tasks
                .iter()
                .map(|&t| tasks::generate(t, *s.lengths.iter().max().unwrap(), 0, s.seed, cpt))
                .collect();
            let input = out.join("count.jsonl");
            write_jsonl(&input, &probe)?;
            let (v, secs) = run_job(&s, "count", "count", "count", &model, &input, &out)?;
            let counts: Vec<Value> = results_of(&v, "count")?;
            let chars: f64 = counts.iter().filter_map(|c| c["chars"].as_f64()).sum();
            let toks: f64 = counts.iter().filter_map(|c| c["n_doc"].as_f64()).sum();
            if toks > 0.0 && chars > 0.0 {
                cpt = chars / toks;
            }
            eprintln!("calibration: {cpt:.2} characters per token");
            timings.push(json!({"step": "count", "elapsed_s": secs, "chars_per_token": cpt}));
        }
        let cells: Vec<(Task, u32)> = s
            .tasks
            .iter()
            .flat_map(|&t| s.lengths.iter().map(move |&l| (t, l)))
            .collect();
        // Runs document `round` of the given cells in one beaconkv-eval call.
        let run_docs = |round: u32,
                        which: &[(Task, u32)],
                        docs: &mut Vec<Doc>,
                        rows: &mut Vec<EvalTaskRow>,
                        costs: &mut BTreeMap<String, f64>,
                        timings: &mut Vec<Value>|
         -> Result<f64, String> {
            let batch: Vec<Doc> = which
                .iter()
                .map(|&(t, l)| {
                    let mut d = tasks::generate(t, l, round, s.seed, cpt);
                    if let Some(m) = s.max_answer {
                        d.questions.iter_mut().for_each(|q| q.max_tokens = m);
                    }
                    d
                })
                .collect();
            let (name, label) = match which {
                [(t, l)] if round > 0 || s.docs.is_none() => (
                    format!("task-{round}-{t}-{l}"),
                    format!("{t}@{l} doc {}", round + 1),
                ),
                _ => (format!("task-{round}"), format!("task round {}", round + 1)),
            };
            let input = out.join(format!("{name}.jsonl"));
            write_jsonl(&input, &batch)?;
            let (v, secs) = run_job(&s, &name, &label, "task", &model, &input, &out)?;
            let new: Vec<EvalTaskRow> = results_of(&v, "task")?;
            // per-document cost: prefill once per config + every answer
            for d in &batch {
                let ms: f64 = new
                    .iter()
                    .filter(|r| r.id == d.id)
                    .map(|r| r.answer_ms + if r.question == 0 { r.prefill_ms } else { 0.0 })
                    .sum();
                costs.insert(format!("{}@{}", d.task, d.length), ms / 1000.0);
            }
            score_rows(&batch, new.clone(), &cfgs)?;
            timings.push(json!({"step": name, "elapsed_s": secs, "documents": batch.len()}));
            docs.extend(batch);
            rows.extend(new);
            Ok(secs)
        };
        if do_tasks {
            // one call per document (what finished survives a later failure), in one call when
            // the count is fixed (CI: one model load)
            let mut secs = 0.0;
            if s.docs.is_some() {
                secs = run_docs(0, &cells, &mut docs, &mut rows, &mut costs, &mut timings)?;
            } else {
                for c in &cells {
                    secs += run_docs(
                        0,
                        std::slice::from_ref(c),
                        &mut docs,
                        &mut rows,
                        &mut costs,
                        &mut timings,
                    )?;
                }
            }
            let parts: Vec<String> = costs.iter().map(|(k, v)| format!("{k} {v:.0} s")).collect();
            eprintln!(
                "measured per document (all {} configs): {} — one round {:.0} s",
                cfgs.len(),
                parts.join(", "),
                secs
            );
        }
        if s.parts.contains(&Part::Trace) {
            let list: &[(&str, &str)] = if s.quick {
                &QUICK_TRACE_PROMPTS
            } else {
                &TRACE_PROMPTS[..s.trace_prompts as usize]
            };
            let prompts: Vec<String> = list
                .iter()
                .map(|(id, p)| json!({"id": id, "prompt": p}).to_string())
                .collect();
            let input = out.join("trace.jsonl");
            std::fs::write(&input, prompts.join("\n") + "\n")
                .map_err(|e| format!("cannot write {}: {e}", input.display()))?;
            let (v, secs) = run_job(&s, "trace", "trace", "trace", &model, &input, &out)?;
            let t = parse_trace(&v)?;
            check_trace(&t, list.len(), &cfgs, s.trace_tokens as u64)?;
            timings.push(json!({"step": "trace", "elapsed_s": secs}));
            trace = Some(t);
        }
        if do_tasks {
            match s.docs {
                // exactly N documents per cell: one call per round
                Some(n) => {
                    for round in 1..n {
                        run_docs(
                            round,
                            &cells,
                            &mut docs,
                            &mut rows,
                            &mut costs,
                            &mut timings,
                        )?;
                    }
                }
                // while time is left: one document at a time, cycling over the cells, each
                // only when its measured cost still fits
                None => {
                    let mut round = 1;
                    loop {
                        let mut ran = false;
                        for &(t, l) in &cells {
                            // keep a little for tables and plots
                            let left = budget_s
                                - started.elapsed().as_secs_f64()
                                - (0.05 * budget_s).min(20.0);
                            let cost = costs.get(&format!("{t}@{l}")).copied().unwrap_or(f64::MAX);
                            if cost * 1.1 > left {
                                continue;
                            }
                            run_docs(
                                round,
                                &[(t, l)],
                                &mut docs,
                                &mut rows,
                                &mut costs,
                                &mut timings,
                            )?;
                            ran = true;
                        }
                        if !ran {
                            eprintln!(
                                "time budget reached: {round} document(s) per task and length at most ({:.1} min left)",
                                (budget_s - started.elapsed().as_secs_f64()) / 60.0
                            );
                            break;
                        }
                        round += 1;
                    }
                }
            }
        }
        Ok(())
    };
    if let Err(e) = attempt() {
        failure = Some(e);
    }

    let scored = match score_rows(&docs, rows.clone(), &cfgs) {
        Ok(v) => v,
        Err(e) => {
            failure = failure.or(Some(e));
            Vec::new()
        }
    };
    let acc = aggregate(&scored);
    let header = format!(
        "# BeaconKV task benchmark: {}\n\n",
        model.file_name().unwrap_or_default().to_string_lossy()
    );
    let md = summary_markdown(&s, &acc, trace.as_ref());
    let write = |name: &str, text: &str| -> Result<(), String> {
        let p = out.join(name);
        std::fs::write(&p, text).map_err(|e| format!("cannot write {}: {e}", p.display()))
    };
    write("summary.md", &format!("{header}{md}"))?;
    write("tasks.csv", &tasks_csv(&scored))?;
    write("accuracy.csv", &accuracy_csv(&acc))?;
    if let Some(t) = &trace {
        write("trace.csv", &trace_csv(t))?;
    }
    let acc_json: Vec<Value> = acc
        .iter()
        .map(|((t, l, p, b), a)| {
            let (lo, hi) = wilson(a.k, a.n);
            json!({"task": t, "length": if *l == 0 { Value::from("all") } else { Value::from(*l) },
                   "policy": p, "budget": b, "correct": a.k, "n": a.n, "accuracy": a.rate(),
                   "wilson": [lo, hi]})
        })
        .collect();
    let doc = json!({
        "command_line": command_line,
        "model": model.display().to_string(),
        "eval": s.run.eval.display().to_string(),
        "machine": crate::machine_info(),
        "started_unix": unix,
        "elapsed_s": started.elapsed().as_secs_f64(),
        "settings": s,
        "chars_per_token": cpt,
        "seconds_per_document": costs,
        "steps": timings,
        "failed": failure,
        "accuracy": acc_json,
        "tasks": scored,
        "trace": trace,
    });
    let pretty = serde_json::to_string_pretty(&doc)
        .map_err(|e| format!("cannot encode results.json: {e}"))?;
    write("results.json", &pretty)?;
    if !md.is_empty() {
        println!("{md}");
        match plot_tasks(&s, &acc, trace.as_ref(), &out) {
            Ok(files) => {
                for f in files {
                    eprintln!("plot: {}", f.display());
                }
            }
            Err(e) => failure = failure.or(Some(e)),
        }
    }
    eprintln!(
        "results in {} ({:.1} min)",
        out.display(),
        started.elapsed().as_secs_f64() / 60.0
    );
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser, Debug)]
    struct Wrap {
        #[command(flatten)]
        t: TasksCli,
    }

    fn settings(args: &[&str]) -> Result<TaskSettings, String> {
        use clap::Parser;
        let w = Wrap::try_parse_from(std::iter::once("x").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        resolve(w.t, Path::new("/repo"))
    }

    #[test]
    fn defaults_and_quick() {
        let s = settings(&[]).unwrap();
        assert_eq!(s.budgets, vec![256, 512, 1024]);
        assert_eq!(s.lengths, vec![2048]);
        assert_eq!(s.tasks, Task::ALL.to_vec());
        assert_eq!(
            (s.trace_tokens, s.trace_prompts, s.bucket, s.free_max),
            (2048, 1, 256, 256)
        );
        assert_eq!(s.docs, None);
        assert_eq!(s.minutes, 60.0);
        assert_eq!(configs(&s).len(), 13);
        assert_eq!(configs(&s)[0], "none");
        let q = settings(&["--quick", "--tasks", "vt,niah"]).unwrap();
        assert_eq!(q.budgets, vec![32, 64]);
        assert_eq!(q.docs, Some(1));
        assert_eq!(q.tasks, vec![Task::Niah, Task::Vt]);
        assert_eq!((q.trace_tokens, q.bucket, q.free_max), (48, 8, 0));
    }

    #[test]
    fn rejects_bad_options() {
        assert!(settings(&["--budgets", "4"]).is_err());
        assert!(settings(&["--policies", "none"]).is_err());
        assert!(settings(&["--docs", "0"]).is_err());
        assert!(settings(&["--trace-prompts", "9"]).is_err());
        assert!(settings(&["--tasks", "bogus"]).is_err());
        assert!(settings(&["--extra", "x"]).is_err());
    }

    #[test]
    fn eval_arguments() {
        let s = settings(&["--quick", "--extra", "span=3", "--", "-fa", "on"]).unwrap();
        let a = base_args(
            &s,
            "trace",
            Path::new("/m.gguf"),
            Path::new("/o/t.jsonl"),
            Path::new("/o/t.json"),
        )
        .join(" ");
        assert!(
            a.starts_with("--mode trace --configs none,beacon:32/span=3,beacon:64/span=3,"),
            "{a}"
        );
        assert!(
            a.contains("--tasks /o/t.jsonl --out /o/t.json -m /m.gguf -t 2"),
            "{a}"
        );
        assert!(
            a.ends_with("--chunk 64 --n-tokens 48 --bucket 8 --free-max 0 -fa on"),
            "{a}"
        );
        let c = base_args(
            &s,
            "count",
            Path::new("/m"),
            Path::new("/i"),
            Path::new("/o"),
        )
        .join(" ");
        assert!(c.starts_with("--mode count --configs none "), "{c}");
    }

    fn row(doc: &Doc, q: usize, config: &str, output: &str) -> EvalTaskRow {
        let (policy, budget) = match config.split_once(':') {
            Some((p, b)) => (p.to_string(), b.parse().unwrap()),
            None => (config.to_string(), 0),
        };
        EvalTaskRow {
            id: doc.id.clone(),
            question: q,
            config: config.into(),
            policy,
            budget,
            n_doc: 300,
            n_question: 30,
            n_gen: 5,
            stopped: true,
            output: output.into(),
            cells_doc: 64,
            cells_peak: 64,
            evicted: 10,
            compress_events: 2,
            plugin_ms: 1.0,
            prefill_ms: 100.0,
            answer_ms: 10.0,
        }
    }

    #[test]
    fn scoring_rows_and_tables() {
        let docs = vec![
            tasks::generate(Task::Niah, 256, 0, 1, 4.0),
            tasks::generate(Task::Multikey, 256, 0, 1, 4.0),
        ];
        let cfgs: Vec<String> = vec!["none".into(), "beacon:64".into()];
        let mut rows = Vec::new();
        for d in &docs {
            for (qi, q) in d.questions.iter().enumerate() {
                rows.push(row(d, qi, "none", &q.reference));
                rows.push(row(
                    d,
                    qi,
                    "beacon:64",
                    if qi == 0 { &q.reference } else { "no idea" },
                ));
            }
        }
        let scored = score_rows(&docs, rows.clone(), &cfgs).unwrap();
        assert_eq!(scored.len(), 2 * (1 + 4));
        let acc = aggregate(&scored);
        assert_eq!(acc[&(Task::Multikey, 0, "none".into(), 0)].k, 4);
        assert_eq!(acc[&(Task::Multikey, 256, "beacon".into(), 64)].k, 1);
        assert_eq!(acc[&(Task::Multikey, 256, "beacon".into(), 64)].n, 4);
        let t = task_table(&acc, Task::Multikey, 0, &["beacon".into()], &[64]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "| policy | 64 | full cache |");
        assert_eq!(lines[2], "| beacon | 25% [5–70] (1/4) | – |");
        assert_eq!(lines[3], "| none | – | 100% [51–100] (4/4) |");
        let f = full_cache_table(&acc, &[Task::Niah, Task::Multikey], &[256]);
        assert!(
            f.contains("| niah | 100% [21–100] (1/1) | 100% [21–100] (1/1) |"),
            "{f}"
        );
        let csv = accuracy_csv(&acc);
        assert!(csv.contains("multikey,all,beacon,64,1,4,0.2500,"), "{csv}");
        let tcsv = tasks_csv(&scored);
        assert_eq!(tcsv.lines().next().unwrap(), TASK_CSV_COLUMNS.join(","));
        assert_eq!(tcsv.lines().count(), 1 + scored.len());

        // missing, duplicate and malformed rows are errors
        assert!(score_rows(&docs, rows[1..].to_vec(), &cfgs)
            .unwrap_err()
            .contains("no row"));
        let mut dup = rows.clone();
        dup.push(rows[0].clone());
        assert!(score_rows(&docs, dup, &cfgs)
            .unwrap_err()
            .contains("2 rows"));
        let mut bad = rows.clone();
        bad[0].n_doc = 0;
        assert!(score_rows(&docs, bad, &cfgs)
            .unwrap_err()
            .contains("malformed"));
        let mut unknown = rows;
        unknown[0].id = "nope".into();
        assert!(score_rows(&docs, unknown, &cfgs).is_err());
    }

    fn trace_fixture() -> TraceRun {
        let bucket = |from, to, top1, kl| Bucket {
            from,
            to,
            n: to - from,
            top1,
            kl,
        };
        let mk = |config: &str, policy: &str, budget, top1, first, free| TraceRow {
            id: "p".into(),
            config: config.into(),
            policy: policy.into(),
            budget,
            n_tokens: 16,
            top1,
            kl: 0.5,
            first_mismatch: first,
            diverge_free: free,
            free_limit: 16,
            buckets: vec![bucket(0, 8, 1.0, 0.0), bucket(8, 16, 2.0 * top1 - 1.0, 1.0)],
            cells_peak: 32,
            evicted: 4,
            compress_events: 1,
            plugin_ms: 1.0,
            decode_ms: 2.0,
        };
        TraceRun {
            prompts: vec![TracePrompt {
                id: "p".into(),
                n_prompt: 20,
                n_tokens: 16,
                first_eog: -1,
                ref_ms: 5.0,
                text: "x".into(),
            }],
            rows: vec![
                mk("none", "none", 0, 1.0, -1, None),
                mk("beacon:32", "beacon", 32, 0.75, 9, Some(16)),
            ],
        }
    }

    #[test]
    fn trace_tables_and_checks() {
        let t = trace_fixture();
        let cfgs: Vec<String> = vec!["none".into(), "beacon:32".into()];
        check_trace(&t, 1, &cfgs, 16).unwrap();
        assert!(check_trace(&t, 2, &cfgs, 16).is_err());
        assert!(check_trace(&t, 1, &["none".into(), "recent:32".into()], 16).is_err());
        let table = trace_table(&t, &cfgs);
        assert!(
            table.contains("| none | 1.000 | 0.5000 | none | – |"),
            "{table}"
        );
        assert!(
            table.contains("| beacon:32 | 0.750 | 0.5000 | 9 | ≥16 |"),
            "{table}"
        );
        let b = bucket_table(&t, &cfgs, false);
        assert!(b.starts_with("| config | 0–7 | 8–15 |"), "{b}");
        assert!(b.contains("| beacon:32 | 1.000 | 0.500 |"), "{b}");
        let csv = trace_csv(&t);
        assert_eq!(csv.lines().count(), 1 + 4);
        assert!(
            csv.contains("p,beacon:32,beacon,32,8,16,8,0.5,1,9,16,16"),
            "{csv}"
        );
        let mut bad = t.clone();
        bad.rows[1].diverge_free = None;
        assert!(check_trace(&bad, 1, &cfgs, 16).is_err());
    }

    #[test]
    fn parses_the_tools_json() {
        let v: Value = serde_json::from_str(r#"{"mode": "trace", "n_tokens": 16, "prompts": [{"id": "p", "n_prompt": 20, "n_tokens": 16, "first_eog": 3, "ref_ms": 1.5, "text": "abc"}], "results": [{"id": "p", "config": "none", "policy": "none", "budget": 0, "n_tokens": 16, "top1": 1.0, "kl": 0.0, "first_mismatch": -1, "diverge_free": null, "free_limit": 16, "buckets": [{"from": 0, "to": 16, "n": 16, "top1": 1.0, "kl": 0.0}], "cells_peak": 40, "evicted": 0, "compress_events": 0, "plugin_ms": 0, "decode_ms": 3}]}"#).unwrap();
        let t = parse_trace(&v).unwrap();
        assert_eq!(t.prompts[0].first_eog, 3);
        assert_eq!(t.rows[0].diverge_free, None);
        let task: Value = serde_json::from_str(r#"{"mode": "task", "results": [{"id": "niah-256-0", "question": 0, "config": "beacon:32", "policy": "beacon", "budget": 32, "n_doc": 300, "n_question": 30, "n_gen": 4, "stopped": true, "output": " 1234567", "cells_doc": 30, "cells_peak": 33, "evicted": 270, "compress_events": 60, "plugin_ms": 3.5, "prefill_ms": 800.0, "answer_ms": 90.0}]}"#).unwrap();
        let rows: Vec<EvalTaskRow> = results_of(&task, "task").unwrap();
        assert_eq!(rows[0].output, " 1234567");
    }
}
