//! The run: the conversations, then per round and cell one `beaconkv-eval --mode reason` over the
//! conversations still missing from `results.jsonl`; each conversation the tool prints is checked and
//! appended at once. Then the tables and plots.

use super::problems::{self, Conversation};
use super::report;
use super::{cells, config_of, resolve, ReasonCli, ReasonSettings};
use crate::args::{out_dir, unix_now, write_file};
use crate::run::{run_eval, run_eval_lines, EvalJob};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The resume file in the output folder.
pub const RESULTS_FILE: &str = "results.jsonl";

/// One turn of a conversation line of `beaconkv-eval --mode reason`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct EvalTurn {
    pub n_prompt: u64,
    pub n_gen: u64,
    pub stopped: bool,
    pub output: String,
}

/// One conversation line of `beaconkv-eval --mode reason` (stdout).
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

/// One checked conversation in one cell: a line of `results.jsonl`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Row {
    /// What the answers depend on besides the cell ([`fingerprint`]); a folder holds one.
    pub settings: String,
    pub conversation: String,
    pub index: u32,
    /// [`Conversation::digest`] of the conversation answered.
    pub digest: String,
    /// The policy entry as given ("none" for the full cache).
    pub policy: String,
    /// 0 for the full cache.
    pub budget: u32,
    pub config: String,
    /// Every turn right.
    pub correct: bool,
    pub turns_right: u32,
    pub turns: u32,
    pub final_right: bool,
    pub expected: Vec<i64>,
    pub given: Vec<Option<i64>>,
    /// Per turn, the earlier turn (1-based) its problem starts from.
    pub from: Vec<Option<u32>>,
    /// Prompt tokens of the whole conversation (every turn's template and problem).
    pub n_prompt: u64,
    /// Tokens generated in the whole conversation.
    pub n_gen: u64,
    pub turn_gen: Vec<u64>,
    /// Turns cut at --n-tokens.
    pub cut: u32,
    pub cells_peak: i64,
    /// Cells the policy protected as the prompt's prefix.
    pub prefix_len: i64,
    pub evicted: u64,
    pub compress_events: u64,
    pub recalled: u64,
    /// From the conversation's first prompt token to its last answer (other conversations decoded
    /// alongside).
    pub seconds: f64,
    pub outputs: Vec<String>,
}

/// What an answer depends on besides its conversation index and cell: the model file, the
/// generator, the generation cap, prompt chunking, the conversations decoded together (they change
/// the rounding), extra keys and flags.
pub fn fingerprint(s: &ReasonSettings, model: &Path) -> String {
    let name = model
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!(
        "model={name} seed={} turns={} steps={} n_tokens={} chunk={} parallel={} extra={} llama={}",
        s.seed,
        s.shape.turns,
        s.shape.steps,
        s.n_tokens,
        s.chunk,
        s.parallel,
        s.run.extra,
        s.run.llama_args.join(" ")
    )
}

/// The rows of a resume file (none when it does not exist). A last line cut short (a run killed
/// while writing it) is dropped and the file truncated after the last whole line; any other bad
/// line is an error.
pub fn load_rows(path: &Path) -> Result<Vec<Row>, String> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    if whole < bytes.len() {
        eprintln!(
            "{}: dropping a last line cut short ({} bytes)",
            path.display(),
            bytes.len() - whole
        );
        std::fs::write(path, &bytes[..whole])
            .map_err(|e| format!("cannot rewrite {}: {e}", path.display()))?;
    }
    let text = String::from_utf8_lossy(&bytes[..whole]);
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        rows.push(
            serde_json::from_str(line)
                .map_err(|e| format!("{} line {}: {e}", path.display(), i + 1))?,
        );
    }
    Ok(rows)
}

/// Appends one row as a line and flushes it to the disk.
pub fn append_row(path: &Path, row: &Row) -> Result<(), String> {
    let line = serde_json::to_string(row).map_err(|e| format!("cannot encode a row: {e}"))?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    writeln!(f, "{line}")
        .and_then(|_| f.sync_data())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// One invocation of the tool: a cell and the conversations it still lacks.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    pub cell: usize,
    pub conversations: Vec<usize>,
}

/// The jobs still to run. Conversations go in rounds of `round`: every cell gets a round's missing
/// conversations before the next round starts, so that a run cut short leaves every cell with about
/// the same count. Rows of other settings, or of a conversation now generated differently, are an
/// error.
pub fn plan(
    conversations: &[Conversation],
    cells: &[(String, u32)],
    rows: &[Row],
    settings: &str,
    round: usize,
) -> Result<Vec<Job>, String> {
    if let Some(r) = rows.iter().find(|r| r.settings != settings) {
        return Err(format!(
            "the output folder holds answers of other settings ({}; now {settings}): pass another --out",
            r.settings
        ));
    }
    if let Some(r) = rows.iter().find(|r| {
        conversations
            .get(r.index as usize)
            .is_some_and(|p| p.id != r.conversation || p.digest() != r.digest)
    }) {
        return Err(format!(
            "the output folder holds answers to another wording of {} (this version of the \
             generator words it differently): pass another --out",
            r.conversation
        ));
    }
    let done: BTreeSet<(&str, &str, u32)> = rows
        .iter()
        .map(|r| (r.conversation.as_str(), r.policy.as_str(), r.budget))
        .collect();
    let mut jobs = Vec::new();
    let round = round.max(1);
    for start in (0..conversations.len()).step_by(round) {
        let end = (start + round).min(conversations.len());
        for (ci, (policy, budget)) in cells.iter().enumerate() {
            let missing: Vec<usize> = (start..end)
                .filter(|&i| {
                    !done.contains(&(conversations[i].id.as_str(), policy.as_str(), *budget))
                })
                .collect();
            if !missing.is_empty() {
                jobs.push(Job {
                    cell: ci,
                    conversations: missing,
                });
            }
        }
    }
    Ok(jobs)
}

/// The tool's arguments for one conversations file and one config.
pub fn eval_args(
    s: &ReasonSettings,
    model: &Path,
    config: &str,
    input: &Path,
    out: &Path,
) -> Vec<String> {
    let sizes = (s.n_tokens, s.chunk, s.parallel);
    crate::run::reason_mode_args(&s.run, sizes, model, config, input, out)
}

/// A conversation line of the tool checked against its conversation: a row.
pub fn check_row(
    s: &ReasonSettings,
    settings: &str,
    conversation: &Conversation,
    index: u32,
    (policy, budget): &(String, u32),
    e: &EvalConversation,
) -> Result<Row, String> {
    let config = config_of(policy, *budget, &s.run.extra);
    if e.id != conversation.id || e.config != config {
        return Err(format!(
            "beaconkv-eval answered {} {}, expected {} {config}",
            e.id, e.config, conversation.id
        ));
    }
    if e.turns.len() != conversation.turns.len() {
        return Err(format!(
            "{} {config}: {} turns answered, expected {}",
            e.id,
            e.turns.len(),
            conversation.turns.len()
        ));
    }
    if let Some((k, t)) = e
        .turns
        .iter()
        .enumerate()
        .find(|(_, t)| t.n_gen > s.n_tokens as u64 || (t.n_gen == 0 && !t.stopped))
    {
        return Err(format!(
            "{} {config} turn {}: {} tokens generated, expected 1..={} (or an end-of-generation token)",
            e.id,
            k + 1,
            t.n_gen,
            s.n_tokens
        ));
    }
    let outputs: Vec<String> = e.turns.iter().map(|t| t.output.clone()).collect();
    let c = problems::check(conversation, &outputs);
    Ok(Row {
        settings: settings.to_string(),
        conversation: conversation.id.clone(),
        index,
        digest: conversation.digest(),
        policy: policy.clone(),
        budget: *budget,
        config,
        correct: c.correct,
        turns_right: c.turns_right,
        turns: c.turns,
        final_right: c.final_right,
        expected: conversation.answers(),
        given: c.given,
        from: conversation
            .turns
            .iter()
            .map(|t| t.from.map(|j| j as u32))
            .collect(),
        n_prompt: e.n_prompt,
        n_gen: e.n_gen,
        turn_gen: e.turns.iter().map(|t| t.n_gen).collect(),
        cut: e.turns.iter().filter(|t| !t.stopped).count() as u32,
        cells_peak: e.cells_peak,
        prefix_len: e.prefix_len,
        evicted: e.evicted,
        compress_events: e.compress_events,
        recalled: e.recalled,
        seconds: e.seconds,
        outputs,
    })
}

/// What the run needs to hand a job to the tool.
struct Ctx<'a> {
    s: &'a ReasonSettings,
    model: &'a Path,
    settings: &'a str,
    work: &'a Path,
    results: &'a Path,
    /// The tool's throughput figures, one line per invocation.
    throughput: &'a Path,
    conversations: &'a [Conversation],
    cells: &'a [(String, u32)],
}

/// Runs every job, appending each conversation's row as the tool prints it; returns the conversations
/// run.
fn run_jobs(c: &Ctx, jobs: &[Job]) -> Result<usize, String> {
    let started = Instant::now();
    let total: usize = jobs.iter().map(|j| j.conversations.len()).sum();
    let mut done = 0usize;
    let mut tokens = 0u64;
    for job in jobs {
        let cell = &c.cells[job.cell];
        let config = config_of(&cell.0, cell.1, &c.s.run.extra);
        let input = c.work.join("conversations.jsonl");
        let mut text = String::new();
        for &i in &job.conversations {
            text.push_str(&c.conversations[i].to_jsonl());
            text.push('\n');
        }
        write_file(&input, &text)?;
        let json = c.work.join("eval.json");
        let _ = std::fs::remove_file(&json);
        let eval_job = EvalJob {
            eval: c.s.run.eval.clone(),
            args: eval_args(c.s, c.model, &config, &input, &json),
            label: config.clone(),
            log: c.work.join("eval.log"),
        };
        let mut answered: BTreeSet<usize> = BTreeSet::new();
        let mut on_line = |line: &str| -> Result<(), String> {
            if !line.starts_with('{') {
                return Ok(());
            }
            let e: EvalConversation = serde_json::from_str(line)
                .map_err(|err| format!("unexpected conversation line of beaconkv-eval: {err}"))?;
            let Some(&i) = job
                .conversations
                .iter()
                .find(|&&i| c.conversations[i].id == e.id && !answered.contains(&i))
            else {
                return Err(format!(
                    "beaconkv-eval answered {} {}, not a conversation it was given (or twice)",
                    e.id, e.config
                ));
            };
            let row = check_row(c.s, c.settings, &c.conversations[i], i as u32, cell, &e)?;
            append_row(c.results, &row)?;
            answered.insert(i);
            done += 1;
            tokens += row.n_gen;
            let secs = started.elapsed().as_secs_f64();
            eprintln!(
                "[{done}/{total}] {} {config}: {}/{} turns right, {} tokens; {:.1} tok/s so far, about {:.0} min left",
                row.conversation,
                row.turns_right,
                row.turns,
                row.n_gen,
                tokens as f64 / secs,
                secs / done as f64 * (total - done) as f64 / 60.0
            );
            Ok(())
        };
        run_eval_lines(&eval_job, Some(&mut on_line))?;
        if answered.len() != job.conversations.len() {
            return Err(format!(
                "beaconkv-eval answered {} of {} conversations for {config}",
                answered.len(),
                job.conversations.len()
            ));
        }
        if let Ok(bytes) = std::fs::read(&json) {
            let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(c.throughput)
                .map_err(|e| format!("cannot open {}: {e}", c.throughput.display()))?;
            for r in v["runs"].as_array().into_iter().flatten() {
                writeln!(f, "{r}")
                    .map_err(|e| format!("cannot write {}: {e}", c.throughput.display()))?;
            }
        }
    }
    Ok(total)
}

/// The policy entries this `beaconkv-eval` accepts. An entry of the default list it rejects
/// (a policy of a newer library) is left out with a warning; one given with --policies is an
/// error.
fn known_policies(s: &ReasonSettings, work: &Path) -> Result<Vec<String>, String> {
    let mut kept = Vec::new();
    for p in &s.policies {
        let config = config_of(p, s.budgets[0], &s.run.extra);
        let job = EvalJob {
            eval: s.run.eval.clone(),
            args: vec![
                "--mode".into(),
                "configs".into(),
                "--configs".into(),
                config,
            ],
            label: format!("check {p}"),
            log: work.join("configs.log"),
        };
        match run_eval(&job) {
            Ok(_) => kept.push(p.clone()),
            Err(_) if s.default_policies => eprintln!(
                "warning: leaving out the default policy '{p}': this beaconkv-eval rejects it ({})",
                crate::run::tail_lines(&job.log, 1)
            ),
            Err(e) => return Err(format!("--policies: '{p}' is not accepted: {e}")),
        }
    }
    if kept.is_empty() && !s.policies.is_empty() {
        return Err("no policy left to measure".into());
    }
    Ok(kept)
}

/// The rows with their answers checked again from their outputs, so that the tables follow
/// this version of the checker (rows of conversations beyond this run's count as they are).
pub fn recheck(rows: Vec<Row>, conversations: &[Conversation]) -> Vec<Row> {
    rows.into_iter()
        .map(|mut r| {
            if let Some(p) = conversations.get(r.index as usize) {
                let c = problems::check(p, &r.outputs);
                r.correct = c.correct;
                r.turns_right = c.turns_right;
                r.final_right = c.final_right;
                r.given = c.given;
            }
            r
        })
        .collect()
}

/// --quick's checks on what the tool reports: a compressed conversation never held more cells
/// than its budget, and evicted some once it ran past it; the full cache evicted nothing and held
/// every token (every turn's prompt and answer).
pub fn check_cells(rows: &[Row]) -> Result<(), String> {
    for r in rows {
        let tokens = (r.n_prompt + r.n_gen) as i64;
        let bad = if r.budget == 0 {
            (r.evicted != 0 || r.cells_peak != tokens).then(|| {
                format!(
                    "held {} cells of {tokens} tokens, evicted {}",
                    r.cells_peak, r.evicted
                )
            })
        } else if r.cells_peak > r.budget as i64 {
            Some(format!("held {} cells", r.cells_peak))
        } else if tokens > r.budget as i64 && r.evicted == 0 {
            Some(format!("evicted nothing from {tokens} tokens"))
        } else {
            None
        };
        if let Some(why) = bad {
            return Err(format!("--quick: {} {}: {why}", r.conversation, r.config));
        }
    }
    Ok(())
}

/// --quick's checks: every (conversation, cell) answered exactly once, a rerun finds nothing to do,
/// and after the last conversation's rows are removed it runs exactly those again.
fn quick_resume_check(c: &Ctx, round: usize) -> Result<(), String> {
    let n = c.conversations.len();
    let once = |rows: &[Row]| -> Result<(), String> {
        let keys: BTreeSet<(&str, &str, u32)> = rows
            .iter()
            .map(|r| (r.conversation.as_str(), r.policy.as_str(), r.budget))
            .collect();
        if rows.len() != n * c.cells.len() || keys.len() != rows.len() {
            return Err(format!(
                "--quick: {} rows ({} distinct) in {}, expected {n} conversations x {} cells",
                rows.len(),
                keys.len(),
                c.results.display(),
                c.cells.len()
            ));
        }
        Ok(())
    };
    let rows = load_rows(c.results)?;
    once(&rows)?;
    let left = plan(c.conversations, c.cells, &rows, c.settings, round)?;
    if !left.is_empty() {
        return Err(format!("--quick: a rerun would run {} jobs", left.len()));
    }
    let last = n - 1;
    let mut text = String::new();
    for r in rows.iter().filter(|r| r.index as usize != last) {
        text.push_str(&serde_json::to_string(r).map_err(|e| e.to_string())?);
        text.push('\n');
    }
    write_file(c.results, &text)?;
    let rows = load_rows(c.results)?;
    let todo = plan(c.conversations, c.cells, &rows, c.settings, round)?;
    let expect: Vec<Job> = (0..c.cells.len())
        .map(|ci| Job {
            cell: ci,
            conversations: vec![last],
        })
        .collect();
    if todo != expect {
        return Err(format!(
            "--quick: after removing conversation {last}'s rows the rerun plans {todo:?}, expected {expect:?}"
        ));
    }
    eprintln!("--quick: resume check: rerunning conversation {last} in every cell");
    run_jobs(c, &todo)?;
    let rows = load_rows(c.results)?;
    once(&rows)?;
    if !plan(c.conversations, c.cells, &rows, c.settings, round)?.is_empty() {
        return Err("--quick: conversations still missing after the rerun".into());
    }
    Ok(())
}

pub fn run(
    cli: ReasonCli,
    root: &Path,
    resolve_model: impl Fn(&Option<PathBuf>, bool) -> Result<PathBuf, String>,
) -> Result<(), String> {
    let started = Instant::now();
    let mut s = resolve(cli, root)?;
    s.run.check_binary()?;
    let model = resolve_model(&s.model, s.quick)?;
    let out = match (&s.out, s.quick) {
        (Some(o), _) => out_dir(Some(o.clone()), &model, root, "", 0)?,
        (None, true) => out_dir(None, &model, root, "reason-quick-", unix_now())?,
        (None, false) => {
            let stem = model
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "model".into());
            out_dir(
                Some(root.join("results").join(format!("reason-{stem}"))),
                &model,
                root,
                "",
                0,
            )?
        }
    };
    let results = out.join(RESULTS_FILE);
    if s.quick && results.exists() {
        std::fs::remove_file(&results)
            .map_err(|e| format!("cannot remove {}: {e}", results.display()))?;
    }
    let work = out.join("work");
    std::fs::create_dir_all(&work).map_err(|e| format!("cannot create {}: {e}", work.display()))?;
    s.policies = known_policies(&s, &work)?;
    let settings = fingerprint(&s, &model);
    let conversations: Vec<Conversation> = (0..s.conversations)
        .map(|i| problems::generate(s.seed, i, s.shape))
        .collect();
    let mut text = String::new();
    for p in &conversations {
        text.push_str(&serde_json::to_string(p).map_err(|e| e.to_string())?);
        text.push('\n');
    }
    write_file(&out.join("conversations.jsonl"), &text)?;
    let cells = cells(&s);
    let rows = load_rows(&results)?;
    let round = 2 * s.parallel as usize;
    let jobs = plan(&conversations, &cells, &rows, &settings, round)?;
    let todo: usize = jobs.iter().map(|j| j.conversations.len()).sum();
    eprintln!("model:   {}", model.display());
    eprintln!("out:     {}", out.display());
    eprintln!("settings: {settings}");
    eprintln!(
        "cells:   {} ({} conversations each, in rounds of {round}); {} conversations done, {} to run",
        cells.len(),
        conversations.len(),
        conversations.len() * cells.len() - todo,
        todo
    );
    let c = Ctx {
        s: &s,
        model: &model,
        settings: &settings,
        work: &work,
        results: &results,
        throughput: &out.join("throughput.jsonl"),
        conversations: &conversations,
        cells: &cells,
    };
    run_jobs(&c, &jobs)?;
    if s.quick {
        quick_resume_check(&c, round)?;
        check_cells(&load_rows(&results)?)?;
    }
    let rows = recheck(load_rows(&results)?, &conversations);
    let rep = report::Report::new(&cells, &rows);
    let summary = rep.summary_markdown(&s, &model, started.elapsed().as_secs_f64());
    write_file(&out.join("summary.md"), &summary)?;
    write_file(&out.join("accuracy.csv"), &rep.csv())?;
    if s.quick {
        rep.check_shape(&s)?;
    }
    let plots = rep.plot(&s, &out)?;
    println!("{}", rep.table(&s));
    for p in plots {
        eprintln!("plot:    {}", p.display());
    }
    eprintln!("summary: {}", out.join("summary.md").display());
    Ok(())
}
