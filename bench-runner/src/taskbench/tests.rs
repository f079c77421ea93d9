//! Options, row checks, tables and the tool's arguments.

use super::driver::{base_args, run_trace_prompts, trace_chunk, TraceWant};
use super::report::*;
use super::rows::*;
use super::*;
use crate::tasks::{self, Doc};
use serde_json::Value;

#[derive(clap::Parser, Debug)]
struct Wrap {
    #[command(flatten)]
    t: TasksCli,
}

fn settings(args: &[&str]) -> Result<TaskSettings, String> {
    use clap::Parser;
    let w = Wrap::try_parse_from(std::iter::once("x").chain(args.iter().copied()))
        .map_err(|e| e.to_string())?;
    resolve(w.t, Path::new("/repo"))
}

#[test]
fn defaults_and_quick() {
    let s = settings(&[]).unwrap();
    assert_eq!(s.budgets, vec![256, 512, 1024]);
    assert_eq!(s.lengths, vec![2048]);
    assert_eq!(s.tasks, Task::ALL.to_vec());
    assert_eq!(
        (s.trace_tokens, s.trace_prompts, s.bucket, s.free_max),
        (2048, 1, 256, 256)
    );
    assert_eq!(s.docs, None);
    assert_eq!(s.minutes, 60.0);
    assert_eq!(configs(&s).len(), 13);
    assert_eq!(configs(&s)[0], "none");
    let q = settings(&["--quick", "--tasks", "vt,niah"]).unwrap();
    assert_eq!(q.budgets, vec![32, 64]);
    assert_eq!(q.docs, Some(1));
    assert_eq!(q.tasks, vec![Task::Niah, Task::Vt]);
    assert_eq!((q.trace_tokens, q.bucket, q.free_max), (48, 8, 0));
}

#[test]
fn rejects_bad_options() {
    assert!(settings(&["--budgets", "4"]).is_err());
    assert!(settings(&["--policies", "none"]).is_err());
    assert!(settings(&["--docs", "0"]).is_err());
    assert!(settings(&["--trace-prompts", "25"]).is_err());
    assert_eq!(
        settings(&["--trace-prompts", "24"]).unwrap().trace_prompts,
        24
    );
    assert!(settings(&["--tasks", "bogus"]).is_err());
    assert!(settings(&["--extra", "x"]).is_err());
    let e = settings(&["--policies", "beacon/score"]).unwrap_err();
    assert!(e.contains("beacon/score"), "{e}");
    let e = settings(&["--policies", "rkv,rkv"]).unwrap_err();
    assert!(e.contains("twice"), "{e}");
}

#[test]
fn policy_entries_carry_spec_keys() {
    let s = settings(&[
        "--policies",
        "beacon/score=prob,rkv",
        "--budgets",
        "64",
        "--extra",
        "span=3",
    ])
    .unwrap();
    assert_eq!(
        configs(&s),
        vec!["none", "beacon:64/score=prob/span=3", "rkv:64/span=3"]
    );
}

#[test]
fn eval_arguments() {
    let s = settings(&["--quick", "--extra", "span=3", "--", "-fa", "on"]).unwrap();
    let a = base_args(
        &s,
        "trace",
        Path::new("/m.gguf"),
        Path::new("/o/t.jsonl"),
        Path::new("/o/t.json"),
    )
    .join(" ");
    assert!(
        a.starts_with("--mode trace --configs none,beacon:32/span=3,beacon:64/span=3,"),
        "{a}"
    );
    assert!(
        a.contains("--tasks /o/t.jsonl --out /o/t.json -m /m.gguf -t 2"),
        "{a}"
    );
    assert!(
        a.ends_with("--chunk 4 --n-tokens 48 --bucket 8 --free-max 0 -fa on"),
        "{a}"
    );
    let c = base_args(
        &s,
        "count",
        Path::new("/m"),
        Path::new("/i"),
        Path::new("/o"),
    )
    .join(" ");
    assert!(c.starts_with("--mode count --configs none "), "{c}");
}

fn row(doc: &Doc, q: usize, config: &str, output: &str) -> EvalTaskRow {
    let (policy, budget) = match config.split_once(':') {
        Some((p, b)) => (p.to_string(), b.split('/').next().unwrap().parse().unwrap()),
        None => (config.to_string(), 0),
    };
    EvalTaskRow {
        id: doc.id.clone(),
        question: q,
        config: config.into(),
        policy,
        budget,
        n_doc: 300,
        n_question: 30,
        n_gen: 5,
        stopped: true,
        output: output.into(),
        cells_doc: 64,
        cells_peak: 64,
        evicted: 10,
        compress_events: 2,
        plugin_ms: 1.0,
        prefill_ms: 100.0,
        answer_ms: 10.0,
    }
}

#[test]
fn scoring_rows_and_tables() {
    let docs = vec![
        tasks::generate(Task::Niah, 256, 0, 1, 4.0),
        tasks::generate(Task::Multikey, 256, 0, 1, 4.0),
    ];
    let cfgs: Vec<String> = vec!["none".into(), "beacon:64".into()];
    let mut rows = Vec::new();
    for d in &docs {
        for (qi, q) in d.questions.iter().enumerate() {
            rows.push(row(d, qi, "none", &q.reference));
            rows.push(row(
                d,
                qi,
                "beacon:64",
                if qi == 0 { &q.reference } else { "no idea" },
            ));
        }
    }
    let scored = score_rows(&docs, rows.clone(), &cfgs).unwrap();
    assert_eq!(scored.len(), 2 * (1 + 4));
    let acc = aggregate(&scored);
    assert_eq!(acc[&(Task::Multikey, 0, "none".into(), 0)].k, 4);
    assert_eq!(acc[&(Task::Multikey, 256, "beacon".into(), 64)].k, 1);
    assert_eq!(acc[&(Task::Multikey, 256, "beacon".into(), 64)].n, 4);
    let t = task_table(&acc, Task::Multikey, 0, &["beacon".into()], &[64]);
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines[0], "| policy | 64 | full cache |");
    assert_eq!(lines[2], "| beacon | 25% [5–70] (1/4) | – |");
    assert_eq!(lines[3], "| none | – | 100% [51–100] (4/4) |");
    let f = full_cache_table(&acc, &[Task::Niah, Task::Multikey], &[256]);
    assert!(
        f.contains("| niah | 100% [21–100] (1/1) | 100% [21–100] (1/1) |"),
        "{f}"
    );
    let csv = accuracy_csv(&acc);
    assert!(csv.contains("multikey,all,beacon,64,1,4,0.2500,"), "{csv}");
    let tcsv = tasks_csv(&scored);
    assert_eq!(tcsv.lines().next().unwrap(), TASK_CSV_COLUMNS.join(","));
    assert_eq!(tcsv.lines().count(), 1 + scored.len());

    // missing, duplicate and malformed rows are errors
    assert!(score_rows(&docs, rows[1..].to_vec(), &cfgs)
        .unwrap_err()
        .contains("no row"));
    let mut dup = rows.clone();
    dup.push(rows[0].clone());
    assert!(score_rows(&docs, dup, &cfgs)
        .unwrap_err()
        .contains("2 rows"));
    let mut bad = rows.clone();
    bad[0].n_doc = 0;
    assert!(score_rows(&docs, bad, &cfgs)
        .unwrap_err()
        .contains("malformed"));
    let mut unknown = rows;
    unknown[0].id = "nope".into();
    assert!(score_rows(&docs, unknown, &cfgs).is_err());
}

/// Two entries of one policy that differ in spec keys (the prompt policy) are counted apart.
#[test]
fn entries_that_differ_in_spec_keys_are_counted_apart() {
    assert_eq!(
        policy_entry("beacon:512/prompt=inside"),
        "beacon/prompt=inside"
    );
    assert_eq!(policy_entry("beacon:512"), "beacon");
    assert_eq!(policy_entry("none"), "none");
    let docs = vec![tasks::generate(Task::Niah, 256, 0, 1, 4.0)];
    let cfgs: Vec<String> = vec![
        "none".into(),
        "beacon:64".into(),
        "beacon:64/prompt=inside".into(),
    ];
    let q = &docs[0].questions[0];
    let rows = vec![
        row(&docs[0], 0, "none", &q.reference),
        row(&docs[0], 0, "beacon:64", &q.reference),
        row(&docs[0], 0, "beacon:64/prompt=inside", "no idea"),
    ];
    let acc = aggregate(&score_rows(&docs, rows, &cfgs).unwrap());
    assert_eq!(acc[&(Task::Niah, 0, "beacon".into(), 64)].k, 1);
    assert_eq!(
        acc[&(Task::Niah, 0, "beacon/prompt=inside".into(), 64)].k,
        0
    );
    assert_eq!(
        acc[&(Task::Niah, 0, "beacon/prompt=inside".into(), 64)].n,
        1
    );
}

fn trace_fixture() -> TraceRun {
    let bucket = |from, to, top1, kl| Bucket {
        from,
        to,
        n: to - from,
        top1,
        kl,
    };
    let mk = |config: &str, policy: &str, budget, top1, first, free| TraceRow {
        id: "p".into(),
        config: config.into(),
        policy: policy.into(),
        budget,
        n_tokens: 16,
        top1,
        kl: 0.5,
        first_mismatch: first,
        diverge_free: free,
        free_limit: 16,
        buckets: vec![bucket(0, 8, 1.0, 0.0), bucket(8, 16, 2.0 * top1 - 1.0, 1.0)],
        cells_peak: 32,
        evicted: 4,
        compress_events: 1,
        plugin_ms: 1.0,
        decode_ms: 2.0,
    };
    TraceRun {
        prompts: vec![TracePrompt {
            id: "p".into(),
            n_prompt: 20,
            n_tokens: 16,
            first_eog: -1,
            ref_ms: 5.0,
            text: "x".into(),
        }],
        rows: vec![
            mk("none", "none", 0, 1.0, -1, None),
            mk("beacon:32", "beacon", 32, 0.75, 9, Some(16)),
        ],
    }
}

#[test]
fn trace_tables_and_checks() {
    let t = trace_fixture();
    let cfgs: Vec<String> = vec!["none".into(), "beacon:32".into()];
    check_trace(&t, 1, &cfgs, 16, true).unwrap();
    assert!(check_trace(&t, 2, &cfgs, 16, true).is_err());
    assert!(check_trace(&t, 1, &["none".into(), "recent:32".into()], 16, true).is_err());
    let table = trace_table(&t, &cfgs);
    assert!(
        table.contains("| none | 1.000 | 0.5000 | none | – |"),
        "{table}"
    );
    assert!(
        table.contains("| beacon:32 | 0.750 | 0.5000 | 9 | ≥16 |"),
        "{table}"
    );
    let b = bucket_table(&t, &cfgs, false);
    assert!(b.starts_with("| config | 0–7 | 8–15 |"), "{b}");
    assert!(b.contains("| beacon:32 | 1.000 | 0.500 |"), "{b}");
    let csv = trace_csv(&t);
    assert_eq!(csv.lines().count(), 1 + 4);
    assert!(
        csv.contains("p,beacon:32,beacon,32,8,16,8,0.5,1,9,16,16"),
        "{csv}"
    );
    let mut bad = t.clone();
    bad.rows[1].diverge_free = None;
    assert!(check_trace(&bad, 1, &cfgs, 16, true).is_err());
    // without free runs a compressed row carries none
    check_trace(&bad, 1, &cfgs, 16, false).unwrap();
}

#[test]
fn free_runs_can_be_left_out() {
    let s = settings(&["--no-free-run"]).unwrap();
    assert!(!s.free_runs);
    let a = base_args(&s, "trace", Path::new("m"), Path::new("i"), Path::new("o"));
    let i = a.iter().position(|x| x == "--free-max").unwrap();
    assert_eq!(a[i + 1], "-1");
    let d = settings(&[]).unwrap();
    let a = base_args(&d, "trace", Path::new("m"), Path::new("i"), Path::new("o"));
    let i = a.iter().position(|x| x == "--free-max").unwrap();
    assert_eq!(a[i + 1], "256");
    assert!(settings(&["--no-free-run", "--free-max", "8"]).is_err());
}

#[test]
fn trace_calls_carry_the_runs_chunk() {
    let s = settings(&["--budgets", "128,1024"]).unwrap();
    let a = base_args(&s, "trace", Path::new("m"), Path::new("i"), Path::new("o"));
    let i = a.iter().position(|x| x == "--chunk").unwrap();
    assert_eq!(a[i + 1], "16");
}

#[test]
fn trace_chunk_follows_the_smallest_budget() {
    assert_eq!(trace_chunk(&settings(&[]).unwrap()), 32);
    assert_eq!(
        trace_chunk(&settings(&["--budgets", "128,512"]).unwrap()),
        16
    );
    assert_eq!(
        trace_chunk(&settings(&["--budgets", "1024", "--chunk", "48"]).unwrap()),
        48
    );
    assert_eq!(trace_chunk(&settings(&["--budgets", "8"]).unwrap()), 1);
}

/// Two prompts × (none, beacon:32, recent:32), the first prompt closer with beacon.
fn two_prompt_trace() -> TraceRun {
    let mut t = trace_fixture();
    let mut second = t.clone();
    second.prompts[0].id = "q".into();
    second.rows.iter_mut().for_each(|r| r.id = "q".into());
    let mut recent: Vec<TraceRow> = t
        .rows
        .iter()
        .chain(second.rows.iter())
        .filter(|r| r.policy == "beacon")
        .cloned()
        .collect();
    for r in &mut recent {
        r.config = "recent:32".into();
        r.policy = "recent".into();
        r.top1 -= 0.1;
        r.kl += 0.1;
    }
    t.prompts.extend(second.prompts);
    t.rows.extend(second.rows);
    t.rows.extend(recent);
    t
}

#[test]
fn pairs_count_prompts_each_policy_is_closer_on() {
    let t = two_prompt_trace();
    let table = trace_pairs_table(&t, &["beacon".into(), "recent".into()], &[32], "");
    assert!(
        table.contains("| beacon | recent | 32 | 2 | 2 | 0 | p = 0.500 | 2 | 0 | p = 0.500 |"),
        "{table}"
    );
    let flipped = trace_pairs_table(&t, &["recent".into(), "beacon".into()], &[32], "");
    assert!(
        flipped.contains("| recent | beacon | 32 | 2 | 0 | 2 | p = 0.500 | 0 | 2 | p = 0.500 |"),
        "{flipped}"
    );
}

/// What `beaconkv-eval --mode trace` would write for prompt `id` and `configs`: the fixture's
/// rows, a compressed config's row copied from `beacon:32`'s; `answer` is the full cache's text.
fn fake_trace_file(id: &str, configs: &[String], answer: &str) -> Value {
    let t = trace_fixture();
    let mut prompt = t.prompts[0].clone();
    prompt.id = id.into();
    prompt.text = answer.into();
    let rows: Vec<TraceRow> = configs
        .iter()
        .map(|c| {
            let mut r = t.rows[if c == "none" { 0 } else { 1 }].clone();
            r.id = id.into();
            r.config = c.clone();
            r.policy = c.split(':').next().unwrap().into();
            r
        })
        .collect();
    serde_json::json!({"mode": "trace", "chunk": 4, "prompts": [prompt], "results": rows})
}

type Calls = Vec<(String, Vec<String>)>;

/// One trace run over `dir` with a stand-in for `beaconkv-eval` whose full cache answers
/// `answer`: it writes each call's file as the driver's call would; returns the run and its calls
/// (file stem, configs).
fn resume(
    list: &[(&str, &str)],
    cfgs: &[String],
    want: TraceWant,
    dir: &Path,
    answer: &str,
) -> (Result<TraceRun, String>, Calls) {
    let mut calls = Vec::new();
    let got = run_trace_prompts(list, cfgs, want, dir, |id, _, stem, only| {
        calls.push((stem.to_string(), only.to_vec()));
        let v = fake_trace_file(id, only, answer);
        std::fs::write(dir.join(format!("{stem}.json")), v.to_string()).unwrap();
        Ok(v)
    });
    (got, calls)
}

#[test]
fn trace_prompts_resume_from_their_files() {
    let dir = std::env::temp_dir().join(format!("bkv-trace-resume-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let want = |n_tokens, chunk| TraceWant {
        n_tokens,
        free_runs: true,
        chunk,
    };
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<String>>();
    let cfgs = s(&["none", "beacon:32", "recent:32"]);

    // prompt p finished in an earlier sitting; q did not
    let p0 = fake_trace_file("p", &cfgs, "answer");
    std::fs::write(dir.join("trace-p.json"), p0.to_string()).unwrap();
    let (got, calls) = resume(
        &[("p", "P"), ("q", "Q")],
        &cfgs,
        want(16, 4),
        &dir,
        "answer",
    );
    assert_eq!(calls, vec![("trace-q".to_string(), cfgs.clone())]);
    check_trace(&got.unwrap(), 2, &cfgs, 16, true).unwrap();

    // more configs: only the missing one runs, into the next file, and the rows merge
    let more = s(&["none", "beacon:32", "recent:32", "streaming:32"]);
    let (got, calls) = resume(&[("p", "P")], &more, want(16, 4), &dir, "answer");
    assert_eq!(
        calls,
        vec![("trace-p.1".to_string(), s(&["none", "streaming:32"]))]
    );
    let got = got.unwrap();
    check_trace(&got, 1, &more, 16, true).unwrap();
    // and a third run reads both files back without running anything
    let (again, calls) = resume(&[("p", "P")], &more, want(16, 4), &dir, "answer");
    assert!(calls.is_empty());
    assert_eq!(again.unwrap(), got);

    // files of another trace length or chunk do not count: everything runs again
    for other in [want(32, 4), want(16, 8)] {
        let (_, calls) = resume(&[("p", "P")], &cfgs, other, &dir, "answer");
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].1, cfgs);
    }

    // a new call whose full cache answered otherwise cannot be paired with the old rows
    let dir2 = dir.join("other");
    std::fs::create_dir_all(&dir2).unwrap();
    std::fs::write(dir2.join("trace-p.json"), p0.to_string()).unwrap();
    let (got, _) = resume(&[("p", "P")], &more, want(16, 4), &dir2, "another answer");
    let e = got.unwrap_err();
    assert!(e.contains("differently"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn parses_the_tools_json() {
    let v: Value = serde_json::from_str(r#"{"mode": "trace", "n_tokens": 16, "prompts": [{"id": "p", "n_prompt": 20, "n_tokens": 16, "first_eog": 3, "ref_ms": 1.5, "text": "abc"}], "results": [{"id": "p", "config": "none", "policy": "none", "budget": 0, "n_tokens": 16, "top1": 1.0, "kl": 0.0, "first_mismatch": -1, "diverge_free": null, "free_limit": 16, "buckets": [{"from": 0, "to": 16, "n": 16, "top1": 1.0, "kl": 0.0}], "cells_peak": 40, "evicted": 0, "compress_events": 0, "plugin_ms": 0, "decode_ms": 3}]}"#).unwrap();
    let t = parse_trace(&v).unwrap();
    assert_eq!(t.prompts[0].first_eog, 3);
    assert_eq!(t.rows[0].diverge_free, None);
    let task: Value = serde_json::from_str(r#"{"mode": "task", "results": [{"id": "niah-256-0", "question": 0, "config": "beacon:32", "policy": "beacon", "budget": 32, "n_doc": 300, "n_question": 30, "n_gen": 4, "stopped": true, "output": " 1234567", "cells_doc": 30, "cells_peak": 33, "evicted": 270, "compress_events": 60, "plugin_ms": 3.5, "prefill_ms": 800.0, "answer_ms": 90.0}]}"#).unwrap();
    let rows: Vec<EvalTaskRow> = results_of(&task, "task").unwrap();
    assert_eq!(rows[0].output, " 1234567");
}

#[test]
fn trace_table_gives_the_median_over_many_prompts() {
    let one = trace_fixture();
    let mut t = TraceRun::default();
    for (i, first) in [9, 3, 12, 5].into_iter().enumerate() {
        let mut p = one.clone();
        let id = format!("p{i}");
        p.prompts[0].id = id.clone();
        for r in &mut p.rows {
            r.id = id.clone();
            if r.policy != "none" {
                r.first_mismatch = first;
                r.diverge_free = None;
            }
        }
        t.prompts.extend(p.prompts);
        t.rows.extend(p.rows);
    }
    let table = trace_table(&t, &["none".into(), "beacon:32".into()]);
    // misses 3, 5, 9, 12: the upper median; a prompt never missed counts its whole length
    assert!(
        table.contains("| beacon:32 | 0.750 | 0.5000 | median 9 of 4 | – |"),
        "{table}"
    );
    assert!(
        table.contains("| none | 1.000 | 0.5000 | median 16 of 4 | – |"),
        "{table}"
    );
}
