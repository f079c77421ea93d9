//! The run: the conversations, then per round and cell one `beaconkv-eval --mode reason` over the
//! conversations still missing from `results.jsonl`; each conversation the tool prints is checked and
//! appended at once. Then the tables and plots.

use super::problems::{self, Conversation};
use super::report;
use super::{cells, config_of, resolve, ReasonCli, ReasonSettings};
use crate::args::{model_file_name, write_file};
use crate::jsonl::{append_line, append_lines, load_lines, to_lines};
pub use crate::reason_mode::EvalConversation;
#[cfg(test)]
pub use crate::reason_mode::EvalTurn;
use crate::reason_mode::{Batch, Nouns};
pub use crate::resumable::check_cells;
use crate::resumable::{
    out_folder, plan_rounds, refuse_other_settings, remove_files, CacheUse, Pending, Progress,
    ResultRow, ResumeFile, RESULTS_FILE,
};
use crate::run::known_policies;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What messages call a conversation and the tool's line for it.
const NOUNS: Nouns = Nouns {
    item: "conversation",
    line: "conversation",
};

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

impl ResultRow for Row {
    fn settings(&self) -> &str {
        &self.settings
    }
    fn key(&self) -> (&str, &str, u32) {
        (&self.conversation, &self.policy, self.budget)
    }
    fn config(&self) -> &str {
        &self.config
    }
    fn cache_use(&self) -> CacheUse {
        CacheUse {
            tokens: self.n_prompt + self.n_gen,
            cells_peak: self.cells_peak,
            evicted: self.evicted,
        }
    }
}

/// What an answer depends on besides its conversation index and cell: the model file, the
/// generator, the generation cap, prompt chunking, the conversations decoded together (they change
/// the rounding), extra keys and flags.
pub fn fingerprint(s: &ReasonSettings, model: &Path) -> String {
    let name = model_file_name(model);
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

/// The rows of a resume file ([`load_lines`]).
pub fn load_rows(path: &Path) -> Result<Vec<Row>, String> {
    load_lines(path)
}

/// Appends one row as a line and flushes it to the disk.
pub fn append_row(path: &Path, row: &Row) -> Result<(), String> {
    append_line(path, row)
}

/// One invocation of the tool: a cell and the conversations it still lacks.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    pub cell: usize,
    pub conversations: Vec<usize>,
}

impl From<Pending> for Job {
    fn from(p: Pending) -> Job {
        Job {
            cell: p.cell,
            conversations: p.items,
        }
    }
}

/// The jobs still to run, in rounds of `round` ([`plan_rounds`]). Rows of other settings, or of
/// a conversation now generated differently, are an error.
pub fn plan(
    conversations: &[Conversation],
    cells: &[(String, u32)],
    rows: &[Row],
    settings: &str,
    round: usize,
) -> Result<Vec<Job>, String> {
    refuse_other_settings(rows, settings)?;
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
    let ids: Vec<&str> = conversations.iter().map(|c| c.id.as_str()).collect();
    Ok(plan_rounds(&ids, cells, rows, round))
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
    crate::reason_mode::args(&s.run, sizes, model, config, input, out)
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
    e.expect(&conversation.id, &config)?;
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
    /// The results file, with the items and cells its rows answer.
    file: ResumeFile<'a>,
    /// The tool's throughput figures, one line per invocation.
    throughput: &'a Path,
    conversations: &'a [Conversation],
}

/// Runs every job, appending each conversation's row as the tool prints it; returns the conversations
/// run.
fn run_jobs(c: &Ctx, jobs: &[Job]) -> Result<usize, String> {
    let mut progress = Progress::new(jobs.iter().map(|j| j.conversations.len()).sum());
    for job in jobs {
        let cell = &c.file.cells[job.cell];
        let items = job.conversations.iter().map(|&i| &c.conversations[i]);
        let items = items.map(|p| (p.id.as_str(), p.to_jsonl())).collect();
        let batch = Batch::new(&c.s.run, cell, c.work, "conversations.jsonl", NOUNS, items);
        let config = &batch.config;
        let args = |input: &Path, json: &Path| eval_args(c.s, c.model, config, input, json);
        let tool_runs = batch.run(args, |k, e| {
            let i = job.conversations[k];
            let row = check_row(c.s, c.settings, &c.conversations[i], i as u32, cell, e)?;
            append_row(c.file.results, &row)?;
            let detail = format!(
                "{}/{} turns right, {} tokens",
                row.turns_right, row.turns, row.n_gen
            );
            progress.answered(&row.conversation, config, &detail, row.n_gen);
            Ok(())
        })?;
        if let Some(runs) = tool_runs {
            append_lines(c.throughput, runs.as_array().map_or(&[][..], Vec::as_slice))?;
        }
    }
    Ok(progress.total)
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

/// --quick's checks of resuming ([`ResumeFile::quick_resume_check`]).
fn quick_resume_check(c: &Ctx, round: usize) -> Result<(), String> {
    let last = c.conversations.len() - 1;
    let plan = |rows: &[Row]| plan(c.conversations, c.file.cells, rows, c.settings, round);
    c.file
        .quick_resume_check(&format!("conversation {last}"), plan, |todo| {
            run_jobs(c, todo)
        })
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
    let out = out_folder(s.out.as_deref(), s.quick, &model, root, "reason")?;
    let results = out.join(RESULTS_FILE);
    if s.quick {
        remove_files(&[&results])?;
    }
    let work = out.join("work");
    std::fs::create_dir_all(&work).map_err(|e| format!("cannot create {}: {e}", work.display()))?;
    let log = work.join("configs.log");
    s.policies = known_policies(&s.run, &s.policies, s.budgets[0], s.default_policies, &log)?;
    let settings = fingerprint(&s, &model);
    let conversations: Vec<Conversation> = (0..s.conversations)
        .map(|i| problems::generate(s.seed, i, s.shape))
        .collect();
    write_file(&out.join("conversations.jsonl"), &to_lines(&conversations)?)?;
    let cells = cells(&s);
    let rows = load_rows(&results)?;
    let round = 2 * s.parallel as usize;
    let jobs = plan(&conversations, &cells, &rows, &settings, round)?;
    let todo: usize = jobs.iter().map(|j| j.conversations.len()).sum();
    let c = Ctx {
        s: &s,
        model: &model,
        settings: &settings,
        work: &work,
        file: ResumeFile {
            ids: conversations.iter().map(|x| x.id.as_str()).collect(),
            cells: &cells,
            results: &results,
            item: NOUNS.item,
        },
        throughput: &out.join("throughput.jsonl"),
        conversations: &conversations,
    };
    eprintln!("model:   {}", model.display());
    eprintln!("out:     {}", out.display());
    eprintln!("settings: {settings}");
    eprintln!("{}", c.file.plan_line(round, todo));
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
