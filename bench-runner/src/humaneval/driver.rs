//! The run: the bundles, then per round and cell one `beaconkv-eval --mode reason` over the
//! bundles still missing from `results.jsonl`; each answer the tool prints is checked function by
//! function and appended at once. Then the tables and plots.

use super::data::{self, Bundle, Problem, Split};
use super::extract::{extract, extract_nth};
use super::report;
use super::sandbox::{children_cpu_seconds, Sandbox, Verdict};
use super::{cells, resolve, HumanEvalCli, HumanEvalSettings};
use crate::args::{config_of, out_dir, unix_now, write_file};
use crate::run::{run_eval, run_eval_lines, EvalJob};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// The resume file in the output folder.
pub const RESULTS_FILE: &str = "results.jsonl";
/// One line per invocation of the tool: its cell, bundles, CPU and wall time.
pub const RUNS_FILE: &str = "runs.jsonl";
/// The version of the extraction and the check; rows of another are checked again and
/// rewritten with the new verdicts.
pub const CHECKER: &str = "2";

/// One turn of a conversation line of `beaconkv-eval --mode reason`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct EvalTurn {
    pub n_prompt: u64,
    pub n_gen: u64,
    pub stopped: bool,
    pub output: String,
}

/// One conversation line of `beaconkv-eval --mode reason` (stdout): here one bundle, one turn.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct EvalAnswer {
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
    let name = model
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!(
        "model={name} bundle_size={} n_tokens={} chunk={} parallel={} extra={} llama={}",
        s.bundle_size,
        s.n_tokens,
        s.chunk,
        s.parallel,
        s.run.extra,
        s.run.llama_args.join(" ")
    )
}

/// The lines of a JSONL file (none when it does not exist). A last line cut short (a run killed
/// while writing it) is dropped and the file truncated after the last whole line; any other bad
/// line is an error.
pub fn load_lines<T: DeserializeOwned>(path: &Path) -> Result<Vec<T>, String> {
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

/// Appends one line and flushes it to the disk.
pub fn append_line<T: Serialize>(path: &Path, row: &T) -> Result<(), String> {
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

/// One invocation of the tool: a cell and the bundles (indices into the run's bundles) it lacks.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    pub cell: usize,
    pub bundles: Vec<usize>,
}

/// The jobs still to run. Bundles go in rounds of `round`: every cell gets a round's missing
/// bundles before the next round starts, so that a run cut short leaves every cell with about
/// the same count. Rows of other settings, or of a bundle now worded differently (`known`: the
/// digest of every bundle id of this bundle size), are an error.
pub fn plan(
    bundles: &[Bundle],
    known: &BTreeMap<String, String>,
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
    let done: BTreeSet<(&str, &str, u32)> = rows
        .iter()
        .map(|r| (r.bundle.as_str(), r.policy.as_str(), r.budget))
        .collect();
    let mut jobs = Vec::new();
    let round = round.max(1);
    for start in (0..bundles.len()).step_by(round) {
        let end = (start + round).min(bundles.len());
        for (ci, (policy, budget)) in cells.iter().enumerate() {
            let missing: Vec<usize> = (start..end)
                .filter(|&i| !done.contains(&(bundles[i].id.as_str(), policy.as_str(), *budget)))
                .collect();
            if !missing.is_empty() {
                jobs.push(Job {
                    cell: ci,
                    bundles: missing,
                });
            }
        }
    }
    Ok(jobs)
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
    crate::run::reason_mode_args(&s.run, sizes, model, config, input, out)
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
    if e.id != bundle.id || e.config != config {
        return Err(format!(
            "beaconkv-eval answered {} {}, expected {} {config}",
            e.id, e.config, bundle.id
        ));
    }
    let [t] = e.turns.as_slice() else {
        return Err(format!(
            "{} {config}: {} turns answered, expected 1",
            e.id,
            e.turns.len()
        ));
    };
    if t.n_gen > s.n_tokens as u64 || (t.n_gen == 0 && !t.stopped) {
        return Err(format!(
            "{} {config}: {} tokens generated, expected 1..={} (or an end-of-generation token)",
            e.id, t.n_gen, s.n_tokens
        ));
    }
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
        n_prompt: e.n_prompt,
        n_gen: e.n_gen,
        cut: !t.stopped,
        cells_peak: e.cells_peak,
        prefix_len: e.prefix_len,
        evicted: e.evicted,
        compress_events: e.compress_events,
        recalled: e.recalled,
        seconds: e.seconds,
        output: t.output.clone(),
    })
}

/// What the run needs to hand a job to the tool.
struct Ctx<'a> {
    s: &'a HumanEvalSettings,
    model: &'a Path,
    settings: &'a str,
    work: &'a Path,
    results: &'a Path,
    runs: &'a Path,
    problems: &'a [Problem],
    bundles: &'a [Bundle],
    cells: &'a [(String, u32)],
    sandbox: &'a Sandbox,
}

/// Runs every job, appending each bundle's row as soon as the tool prints its answer and the
/// functions are checked; returns the bundles run.
fn run_jobs(c: &Ctx, jobs: &[Job]) -> Result<usize, String> {
    let started = Instant::now();
    let total: usize = jobs.iter().map(|j| j.bundles.len()).sum();
    let mut done = 0usize;
    let mut tokens = 0u64;
    for job in jobs {
        let cell = &c.cells[job.cell];
        let config = config_of(&cell.0, cell.1, &c.s.run.extra);
        let input = c.work.join("bundles.jsonl");
        let mut text = String::new();
        for &i in &job.bundles {
            text.push_str(&c.bundles[i].to_jsonl());
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
        let mut job_gen = 0u64;
        let mut check_cpu = 0.0f64;
        let cpu0 = children_cpu_seconds();
        let wall0 = Instant::now();
        let mut on_line = |line: &str| -> Result<(), String> {
            if !line.starts_with('{') {
                return Ok(());
            }
            let e: EvalAnswer = serde_json::from_str(line)
                .map_err(|err| format!("unexpected answer line of beaconkv-eval: {err}"))?;
            let Some(&i) = job
                .bundles
                .iter()
                .find(|&&i| c.bundles[i].id == e.id && !answered.contains(&i))
            else {
                return Err(format!(
                    "beaconkv-eval answered {} {}, not a bundle it was given (or twice)",
                    e.id, e.config
                ));
            };
            let output = e.turns.first().map(|t| t.output.as_str()).unwrap_or("");
            let before = children_cpu_seconds();
            let verdicts = check_answer(c.problems, &c.bundles[i], output, c.sandbox);
            check_cpu += children_cpu_seconds() - before;
            let row = make_row(
                c.s,
                c.settings,
                c.problems,
                &c.bundles[i],
                cell,
                &e,
                &verdicts,
            )?;
            append_line(c.results, &row)?;
            answered.insert(i);
            done += 1;
            tokens += row.n_gen;
            job_gen += row.n_gen;
            let secs = started.elapsed().as_secs_f64();
            eprintln!(
                "[{done}/{total}] {} {config}: {}/{} functions pass, {} + {} tokens{}; {:.1} tok/s so far, about {:.0} min left",
                row.bundle,
                row.passed.iter().filter(|&&p| p).count(),
                row.passed.len(),
                row.n_prompt,
                row.n_gen,
                if row.cut { " (cut)" } else { "" },
                tokens as f64 / secs,
                secs / done as f64 * (total - done) as f64 / 60.0
            );
            Ok(())
        };
        run_eval_lines(&eval_job, Some(&mut on_line))?;
        if answered.len() != job.bundles.len() {
            return Err(format!(
                "beaconkv-eval answered {} of {} bundles for {config}",
                answered.len(),
                job.bundles.len()
            ));
        }
        let tool = std::fs::read(&json)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .map(|v| v["runs"].clone())
            .unwrap_or_default();
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
                tool,
            },
        )?;
    }
    Ok(total)
}

/// The policy entries this `beaconkv-eval` accepts. An entry of the default list it rejects
/// (a policy of a newer library) is left out with a warning; one given with --policies is an
/// error.
fn known_policies(s: &HumanEvalSettings, work: &Path) -> Result<Vec<String>, String> {
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
                    r.checker = CHECKER.to_string();
                }
            }
            r
        })
        .collect()
}

/// --quick's checks on what the tool reports: a compressed answer never held more cells than its
/// budget, and evicted some once it ran past it; the full cache evicted nothing and held every
/// token (prompt and answer).
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
            return Err(format!("--quick: {} {}: {why}", r.bundle, r.config));
        }
    }
    Ok(())
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

/// --quick's checks: every (bundle, cell) answered exactly once, a rerun finds nothing to do,
/// and after the last bundle's rows are removed it runs exactly those again.
fn quick_resume_check(
    c: &Ctx,
    known: &BTreeMap<String, String>,
    round: usize,
) -> Result<(), String> {
    let n = c.bundles.len();
    let once = |rows: &[Row]| -> Result<(), String> {
        let keys: BTreeSet<(&str, &str, u32)> = rows
            .iter()
            .map(|r| (r.bundle.as_str(), r.policy.as_str(), r.budget))
            .collect();
        if rows.len() != n * c.cells.len() || keys.len() != rows.len() {
            return Err(format!(
                "--quick: {} rows ({} distinct) in {}, expected {n} bundles x {} cells",
                rows.len(),
                keys.len(),
                c.results.display(),
                c.cells.len()
            ));
        }
        Ok(())
    };
    let rows: Vec<Row> = load_lines(c.results)?;
    once(&rows)?;
    if !plan(c.bundles, known, c.cells, &rows, c.settings, round)?.is_empty() {
        return Err("--quick: a rerun would run jobs although every bundle is done".into());
    }
    let last = n - 1;
    let mut text = String::new();
    for r in rows.iter().filter(|r| r.bundle != c.bundles[last].id) {
        text.push_str(&serde_json::to_string(r).map_err(|e| e.to_string())?);
        text.push('\n');
    }
    write_file(c.results, &text)?;
    let rows: Vec<Row> = load_lines(c.results)?;
    let todo = plan(c.bundles, known, c.cells, &rows, c.settings, round)?;
    let expect: Vec<Job> = (0..c.cells.len())
        .map(|ci| Job {
            cell: ci,
            bundles: vec![last],
        })
        .collect();
    if todo != expect {
        return Err(format!(
            "--quick: after removing {}'s rows the rerun plans {todo:?}, expected {expect:?}",
            c.bundles[last].id
        ));
    }
    eprintln!(
        "--quick: resume check: rerunning {} in every cell",
        c.bundles[last].id
    );
    run_jobs(c, &todo)?;
    let rows: Vec<Row> = load_lines(c.results)?;
    once(&rows)?;
    if !plan(c.bundles, known, c.cells, &rows, c.settings, round)?.is_empty() {
        return Err("--quick: bundles still missing after the rerun".into());
    }
    Ok(())
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
    let out = match (&s.out, s.quick) {
        (Some(o), _) => out_dir(Some(o.clone()), &model, root, "", 0)?,
        (None, true) => out_dir(None, &model, root, "humaneval-quick-", unix_now())?,
        (None, false) => {
            let stem = model
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "model".into());
            out_dir(
                Some(root.join("results").join(format!("humaneval-{stem}"))),
                &model,
                root,
                "",
                0,
            )?
        }
    };
    let results = out.join(RESULTS_FILE);
    let runs = out.join(RUNS_FILE);
    if s.quick {
        for f in [&results, &runs] {
            if f.exists() {
                std::fs::remove_file(f)
                    .map_err(|e| format!("cannot remove {}: {e}", f.display()))?;
            }
        }
        sandbox_self_check(&problems, &sandbox)?;
    }
    let work = out.join("work");
    std::fs::create_dir_all(&work).map_err(|e| format!("cannot create {}: {e}", work.display()))?;
    s.policies = known_policies(&s, &work)?;
    if s.reference
        .as_ref()
        .is_some_and(|r| !s.policies.contains(r))
    {
        s.reference = s.policies.first().cloned();
    }
    let settings = fingerprint(&s, &model);
    let size = s.bundle_size as usize;
    let bundles = data::all_bundles(&problems, &s.splits, size, s.bundles.map(|n| n as usize));
    if bundles.is_empty() {
        return Err(format!(
            "{} has no problems in the splits asked for",
            data.display()
        ));
    }
    let every: BTreeMap<String, Bundle> =
        data::all_bundles(&problems, &[Split::Tune, Split::Heldout], size, None)
            .into_iter()
            .map(|b| (b.id.clone(), b))
            .collect();
    let known: BTreeMap<String, String> = every
        .iter()
        .map(|(id, b)| (id.clone(), b.digest()))
        .collect();
    let mut text = String::new();
    for b in &bundles {
        let line = serde_json::json!({"id": b.id, "split": b.split, "tasks": b.task_ids(&problems),
            "digest": b.digest(), "request": b.text});
        text.push_str(&line.to_string());
        text.push('\n');
    }
    write_file(&out.join("bundles.jsonl"), &text)?;
    let cells = cells(&s);
    let rows: Vec<Row> = load_lines(&results)?;
    let round = 2 * s.parallel as usize;
    let jobs = plan(&bundles, &known, &cells, &rows, &settings, round)?;
    let todo: usize = jobs.iter().map(|j| j.bundles.len()).sum();
    eprintln!("model:   {}", model.display());
    eprintln!("data:    {} ({} problems)", data.display(), problems.len());
    eprintln!("out:     {}", out.display());
    eprintln!("settings: {settings}");
    eprintln!("sandbox: {}", sandbox.network());
    eprintln!(
        "cells:   {} ({} bundles each, in rounds of {round}); {} bundles done, {} to run",
        cells.len(),
        bundles.len(),
        bundles.len() * cells.len() - todo,
        todo
    );
    let c = Ctx {
        s: &s,
        model: &model,
        settings: &settings,
        work: &work,
        results: &results,
        runs: &runs,
        problems: &problems,
        bundles: &bundles,
        cells: &cells,
        sandbox: &sandbox,
    };
    run_jobs(&c, &jobs)?;
    if s.quick {
        quick_resume_check(&c, &known, round)?;
        check_cells(&load_lines(&results)?)?;
    }
    let loaded: Vec<Row> = load_lines(&results)?;
    let stale = loaded.iter().any(|r| r.checker != CHECKER);
    let rows = recheck(loaded, &problems, &every, &sandbox);
    if stale {
        // the file keeps the new verdicts, written whole and then moved over the old one
        let mut text = String::new();
        for r in &rows {
            text.push_str(&serde_json::to_string(r).map_err(|e| e.to_string())?);
            text.push('\n');
        }
        let tmp = out.join("results.jsonl.tmp");
        write_file(&tmp, &text)?;
        std::fs::rename(&tmp, &results)
            .map_err(|e| format!("cannot replace {}: {e}", results.display()))?;
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
    if s.quick {
        rep.check_shape()?;
    }
    let plots = rep.plot(&out)?;
    println!("{}", rep.table());
    for p in plots {
        eprintln!("plot:    {}", p.display());
    }
    eprintln!("summary: {}", out.join("summary.md").display());
    Ok(())
}
