//! `beaconkv-eval --mode reason`, which the reason and HumanEval benches both drive: its
//! arguments, the line it prints per finished conversation, and one invocation over a batch of
//! conversations whose lines are handed on as they come.

use crate::args::{config_of, write_file};
use crate::run::{run_eval_lines, EvalJob, EvalOptions};
use serde::Deserialize;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// One turn of a conversation line.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct EvalTurn {
    pub n_prompt: u64,
    pub n_gen: u64,
    pub stopped: bool,
    pub output: String,
}

/// One conversation line (stdout).
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct EvalConversation {
    pub id: String,
    pub config: String,
    pub turns: Vec<EvalTurn>,
    pub n_prompt: u64,
    pub n_gen: u64,
    pub cells_peak: i64,
    pub prefix_len: i64,
    pub evicted: u64,
    pub compress_events: u64,
    pub recalled: u64,
    pub seconds: f64,
}

impl EvalConversation {
    /// The line must answer the item `id` in `config`.
    pub fn expect(&self, id: &str, config: &str) -> Result<(), String> {
        if self.id != id || self.config != config {
            return Err(format!(
                "beaconkv-eval answered {} {}, expected {id} {config}",
                self.id, self.config
            ));
        }
        Ok(())
    }
}

/// The arguments for one tasks file and one config, with `(n_tokens, chunk, parallel)`.
pub fn args(
    run: &EvalOptions,
    (n_tokens, chunk, parallel): (u32, u32, u32),
    model: &Path,
    config: &str,
    input: &Path,
    out: &Path,
) -> Vec<String> {
    let mut a: Vec<String> = [
        "--mode",
        "reason",
        "--configs",
        config,
        "--tasks",
        &input.display().to_string(),
        "--out",
        &out.display().to_string(),
        "--n-tokens",
        &n_tokens.to_string(),
        "--chunk",
        &chunk.to_string(),
        "-np",
        &parallel.to_string(),
        "-m",
        &model.display().to_string(),
        "-t",
        &run.threads.to_string(),
    ]
    .iter()
    .map(|x| x.to_string())
    .collect();
    a.extend(run.llama_args.iter().cloned());
    a
}

/// What messages call a batch's items ("conversation", "bundle"; plural with an s) and the
/// tool's lines ("conversation", "answer").
#[derive(Clone, Copy, Debug)]
pub struct Nouns {
    pub item: &'static str,
    pub line: &'static str,
}

/// One invocation over a batch of items in one cell.
pub struct Batch<'a> {
    pub eval: &'a Path,
    /// The cell's config.
    pub config: String,
    /// Holds the input file, the tool's JSON and its log.
    pub work: &'a Path,
    /// The input file's name in `work`.
    pub input: &'a str,
    /// Each item's id and its line of the input file, in order.
    pub items: Vec<(&'a str, String)>,
    pub nouns: Nouns,
}

impl<'a> Batch<'a> {
    /// `items` in the cell (policy entry, budget), the tool and its config as `run` says.
    pub fn new(
        run: &'a EvalOptions,
        (policy, budget): &(String, u32),
        work: &'a Path,
        input: &'a str,
        nouns: Nouns,
        items: Vec<(&'a str, String)>,
    ) -> Batch<'a> {
        Batch {
            eval: &run.eval,
            config: config_of(policy, *budget, &run.extra),
            work,
            input,
            items,
            nouns,
        }
    }

    /// Writes the input, runs the tool with `args(input, json)` and hands every conversation line
    /// to `on_answer` as it comes, with the position in `items` of the item it answers, so that
    /// each answer is kept even when a later one fails. Every item must be answered exactly once.
    /// Returns the `runs` of the tool's JSON (null when it has none), None when it wrote none.
    pub fn run(
        &self,
        args: impl FnOnce(&Path, &Path) -> Vec<String>,
        mut on_answer: impl FnMut(usize, &EvalConversation) -> Result<(), String>,
    ) -> Result<Option<serde_json::Value>, String> {
        let Nouns { item, line } = self.nouns;
        let input = self.work.join(self.input);
        let text: String = self.items.iter().map(|(_, l)| format!("{l}\n")).collect();
        write_file(&input, &text)?;
        let json: PathBuf = self.work.join("eval.json");
        let _ = std::fs::remove_file(&json);
        let job = EvalJob {
            eval: self.eval.to_path_buf(),
            args: args(&input, &json),
            label: self.config.clone(),
            log: self.work.join("eval.log"),
        };
        let mut answered: BTreeSet<usize> = BTreeSet::new();
        let mut on_line = |l: &str| -> Result<(), String> {
            if !l.starts_with('{') {
                return Ok(());
            }
            let e: EvalConversation = serde_json::from_str(l)
                .map_err(|err| format!("unexpected {line} line of beaconkv-eval: {err}"))?;
            let Some(k) =
                (0..self.items.len()).find(|k| self.items[*k].0 == e.id && !answered.contains(k))
            else {
                return Err(format!(
                    "beaconkv-eval answered {} {}, not a {item} it was given (or twice)",
                    e.id, e.config
                ));
            };
            on_answer(k, &e)?;
            answered.insert(k);
            Ok(())
        };
        run_eval_lines(&job, Some(&mut on_line))?;
        if answered.len() != self.items.len() {
            return Err(format!(
                "beaconkv-eval answered {} of {} {item}s for {}",
                answered.len(),
                self.items.len(),
                self.config
            ));
        }
        Ok(std::fs::read(&json).ok().map(|bytes| {
            let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
            v["runs"].clone()
        }))
    }
}
