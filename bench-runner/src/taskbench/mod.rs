//! `beaconkv-bench tasks`: task accuracy on synthetic long-context tasks ([`crate::tasks`]) and
//! own-trace fidelity, for the full cache and every policy × budget.
//!
//! The run: calibrate characters per token on the model (`beaconkv-eval --mode count`), one
//! document per task and length with every config (the measured per-document cost), the trace
//! test, then further rounds of one document per task and length while they fit in `--minutes`
//! (or exactly `--docs` documents). Tables (accuracy with its Wilson interval and sample count),
//! CSV, JSON and plots go to the output folder.
//!
//! Layout: this file holds the options; `rows.rs` reads and checks `beaconkv-eval`'s rows,
//! `report.rs` aggregates them into tables, CSV and plots, and `driver.rs` runs the whole.

mod driver;
mod prompts;
mod report;
mod rows;
#[cfg(test)]
mod tests;

pub use driver::run;

use crate::args::{check_policy_entries, config_of, pick, policies_or};
use crate::tasks::Task;
pub use prompts::TRACE_PROMPTS;
use serde::Serialize;
use std::path::{Path, PathBuf};

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
    /// Eviction policies, each NAME[+archive][/key=value...], e.g. beacon/score=prob [default: beacon,recent,streaming,random]
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
    /// Trace: number of prompts, the first N of the 24 (word problem, program, plan, loan, ...)
    /// [default: 1; --quick: 1, a short one]
    #[arg(long, value_name = "N")]
    pub trace_prompts: Option<u32>,
    /// Trace: position bucket in tokens [default: 256; --quick: 8]
    #[arg(long, value_name = "N")]
    pub bucket: Option<u32>,
    /// Trace: longest free run per config, tokens (0 = the whole trace) [default: 256; --quick: 0]
    #[arg(long, value_name = "N", conflicts_with = "no_free_run")]
    pub free_max: Option<u32>,
    /// Trace: no free runs (teacher-forced agreement only; a free run decodes one token at a
    /// time per config and prompt)
    #[arg(long)]
    pub no_free_run: bool,
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
    pub free_runs: bool,
    pub chunk: u32,
    /// Overrides every task's answer length (None: the task's own).
    pub max_answer: Option<u32>,
    pub parts: Vec<Part>,
    pub out: Option<PathBuf>,
    /// How beaconkv-eval runs (its fields appear at the top level of results.json).
    #[serde(flatten)]
    pub run: crate::run::EvalOptions,
}

pub fn resolve(cli: TasksCli, root: &Path) -> Result<TaskSettings, String> {
    let quick = cli.quick;
    let budgets = pick(cli.budgets, quick, vec![32, 64], vec![256, 512, 1024]);
    let policies = policies_or(cli.policies, &DEFAULT_POLICIES);
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
    if policies.is_empty() {
        return Err("--policies needs at least one policy".into());
    }
    check_policy_entries(&policies)?;
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
        free_runs: !cli.no_free_run,
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
            c.push(config_of(p, *b, &s.run.extra));
        }
    }
    c
}
