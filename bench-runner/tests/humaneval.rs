//! Runs `beaconkv-bench humaneval` end to end against tests/fake-humaneval-eval.py (a stand-in
//! for beaconkv-eval's reason mode) on four made-up problems, with the real sandbox: the quick
//! run's checks, resuming after the tool fails, refusing other settings, the tables.

use std::path::{Path, PathBuf};
use std::process::Command;

fn tmpdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("beaconkv-bench-he-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Problems 0, 1 (tuning) and 100, 101 (held-out); each docstring holds the body the fake writes.
fn data(dir: &Path) -> PathBuf {
    let p = |n: u32, entry: &str, body: &str, test: &str| {
        serde_json::json!({
            "task_id": format!("HumanEval/{n}"),
            "prompt": format!("from typing import List\n\n\ndef {entry}(x: int) -> int:\n    \"\"\"Problem {n}. Body: {body}\n    >>> {entry}(2)\n    \"\"\"\n"),
            "entry_point": entry,
            "canonical_solution": format!("    {body}\n"),
            "test": format!("\n\nMETADATA = {{}}\n\n\ndef check(candidate):\n    {test}\n"),
        })
        .to_string()
    };
    let text = [
        p(0, "double", "return 2 * x", "assert candidate(2) == 4"),
        p(1, "inc", "return x + 1", "assert candidate(2) == 3"),
        p(100, "dec", "return x - 1", "assert candidate(2) == 1"),
        p(101, "triple", "return 3 * x", "assert candidate(2) == 6"),
    ]
    .join("\n");
    let f = dir.join("HumanEval.jsonl");
    std::fs::write(&f, text + "\n").unwrap();
    f
}

fn has_python() -> bool {
    Command::new("python3")
        .args(["-c", "import resource"])
        .status()
        .is_ok_and(|s| s.success())
}

fn humaneval(
    out: &Path,
    data: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (bool, String, String) {
    let fake = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake-humaneval-eval.py");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_beaconkv-bench"));
    cmd.args(["humaneval", "-m", "/dev/null", "--eval"])
        .arg(fake)
        .arg("--data")
        .arg(data)
        .arg("--out")
        .arg(out)
        .args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd.output().expect("run beaconkv-bench humaneval");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn rows(out: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(out.join("results.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn humaneval_quick_run_with_fake_eval() {
    if !has_python() {
        eprintln!("skipped: no python3 with the resource module");
        return;
    }
    let dir = tmpdir("quick");
    let data = data(&dir);
    let out = dir.join("out");
    let (ok, stdout, stderr) = humaneval(&out, &data, &["--quick"], &[]);
    assert!(
        ok,
        "bench humaneval failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stderr.contains("sandbox check: 4 canonical solutions pass"),
        "{stderr}"
    );
    assert!(
        stderr.contains("resume check: rerunning heldout-0"),
        "{stderr}"
    );
    for f in [
        "summary.md",
        "accuracy.csv",
        "mcnemar.csv",
        "bundles.jsonl",
        "results.jsonl",
        "runs.jsonl",
        "accuracy-tune.png",
        "accuracy-heldout.png",
        "length.png",
    ] {
        let m = std::fs::metadata(out.join(f));
        assert!(m.is_ok_and(|m| m.len() > 0), "{f} missing or empty");
    }
    // 2 bundles x (the full cache + 2 policies x 2 budgets), each once after the resume check
    let r = rows(&out);
    assert_eq!(r.len(), 2 * 5);
    // the fake writes every function with the full cache and beacon, only the first with streaming
    assert!(
        stdout.contains("| none (full cache) | – | 100% [34–100] (2/2) | 100% [34–100] (2/2) | 100% [21–100] (1/1) | 100% [21–100] (1/1) |"),
        "{stdout}"
    );
    assert!(
        stdout.contains("| streaming | 32 | 50% [9–91] (1/2) | 50% [9–91] (1/2) | 0% [0–79] (0/1) | 0% [0–79] (0/1) |"),
        "{stdout}"
    );
    let streaming = r
        .iter()
        .find(|x| x["policy"] == "streaming" && x["bundle"] == "tune-0")
        .unwrap();
    assert_eq!(streaming["passed"], serde_json::json!([true, false]));
    assert_eq!(streaming["reasons"][1], "assertion");
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(
        summary.contains("| beacon/score=prob vs streaming | 32 |"),
        "{summary}"
    );
    assert!(
        summary.contains("| full cache vs streaming | 64 | −1 +0, p=1.00 (n=2) |"),
        "{summary}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn humaneval_resumes_after_a_failure_and_refuses_other_settings() {
    if !has_python() {
        eprintln!("skipped: no python3 with the resource module");
        return;
    }
    let dir = tmpdir("resume");
    let data = data(&dir);
    let out = dir.join("out");
    let args = [
        "--bundle-size",
        "1",
        "--n-tokens",
        "200",
        "--parallel",
        "2",
        "--budgets",
        "64",
        "--policies",
        "beacon,rkv",
    ];
    // the tool dies after its first answer: that one is kept
    let (ok, _, stderr) = humaneval(&out, &data, &args, &[("FAKE_EVAL_FAIL", "reason")]);
    assert!(!ok);
    assert!(stderr.contains("llama_decode returned -1"), "{stderr}");
    let r = rows(&out);
    assert_eq!(r.len(), 1);
    assert_eq!(
        (r[0]["bundle"].as_str(), r[0]["policy"].as_str()),
        (Some("tune-0"), Some("none"))
    );
    // the rerun does the other 11 (bundle, cell) pairs: 4 bundles of one function x 3 cells
    let (ok, stdout, stderr) = humaneval(&out, &data, &args, &[]);
    assert!(ok, "{stderr}");
    assert!(stderr.contains("1 bundles done, 11 to run"), "{stderr}");
    assert_eq!(rows(&out).len(), 12);
    // one function per bundle: every policy writes it; 104 tokens are under 4 x 64
    assert!(
        stdout.contains("| rkv | 64 * | 100% [34–100] (2/2) | 100% [34–100] (2/2) |"),
        "{stdout}"
    );
    // nothing left
    let (ok, _, stderr) = humaneval(&out, &data, &args, &[]);
    assert!(
        ok && stderr.contains("12 bundles done, 0 to run"),
        "{stderr}"
    );
    // one split only: its column alone
    let mut tune = args.to_vec();
    tune.extend(["--split", "tune"]);
    let (ok, stdout, _) = humaneval(&out, &data, &tune, &[]);
    assert!(
        ok && stdout.contains("tuning (0–99)") && !stdout.contains("held-out"),
        "{stdout}"
    );
    // other settings are refused and nothing runs
    let mut other = args.to_vec();
    other[3] = "100";
    let (ok, _, stderr) = humaneval(&out, &data, &other, &[]);
    assert!(
        !ok && stderr.contains("answers of other settings"),
        "{stderr}"
    );
    assert_eq!(rows(&out).len(), 12);
    let (ok, _, stderr) = humaneval(&out, &data, &["--policies", "bogus"], &[]);
    assert!(
        !ok && stderr.contains("'bogus' is not accepted"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
