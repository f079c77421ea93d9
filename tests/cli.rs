//! The command-line tool, end to end on the tiny model: compressed generation, the JSON summary,
//! flag and environment handling, and clear errors for bad values.
#![cfg(feature = "e2e")]

mod common_e2e;

use common_e2e::*;
use serde_json::Value;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

fn cli() -> Command {
    let mut c = Command::new(tool("beaconkv-cli"));
    c.arg("-m").arg(tiny_model()).args([
        "-t",
        "2",
        "--temp",
        "0",
        "--ignore-eos",
        "-p",
        "hello world",
    ]);
    c
}

/// beaconkv-eval on the tiny model.
fn eval() -> Command {
    let mut c = Command::new(tool("beaconkv-eval"));
    c.arg("-m").arg(tiny_model());
    c
}

fn stats(extra: &[&str], env: &[(&str, &str)]) -> Value {
    // every run its own directory: tests run in parallel
    static RUN: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "beaconkv-cli-{}-{}",
        std::process::id(),
        RUN.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("stats.json");
    let mut c = cli();
    c.args(extra).arg("--stats-json").arg(&json);
    for (k, v) in env {
        c.env(k, v);
    }
    run_ok(&mut c);
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

#[test]
fn compressed_generation_reports_stable_keys() {
    let s = stats(
        &[
            "-n",
            "2000",
            "--kv-compress",
            "beacon",
            "--kv-budget",
            "128",
            "--kv-window",
            "16",
        ],
        &[],
    );
    for key in [
        "policy",
        "budget",
        "n_prompt",
        "n_generated",
        "cells_peak",
        "cells_physical",
        "kv_bytes_physical",
        "kv_bytes_uncompressed",
        "evicted",
        "compress_events",
        "archived",
        "recalled",
        "archive_bytes",
        "prompt_tok_s",
        "decode_tok_s",
        "plugin_ms",
    ] {
        assert!(s.get(key).is_some(), "missing key {key} in {s}");
    }
    assert_eq!(s["policy"], "beacon");
    assert_eq!(s["budget"], 128);
    assert_eq!(s["n_generated"], 2000);
    // prompt=keep (the default): the prompt is held on top of the budget
    let prompt = s["n_prompt"].as_i64().unwrap();
    assert!(s["cells_peak"].as_i64().unwrap() <= 128 + prompt, "{s}");
    assert!(s["evicted"].as_i64().unwrap() > 1800, "{s}");
    assert!(
        s["kv_bytes_physical"].as_u64().unwrap() < s["kv_bytes_uncompressed"].as_u64().unwrap(),
        "{s}"
    );
}

#[test]
fn environment_variables_work_like_flags() {
    let s = stats(
        &["-n", "300"],
        &[
            ("LLAMA_ARG_KV_COMPRESS", "streaming"),
            ("LLAMA_ARG_KV_BUDGET", "64"),
            ("LLAMA_ARG_KV_WINDOW", "16"),
        ],
    );
    assert_eq!(s["policy"], "streaming");
    let prompt = s["n_prompt"].as_i64().unwrap();
    assert!(s["cells_peak"].as_i64().unwrap() <= 64 + prompt, "{s}");
}

#[test]
fn spec_flag_sets_every_key() {
    // every key away from its default; the plugin's canonical spec must carry each value
    let keys = [
        "policy=recent",
        "budget=96",
        "min=80",
        "beacons=8",
        "recent=12",
        "window=8",
        "prefix=4",
        "prefix_max=20",
        "prompt=inside",
        "reduce=zmean",
        "span=3",
        "score=logit",
        "read=copy",
        "qcap=16",
        "seed=7",
        "archive=512",
        "archive_type=q8_0",
        "page=8",
        "recall_every=2",
        "recall_margin=2.5",
        "recall_match=12",
    ];
    let spec = keys.join(",");
    let s = stats(&["-n", "200", "--kv-compress-spec", &spec], &[]);
    assert_eq!(s["policy"], "recent");
    assert_eq!(s["budget"], 96);
    assert!(s["cells_peak"].as_i64().unwrap() <= 96, "{s}");
    let got = s["spec"].as_str().unwrap();
    for kv in keys {
        assert!(
            got.split(',').any(|x| x == kv),
            "{kv} missing from the effective spec {got}"
        );
    }
}

#[test]
fn bad_flag_values_stop_startup_naming_the_flag() {
    let cases: &[(&[&str], &str)] = &[
        (&["--kv-compress", "bogus"], "--kv-compress"),
        (&["--kv-budget", "-5"], "--kv-budget"),
        (&["--kv-budget", "abc"], "--kv-budget"),
        (&["--kv-beacons", "-1"], "--kv-beacons"),
        (&["--kv-prefix", "first"], "--kv-prefix"),
        (&["--kv-archive", "-1"], "--kv-archive"),
        // the archive needs policy beacon or recent
        (
            &["--kv-compress", "streaming", "--kv-archive", "64"],
            "--kv-archive",
        ),
        (
            &["--kv-compress-spec", "archive=64,archive_type=q2"],
            "archive_type",
        ),
        (
            &["--kv-compress-spec", "policy=beacon,nosuchkey=1"],
            "nosuchkey",
        ),
    ];
    for (flags, name) in cases {
        let out = cli().args(*flags).args(["-n", "4"]).output().unwrap();
        assert!(!out.status.success(), "{flags:?} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(name),
            "{flags:?}: error does not name {name}: {err}"
        );
    }
}

#[test]
fn flag_order_does_not_matter() {
    // window=40 is only valid once the budget is known: every order must give the same run
    let flags = [
        ["--kv-budget", "64"],
        ["--kv-window", "40"],
        ["--kv-compress", "streaming"],
    ];
    let orders: [[usize; 3]; 3] = [[0, 1, 2], [1, 2, 0], [2, 1, 0]];
    let runs: Vec<Value> = orders
        .iter()
        .map(|o| {
            let mut args = vec!["-n", "200"];
            for &i in o {
                args.extend_from_slice(&flags[i]);
            }
            stats(&args, &[])
        })
        .collect();
    for s in &runs {
        assert_eq!(s["policy"], "streaming", "{s}");
        assert_eq!(s["budget"], 64, "{s}");
        assert!(s["spec"].as_str().unwrap().contains("window=40"), "{s}");
        assert!(s["evicted"].as_i64().unwrap() > 0, "{s}");
    }
    for key in ["spec", "evicted", "compress_events", "cells_peak"] {
        assert_eq!(
            runs[0][key], runs[1][key],
            "{key} differs between flag orders"
        );
        assert_eq!(
            runs[0][key], runs[2][key],
            "{key} differs between flag orders"
        );
    }
}

#[test]
fn uncompressed_run_has_no_evictions() {
    let s = stats(&["-n", "100", "--kv-compress", "none"], &[]);
    assert_eq!(s["policy"], "none");
    assert_eq!(s["evicted"], 0);
}

#[test]
fn eval_passkey_reports_how_much_of_the_needle_the_cache_holds() {
    let out = run_ok(
        eval()
            .args(["-t", "2", "--mode", "passkey", "--length", "512"])
            .args(["--depths", "0.5", "--configs", "none:0,beacon:128"]),
    );
    let v: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{v}");
    let needle = rows[0]["needle_tokens"].as_i64().unwrap();
    assert!(needle > 0, "{v}");
    // the full cache holds every needle token; 128 cells beside the prompt's first 128 (the
    // default prompt=keep) cannot hold the whole needle in the middle of a 512-token haystack
    assert_eq!(rows[0]["needle_kept"].as_i64(), Some(needle), "{v}");
    let kept = rows[1]["needle_kept"].as_i64().unwrap();
    assert!((0..needle).contains(&kept), "{v}");
    assert!(rows[1]["cells_peak"].as_i64().unwrap() <= 2 * 128, "{v}");
}

#[test]
fn eval_per_token_trace_matches_the_summary() {
    let dir = std::env::temp_dir();
    let (csv, text) = (
        dir.join(format!("beaconkv-trace-{}.csv", std::process::id())),
        dir.join(format!("beaconkv-trace-{}.txt", std::process::id())),
    );
    let words: Vec<String> = (0..400).map(|i| format!("word{} ", i * 7 % 13)).collect();
    std::fs::write(&text, words.concat()).unwrap();
    let out = run_ok(
        eval()
            .args(["-t", "2", "--mode", "agree", "--n-tokens", "300"])
            .args(["--prompt-tokens", "16", "--configs", "beacon:64"])
            .arg("--text")
            .arg(&text)
            .arg("--per-token")
            .arg(&csv),
    );
    let v: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    // a prompt of no tokens has no step to score from: an error that names the flag
    let bad = eval()
        .args([
            "--mode",
            "agree",
            "--prompt-tokens",
            "0",
            "--configs",
            "beacon:64",
        ])
        .arg("--text")
        .arg(&text)
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--prompt-tokens"));
    let trace = std::fs::read_to_string(&csv).unwrap();
    std::fs::remove_file(&csv).ok();
    std::fs::remove_file(&text).ok();
    let mut lines = trace.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let top1 = header
        .iter()
        .position(|h| *h == "beacon:64 top1")
        .unwrap_or_else(|| panic!("no top-1 column in {header:?}"));
    // every scored step is a line, and its top-1 flags add up to the summary's agreement
    let flags: Vec<f64> = lines
        .map(|l| l.split(',').nth(top1).unwrap().parse().unwrap())
        .collect();
    assert!(flags.iter().all(|&f| f == 0.0 || f == 1.0), "{flags:?}");
    let row = &v["results"][0];
    let n = flags.len() as f64;
    let want = row["top1"].as_f64().unwrap();
    assert!(n > 200.0, "{} steps traced", flags.len());
    assert!(
        (flags.iter().sum::<f64>() / n - want).abs() < 1e-4,
        "trace {} vs summary {want}",
        flags.iter().sum::<f64>() / n
    );
}
