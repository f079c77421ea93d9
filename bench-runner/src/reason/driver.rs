//! The run: the problems, one `beaconkv-eval --mode reason` per (problem, config) still missing
//! from `results.jsonl`, each answer checked and appended at once, then the tables and plots.

use super::problems::{self, Kind, Problem};
use super::report;
use super::{cells, config_of, resolve, ReasonCli, ReasonSettings};
use crate::args::{out_dir, unix_now, write_file};
use crate::results::sanitize_json;
use crate::run::{run_eval, EvalJob};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The resume file in the output folder.
pub const RESULTS_FILE: &str = "results.jsonl";

/// One row of `beaconkv-eval --mode reason`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct EvalReasonRow {
    pub id: String,
    pub config: String,
    pub n_prompt: u64,
    pub n_gen: u64,
    pub stopped: bool,
    pub output: String,
    pub cells_peak: i64,
    pub evicted: u64,
    pub compress_events: u64,
    pub recalled: u64,
    pub plugin_ms: f64,
    pub prefill_ms: f64,
    pub gen_ms: f64,
}

/// One checked answer: a line of `results.jsonl`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Row {
    /// What the answer depends on besides the cell ([`fingerprint`]); a folder holds one.
    pub settings: String,
    pub problem: String,
    pub index: u32,
    pub kind: Kind,
    /// The policy entry as given ("none" for the full cache).
    pub policy: String,
    /// 0 for the full cache.
    pub budget: u32,
    pub config: String,
    pub correct: bool,
    pub parts_right: u32,
    pub parts: u32,
    pub expected: Vec<i64>,
    pub given: Vec<Option<i64>>,
    pub n_prompt: u64,
    pub n_gen: u64,
    pub stopped: bool,
    pub cells_peak: i64,
    pub evicted: u64,
    pub compress_events: u64,
    pub recalled: u64,
    pub plugin_ms: f64,
    pub prefill_ms: f64,
    pub gen_ms: f64,
    /// Wall time of the tool's run (model loading included).
    pub seconds: f64,
    pub output: String,
}

/// What an answer depends on besides its problem index and cell: the model file, the generator,
/// generation length, prompt chunking, extra keys and flags.
pub fn fingerprint(s: &ReasonSettings, model: &Path) -> String {
    let name = model
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!(
        "model={name} seed={} single_steps={} steps={} parts={} n_tokens={} chunk={} extra={} llama={}",
        s.seed,
        s.shape.single_steps,
        s.shape.steps,
        s.shape.parts,
        s.n_tokens,
        s.chunk,
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

/// The (problem index, cell index) pairs not answered yet, problem by problem (so that a run cut
/// short leaves every cell with about the same count). Rows of other settings are an error.
pub fn pending(
    problems: &[Problem],
    cells: &[(String, u32)],
    rows: &[Row],
    settings: &str,
) -> Result<Vec<(usize, usize)>, String> {
    if let Some(r) = rows.iter().find(|r| r.settings != settings) {
        return Err(format!(
            "the output folder holds answers of other settings ({}; now {settings}): pass another --out",
            r.settings
        ));
    }
    let done: BTreeSet<(&str, &str, u32)> = rows
        .iter()
        .map(|r| (r.problem.as_str(), r.policy.as_str(), r.budget))
        .collect();
    let mut out = Vec::new();
    for (pi, p) in problems.iter().enumerate() {
        for (ci, (policy, budget)) in cells.iter().enumerate() {
            if !done.contains(&(p.id.as_str(), policy.as_str(), *budget)) {
                out.push((pi, ci));
            }
        }
    }
    Ok(out)
}

/// The tool's arguments for one problem file and one config.
pub fn eval_args(
    s: &ReasonSettings,
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
        &s.n_tokens.to_string(),
        "--chunk",
        &s.chunk.to_string(),
        "-m",
        &model.display().to_string(),
        "-t",
        &s.run.threads.to_string(),
    ]
    .iter()
    .map(|x| x.to_string())
    .collect();
    a.extend(s.run.llama_args.iter().cloned());
    a
}

/// Runs one problem with one cell's config and checks the answer.
fn answer(
    s: &ReasonSettings,
    model: &Path,
    settings: &str,
    work: &Path,
    p: &Problem,
    index: u32,
    (policy, budget): &(String, u32),
) -> Result<Row, String> {
    let config = config_of(policy, *budget, &s.run.extra);
    let input = work.join("problem.jsonl");
    write_file(&input, &format!("{}\n", p.to_jsonl()))?;
    let json = work.join("eval.json");
    let _ = std::fs::remove_file(&json);
    let job = EvalJob {
        eval: s.run.eval.clone(),
        args: eval_args(s, model, &config, &input, &json),
        label: format!("{} {config}", p.id),
        log: work.join("eval.log"),
    };
    let elapsed = run_eval(&job)?;
    let bytes = std::fs::read(&json)
        .map_err(|e| format!("beaconkv-eval wrote no {}: {e}", json.display()))?;
    let v: Value = serde_json::from_str(&sanitize_json(&bytes))
        .map_err(|e| format!("{}: invalid JSON: {e}", json.display()))?;
    if v.get("mode").and_then(Value::as_str) != Some("reason") {
        return Err(format!("{}: not a reason result", json.display()));
    }
    let rows: Vec<EvalReasonRow> =
        serde_json::from_value(v.get("results").cloned().unwrap_or(Value::Null))
            .map_err(|e| format!("unexpected reason result: {e}"))?;
    let [e] = rows.as_slice() else {
        return Err(format!(
            "{}: {} rows, expected 1",
            json.display(),
            rows.len()
        ));
    };
    if e.id != p.id || e.config != config {
        return Err(format!(
            "{}: a row for {} {}, expected {} {config}",
            json.display(),
            e.id,
            e.config,
            p.id
        ));
    }
    if e.n_gen > s.n_tokens as u64 || (e.n_gen == 0 && !e.stopped) {
        return Err(format!(
            "{} {config}: {} tokens generated, expected 1..={} (or an end-of-generation token)",
            p.id, e.n_gen, s.n_tokens
        ));
    }
    let c = problems::check(p, &e.output);
    Ok(Row {
        settings: settings.to_string(),
        problem: p.id.clone(),
        index,
        kind: p.kind,
        policy: policy.clone(),
        budget: *budget,
        config,
        correct: c.correct,
        parts_right: c.parts_right,
        parts: c.parts,
        expected: p.answers(),
        given: c.given,
        n_prompt: e.n_prompt,
        n_gen: e.n_gen,
        stopped: e.stopped,
        cells_peak: e.cells_peak,
        evicted: e.evicted,
        compress_events: e.compress_events,
        recalled: e.recalled,
        plugin_ms: e.plugin_ms,
        prefill_ms: e.prefill_ms,
        gen_ms: e.gen_ms,
        seconds: elapsed.as_secs_f64(),
        output: e.output.clone(),
    })
}

/// Answers every pending pair, appending each row; returns how many ran.
#[allow(clippy::too_many_arguments)]
fn run_pending(
    s: &ReasonSettings,
    model: &Path,
    settings: &str,
    work: &Path,
    results: &Path,
    problems: &[Problem],
    cells: &[(String, u32)],
    todo: &[(usize, usize)],
) -> Result<usize, String> {
    let started = Instant::now();
    for (i, &(pi, ci)) in todo.iter().enumerate() {
        let row = answer(
            s,
            model,
            settings,
            work,
            &problems[pi],
            pi as u32,
            &cells[ci],
        )?;
        append_row(results, &row)?;
        let per = started.elapsed().as_secs_f64() / (i + 1) as f64;
        eprintln!(
            "[{}/{}] {} {}: {} tokens, {}, {:.1} s; about {:.0} min left",
            i + 1,
            todo.len(),
            row.problem,
            row.config,
            row.n_gen,
            if row.correct { "right" } else { "wrong" },
            row.seconds,
            per * (todo.len() - i - 1) as f64 / 60.0
        );
    }
    Ok(todo.len())
}

/// --quick's checks: every (problem, cell) answered exactly once, a rerun finds nothing to do,
/// and after the last problem's rows are removed it runs exactly those again.
#[allow(clippy::too_many_arguments)]
fn quick_resume_check(
    s: &ReasonSettings,
    model: &Path,
    settings: &str,
    work: &Path,
    results: &Path,
    problems: &[Problem],
    cells: &[(String, u32)],
) -> Result<(), String> {
    let once = |rows: &[Row]| -> Result<(), String> {
        let keys: BTreeSet<(&str, &str, u32)> = rows
            .iter()
            .map(|r| (r.problem.as_str(), r.policy.as_str(), r.budget))
            .collect();
        if rows.len() != problems.len() * cells.len() || keys.len() != rows.len() {
            return Err(format!(
                "--quick: {} rows ({} distinct) in {}, expected {} problems x {} cells",
                rows.len(),
                keys.len(),
                results.display(),
                problems.len(),
                cells.len()
            ));
        }
        Ok(())
    };
    let rows = load_rows(results)?;
    once(&rows)?;
    let left = pending(problems, cells, &rows, settings)?;
    if !left.is_empty() {
        return Err(format!(
            "--quick: a rerun would redo {} answers",
            left.len()
        ));
    }
    let last = problems.len() - 1;
    let kept: Vec<&Row> = rows.iter().filter(|r| r.index as usize != last).collect();
    let mut text = String::new();
    for r in &kept {
        text.push_str(&serde_json::to_string(r).map_err(|e| e.to_string())?);
        text.push('\n');
    }
    write_file(results, &text)?;
    let rows = load_rows(results)?;
    let todo = pending(problems, cells, &rows, settings)?;
    let expect: Vec<(usize, usize)> = (0..cells.len()).map(|ci| (last, ci)).collect();
    if todo != expect {
        return Err(format!(
            "--quick: after removing problem {last}'s rows the rerun plans {todo:?}, expected {expect:?}"
        ));
    }
    eprintln!("--quick: resume check: rerunning {} answers", todo.len());
    run_pending(s, model, settings, work, results, problems, cells, &todo)?;
    let rows = load_rows(results)?;
    once(&rows)?;
    if !pending(problems, cells, &rows, settings)?.is_empty() {
        return Err("--quick: answers still missing after the rerun".into());
    }
    Ok(())
}

pub fn run(
    cli: ReasonCli,
    root: &Path,
    resolve_model: impl Fn(&Option<PathBuf>, bool) -> Result<PathBuf, String>,
) -> Result<(), String> {
    let started = Instant::now();
    let s = resolve(cli, root)?;
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
    let settings = fingerprint(&s, &model);
    let problems: Vec<Problem> = (0..s.problems)
        .map(|i| problems::generate(s.seed, i, s.shape))
        .collect();
    let mut text = String::new();
    for p in &problems {
        text.push_str(&serde_json::to_string(p).map_err(|e| e.to_string())?);
        text.push('\n');
    }
    write_file(&out.join("problems.jsonl"), &text)?;
    let cells = cells(&s);
    let rows = load_rows(&results)?;
    let todo = pending(&problems, &cells, &rows, &settings)?;
    eprintln!("model:   {}", model.display());
    eprintln!("out:     {}", out.display());
    eprintln!("settings: {settings}");
    eprintln!(
        "cells:   {} ({} problems each); {} answers done, {} to run",
        cells.len(),
        problems.len(),
        problems.len() * cells.len() - todo.len(),
        todo.len()
    );
    run_pending(
        &s, &model, &settings, &work, &results, &problems, &cells, &todo,
    )?;
    if s.quick {
        quick_resume_check(&s, &model, &settings, &work, &results, &problems, &cells)?;
    }
    let rows = load_rows(&results)?;
    let rep = report::Report::new(&s, &cells, &rows);
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
