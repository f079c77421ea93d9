//! `beaconkv-bench humaneval`: long generations of real code. A bundle asks the model for
//! several HumanEval functions in one answer ([`data`]); `beaconkv-eval --mode reason` answers
//! each bundle as a one-turn conversation, greedily, `--parallel` bundles decoded together in one
//! context (one sequence each, the same budget), with the full cache and every policy × budget.
//! Each function is taken out of the answer ([`extract`]) and run against the problem's tests in
//! a sandboxed Python process ([`sandbox`]).
//!
//! Every finished bundle is appended to `results.jsonl` in the output folder as soon as it is
//! checked; a rerun with the same folder and settings skips the (bundle, cell) pairs already
//! there. Tables (pass@1 per function with Wilson intervals and whole bundles passed, per split;
//! prompt + answer length; CPU time; exact McNemar tests against the full cache and between the
//! reference policy and the others), CSV and plots go to the same folder.
//!
//! Layout: this file holds the options, `data.rs` the problems and bundles, `extract.rs` the
//! reading of answers, `sandbox.rs` the checks, `report.rs` the tables and plots, `driver.rs`
//! the run and the rows of its resume file. What the reason bench does the same way is shared:
//! [`crate::resumable`] (resuming), [`crate::reason_mode`] (the tool), [`crate::jsonl`] and
//! [`crate::grid`].

pub mod data;
mod driver;
pub mod extract;
pub mod own_values;
mod report;
pub mod sandbox;
#[cfg(test)]
mod tests;

pub use driver::run;

use crate::args::{check_at_least_one, check_policy_entries, pick, policies_or_none};
use data::Split;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The policies measured besides the full cache: the library's default scorer first (the
/// reference of the paired comparisons), the method as published, and the baselines. The
/// scorers that read `score` name it, so that a row means the same whatever the library's
/// default.
pub const DEFAULT_POLICIES: [&str; 5] = [
    "beacon/score=prob",
    "beacon/score=logit",
    "rkv",
    "streaming",
    "random",
];

/// --quick's policies: the reference and one baseline.
pub const QUICK_POLICIES: [&str; 2] = ["beacon/score=prob", "streaming"];

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Serialize)]
pub enum SplitArg {
    /// Problems 0–99
    Tune,
    /// Problems 100–163
    Heldout,
    /// Both, each in its own column
    Both,
}

#[derive(clap::Args, Debug)]
pub struct HumanEvalCli {
    /// CI run: the tiny test model, budgets 32,64, one bundle of two problems per split, 24
    /// tokens, plus checks of the sandbox (every canonical solution passes; a wrong answer, a
    /// syntax error, a loop and a socket fail) and of resuming (accuracy is whatever it is)
    #[arg(long)]
    pub quick: bool,
    /// Model GGUF [default: Qwen2.5-Coder-1.5B-Instruct from scripts/fetch-models.sh qwen15;
    /// --quick: build/models/tiny.gguf]
    #[arg(short = 'm', long = "model", value_name = "MODEL")]
    pub model: Option<PathBuf>,
    /// HumanEval.jsonl [default: from scripts/fetch-humaneval.sh]
    #[arg(long, value_name = "FILE")]
    pub data: Option<PathBuf>,
    /// KV budgets in cells [default: 200,400,700, about 10, 20 and 35% of the full cache's mean
    /// prompt + answer of 8 functions; --quick: 32,64]
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub budgets: Option<Vec<u32>>,
    /// Policies besides the full cache, e.g. beacon/score=prob,rkv,streaming ("none" alone: only
    /// the full cache, to size the answers) [default: beacon/score=prob, beacon/score=logit, rkv,
    /// streaming, random; --quick: beacon/score=prob, streaming]
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub policies: Option<Vec<String>>,
    /// The policy compared with each other one at the same budget [default: the first policy]
    #[arg(long, value_name = "POLICY")]
    pub reference: Option<String>,
    /// Which problems to run
    #[arg(long, value_enum, default_value_t = SplitArg::Both)]
    pub split: SplitArg,
    /// Functions asked for in one request [default: 8; with --own-values: 4; --quick: 2]
    #[arg(long, value_name = "N")]
    pub bundle_size: Option<u32>,
    /// Also ask for a dictionary of N numbers the model chooses itself before the functions and
    /// for the same numbers written again after them, and check them (0: off; at most 48). Each
    /// split then also has a second grouping of its problems, so twice the requests
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub own_values: u32,
    /// Bundles per split, the first N [default: all (13 tuning, 8 held-out at size 8); --quick: 1]
    #[arg(long, value_name = "N")]
    pub bundles: Option<u32>,
    /// Most tokens generated per answer [default: 3000; --quick: 24, with --own-values 320]
    #[arg(long, value_name = "N")]
    pub n_tokens: Option<u32>,
    /// Bundles decoded together, one sequence each in one context (at most 30) [default: 8;
    /// --quick: 2]
    #[arg(long, value_name = "N")]
    pub parallel: Option<u32>,
    /// Largest chunk of a prompt per decode call (a compressed context: also at most budget/8)
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub chunk: u32,
    /// Flag a cell whose mean prompt + answer length is below this many times its budget
    #[arg(long, value_name = "X", default_value_t = 4.0)]
    pub min_ratio: f64,
    /// Seconds one function's tests may run [default: 10; --quick: 3]
    #[arg(long, value_name = "S")]
    pub timeout: Option<f64>,
    /// Address space of one check's Python process, in MiB
    #[arg(long, value_name = "N", default_value_t = 2048)]
    pub memory_mb: u64,
    /// The Python that runs the checks
    #[arg(long, value_name = "PATH", default_value = "python3")]
    pub python: PathBuf,
    /// Output folder, also the one a rerun resumes [default: results/humaneval-<model-stem> in
    /// the repository; --quick: a fresh run every time]
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub run: crate::run::EvalArgs,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct HumanEvalSettings {
    pub quick: bool,
    pub model: Option<PathBuf>,
    pub data: Option<PathBuf>,
    pub budgets: Vec<u32>,
    pub policies: Vec<String>,
    /// The policies came from the default list (unknown ones are skipped, not an error).
    pub default_policies: bool,
    /// None: no policy (the full cache alone).
    pub reference: Option<String>,
    pub splits: Vec<Split>,
    pub bundle_size: u32,
    pub own_values: u32,
    pub bundles: Option<u32>,
    pub n_tokens: u32,
    pub parallel: u32,
    pub chunk: u32,
    pub min_ratio: f64,
    pub timeout: f64,
    pub memory_mb: u64,
    pub python: PathBuf,
    pub out: Option<PathBuf>,
    #[serde(flatten)]
    pub run: crate::run::EvalOptions,
}

pub fn resolve(cli: HumanEvalCli, root: &Path) -> Result<HumanEvalSettings, String> {
    let quick = cli.quick;
    let budgets = pick(cli.budgets, quick, vec![32, 64], vec![200, 400, 700]);
    let default_policies = cli.policies.is_none();
    let defaults: &[&str] = if quick {
        &QUICK_POLICIES
    } else {
        &DEFAULT_POLICIES
    };
    let policies = policies_or_none(cli.policies, defaults)?;
    if budgets.is_empty() || budgets.iter().any(|&b| b < 8) {
        return Err("--budgets needs numbers of at least 8, e.g. 256,512".into());
    }
    check_policy_entries(&policies)?;
    let reference = match cli.reference {
        Some(r) if policies.contains(&r) => Some(r),
        Some(r) => {
            return Err(format!(
                "--reference '{r}' is not one of --policies ({})",
                policies.join(",")
            ))
        }
        None => policies.first().cloned(),
    };
    if cli.own_values > own_values::MAX_VALUES {
        return Err(format!(
            "--own-values must be at most {}",
            own_values::MAX_VALUES
        ));
    }
    let full_size = if cli.own_values > 0 { 4 } else { 8 };
    let bundle_size = pick(cli.bundle_size, quick, 2, full_size);
    let bundles = cli.bundles.or(quick.then_some(1));
    // --quick with own values: room for the forced dictionary and a few tokens after it
    let quick_tokens = if cli.own_values > 0 { 320 } else { 24 };
    let n_tokens = pick(cli.n_tokens, quick, quick_tokens, 3000);
    let parallel = pick(cli.parallel, quick, 2, 8);
    let timeout = pick(cli.timeout, quick, 3.0, 10.0);
    check_at_least_one(&[
        ("--bundle-size", bundle_size),
        ("--bundles", bundles.unwrap_or(1)),
        ("--n-tokens", n_tokens),
        ("--parallel", parallel),
        ("--chunk", cli.chunk),
    ])?;
    if parallel > 30 {
        return Err("--parallel must be at most 30".into());
    }
    if !(timeout.is_finite() && timeout > 0.0 && timeout <= 600.0) {
        return Err("--timeout must be a number of seconds in (0, 600]".into());
    }
    if cli.memory_mb < 64 {
        return Err("--memory-mb must be at least 64".into());
    }
    if cli.min_ratio.is_nan() || cli.min_ratio < 0.0 {
        return Err("--min-ratio must be a number >= 0".into());
    }
    let splits = match cli.split {
        SplitArg::Tune => vec![Split::Tune],
        SplitArg::Heldout => vec![Split::Heldout],
        SplitArg::Both => vec![Split::Tune, Split::Heldout],
    };
    let run = cli.run.resolve(root)?;
    Ok(HumanEvalSettings {
        quick,
        model: cli.model,
        data: cli.data,
        budgets,
        policies,
        default_policies,
        reference,
        splits,
        bundle_size,
        own_values: cli.own_values,
        bundles,
        n_tokens,
        parallel,
        chunk: cli.chunk,
        min_ratio: cli.min_ratio,
        timeout,
        memory_mb: cli.memory_mb,
        python: cli.python,
        out: cli.out,
        run,
    })
}

impl HumanEvalSettings {
    pub fn shape(&self) -> data::Shape {
        data::Shape {
            size: self.bundle_size as usize,
            own_values: self.own_values,
        }
    }
}

/// Every cell ([`crate::grid::cells`]).
pub fn cells(s: &HumanEvalSettings) -> Vec<(String, u32)> {
    crate::grid::cells(&s.policies, &s.budgets)
}
