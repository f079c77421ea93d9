//! Runs beaconkv-bench end to end against tests/fake-eval.sh (a stand-in for beaconkv-eval), so
//! the orchestration, tables, CSV/JSON and plots are tested without llama.cpp.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fake_eval() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake-eval.sh")
}

fn tmpdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("beaconkv-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The agree/revisit text: Debian's GPL-3 (the default) when present, else this crate's manifest.
fn text_args() -> Vec<String> {
    if Path::new("/usr/share/common-licenses/GPL-3").is_file() {
        vec![]
    } else {
        vec![
            "--text".into(),
            concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml").into(),
        ]
    }
}

fn bench(out: &Path, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_beaconkv-bench"));
    cmd.arg("--eval")
        .arg(fake_eval())
        .args(["--quick", "-m", "/dev/null", "--out"])
        .arg(out);
    cmd.args(text_args()).args(extra);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run beaconkv-bench")
}

fn non_empty(path: &Path) -> bool {
    std::fs::metadata(path)
        .map(|m| m.len() > 0)
        .unwrap_or(false)
}

#[test]
fn quick_run_with_fake_eval() {
    let out = tmpdir("quick");
    let started = std::time::Instant::now();
    let o = bench(&out, &[], &[]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success(),
        "bench failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    eprintln!(
        "quick run of the fake tool: {:.2} s",
        started.elapsed().as_secs_f64()
    );

    for f in [
        "quality_vs_budget.png",
        "revisit_ppl_vs_budget.png",
        "speed_vs_context.png",
        "kv_bytes_vs_context.png",
    ] {
        let p = out.join(f);
        assert!(non_empty(&p), "{f} missing or empty");
        assert_eq!(
            &std::fs::read(&p).unwrap()[..8],
            b"\x89PNG\r\n\x1a\n",
            "{f} is not a PNG"
        );
    }
    for f in [
        "results.csv",
        "results.json",
        "summary.md",
        "agree.json",
        "revisit.json",
        "passkey.json",
        "speed.json",
    ] {
        assert!(non_empty(&out.join(f)), "{f} missing or empty");
    }

    // CSV: header + one row per result of every mode (6 policies x 2 budgets for agree/revisit,
    // +none for passkey at one depth, speed: none, beacon and beacon+archive with its three element
    // types at 2 lengths + the none:64 limit).
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    let count = |m: &str| {
        csv.lines()
            .filter(|l| l.starts_with(&format!("{m},")))
            .count()
    };
    assert_eq!(count("agree"), 12);
    assert_eq!(count("revisit"), 12);
    assert_eq!(count("passkey"), 13);
    assert_eq!(count("speed"), 11);

    // results.json: every mode, command line, model and machine.
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(doc["model"], "/dev/null");
    assert!(doc["command_line"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a == "--quick"));
    assert!(doc["machine"]["arch"]
        .as_str()
        .is_some_and(|s| !s.is_empty()));
    assert!(doc["machine"]["nproc"].as_u64().is_some_and(|n| n > 0));
    let modes: Vec<&str> = doc["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["mode"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["agree", "revisit", "passkey", "speed"]);
    assert_eq!(doc["runs"][1]["data"]["results"][0]["config"], "beacon:32");

    // Tables on stdout and in summary.md; the tool's non-progress stderr went to the logs.
    assert!(stdout.contains("| policy | 32 | 64 |"), "{stdout}");
    assert!(stdout.contains("(ref 8.50)"), "{stdout}");
    assert!(stdout.contains("| none | – | – | 100% (1/1) |"), "{stdout}");
    assert!(stdout.contains("| 256 | beacon:64 |"), "{stdout}");
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(summary.contains("| beacon | 0.87"), "{summary}");
    let log = std::fs::read_to_string(out.join("agree.log")).unwrap();
    assert!(
        log.contains("loaded meta data (fake)") && !log.contains("progress "),
        "{log}"
    );
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn failing_tool_is_reported_with_its_log() {
    let out = tmpdir("fail");
    let o = bench(
        &out,
        &["--only", "agree,passkey"],
        &[("FAKE_EVAL_FAIL", "passkey")],
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        stderr.contains("beaconkv-eval failed for passkey"),
        "{stderr}"
    );
    assert!(stderr.contains("llama_decode returned -1"), "{stderr}");
    // What finished before the failure is still saved.
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert_eq!(csv.lines().filter(|l| l.starts_with("agree,")).count(), 12);
    assert!(out.join("quality_vs_budget.png").is_file());
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn missing_eval_is_a_clear_error() {
    let out = tmpdir("noeval");
    let o = Command::new(env!("CARGO_BIN_EXE_beaconkv-bench"))
        .args([
            "--quick",
            "-m",
            "/dev/null",
            "--eval",
            "/nonexistent/beaconkv-eval",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("beaconkv-eval not found at /nonexistent/beaconkv-eval"),
        "{stderr}"
    );
    assert!(!out.exists(), "no output folder before the run can start");
}

#[test]
fn tasks_quick_run_with_fake_eval() {
    let out = tmpdir("tasks");
    let o = Command::new(env!("CARGO_BIN_EXE_beaconkv-bench"))
        .args(["tasks", "--quick", "-m", "/dev/null", "--eval"])
        .arg(fake_eval())
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run beaconkv-bench tasks");
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success(),
        "bench tasks failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stderr.contains("characters per token"), "{stderr}");
    for f in [
        "summary.md",
        "results.json",
        "tasks.csv",
        "accuracy.csv",
        "trace.csv",
        "task-0.jsonl",
        "accuracy_niah.png",
        "accuracy_chain.png",
        "trace_top1_32.png",
        "trace_kl_64.png",
    ] {
        assert!(non_empty(&out.join(f)), "{f} missing or empty");
    }
    // The fake answers right for none and beacon only: the scorer must see exactly that.
    assert!(
        stdout.contains("| niah | 100% [21–100] (1/1) | 100% [21–100] (1/1) |"),
        "{stdout}"
    );
    assert!(
        stdout.contains("| beacon | 100% [51–100] (4/4) | 100% [51–100] (4/4) | – |"),
        "{stdout}"
    );
    assert!(
        stdout.contains("| recent | 0% [0–66] (0/2) | 0% [0–66] (0/2) | – |"),
        "{stdout}"
    );
    assert!(
        stdout.contains("| beacon:64 | 0.900 | 0.0500 | 16 | 16 |"),
        "{stdout}"
    );
    // one CSV row per question and config: (1 + 4 + 2 + 2) questions x 9 configs
    let csv = std::fs::read_to_string(out.join("tasks.csv")).unwrap();
    let rows = csv
        .lines()
        .filter(|l| l.starts_with(|c: char| c.is_ascii_lowercase()) && !l.starts_with("task,"))
        .count();
    assert!(rows >= 9 * 9, "{rows} rows\n{csv}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(doc["tasks"].as_array().unwrap().len(), 9 * 9);
    assert!(doc["failed"].is_null());
    assert_eq!(doc["trace"]["prompts"][0]["id"], "short");
    assert!(doc["seconds_per_document"]["niah@160"].as_f64().is_some());
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn tasks_failing_tool_is_reported() {
    let out = tmpdir("tasks-fail");
    let o = Command::new(env!("CARGO_BIN_EXE_beaconkv-bench"))
        .args(["tasks", "--quick", "-m", "/dev/null", "--eval"])
        .arg(fake_eval())
        .arg("--out")
        .arg(&out)
        .env("FAKE_EVAL_FAIL", "trace")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        stderr.contains("beaconkv-eval failed for trace"),
        "{stderr}"
    );
    // the task round before the failure is kept
    let csv = std::fs::read_to_string(out.join("tasks.csv")).unwrap();
    assert!(csv.lines().count() > 1, "{csv}");
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn tasks_fill_the_time_budget() {
    // A 6-second budget: after the first round, documents are added one at a time while their
    // measured cost (the fake's 13 x 44 ms) still fits.
    let out = tmpdir("tasks-budget");
    let started = std::time::Instant::now();
    let o = Command::new(env!("CARGO_BIN_EXE_beaconkv-bench"))
        .args([
            "tasks",
            "-m",
            "/dev/null",
            "--only",
            "task",
            "--tasks",
            "niah",
            "--lengths",
            "160",
            "--minutes",
            "0.1",
            "--eval",
        ])
        .arg(fake_eval())
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(stderr.contains("time budget reached"), "{stderr}");
    assert!(started.elapsed().as_secs_f64() < 20.0);
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let n = doc["tasks"].as_array().unwrap().len();
    assert!(
        n >= 2 * 13 && n.is_multiple_of(13),
        "{n} rows: more than one document, all 13 configs"
    );
    assert!(out.join("task-1-niah-160.json").is_file());
    std::fs::remove_dir_all(&out).unwrap();
}

fn reason(out: &Path, args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_beaconkv-bench"));
    cmd.args(["reason", "-m", "/dev/null", "--eval"])
        .arg(fake_eval())
        .arg("--out")
        .arg(out)
        .args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd.output().expect("run beaconkv-bench reason");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn result_lines(out: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(out.join("results.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn reason_quick_run_with_fake_eval() {
    let out = tmpdir("reason-quick");
    let (ok, stdout, stderr) = reason(&out, &["--quick"], &[]);
    assert!(
        ok,
        "bench reason failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    for f in [
        "summary.md",
        "accuracy.csv",
        "conversations.jsonl",
        "results.jsonl",
        "accuracy.png",
        "length.png",
    ] {
        assert!(non_empty(&out.join(f)), "{f} missing or empty");
    }
    assert!(
        stderr.contains("resume check: rerunning conversation 1"),
        "{stderr}"
    );
    // 2 conversations x (the full cache + 7 policies x 2 budgets), each once after the resume check
    let rows = result_lines(&out);
    assert_eq!(rows.len(), 2 * 15);
    // the fake works every turn out from its wording: the full cache and beacon get all three
    // turns right, the others all but the last; 3 turns of 12 tokens are under 4 x 64
    assert!(
        stdout.contains(
            "| none (full cache) | 100% [34–100] (2/2), turns 100% [61–100] (6/6), 36 tok |"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "| beacon/score=logit | 100% [34–100] (2/2), turns 100% [61–100] (6/6), 36 tok * |"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "| rkv | 0% [0–66] (0/2), turns 67% [30–90] (4/6), 36 tok * | 0% [0–66] (0/2), turns 67% [30–90] (4/6), 36 tok * |"
        ),
        "{stdout}"
    );
    let csv = std::fs::read_to_string(out.join("accuracy.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 15, "{csv}");
    assert!(csv.contains("\nrecent/score=logit,64,0,2,0.0000,"), "{csv}");
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(summary.contains("## Per cell"), "{summary}");
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn reason_resumes_after_a_failure_and_refuses_other_settings() {
    let out = tmpdir("reason-resume");
    let args = [
        "--conversations",
        "3",
        "--turns",
        "3",
        "--steps",
        "1",
        "--n-tokens",
        "16",
        "--parallel",
        "2",
        "--budgets",
        "64",
        "--policies",
        "beacon,recent",
    ];
    // the tool dies after its first conversation: that one is kept
    let (ok, _, stderr) = reason(&out, &args, &[("FAKE_EVAL_FAIL", "reason")]);
    assert!(!ok);
    assert!(stderr.contains("llama_decode returned -1"), "{stderr}");
    let rows = result_lines(&out);
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0]["conversation"].as_str(), rows[0]["policy"].as_str()),
        (Some("conversation-0"), Some("none"))
    );
    assert_eq!(rows[0]["correct"], true);
    // the rerun does the other 8 (conversation, cell) pairs, once each
    let (ok, stdout, stderr) = reason(&out, &args, &[]);
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("1 conversations done, 8 to run"),
        "{stderr}"
    );
    let rows = result_lines(&out);
    let keys: std::collections::BTreeSet<String> = rows
        .iter()
        .map(|r| format!("{} {} {}", r["conversation"], r["policy"], r["budget"]))
        .collect();
    assert_eq!((rows.len(), keys.len()), (9, 9));
    assert!(
        stdout.contains("| recent | 0% [0–56] (0/3), turns 67% [35–88] (6/9), 36 tok * |"),
        "{stdout}"
    );
    // nothing left: a third run only writes the tables
    let (ok, _, stderr) = reason(&out, &args, &[]);
    assert!(
        ok && stderr.contains("9 conversations done, 0 to run"),
        "{stderr}"
    );
    assert_eq!(result_lines(&out).len(), 9);
    // more conversations: only the new one runs, in every cell
    let mut more = args.to_vec();
    more[1] = "4";
    let (ok, _, stderr) = reason(&out, &more, &[]);
    assert!(
        ok && stderr.contains("9 conversations done, 3 to run"),
        "{stderr}"
    );
    assert_eq!(result_lines(&out).len(), 12);
    // answers of other settings in the folder are refused, and nothing is run
    let mut other = args.to_vec();
    other[7] = "20";
    let (ok, _, stderr) = reason(&out, &other, &[]);
    assert!(
        !ok && stderr.contains("answers of other settings"),
        "{stderr}"
    );
    assert_eq!(result_lines(&out).len(), 12);
    // a policy the tool does not know, given by name, is an error
    let (ok, _, stderr) = reason(&out, &["--policies", "bogus"], &[]);
    assert!(
        !ok && stderr.contains("'bogus' is not accepted"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&out).unwrap();
}
