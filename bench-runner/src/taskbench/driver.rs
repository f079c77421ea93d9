//! The run: calibration, rounds of documents while they fit the time budget, the trace test,
//! then the outputs.

use super::report::*;
use super::rows::*;
use super::{configs, resolve, Part, TaskSettings, TasksCli, QUICK_TRACE_PROMPTS, TRACE_PROMPTS};
use crate::args::{out_dir, unix_now, write_file};
use crate::run::{run_eval, EvalJob};
use crate::tasks::{self, wilson, Doc, Task};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub(super) fn base_args(
    s: &TaskSettings,
    mode: &str,
    model: &Path,
    input: &Path,
    out: &Path,
) -> Vec<String> {
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
    let free_max = if s.free_runs {
        s.free_max.to_string()
    } else {
        "-1".to_string()
    };
    match mode {
        "task" => a.extend(["--chunk".to_string(), s.chunk.to_string()]),
        // the chunk of the whole run, also when a call runs only some of its configs
        "trace" => a.extend(
            [
                "--chunk",
                &trace_chunk(s).to_string(),
                "--n-tokens",
                &s.trace_tokens.to_string(),
                "--bucket",
                &s.bucket.to_string(),
                "--free-max",
                &free_max,
            ]
            .iter()
            .map(|x| x.to_string()),
        ),
        _ => {}
    }
    a.extend(s.run.llama_args.iter().cloned());
    a
}

/// Writes documents as the `--tasks` file of one run.
fn write_jsonl(path: &Path, docs: &[Doc]) -> Result<(), String> {
    let mut s = String::new();
    for d in docs {
        s.push_str(&d.to_jsonl());
        s.push('\n');
    }
    write_file(path, &s)
}

/// One `beaconkv-eval` call writing `<name>.json` into `out`; `only`: the configs to run instead
/// of all of them.
#[allow(clippy::too_many_arguments)]
fn run_job(
    s: &TaskSettings,
    name: &str,
    label: &str,
    mode: &str,
    model: &Path,
    input: &Path,
    out: &Path,
    only: Option<&[String]>,
) -> Result<(Value, f64), String> {
    let json_path = out.join(format!("{name}.json"));
    let mut args = base_args(s, mode, model, input, &json_path);
    if let Some(only) = only {
        if let Some(i) = args.iter().position(|a| a == "--configs") {
            args[i + 1] = only.join(",");
        }
    }
    let job = EvalJob {
        eval: s.run.eval.clone(),
        args,
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
    let unix = unix_now();
    let out = out_dir(s.out.clone(), &model, root, "tasks-", unix)?;
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
            let (v, secs) = run_job(&s, "count", "count", "count", &model, &input, &out, None)?;
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
            let (v, secs) = run_job(&s, &name, &label, "task", &model, &input, &out, None)?;
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
            let want = TraceWant {
                n_tokens: s.trace_tokens as u64,
                free_runs: s.free_runs,
                chunk: trace_chunk(&s),
            };
            let t = run_trace_prompts(list, &cfgs, want, &out, |id, prompt, name, only| {
                let input = out.join(format!("trace-{id}.jsonl"));
                write_file(
                    &input,
                    &(json!({"id": id, "prompt": prompt}).to_string() + "\n"),
                )?;
                let (v, secs) = run_job(&s, name, name, "trace", &model, &input, &out, Some(only))?;
                timings.push(json!({"step": name, "elapsed_s": secs}));
                Ok(v)
            })?;
            check_trace(&t, list.len(), &cfgs, s.trace_tokens as u64, s.free_runs)?;
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
    let write = |name: &str, text: &str| write_file(&out.join(name), text);
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

/// What a trace file read back must match to count as this run's.
pub(super) struct TraceWant {
    pub n_tokens: u64,
    /// free runs needed
    pub free_runs: bool,
    /// tokens per teacher-forced decode call (where passes fall, and the logits' batching)
    pub chunk: u64,
}

/// The chunk `beaconkv-eval --mode trace` feeds every context: at most `--chunk` and budget/8
/// of the smallest budget.
pub(super) fn trace_chunk(s: &TaskSettings) -> u64 {
    let smallest = s.budgets.iter().min().copied().unwrap_or(s.chunk * 8);
    s.chunk.min(smallest / 8).max(1) as u64
}

/// The trace test, one `beaconkv-eval` call per prompt, writing `trace-<id>.json` (then
/// `trace-<id>.1.json`, ... for configs added later) in `out`. What those files already hold for
/// a prompt (same length and chunk, the same full-cache answer) is read back, and only the
/// configs still missing are run, so a stopped run resumes where it stopped and a rerun with more
/// policies or budgets runs only those. `run(id, prompt, file stem, configs)` runs one call.
pub(super) fn run_trace_prompts(
    list: &[(&str, &str)],
    cfgs: &[String],
    want: TraceWant,
    out: &Path,
    mut run: impl FnMut(&str, &str, &str, &[String]) -> Result<Value, String>,
) -> Result<TraceRun, String> {
    let mut all = TraceRun::default();
    for &(id, prompt) in list {
        let stem = |k: usize| match k {
            0 => format!("trace-{id}"),
            k => format!("trace-{id}.{k}"),
        };
        let usable = |t: &TraceRun| {
            t.prompts.len() == 1 && t.prompts[0].id == id && t.prompts[0].n_tokens == want.n_tokens
        };
        let mut have: Option<TraceRun> = None;
        let mut k = 0;
        while out.join(format!("{}.json", stem(k))).exists() {
            let file = read_json(&out.join(format!("{}.json", stem(k))), "trace")
                .ok()
                .filter(|v| v.get("chunk").and_then(Value::as_u64) == Some(want.chunk))
                .and_then(|v| parse_trace(&v).ok())
                .filter(usable);
            k += 1;
            let Some(file) = file else { continue };
            match &mut have {
                None => have = Some(file),
                // rows of another full-cache answer cannot be paired with this one's
                Some(h) if h.prompts[0].text == file.prompts[0].text => h.rows.extend(file.rows),
                Some(_) => {}
            }
        }
        let covered = |t: &TraceRun, c: &String| {
            t.rows.iter().any(|r| {
                &r.config == c && (!want.free_runs || r.policy == "none" || r.free_limit > 0)
            })
        };
        let missing: Vec<String> = cfgs
            .iter()
            .filter(|c| have.as_ref().is_none_or(|t| !covered(t, c)))
            .cloned()
            .collect();
        let t = match have {
            Some(t) if missing.is_empty() => {
                eprintln!("{:>16}: read back from {}.json", stem(0), stem(0));
                t
            }
            have => {
                let mut only = vec!["none".to_string()];
                only.extend(missing.into_iter().filter(|c| c != "none"));
                let fresh = parse_trace(&run(id, prompt, &stem(k), &only)?)?;
                if !usable(&fresh) {
                    return Err(format!("{}.json: not a trace of prompt '{id}'", stem(k)));
                }
                match have {
                    Some(mut h) if h.prompts[0].text == fresh.prompts[0].text => {
                        h.rows
                            .extend(fresh.rows.into_iter().filter(|r| r.policy != "none"));
                        h
                    }
                    Some(_) => {
                        return Err(format!(
                            "{}.json: the full cache answered prompt '{id}' differently than in \
                             {}.json; move the old files away to run it again",
                            stem(k),
                            stem(0)
                        ))
                    }
                    None => fresh,
                }
            }
        };
        all.prompts.extend(t.prompts);
        let mut seen = std::collections::BTreeSet::new();
        all.rows.extend(
            t.rows
                .into_iter()
                .filter(|r| cfgs.contains(&r.config) && seen.insert(r.config.clone())),
        );
    }
    Ok(all)
}
