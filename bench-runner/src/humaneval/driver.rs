//! The run: the bundles, then per round and cell one `beaconkv-eval --mode reason` over the
//! bundles still missing from `results.jsonl`; each answer the tool prints is checked function by
//! function and appended at once. Then the tables and plots.

use super::data::{self, Bundle, Problem, Split};
use super::extract::{extract, extract_nth};
use super::own_values::{self, OwnValues};
use super::report;
use super::sandbox::{children_cpu_seconds, Sandbox, Verdict};
use super::{cells, resolve, HumanEvalCli, HumanEvalSettings};
use crate::args::{config_of, model_file_name, write_file};
pub use crate::jsonl::{append_line, load_lines};
use crate::jsonl::{replace_lines, to_lines};
use crate::reason_mode::{Batch, Nouns};
pub use crate::resumable::check_cells;
use crate::resumable::{
    out_folder, plan_rounds, refuse_other_settings, remove_files, CacheUse, Pending, Progress,
    ResultRow, ResumeFile, RESULTS_FILE,
};
use crate::run::known_policies;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// One line per invocation of the tool: its cell, bundles, CPU and wall time.
pub const RUNS_FILE: &str = "runs.jsonl";
/// The version of the extraction and the check; rows of another are checked again and
/// rewritten with the new verdicts.
pub const CHECKER: &str = "3";

/// What messages call a bundle and the tool's line for it.
const NOUNS: Nouns = Nouns {
    item: "bundle",
    line: "answer",
};

/// One conversation line of `beaconkv-eval --mode reason`: here one bundle, one turn.
pub type EvalAnswer = crate::reason_mode::EvalConversation;
#[cfg(test)]
pub use crate::reason_mode::EvalTurn;

/// One checked bundle in one cell: a line of `results.jsonl`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Row {
    /// What the answers depend on besides the cell ([`fingerprint`]); a folder holds one.
    pub settings: String,
    pub bundle: String,
    pub split: Split,
    /// [`Bundle::digest`] of the request answered.
    pub digest: String,
    /// The policy entry as given ("none" for the full cache).
    pub policy: String,
    /// 0 for the full cache.
    pub budget: u32,
    pub config: String,
    /// [`CHECKER`] of the check that filled `passed` and `reasons`.
    pub checker: String,
    pub tasks: Vec<String>,
    pub passed: Vec<bool>,
    pub reasons: Vec<String>,
    /// The own values' check (requests that asked for them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own: Option<OwnValues>,
    /// Prompt tokens (the request with the chat template).
    pub n_prompt: u64,
    /// Tokens generated.
    pub n_gen: u64,
    /// Cut at --n-tokens (no end-of-generation token).
    pub cut: bool,
    pub cells_peak: i64,
    /// Cells the policy protected as the prompt's prefix.
    pub prefix_len: i64,
    pub evicted: u64,
    pub compress_events: u64,
    pub recalled: u64,
    /// From the bundle's first prompt token to its answer's end (other bundles decoded alongside).
    pub seconds: f64,
    pub output: String,
}

impl Row {
    pub fn all_passed(&self) -> bool {
        !self.passed.is_empty() && self.passed.iter().all(|&p| p)
    }
}

impl ResultRow for Row {
    fn settings(&self) -> &str {
        &self.settings
    }
    fn key(&self) -> (&str, &str, u32) {
        (&self.bundle, &self.policy, self.budget)
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

/// One invocation of the tool: a line of `runs.jsonl`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RunLine {
    pub settings: String,
    pub policy: String,
    pub budget: u32,
    pub config: String,
    pub bundles: Vec<String>,
    /// CPU seconds of the tool's process (the checks' processes not counted).
    pub cpu_s: f64,
    pub wall_s: f64,
    pub n_gen: u64,
    /// The tool's own figures (`runs` of its --out file).
    #[serde(default)]
    pub tool: serde_json::Value,
}

/// What an answer depends on besides its bundle and cell: the model file, the bundle size,
/// the generation cap, prompt chunking, the bundles decoded together (they change the
/// rounding), extra keys and flags.
pub fn fingerprint(s: &HumanEvalSettings, model: &Path) -> String {
    let name = model_file_name(model);
    // absent when off, so that folders written before the option resume
    let own = match s.own_values {
        0 => String::new(),
        n => format!(" own_values={n}"),
    };
    format!(
        "model={name} bundle_size={}{own} n_tokens={} chunk={} parallel={} extra={} llama={}",
        s.bundle_size,
        s.n_tokens,
        s.chunk,
        s.parallel,
        s.run.extra,
        s.run.llama_args.join(" ")
    )
}

/// One invocation of the tool: a cell and the bundles (indices into the run's bundles) it lacks.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    pub cell: usize,
    pub bundles: Vec<usize>,
}

impl From<Pending> for Job {
    fn from(p: Pending) -> Job {
        Job {
            cell: p.cell,
            bundles: p.items,
        }
    }
}

/// The jobs still to run, in rounds of `round` ([`plan_rounds`]). Rows of other settings, or of
/// a bundle now worded differently (`known`: the digest of every bundle id of this bundle size),
/// are an error.
pub fn plan(
    bundles: &[Bundle],
    known: &BTreeMap<String, String>,
    cells: &[(String, u32)],
    rows: &[Row],
    settings: &str,
    round: usize,
) -> Result<Vec<Job>, String> {
    refuse_other_settings(rows, settings)?;
    if let Some(r) = rows
        .iter()
        .find(|r| known.get(&r.bundle) != Some(&r.digest))
    {
        return Err(format!(
            "the output folder holds answers to another wording of {} (this version words it \
             differently, or has no such bundle): pass another --out",
            r.bundle
        ));
    }
    let ids: Vec<&str> = bundles.iter().map(|b| b.id.as_str()).collect();
    Ok(plan_rounds(&ids, cells, rows, round))
}

/// The tool's arguments for one cell.
pub fn eval_args(
    s: &HumanEvalSettings,
    model: &Path,
    config: &str,
    input: &Path,
    out: &Path,
) -> Vec<String> {
    let sizes = (s.n_tokens, s.chunk, s.parallel);
    crate::reason_mode::args(&s.run, sizes, model, config, input, out)
}

/// Every function of a bundle taken out of `output` and checked.
pub fn check_answer(
    problems: &[Problem],
    bundle: &Bundle,
    output: &str,
    sandbox: &Sandbox,
) -> Vec<Verdict> {
    bundle
        .problems
        .iter()
        .enumerate()
        .map(|(k, &i)| {
            let p = &problems[i];
            // the how-manieth function of this name the request asks for
            let nth = bundle.problems[..k]
                .iter()
                .filter(|&&j| problems[j].entry_point == p.entry_point)
                .count();
            match extract_nth(output, &p.entry_point, nth) {
                None => Verdict::fail("missing function"),
                Some(code) => sandbox.check(&p.prompt, &code, &p.test, &p.entry_point),
            }
        })
        .collect()
}

/// The own values' check of an answer, where the bundle asked for them.
pub fn check_own(bundle: &Bundle, output: &str) -> Option<OwnValues> {
    (!bundle.own_names.is_empty()).then(|| own_values::check(output, &bundle.own_names))
}

/// An answer line of the tool, with its functions' verdicts: a row.
pub fn make_row(
    s: &HumanEvalSettings,
    settings: &str,
    problems: &[Problem],
    bundle: &Bundle,
    (policy, budget): &(String, u32),
    e: &EvalAnswer,
    verdicts: &[Verdict],
) -> Result<Row, String> {
    let config = config_of(policy, *budget, &s.run.extra);
    e.expect(&bundle.id, &config)?;
    let expected = bundle.turns().len();
    if e.turns.len() != expected {
        return Err(format!(
            "{} {config}: {} turns answered, expected {expected}",
            e.id,
            e.turns.len()
        ));
    }
    for t in &e.turns {
        if t.n_gen > s.n_tokens as u64 || (t.n_gen == 0 && !t.stopped) {
            return Err(format!(
                "{} {config}: {} tokens generated, expected 1..={} (or an end-of-generation token)",
                e.id, t.n_gen, s.n_tokens
            ));
        }
    }
    let output = answer_text(e);
    Ok(Row {
        settings: settings.to_string(),
        bundle: bundle.id.clone(),
        split: bundle.split,
        digest: bundle.digest(),
        policy: policy.clone(),
        budget: *budget,
        config,
        checker: CHECKER.to_string(),
        tasks: bundle.task_ids(problems),
        passed: verdicts.iter().map(|v| v.passed).collect(),
        reasons: verdicts.iter().map(|v| v.reason.clone()).collect(),
        own: check_own(bundle, &output),
        n_prompt: e.n_prompt,
        n_gen: e.n_gen,
        cut: e.turns.iter().any(|t| !t.stopped),
        cells_peak: e.cells_peak,
        prefix_len: e.prefix_len,
        evicted: e.evicted,
        compress_events: e.compress_events,
        recalled: e.recalled,
        seconds: e.seconds,
        output,
    })
}

/// --quick: every answer begins with its bundle's forced start (the tool fed it as answer).
fn check_answer_starts(rows: &[Row], bundles: &BTreeMap<String, Bundle>) -> Result<(), String> {
    for r in rows {
        let start = bundles
            .get(&r.bundle)
            .and_then(|b| b.answer_start.as_deref());
        if let Some(start) = start {
            // the tiny model's byte-fallback SPM vocabulary writes a space as '▁'
            let written = r.output.replace('\u{2581}', " ");
            if !written.trim_start().starts_with(start.trim_start()) {
                return Err(format!(
                    "--quick: {} {}: the answer does not begin with its forced start:\n{}",
                    r.bundle, r.config, r.output
                ));
            }
        }
    }
    Ok(())
}

/// The answer's text: the turns' outputs, a blank line between them.
pub fn answer_text(e: &EvalAnswer) -> String {
    let outs: Vec<&str> = e.turns.iter().map(|t| t.output.as_str()).collect();
    outs.join("\n\n")
}

/// What the run needs to hand a job to the tool.
struct Ctx<'a> {
    s: &'a HumanEvalSettings,
    model: &'a Path,
    settings: &'a str,
    work: &'a Path,
    /// The results file, with the items and cells its rows answer.
    file: ResumeFile<'a>,
    runs: &'a Path,
    problems: &'a [Problem],
    bundles: &'a [Bundle],
    sandbox: &'a Sandbox,
}

/// Runs every job, appending each bundle's row as soon as the tool prints its answer and the
/// functions are checked, and a line per job to `runs.jsonl`; returns the bundles run.
fn run_jobs(c: &Ctx, jobs: &[Job]) -> Result<usize, String> {
    let mut progress = Progress::new(jobs.iter().map(|j| j.bundles.len()).sum());
    for job in jobs {
        let cell = &c.file.cells[job.cell];
        let items = job.bundles.iter().map(|&i| &c.bundles[i]);
        let items = items.map(|b| (b.id.as_str(), b.to_jsonl())).collect();
        let batch = Batch::new(&c.s.run, cell, c.work, "bundles.jsonl", NOUNS, items);
        let config = &batch.config;
        let mut job_gen = 0u64;
        // the checks' Python processes are children too: their CPU is not the tool's
        let mut check_cpu = 0.0f64;
        let cpu0 = children_cpu_seconds();
        let wall0 = Instant::now();
        let args = |input: &Path, json: &Path| eval_args(c.s, c.model, config, input, json);
        let tool_runs = batch.run(args, |k, e| {
            let b = &c.bundles[job.bundles[k]];
            let output = answer_text(e);
            let before = children_cpu_seconds();
            let verdicts = check_answer(c.problems, b, &output, c.sandbox);
            check_cpu += children_cpu_seconds() - before;
            let row = make_row(c.s, c.settings, c.problems, b, cell, e, &verdicts)?;
            append_line(c.file.results, &row)?;
            job_gen += row.n_gen;
            let own = row.own.as_ref().map_or(String::new(), |o| {
                format!(", {}/{} own values written again", o.recalled, o.asked)
            });
            let detail = format!(
                "{}/{} functions pass{own}, {} + {} tokens{}",
                row.passed.iter().filter(|&&p| p).count(),
                row.passed.len(),
                row.n_prompt,
                row.n_gen,
                if row.cut { " (cut)" } else { "" },
            );
            progress.answered(&row.bundle, config, &detail, row.n_gen);
            Ok(())
        })?;
        append_line(
            c.runs,
            &RunLine {
                settings: c.settings.to_string(),
                policy: cell.0.clone(),
                budget: cell.1,
                config: config.clone(),
                bundles: job
                    .bundles
                    .iter()
                    .map(|&i| c.bundles[i].id.clone())
                    .collect(),
                cpu_s: (children_cpu_seconds() - cpu0 - check_cpu).max(0.0),
                wall_s: wall0.elapsed().as_secs_f64(),
                n_gen: job_gen,
                tool: tool_runs.unwrap_or_default(),
            },
        )?;
    }
    Ok(progress.total)
}

/// The rows with their functions checked again from their outputs where another version of
/// the checker checked them, so that the tables follow this version.
pub fn recheck(
    rows: Vec<Row>,
    problems: &[Problem],
    known: &BTreeMap<String, Bundle>,
    sandbox: &Sandbox,
) -> Vec<Row> {
    let stale = rows.iter().filter(|r| r.checker != CHECKER).count();
    if stale > 0 {
        eprintln!("checking {stale} answers checked by another version of the checker again");
    }
    rows.into_iter()
        .map(|mut r| {
            if r.checker != CHECKER {
                if let Some(b) = known.get(&r.bundle) {
                    let v = check_answer(problems, b, &r.output, sandbox);
                    r.passed = v.iter().map(|v| v.passed).collect();
                    r.reasons = v.into_iter().map(|v| v.reason).collect();
                    r.own = check_own(b, &r.output);
                    r.checker = CHECKER.to_string();
                }
            }
            r
        })
        .collect()
}

/// An answer as a model might write it: a sentence, then each function in a code block of its
/// own with a line of prose between them.
pub fn answer_of(blocks: &[String]) -> String {
    let mut t = String::from("Here are the functions.\n");
    for (i, b) in blocks.iter().enumerate() {
        t.push_str(&format!(
            "\n### Function {}\n\n```python\n{}\n```\n\nThis handles the cases above.\n",
            i + 1,
            b.trim_end()
        ));
    }
    t
}

/// --quick's checks of the sandbox, before any model runs: every problem's canonical solution,
/// written as a model would (prompt + solution in code blocks, eight to an answer), is taken out
/// of the answer and passes; a wrong answer fails, a syntax error is one, a missing function is
/// found missing, a loop times out, and opening a socket or taking 4 GiB fails.
pub fn sandbox_self_check(problems: &[Problem], sandbox: &Sandbox) -> Result<(), String> {
    let t0 = Instant::now();
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(1, 8);
    // eight to an answer, as the default bundles (56 and 61, both correct_bracketing, together)
    let ids: Vec<usize> = (0..problems.len()).collect();
    let groups: Vec<&[usize]> = ids.chunks(8).collect();
    let failures: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let groups = &groups;
                scope.spawn(move || {
                    let mut bad = Vec::new();
                    for g in groups.iter().skip(w).step_by(workers) {
                        let blocks: Vec<String> = g
                            .iter()
                            .map(|&i| {
                                let p = &problems[i];
                                format!("{}{}", p.prompt, p.canonical_solution)
                            })
                            .collect();
                        let answer = answer_of(&blocks);
                        let bundle = Bundle {
                            id: String::new(),
                            split: Split::Tune,
                            problems: g.to_vec(),
                            text: String::new(),
                            own_names: Vec::new(),
                            answer_start: None,
                            follow_up: None,
                        };
                        let verdicts = check_answer(problems, &bundle, &answer, sandbox);
                        for (&i, v) in g.iter().zip(verdicts) {
                            if !v.passed {
                                bad.push(format!("{}: {}", problems[i].task_id, v.reason));
                            }
                        }
                    }
                    bad
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|_| vec!["a check panicked".into()]))
            .collect()
    });
    if !failures.is_empty() {
        return Err(format!(
            "--quick: canonical solutions failed in the sandbox: {}",
            failures.join("; ")
        ));
    }
    let p = &problems[0];
    let e = &p.entry_point;
    let cases: [(&str, String, &str); 5] = [
        (
            "a wrong answer",
            format!("def {e}(*args, **kwargs):\n    return None\n"),
            "",
        ),
        (
            "a syntax error",
            format!("def {e}(x:\n    return x\n"),
            "syntax error",
        ),
        (
            "a loop",
            format!("def {e}(*args, **kwargs):\n    while True:\n        pass\n"),
            "timeout",
        ),
        (
            "a socket",
            format!(
                "import socket\n\ndef {e}(*args, **kwargs):\n    socket.create_connection((\"127.0.0.1\", 9), timeout=1)\n"
            ),
            "exception: NoNetwork",
        ),
        (
            "4 GiB",
            format!("def {e}(*args, **kwargs):\n    return bytearray(4 << 30)\n"),
            "exception: MemoryError",
        ),
    ];
    for (what, code, want) in &cases {
        let answer = answer_of(std::slice::from_ref(code));
        let code = extract(&answer, e)
            .ok_or_else(|| format!("--quick: {what}: the function was not found"))?;
        let v = sandbox.check(&p.prompt, &code, &p.test, e);
        if v.passed || !v.reason.starts_with(want) {
            return Err(format!(
                "--quick: {what} for {}: {} ({}), expected a failure{}",
                p.task_id,
                if v.passed { "passed" } else { "failed" },
                v.reason,
                if want.is_empty() {
                    String::new()
                } else {
                    format!(" '{want}'")
                }
            ));
        }
    }
    if extract("I cannot write that function.", e).is_some() {
        return Err("--quick: a function was found in an answer without code".into());
    }
    eprintln!(
        "--quick: sandbox check: {} canonical solutions pass; a wrong answer, a syntax error, a \
         loop, a socket and 4 GiB fail; {:.1} s ({})",
        problems.len(),
        t0.elapsed().as_secs_f64(),
        if sandbox.unshare {
            "unshare -rn"
        } else {
            "no unshare"
        }
    );
    Ok(())
}

/// --quick's checks of resuming ([`ResumeFile::quick_resume_check`]).
fn quick_resume_check(
    c: &Ctx,
    known: &BTreeMap<String, String>,
    round: usize,
) -> Result<(), String> {
    let last = &c.bundles[c.bundles.len() - 1].id;
    let plan = |rows: &[Row]| plan(c.bundles, known, c.file.cells, rows, c.settings, round);
    c.file
        .quick_resume_check(last, plan, |todo| run_jobs(c, todo))
}

/// HumanEval.jsonl: as given, else from `scripts/fetch-humaneval.sh` (which prints its path).
fn data_path(given: &Option<PathBuf>, root: &Path) -> Result<PathBuf, String> {
    if let Some(p) = given {
        return Ok(p.clone());
    }
    let script = root.join("scripts/fetch-humaneval.sh");
    let out = Command::new("bash")
        .arg(&script)
        .current_dir(root)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    if !out.status.success() || line.trim().is_empty() {
        return Err(format!(
            "{} failed ({}); pass --data HumanEval.jsonl instead",
            script.display(),
            out.status
        ));
    }
    Ok(PathBuf::from(line.trim()))
}

pub fn run(
    cli: HumanEvalCli,
    root: &Path,
    resolve_model: impl Fn(&Option<PathBuf>, bool) -> Result<PathBuf, String>,
) -> Result<(), String> {
    let started = Instant::now();
    let mut s = resolve(cli, root)?;
    s.run.check_binary()?;
    let sandbox = Sandbox::new(&s.python, s.timeout, s.memory_mb)?;
    let data = data_path(&s.data, root)?;
    let problems = data::load(&data)?;
    let model = resolve_model(&s.model, s.quick)?;
    let out = out_folder(s.out.as_deref(), s.quick, &model, root, "humaneval")?;
    let results = out.join(RESULTS_FILE);
    let runs = out.join(RUNS_FILE);
    if s.quick {
        remove_files(&[&results, &runs])?;
        sandbox_self_check(&problems, &sandbox)?;
    }
    let work = out.join("work");
    std::fs::create_dir_all(&work).map_err(|e| format!("cannot create {}: {e}", work.display()))?;
    let log = work.join("configs.log");
    s.policies = known_policies(&s.run, &s.policies, s.budgets[0], s.default_policies, &log)?;
    if s.reference
        .as_ref()
        .is_some_and(|r| !s.policies.contains(r))
    {
        s.reference = s.policies.first().cloned();
    }
    let settings = fingerprint(&s, &model);
    let shape = s.shape();
    let bundles = data::all_bundles(&problems, &s.splits, shape, s.bundles.map(|n| n as usize));
    if bundles.is_empty() {
        return Err(format!(
            "{} has no problems in the splits asked for",
            data.display()
        ));
    }
    let every: BTreeMap<String, Bundle> =
        data::all_bundles(&problems, &[Split::Tune, Split::Heldout], shape, None)
            .into_iter()
            .map(|b| (b.id.clone(), b))
            .collect();
    let known: BTreeMap<String, String> = every
        .iter()
        .map(|(id, b)| (id.clone(), b.digest()))
        .collect();
    let listed: Vec<serde_json::Value> = bundles
        .iter()
        .map(|b| {
            serde_json::json!({"id": b.id, "split": b.split, "tasks": b.task_ids(&problems),
                "digest": b.digest(), "request": b.text})
        })
        .collect();
    write_file(&out.join("bundles.jsonl"), &to_lines(&listed)?)?;
    let cells = cells(&s);
    let rows: Vec<Row> = load_lines(&results)?;
    let round = 2 * s.parallel as usize;
    let jobs = plan(&bundles, &known, &cells, &rows, &settings, round)?;
    let todo: usize = jobs.iter().map(|j| j.bundles.len()).sum();
    let c = Ctx {
        s: &s,
        model: &model,
        settings: &settings,
        work: &work,
        file: ResumeFile {
            ids: bundles.iter().map(|x| x.id.as_str()).collect(),
            cells: &cells,
            results: &results,
            item: NOUNS.item,
        },
        runs: &runs,
        problems: &problems,
        bundles: &bundles,
        sandbox: &sandbox,
    };
    eprintln!("model:   {}", model.display());
    eprintln!("data:    {} ({} problems)", data.display(), problems.len());
    eprintln!("out:     {}", out.display());
    eprintln!("settings: {settings}");
    eprintln!("sandbox: {}", sandbox.network());
    eprintln!("{}", c.file.plan_line(round, todo));
    run_jobs(&c, &jobs)?;
    if s.quick {
        quick_resume_check(&c, &known, round)?;
        let rows = load_lines::<Row>(&results)?;
        check_cells(&rows)?;
        check_answer_starts(&rows, &every)?;
    }
    let loaded: Vec<Row> = load_lines(&results)?;
    let stale = loaded.iter().any(|r| r.checker != CHECKER);
    let rows = recheck(loaded, &problems, &every, &sandbox);
    if stale {
        // the file keeps the new verdicts
        replace_lines(&results, &rows)?;
    }
    let run_lines: Vec<RunLine> = load_lines(&runs)?;
    let run_lines: Vec<RunLine> = run_lines
        .into_iter()
        .filter(|r| r.settings == settings)
        .collect();
    let rep = report::Report::new(&s, &cells, &rows, &run_lines);
    let summary = rep.summary_markdown(&model, &sandbox, started.elapsed().as_secs_f64());
    write_file(&out.join("summary.md"), &summary)?;
    write_file(&out.join("accuracy.csv"), &rep.csv())?;
    write_file(&out.join("mcnemar.csv"), &rep.mcnemar_csv())?;
    if s.own_values > 0 {
        write_file(&out.join("own-values.csv"), &rep.own_csv())?;
    }
    if s.quick {
        rep.check_shape()?;
    }
    let plots = rep.plot(&out)?;
    println!("{}", rep.table());
    if s.own_values > 0 {
        println!("{}", rep.own_table());
    }
    for p in plots {
        eprintln!("plot:    {}", p.display());
    }
    eprintln!("summary: {}", out.join("summary.md").display());
    Ok(())
}
