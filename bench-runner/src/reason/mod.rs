//! `beaconkv-bench reason`: chain-of-thought accuracy over multi-turn conversations. A
//! conversation is a series of short turns, one arithmetic word problem each, where later problems start
//! from an earlier turn's answer ([`problems`]); `beaconkv-eval --mode reason` answers every
//! turn greedily, `--parallel` conversations decoded together in one context (one sequence each, the
//! same budget), with the full cache and every policy × budget; the bench checks every turn's
//! answer by program.
//!
//! Every finished conversation is appended to `results.jsonl` in the output folder as soon as the
//! tool prints it; a rerun with the same folder and settings skips the (conversation, cell) pairs
//! already there. Tables (conversations right with their Wilson interval, turns right, mean generated
//! length per cell; cells whose mean length is under `--min-ratio` × budget are flagged), CSV
//! and plots go to the same folder.
//!
//! Layout: this file holds the options, `problems.rs` the generator and checker, `report.rs` the
//! tables and plots, `driver.rs` the run and the rows of its resume file. What the HumanEval bench
//! does the same way is shared: [`crate::resumable`] (resuming), [`crate::reason_mode`] (the
//! tool), [`crate::jsonl`] and [`crate::grid`].

mod driver;
pub mod problems;
mod report;
#[cfg(test)]
mod tests;

pub use driver::run;

pub use crate::args::config_of;
use crate::args::{check_at_least_one, check_policy_entries, pick, policies_or_none};
use problems::Shape;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The policies measured besides the full cache. A plain list: any policy the library knows is
/// added by name; `/key=value` adds spec keys, `+archive` the archive. The scorers that read
/// `score` name it, so that a row means the same whatever the library's default: `score=logit`
/// is the method as published, `score=prob` the library's default.
pub const DEFAULT_POLICIES: [&str; 7] = [
    "beacon/score=logit",
    "beacon/score=prob",
    "recent/score=logit",
    "streaming",
    "random",
    "rkv",
    "beacon+archive/score=logit",
];

#[derive(clap::Args, Debug)]
pub struct ReasonCli {
    /// CI run: the tiny test model, budgets 32,64, two conversations of three one-operation turns,
    /// 16 tokens per turn, decoded together, and a check that a rerun skips what is done
    /// (accuracy is whatever it is)
    #[arg(long)]
    pub quick: bool,
    /// Model GGUF [default: Qwen2.5-Coder-1.5B-Instruct from scripts/fetch-models.sh qwen15;
    /// --quick: build/models/tiny.gguf]
    #[arg(short = 'm', long = "model", value_name = "MODEL")]
    pub model: Option<PathBuf>,
    /// KV budgets in cells [default: 256,384; --quick: 32,64]
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub budgets: Option<Vec<u32>>,
    /// Policies besides the full cache, e.g. beacon,beacon/score=prob,beacon+archive/archive=1024,rkv
    /// ("none" alone: only the full cache, to calibrate the conversations)
    /// [default: beacon/score=logit, beacon/score=prob, recent/score=logit, streaming, random, rkv,
    /// beacon+archive/score=logit]
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub policies: Option<Vec<String>>,
    /// Conversations per cell [default: 8, 112 problems at 14 turns; --quick: 2]
    #[arg(long, value_name = "N")]
    pub conversations: Option<u32>,
    /// Turns (problems) per conversation; from the third on, each starts from the answer of a turn at
    /// least two back [default: 14; --quick: 3]
    #[arg(long, value_name = "N")]
    pub turns: Option<u32>,
    /// Operations per problem [default: 3; --quick: 1]
    #[arg(long, value_name = "N")]
    pub steps: Option<u32>,
    /// Most tokens generated per turn (bounds the time of answers that loop) [default: 256;
    /// --quick: 16]
    #[arg(long, value_name = "N")]
    pub n_tokens: Option<u32>,
    /// Conversations decoded together, one sequence each in one context (at most 30: a compressed
    /// context's decode call holds 32 tokens at budgets up to 256) [default: 24; --quick: 2]
    #[arg(long, value_name = "N")]
    pub parallel: Option<u32>,
    /// Seed of the conversation generator
    #[arg(long, value_name = "N", default_value_t = 7)]
    pub seed: u64,
    /// Largest chunk of a turn's prompt per decode call (a compressed context: also at most
    /// budget/8)
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub chunk: u32,
    /// Flag a cell whose mean generated length per conversation is below this many times its budget
    #[arg(long, value_name = "X", default_value_t = 4.0)]
    pub min_ratio: f64,
    /// Output folder, also the one a rerun resumes [default: results/reason-<model-stem> in the
    /// repository; --quick: a fresh run every time]
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub run: crate::run::EvalArgs,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ReasonSettings {
    pub quick: bool,
    pub model: Option<PathBuf>,
    pub budgets: Vec<u32>,
    pub policies: Vec<String>,
    /// The policies came from [`DEFAULT_POLICIES`] (unknown ones are skipped, not an error).
    pub default_policies: bool,
    pub conversations: u32,
    pub shape: Shape,
    pub n_tokens: u32,
    pub parallel: u32,
    pub seed: u64,
    pub chunk: u32,
    pub min_ratio: f64,
    pub out: Option<PathBuf>,
    #[serde(flatten)]
    pub run: crate::run::EvalOptions,
}

pub fn resolve(cli: ReasonCli, root: &Path) -> Result<ReasonSettings, String> {
    let quick = cli.quick;
    let budgets = pick(cli.budgets, quick, vec![32, 64], vec![256, 384]);
    let default_policies = cli.policies.is_none();
    let policies = policies_or_none(cli.policies, &DEFAULT_POLICIES)?;
    if budgets.is_empty() || budgets.iter().any(|&b| b < 8) {
        return Err("--budgets needs numbers of at least 8, e.g. 128,256".into());
    }
    check_policy_entries(&policies)?;
    let conversations = pick(cli.conversations, quick, 2, 8);
    let turns = pick(cli.turns, quick, 3, 14);
    let steps = pick(cli.steps, quick, 1, 3);
    let n_tokens = pick(cli.n_tokens, quick, 16, 256);
    let parallel = pick(cli.parallel, quick, 2, 24);
    check_at_least_one(&[
        ("--conversations", conversations),
        ("--steps", steps),
        ("--n-tokens", n_tokens),
        ("--parallel", parallel),
        ("--chunk", cli.chunk),
    ])?;
    if turns < 3 {
        return Err(
            "--turns must be at least 3 (the third turn is the first to reach back two turns)"
                .into(),
        );
    }
    if cli.min_ratio.is_nan() || cli.min_ratio < 0.0 {
        return Err("--min-ratio must be a number >= 0".into());
    }
    let run = cli.run.resolve(root)?;
    Ok(ReasonSettings {
        quick,
        model: cli.model,
        budgets,
        policies,
        default_policies,
        conversations,
        shape: Shape {
            turns: turns as usize,
            steps: steps as usize,
        },
        n_tokens,
        parallel,
        seed: cli.seed,
        chunk: cli.chunk,
        min_ratio: cli.min_ratio,
        out: cli.out,
        run,
    })
}

/// Every cell ([`crate::grid::cells`]).
pub fn cells(s: &ReasonSettings) -> Vec<(String, u32)> {
    crate::grid::cells(&s.policies, &s.budgets)
}
