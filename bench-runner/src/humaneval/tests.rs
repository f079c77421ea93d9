//! Extraction, the sandbox, McNemar and Wilson, options, bundles, the resume plan and the tables.

use super::data::*;
use super::driver::{
    answer_of, append_line, check_cells, eval_args, fingerprint, load_lines, make_row, plan,
    EvalAnswer, EvalTurn, Job, Row, RunLine, CHECKER,
};
use super::extract::{code_blocks, extract, statements, Kind};
use super::report::{mcnemar_exact, paired, Cell, Report};
use super::sandbox::{Sandbox, Verdict};
use super::*;
use crate::tasks::wilson;
use std::collections::BTreeMap;

#[derive(clap::Parser, Debug)]
struct Wrap {
    #[command(flatten)]
    h: HumanEvalCli,
}

fn settings(args: &[&str]) -> Result<HumanEvalSettings, String> {
    use clap::Parser;
    let w = Wrap::try_parse_from(std::iter::once("x").chain(args.iter().copied()))
        .map_err(|e| e.to_string())?;
    resolve(w.h, Path::new("/repo"))
}

// ---- extraction ----------------------------------------------------------------------------

const TWO: &str = r#"Sure! Here are the functions.

### Function 1: `add`

```python
import math
from typing import List, Tuple as T


def add(a: int, b: int) -> int:
    """Add. def fake(x):
def also_fake(y):
    """
    return helper(a) + b


print(add(1, 2))
assert add(1, 1) == 2
```

Explanation: it's simple (really.

### Function 2: `helper`

```py
LIMIT = 10
result = add(1, 2)

def helper(x):
    return min(x, LIMIT) + int(math.sqrt(4)) - 2


if __name__ == "__main__":
    print(helper(3))
```
"#;

#[test]
fn code_blocks_are_read_between_fences() {
    let b = code_blocks(TWO);
    assert_eq!(b.len(), 2);
    assert!(b[0].starts_with("import math\n"));
    assert!(b[1].starts_with("LIMIT = 10\n"));
    // an answer cut inside a block: the block runs to the end
    let cut = code_blocks("text\n```python\ndef f():\n    return 1");
    assert_eq!(cut, ["def f():\n    return 1\n"]);
    // fences indented in a list: the indentation goes
    let ind = code_blocks("1. one\n   ```python\n   def f():\n       return 1\n   ```\n");
    assert_eq!(ind, ["def f():\n    return 1\n"]);
    assert!(code_blocks("no code").is_empty());
}

#[test]
fn statements_are_top_level_and_classified() {
    let b = code_blocks(TWO);
    let s = statements(&b[0]);
    let kinds: Vec<Kind> = s.iter().map(|x| x.kind).collect();
    assert_eq!(
        kinds,
        [
            Kind::Import,
            Kind::Import,
            Kind::Def,
            Kind::Other,
            Kind::Other
        ]
    );
    assert_eq!(s[0].binds, ["math"]);
    assert_eq!(s[1].binds, ["List", "T"]);
    // the docstring's `def` lines belong to the function
    assert_eq!(s[2].binds, ["add"]);
    assert!(s[2].text.contains("def also_fake(y):"));
    assert!(s[2].uses.contains("helper"));
    assert!(
        !s[2].uses.contains("fake"),
        "words in strings are not names"
    );
    let s2 = statements(&b[1]);
    let kinds: Vec<Kind> = s2.iter().map(|x| x.kind).collect();
    assert_eq!(kinds, [Kind::Assign, Kind::Assign, Kind::Def, Kind::Main]);
    assert!(!s2[2].uses.contains("sqrt"), "attributes are not names");
    // brackets and continuations hold a statement together; decorators join their definition
    let s3 = statements(
        "X = [\n1,\n2]\ny = 1 + \\\n2\n@cache\n@other(1)\ndef f(n):\n    return n\nif x:\n    pass\nelse:\n    pass\nx += 1\nd['k'] = 1\n",
    );
    let kinds: Vec<Kind> = s3.iter().map(|x| x.kind).collect();
    assert_eq!(
        kinds,
        [
            Kind::Assign,
            Kind::Assign,
            Kind::Def,
            Kind::Other,
            Kind::Other,
            Kind::Other
        ]
    );
    assert!(s3[2].text.starts_with("@cache\n@other(1)\ndef f(n):"));
    assert!(s3[3].text.contains("else:"));
    assert_eq!(
        statements("import os.path, re as regex\nfrom x import (a,\n  b as c)\nfrom y import *\n")
            .iter()
            .map(|s| s.binds.clone())
            .collect::<Vec<_>>(),
        [vec!["os", "regex"], vec!["a", "c"], vec!["*"]]
    );
}

#[test]
fn a_function_comes_with_what_it_needs() {
    let add = extract(TWO, "add").unwrap();
    // its block's imports and definition; the helper and the constant it uses from the other
    // block; no prints, asserts, example assignments or __main__ block
    assert!(add.contains("import math\n"));
    assert!(add.contains("def add(a: int, b: int) -> int:"));
    assert!(add.contains("def helper(x):"));
    assert!(add.contains("LIMIT = 10"));
    assert!(!add.contains("print("));
    assert!(!add.contains("assert "));
    assert!(!add.contains("result = add"));
    assert!(!add.contains("__main__"));
    // what it pulls in comes before the block's own code
    assert!(add.find("def helper").unwrap() < add.find("def add").unwrap());
    let helper = extract(TWO, "helper").unwrap();
    assert!(helper.contains("LIMIT = 10"));
    // math comes from the first block: the helper uses it
    assert!(helper.contains("import math"));
    assert!(!helper.contains("def add"), "{helper}");
    assert_eq!(extract(TWO, "missing"), None);
    // a sibling in the same block is left out, with its mistakes (here a name never imported)
    let block = "```python\nfrom typing import List\n\n\ndef f(x: List[int]) -> int:\n    return len(x)\n\n\ndef g(x) -> Optional[int]:\n    return None\n```";
    assert_eq!(
        extract(block, "f").unwrap(),
        "from typing import List\n\ndef f(x: List[int]) -> int:\n    return len(x)\n"
    );
    // a method or a nested function is not the function
    assert_eq!(
        extract(
            "```python\nclass A:\n    def f(self):\n        pass\n```",
            "f"
        ),
        None
    );
    // the first block that defines it wins
    let twice =
        "```python\ndef f():\n    return 1\n```\nOr:\n```python\ndef f():\n    return 2\n```";
    assert_eq!(extract(twice, "f").unwrap(), "def f():\n    return 1\n");
    // no fences: the answer is the code
    assert_eq!(
        extract("def f(x):\n    return x\n\nprint(f(1))\n", "f").unwrap(),
        "def f(x):\n    return x\n"
    );
    // fences present but the function written outside them
    let outside = "```python\ndef g():\n    pass\n```\n\ndef f():\n    return g()\n";
    let f = extract(outside, "f").unwrap();
    assert!(f.contains("def f():") && f.contains("def g():"), "{f}");
    // an answer cut in the middle of its block still gives what is there
    let cut = extract("```python\ndef f(x):\n    if x:\n        return", "f").unwrap();
    assert_eq!(cut, "def f(x):\n    if x:\n        return\n");
}

#[test]
fn two_functions_of_one_name_are_taken_in_order() {
    use super::extract::extract_nth;
    let blocks = [
        "def f(s):\n    return s == '<>'\n".to_string(),
        "def g():\n    pass\n".to_string(),
        "def f(s):\n    return s == '()'\n".to_string(),
    ];
    let a = answer_of(&blocks);
    assert!(extract_nth(&a, "f", 0).unwrap().contains("'<>'"));
    let second = extract_nth(&a, "f", 1).unwrap();
    assert!(
        second.contains("'()'") && !second.contains("'<>'"),
        "{second}"
    );
    assert_eq!(extract_nth(&a, "f", 2), None);
    // both in one block: the other one is left out
    let one = format!("```python\n{}\n{}```", blocks[0], blocks[2]);
    let second = extract_nth(&one, "f", 1).unwrap();
    assert!(
        second.contains("'()'") && !second.contains("'<>'"),
        "{second}"
    );
    let first = extract_nth(&one, "f", 0).unwrap();
    assert!(first.contains("'<>'") && !first.contains("'()'"), "{first}");
}

// ---- the sandbox -----------------------------------------------------------------------------

/// A sandbox on this machine's python3 (None where there is none: the tests that need it pass
/// with a note).
fn sandbox(timeout: f64) -> Option<Sandbox> {
    match Sandbox::new(Path::new("python3"), timeout, 1024) {
        Ok(s) => Some(s),
        Err(e) => {
            eprintln!("skipping a sandbox test: {e}");
            None
        }
    }
}

const PROMPT: &str =
    "from typing import List\n\n\ndef total(xs: List[int]) -> int:\n    \"\"\"Sum.\"\"\"\n";
const TEST: &str =
    "\n\nMETADATA = {}\n\n\ndef check(candidate):\n    assert candidate([1, 2]) == 3\n    assert candidate([]) == 0\n";

#[test]
fn the_sandbox_passes_right_code_and_names_why_wrong_code_fails() {
    let Some(sb) = sandbox(2.0) else { return };
    let run = |code: &str| sb.check(PROMPT, code, TEST, "total");
    let ok = run("def total(xs):\n    return sum(xs)\n");
    assert_eq!(
        ok,
        Verdict {
            passed: true,
            reason: "pass".into()
        }
    );
    // the prompt's imports are there
    assert!(run("def total(xs: List[int]) -> int:\n    return sum(xs)\n").passed);
    assert_eq!(run("def total(xs):\n    return 0\n").reason, "assertion");
    assert_eq!(run("def total(xs:\n").reason, "syntax error (line 1)");
    assert!(run("def total(xs):\n    return xs + 1\n")
        .reason
        .starts_with("exception: TypeError"));
    assert!(
        run("x = undefined_name\ndef total(xs):\n    return sum(xs)\n")
            .reason
            .starts_with("error defining: NameError")
    );
    // what the code prints does not disturb the verdict
    assert!(run("def total(xs):\n    print('{\"pass\": false}')\n    return sum(xs)\n").passed);
    // exiting is a failure, not a pass
    assert!(!run("import sys\ndef total(xs):\n    sys.exit(0)\n").passed);
    // no deleting files, no sockets
    let rm = run("import os\ndef total(xs):\n    os.remove('/tmp/x')\n    return sum(xs)\n");
    assert!(rm.reason.starts_with("exception: TypeError"), "{rm:?}");
    let net = run("import socket\ndef total(xs):\n    socket.socket()\n    return sum(xs)\n");
    assert!(net.reason.starts_with("exception: NoNetwork"), "{net:?}");
    // without unshare (where user namespaces are not allowed) the same verdicts
    let plain = Sandbox {
        unshare: false,
        ..sb.clone()
    };
    assert!(
        plain
            .check(
                PROMPT,
                "def total(xs):\n    return sum(xs)\n",
                TEST,
                "total"
            )
            .passed
    );
    let net = plain.check(
        PROMPT,
        "import socket\ndef total(xs):\n    socket.socket()\n    return sum(xs)\n",
        TEST,
        "total",
    );
    assert!(net.reason.starts_with("exception: NoNetwork"), "{net:?}");
    assert!(plain.network().contains("no unshare"));
}

#[test]
fn the_sandbox_stops_loops_and_memory_hogs() {
    let Some(sb) = sandbox(1.0) else { return };
    let t0 = std::time::Instant::now();
    let v = sb.check(
        PROMPT,
        "def total(xs):\n    while True:\n        pass\n",
        TEST,
        "total",
    );
    assert_eq!(v.reason, "timeout");
    assert!(t0.elapsed().as_secs_f64() < 5.0);
    // a child the code starts is killed with it (fork is disabled; a thread keeps the process up)
    let v = sb.check(
        PROMPT,
        "import threading, time\ndef total(xs):\n    threading.Thread(target=time.sleep, args=(60,)).start()\n    return sum(xs)\n",
        TEST,
        "total",
    );
    assert!(v.passed, "the runner exits at its verdict: {v:?}");
    let v = sb.check(
        PROMPT,
        "def total(xs):\n    return len(bytearray(3 << 30))\n",
        TEST,
        "total",
    );
    assert!(v.reason.starts_with("exception: MemoryError"), "{v:?}");
}

#[test]
fn extracted_answers_run_in_the_sandbox() {
    let Some(sb) = sandbox(5.0) else { return };
    let problems = parse(&fixture()).unwrap();
    let blocks: Vec<String> = problems
        .iter()
        .map(|p| format!("{}{}", p.prompt, p.canonical_solution))
        .collect();
    let answer = answer_of(&blocks);
    let b = &bundles(&problems, Split::Tune, Shape::functions(8), None)[0];
    let v = super::driver::check_answer(&problems, b, &answer, &sb);
    assert_eq!(v.len(), 2);
    assert!(v.iter().all(|v| v.passed), "{v:?}");
    let v = super::driver::check_answer(&problems, b, "no code at all", &sb);
    assert!(v.iter().all(|v| v.reason == "missing function"));
}

// ---- statistics ------------------------------------------------------------------------------

#[test]
fn mcnemar_exact_matches_the_binomial_tail() {
    assert_eq!(mcnemar_exact(0, 0), 1.0);
    // 0 vs 5: 2 * 0.5^5
    assert!((mcnemar_exact(0, 5) - 0.0625).abs() < 1e-12);
    assert!((mcnemar_exact(5, 0) - 0.0625).abs() < 1e-12);
    // 1 vs 9: 2 * (1 + 10) / 1024
    assert!((mcnemar_exact(1, 9) - 22.0 / 1024.0).abs() < 1e-12);
    // 2 vs 8: 2 * (1 + 10 + 45) / 1024 (R: binom.test(2, 10)$p.value = 0.1094)
    assert!((mcnemar_exact(2, 8) - 0.109375).abs() < 1e-12);
    // even splits are 1
    assert_eq!(mcnemar_exact(4, 4), 1.0);
    assert_eq!(mcnemar_exact(3, 4), 1.0);
    // large counts neither overflow nor underflow wrongly
    let p = mcnemar_exact(400, 600);
    assert!(p > 0.0 && p < 1e-9, "{p}");
    assert!((mcnemar_exact(500, 500) - 1.0).abs() < 1e-12);
    // 20 vs 40: 2 * sum_{i<=20} C(60, i) / 2^60
    let p = mcnemar_exact(20, 40);
    assert!((p - 0.013489293731191).abs() < 1e-12, "{p}");
}

#[test]
fn wilson_intervals() {
    let (lo, hi) = wilson(0, 10);
    assert_eq!(lo, 0.0);
    assert!((hi - 0.2775).abs() < 1e-3, "{hi}");
    let (lo, hi) = wilson(82, 164);
    assert!(
        (lo - 0.4239).abs() < 1e-3 && (hi - 0.5761).abs() < 1e-3,
        "{lo} {hi}"
    );
    assert_eq!(wilson(0, 0), (0.0, 1.0));
}

#[test]
fn paired_counts_are_by_task_and_split() {
    let cell = |v: &[(&str, bool)]| Cell {
        outcome: v.iter().map(|(t, p)| (t.to_string(), *p)).collect(),
        ..Cell::default()
    };
    let a = cell(&[
        ("HumanEval/0", true),
        ("HumanEval/1", true),
        ("HumanEval/2", false),
        ("HumanEval/120", true),
        ("HumanEval/121", true),
    ]);
    let b = cell(&[
        ("HumanEval/0", false),
        ("HumanEval/1", true),
        ("HumanEval/2", true),
        ("HumanEval/120", false),
    ]);
    let all = paired(&a, &b, None);
    assert_eq!((all.pairs, all.lost, all.won), (4, 2, 1));
    assert_eq!(all.p, 1.0);
    let tune = paired(&a, &b, Some(Split::Tune));
    assert_eq!((tune.pairs, tune.lost, tune.won), (3, 1, 1));
    let held = paired(&a, &b, Some(Split::Heldout));
    assert_eq!((held.pairs, held.lost, held.won), (1, 1, 0));
}

// ---- data and bundles ------------------------------------------------------------------------

/// Two real-looking problems (0 and 1) and two held-out ones (100, 101).
fn fixture() -> String {
    let p = |n: u32, entry: &str, body: &str, test: &str| {
        serde_json::json!({
            "task_id": format!("HumanEval/{n}"),
            "prompt": format!("\n\ndef {entry}(x):\n    \"\"\"Problem {n}.\"\"\"\n"),
            "entry_point": entry,
            "canonical_solution": body,
            "test": format!("\n\ndef check(candidate):\n    {test}\n"),
        })
        .to_string()
    };
    [
        p(
            101,
            "triple",
            "    return 3 * x\n",
            "assert candidate(2) == 6",
        ),
        p(
            0,
            "double",
            "    return 2 * x\n",
            "assert candidate(2) == 4",
        ),
        p(1, "inc", "    return x + 1\n", "assert candidate(2) == 3"),
        p(100, "dec", "    return x - 1\n", "assert candidate(2) == 1"),
    ]
    .join("\n")
}

#[test]
fn problems_load_in_number_order_and_split_at_100() {
    let ps = parse(&fixture()).unwrap();
    let n: Vec<u32> = ps.iter().map(|p| p.number).collect();
    assert_eq!(n, [0, 1, 100, 101]);
    assert_eq!(ps[1].split(), Split::Tune);
    assert_eq!(ps[2].split(), Split::Heldout);
    assert!(parse("{\"task_id\": \"X/1\", \"prompt\": \"\", \"entry_point\": \"f\", \"test\": \"\", \"canonical_solution\": \"\"}").is_err());
    assert!(parse(&format!("{}\n{}", fixture(), fixture())).is_err());
    assert!(parse("").is_err());
}

#[test]
fn bundles_are_deterministic_and_interleave_the_splits() {
    let ps = parse(&fixture()).unwrap();
    let b = all_bundles(
        &ps,
        &[Split::Tune, Split::Heldout],
        Shape::functions(1),
        None,
    );
    let ids: Vec<&str> = b.iter().map(|x| x.id.as_str()).collect();
    assert_eq!(ids, ["tune-0", "heldout-0", "tune-1", "heldout-1"]);
    let b2 = all_bundles(
        &ps,
        &[Split::Tune, Split::Heldout],
        Shape::functions(2),
        Some(1),
    );
    assert_eq!(b2.len(), 2);
    assert_eq!(b2[0].task_ids(&ps), ["HumanEval/0", "HumanEval/1"]);
    assert_eq!(b2[1].task_ids(&ps), ["HumanEval/100", "HumanEval/101"]);
    assert_eq!(
        b2,
        all_bundles(
            &ps,
            &[Split::Tune, Split::Heldout],
            Shape::functions(2),
            Some(1)
        )
    );
    // the request: every prompt in order in its own block, the entry points named
    let t = &b2[0].text;
    assert!(t.starts_with("Write the 2 Python functions below."));
    assert!(
        t.find("Function 1 of 2: `double`").unwrap() < t.find("Function 2 of 2: `inc`").unwrap()
    );
    assert_eq!(t.matches("```python\n").count(), 2);
    assert!(t.contains("```python\ndef double(x):\n    \"\"\"Problem 0.\"\"\"\n```"));
    let one = &all_bundles(&ps, &[Split::Tune], Shape::functions(1), None)[0].text;
    assert!(one.starts_with("Write the Python function below."));
    // the tool's input line and the digest follow the request
    let v: serde_json::Value = serde_json::from_str(&b2[0].to_jsonl()).unwrap();
    assert_eq!(v["id"], "tune-0");
    assert_eq!(v["turns"][0], t.as_str());
    assert_eq!(b2[0].digest().len(), 16);
    assert_ne!(b2[0].digest(), b2[1].digest());
    // the last bundle of a split may be smaller
    let b3 = bundles(&ps, Split::Tune, Shape::functions(3), None);
    assert_eq!(b3.len(), 1);
    assert_eq!(b3[0].problems.len(), 2);
}

// ---- options ---------------------------------------------------------------------------------

#[test]
fn options_and_defaults() {
    let s = settings(&[]).unwrap();
    assert_eq!(s.budgets, [200, 400, 700]);
    assert_eq!(s.policies, DEFAULT_POLICIES);
    assert_eq!(s.reference.as_deref(), Some("beacon/score=prob"));
    assert_eq!(s.splits, [Split::Tune, Split::Heldout]);
    assert_eq!(
        (s.bundle_size, s.bundles, s.n_tokens, s.parallel),
        (8, None, 3000, 8)
    );
    assert_eq!(s.timeout, 10.0);
    let q = settings(&["--quick"]).unwrap();
    assert_eq!(q.budgets, [32, 64]);
    assert_eq!(q.policies, QUICK_POLICIES);
    assert_eq!(
        (q.bundle_size, q.bundles, q.n_tokens, q.parallel),
        (2, Some(1), 24, 2)
    );
    let c = settings(&[
        "--policies",
        "none",
        "--split",
        "tune",
        "--bundles",
        "2",
        "--budgets",
        "300",
    ])
    .unwrap();
    assert!(c.policies.is_empty());
    assert_eq!(c.reference, None);
    assert_eq!(c.splits, [Split::Tune]);
    assert_eq!(cells(&c), [("none".to_string(), 0)]);
    let r = settings(&["--policies", "rkv,streaming", "--reference", "streaming"]).unwrap();
    assert_eq!(r.reference.as_deref(), Some("streaming"));
    assert_eq!(
        cells(&r)[1..],
        [
            ("rkv".to_string(), 200),
            ("streaming".to_string(), 200),
            ("rkv".to_string(), 400),
            ("streaming".to_string(), 400),
            ("rkv".to_string(), 700),
            ("streaming".to_string(), 700)
        ]
    );
    for bad in [
        &["--reference", "rkv", "--policies", "streaming"][..],
        &["--policies", "none,rkv"],
        &["--policies", "rkv,rkv"],
        &["--budgets", "4"],
        &["--parallel", "31"],
        &["--n-tokens", "0"],
        &["--bundle-size", "0"],
        &["--timeout", "0"],
        &["--memory-mb", "10"],
        &["--split", "all"],
    ] {
        assert!(settings(bad).is_err(), "{bad:?} accepted");
    }
}

#[test]
fn eval_arguments() {
    let s = settings(&["-t", "1", "--n-tokens", "500", "--", "-fa", "on"]).unwrap();
    let a = eval_args(
        &s,
        Path::new("/m/q.gguf"),
        "beacon:256/score=prob",
        Path::new("/w/in.jsonl"),
        Path::new("/w/o.json"),
    );
    let line = a.join(" ");
    assert!(line.starts_with("--mode reason --configs beacon:256/score=prob --tasks /w/in.jsonl"));
    assert!(
        line.contains("--n-tokens 500 --chunk 64 -np 8 -m /m/q.gguf -t 1 -fa on"),
        "{line}"
    );
    let f = fingerprint(&s, Path::new("/m/q.gguf"));
    assert_eq!(
        f,
        "model=q.gguf bundle_size=8 n_tokens=500 chunk=64 parallel=8 extra= llama=-fa on"
    );
}

// ---- rows, resume, tables --------------------------------------------------------------------

fn answer(b: &Bundle, config: &str, n_prompt: u64, n_gen: u64, stopped: bool) -> EvalAnswer {
    EvalAnswer {
        id: b.id.clone(),
        config: config.into(),
        turns: vec![EvalTurn {
            n_prompt,
            n_gen,
            stopped,
            output: "```python\ndef double(x):\n    return 2 * x\n```".into(),
        }],
        n_prompt,
        n_gen,
        cells_peak: (n_prompt + n_gen) as i64,
        prefix_len: 0,
        evicted: 0,
        compress_events: 0,
        recalled: 0,
        seconds: 1.0,
    }
}

fn verdicts(p: &[bool]) -> Vec<Verdict> {
    p.iter()
        .map(|&x| Verdict {
            passed: x,
            reason: if x { "pass" } else { "assertion" }.into(),
        })
        .collect()
}

#[test]
fn tool_lines_become_rows() {
    let s = settings(&["--bundle-size", "2", "--n-tokens", "100"]).unwrap();
    let ps = parse(&fixture()).unwrap();
    let b = &bundles(&ps, Split::Tune, Shape::functions(2), None)[0];
    let cell = ("beacon/score=prob".to_string(), 256);
    let e = answer(b, "beacon:256/score=prob", 300, 100, false);
    let r = make_row(&s, "S", &ps, b, &cell, &e, &verdicts(&[true, false])).unwrap();
    assert_eq!(r.tasks, ["HumanEval/0", "HumanEval/1"]);
    assert_eq!(r.passed, [true, false]);
    assert!(!r.all_passed());
    assert!(r.cut);
    assert_eq!(r.checker, CHECKER);
    assert_eq!(r.digest, b.digest());
    // another config, another bundle, more tokens than the cap: errors
    assert!(make_row(
        &s,
        "S",
        &ps,
        b,
        &cell,
        &answer(b, "rkv:256", 1, 1, true),
        &[]
    )
    .is_err());
    let mut other = e.clone();
    other.id = "tune-9".into();
    assert!(make_row(&s, "S", &ps, b, &cell, &other, &[]).is_err());
    assert!(make_row(
        &s,
        "S",
        &ps,
        b,
        &cell,
        &answer(b, "beacon:256/score=prob", 1, 101, true),
        &[]
    )
    .is_err());
    let mut two = e.clone();
    two.turns.push(two.turns[0].clone());
    assert!(make_row(&s, "S", &ps, b, &cell, &two, &[]).is_err());
}

fn row(b: &Bundle, ps: &[Problem], policy: &str, budget: u32, passed: &[bool], total: u64) -> Row {
    Row {
        settings: "S".into(),
        bundle: b.id.clone(),
        split: b.split,
        digest: b.digest(),
        policy: policy.into(),
        budget,
        config: crate::args::config_of(policy, budget, ""),
        checker: CHECKER.into(),
        own: None,
        tasks: b.task_ids(ps),
        passed: passed.to_vec(),
        reasons: verdicts(passed).into_iter().map(|v| v.reason).collect(),
        n_prompt: total / 2,
        n_gen: total - total / 2,
        cut: false,
        cells_peak: if budget == 0 {
            total as i64
        } else {
            budget as i64
        },
        prefix_len: 0,
        evicted: if budget == 0 {
            0
        } else {
            total - budget as u64
        },
        compress_events: 0,
        recalled: 0,
        seconds: 1.0,
        output: String::new(),
    }
}

#[test]
fn resume_plans_what_is_missing_and_refuses_other_settings() {
    let ps = parse(&fixture()).unwrap();
    let bs = all_bundles(
        &ps,
        &[Split::Tune, Split::Heldout],
        Shape::functions(1),
        None,
    );
    let known: BTreeMap<String, String> = bs.iter().map(|b| (b.id.clone(), b.digest())).collect();
    let cells = vec![("none".to_string(), 0), ("rkv".to_string(), 64)];
    let all = plan(&bs, &known, &cells, &[], "S", 2).unwrap();
    assert_eq!(
        all,
        [
            Job {
                cell: 0,
                bundles: vec![0, 1]
            },
            Job {
                cell: 1,
                bundles: vec![0, 1]
            },
            Job {
                cell: 0,
                bundles: vec![2, 3]
            },
            Job {
                cell: 1,
                bundles: vec![2, 3]
            },
        ]
    );
    let done = vec![
        row(&bs[0], &ps, "none", 0, &[true], 100),
        row(&bs[1], &ps, "rkv", 64, &[false], 100),
    ];
    let left = plan(&bs, &known, &cells, &done, "S", 2).unwrap();
    assert_eq!(
        left[0],
        Job {
            cell: 0,
            bundles: vec![1]
        }
    );
    assert_eq!(
        left[1],
        Job {
            cell: 1,
            bundles: vec![0]
        }
    );
    // every pair done: nothing
    let mut every = Vec::new();
    for b in &bs {
        every.push(row(b, &ps, "none", 0, &[true], 100));
        every.push(row(b, &ps, "rkv", 64, &[true], 100));
    }
    assert!(plan(&bs, &known, &cells, &every, "S", 2)
        .unwrap()
        .is_empty());
    // other settings, another wording, an unknown bundle: refused
    let err = plan(&bs, &known, &cells, &done, "T", 2).unwrap_err();
    assert!(err.contains("other settings"), "{err}");
    let mut reworded = done.clone();
    reworded[0].digest = "0000000000000000".into();
    assert!(plan(&bs, &known, &cells, &reworded, "S", 2).is_err());
    let mut unknown = done.clone();
    unknown[0].bundle = "tune-77".into();
    assert!(plan(&bs, &known, &cells, &unknown, "S", 2).is_err());

    // the file: appended rows read back; a last line cut short is dropped and the file mended
    let dir =
        std::env::temp_dir().join(format!("beaconkv-humaneval-resume-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("results.jsonl");
    let _ = std::fs::remove_file(&f);
    assert!(load_lines::<Row>(&f).unwrap().is_empty());
    for r in &done {
        append_line(&f, r).unwrap();
    }
    let mut text = std::fs::read_to_string(&f).unwrap();
    text.push_str("{\"settings\": \"S\", \"bund");
    std::fs::write(&f, &text).unwrap();
    let back: Vec<Row> = load_lines(&f).unwrap();
    assert_eq!(back, done);
    assert!(std::fs::read_to_string(&f).unwrap().ends_with("}\n"));
    std::fs::write(&f, "not json\n").unwrap();
    assert!(load_lines::<Row>(&f).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn quick_checks_the_cells_the_tool_reports() {
    let ps = parse(&fixture()).unwrap();
    let b = &all_bundles(&ps, &[Split::Tune], Shape::functions(2), None)[0];
    let full = row(b, &ps, "none", 0, &[true, true], 500);
    let comp = row(b, &ps, "rkv", 64, &[true, false], 500);
    assert!(check_cells(&[full.clone(), comp.clone()]).is_ok());
    let mut evicting_full = full.clone();
    evicting_full.evicted = 3;
    assert!(check_cells(&[evicting_full]).is_err());
    let mut short_full = full.clone();
    short_full.cells_peak = 499;
    assert!(check_cells(&[short_full]).is_err());
    // the budget and, with the default prompt=keep, as many prompt cells again
    let mut within = comp.clone();
    within.cells_peak = 128;
    assert!(check_cells(&[within]).is_ok());
    let mut over = comp.clone();
    over.cells_peak = 129;
    assert!(check_cells(&[over]).is_err());
    let mut kept_all = comp;
    kept_all.evicted = 0;
    assert!(check_cells(&[kept_all]).is_err());
}

#[test]
fn tables_show_both_splits_flags_and_paired_tests() {
    let s = settings(&[
        "--policies",
        "beacon/score=prob,rkv",
        "--budgets",
        "64,256",
        "--bundle-size",
        "2",
    ])
    .unwrap();
    let ps = parse(&fixture()).unwrap();
    let bs = all_bundles(&ps, &s.splits, Shape::functions(2), None);
    let cells = cells(&s);
    let mut rows = Vec::new();
    for b in &bs {
        rows.push(row(b, &ps, "none", 0, &[true, true], 600));
        rows.push(row(b, &ps, "beacon/score=prob", 64, &[true, false], 600));
        rows.push(row(b, &ps, "rkv", 64, &[false, false], 600));
        rows.push(row(b, &ps, "beacon/score=prob", 256, &[true, true], 600));
    }
    let runs = vec![RunLine {
        settings: "S".into(),
        policy: "rkv".into(),
        budget: 64,
        config: "rkv:64".into(),
        bundles: vec!["tune-0".into(), "heldout-0".into()],
        cpu_s: 10.0,
        wall_s: 11.0,
        n_gen: 600,
        tool: serde_json::Value::Null,
    }];
    let rep = Report::new(&s, &cells, &rows, &runs);
    let t = rep.table();
    let lines: Vec<&str> = t
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| ---"))
        .collect();
    assert_eq!(lines.len(), 1 + cells.len());
    assert!(lines[0].contains("pass@1 tuning (0–99)") && lines[0].contains("held-out (100–163)"));
    assert!(lines[1].starts_with("| none (full cache) | – | 100% [34–100] (2/2) | 100% [34–100] (2/2) | 100% [21–100] (1/1) |"), "{}", lines[1]);
    // 600 tokens: not flagged at 64 (4 x 64 = 256), flagged at 256
    assert!(
        lines[2].starts_with("| beacon/score=prob | 64 | 50%"),
        "{}",
        lines[2]
    );
    let at256 = lines
        .iter()
        .find(|l| l.contains("| beacon/score=prob | 256 *"))
        .unwrap();
    assert!(at256.contains("100%"));
    // an empty cell shows dashes
    assert!(lines.iter().any(|l| l.starts_with("| rkv | 256 | – |")));
    let rkv = rep.get("rkv", 64);
    assert_eq!((rkv.cpu_s, rkv.cpu_per_bundle()), (10.0, 5.0));
    assert_eq!(rkv.reasons.get("assertion"), Some(&4));
    // paired: rkv at 64 lost all 4 functions against the full cache; beacon lost 2 against
    // the full cache; beacon beat rkv on 2
    let m = rep.mcnemar_table();
    assert!(m.contains("| full cache vs rkv | 64 | −2 +0, p=0.50 (n=2) | −2 +0, p=0.50 (n=2) | −4 +0, p=0.12 (n=4) |"), "{m}");
    assert!(m.contains("| beacon/score=prob vs rkv | 64 |"), "{m}");
    assert!(
        m.contains("−0 +0, p=1.00") || m.contains("| beacon/score=prob vs rkv | 256 | – |"),
        "{m}"
    );
    let csv = rep.csv();
    assert_eq!(csv.lines().count(), 1 + cells.len() * 2);
    assert!(csv.contains("rkv,64,tune,0,2,0.0000,"));
    let mc = rep.mcnemar_csv();
    assert!(mc.contains("none@0,rkv,64,all,4,4,0,0.1250"), "{mc}");
    // the quick shape check: every cell needs every bundle
    let mut q = s.clone();
    q.bundles = Some(1);
    let full_only = Report::new(&q, &cells[..1], &rows, &[]);
    assert!(full_only.check_shape().is_ok());
    let with_empty = Report::new(&q, &cells, &rows, &[]);
    assert!(with_empty.check_shape().is_err());
}

// ---- own values ------------------------------------------------------------------------------

#[test]
fn own_values_names_are_distinct_and_differ_by_bundle() {
    use super::own_values::names;
    let a = names("tune-0", 12);
    let mut d = a.clone();
    d.sort_unstable();
    d.dedup();
    assert_eq!(d.len(), 12);
    assert_eq!(a, names("tune-0", 12));
    assert_ne!(a, names("tune-1", 12));
    assert_eq!(names("x", 100).len(), 48);
}

fn own_answer(codes: &str, again: &str) -> String {
    format!(
        "Here it is.\n\n```python\nCODES = {{\n{codes}\n}}\n\n\ndef double(x):\n    return 2 * x\n\n\ndef codes_again():\n    return {{\n{again}\n    }}\n```\n"
    )
}

#[test]
fn own_values_check_reads_both_dictionaries() {
    use super::own_values::check;
    let names = ["amber", "basil", "cedar"];
    let ok = own_answer(
        "    \"amber\": 417,\n    \"basil\": 902,  # mine\n    'cedar': 135,",
        "        \"cedar\": 135,\n        \"amber\": 417,\n        \"basil\": 902,",
    );
    let o = check(&ok, &names);
    assert!(o.all_recalled(), "{o:?}");
    assert_eq!(
        (o.asked, o.defined, o.recalled, o.patterned),
        (3, 3, 3, false)
    );
    assert!(o.gap_chars > 20 && o.gap_chars < o.answer_chars);
    assert!(
        (o.gap_tokens(100).unwrap() - 100.0 * o.gap_chars as f64 / o.answer_chars as f64).abs()
            < 1e-9
    );
    // one number written differently
    let wrong = own_answer(
        "    \"amber\": 417,\n    \"basil\": 902,\n    \"cedar\": 135,",
        "        \"amber\": 417,\n        \"basil\": 903,\n        \"cedar\": 135,",
    );
    let o = check(&wrong, &names);
    assert!(!o.all_recalled());
    assert_eq!(o.recalled, 2);
    assert_eq!(o.reason, "2 of 3 values written again");
    // codes_again referring to CODES gives no literals
    let lazy = format!("{}\n```\n", &ok[..ok.find("    return {").unwrap()]) + "";
    let lazy = lazy.replace(
        "def codes_again():\n",
        "def codes_again():\n    return dict(CODES)\n",
    );
    let o = check(&lazy, &names);
    assert_eq!(
        (o.recalled, o.reason.as_str()),
        (0, "codes_again types out no dictionary")
    );
    // numbers typed out in the docstring count (the model writes them there before `return CODES`)
    let doc = ok.replace(
        "    return {\n",
        "    \"\"\"\n    >>> codes_again()\n    {\n",
    );
    let doc = doc.replace("    }\n```", "    }\n    \"\"\"\n    return CODES\n```");
    assert!(check(&doc, &names).all_recalled(), "{doc}");
    // a dictionary after the function is not its answer
    let after = ok.replace("    return {\n", "    return None\nOTHER = {\n");
    assert_eq!(check(&after, &names).recalled, 0);
    // missing pieces
    assert_eq!(
        check("def codes_again():\n    return {}", &names).reason,
        "no CODES dictionary"
    );
    let no_fn = ok.replace("def codes_again", "def other");
    assert_eq!(check(&no_fn, &names).reason, "no codes_again after CODES");
    let short = own_answer(
        "    \"amber\": 417,\n    \"basil\": 902,",
        "        \"amber\": 417,\n        \"basil\": 902,",
    );
    let o = check(&short, &names);
    assert!(!o.all_recalled());
    assert_eq!(o.reason, "CODES defines 2 of 3 names");
    let twice = own_answer(
        "    \"amber\": 417,\n    \"basil\": 417,\n    \"cedar\": 135,",
        "        \"amber\": 417,\n        \"basil\": 417,\n        \"cedar\": 135,",
    );
    assert_eq!(check(&twice, &names).reason, "CODES repeats a number");
    // counting up is a pattern; a mention of CODES in prose is not the assignment
    let up = own_answer(
        "    \"amber\": 100,\n    \"basil\": 200,\n    \"cedar\": 300,",
        "        \"amber\": 100,\n        \"basil\": 200,\n        \"cedar\": 300,",
    );
    let up = format!("The CODES = {{}} below.\n{up}");
    let o = check(&up, &names);
    assert!(o.patterned && o.all_recalled(), "{o:?}");
}

#[test]
fn own_values_bundles_ask_for_the_dictionary_and_group_twice() {
    let ps = parse(&fixture()).unwrap();
    let shape = Shape {
        size: 1,
        own_values: 5,
    };
    let b = bundles(&ps, Split::Tune, shape, None);
    let ids: Vec<&str> = b.iter().map(|x| x.id.as_str()).collect();
    assert_eq!(ids, ["tune-0", "tune-1", "tune-s0", "tune-s1"]);
    assert_eq!(b[2].task_ids(&ps), ["HumanEval/0"]);
    let t = &b[0].text;
    assert!(t.contains("dictionary `CODES` of 5 numbers, already written for you"));
    let follow = b[0].follow_up.as_deref().unwrap();
    assert!(follow.contains("function `codes_again()`"));
    assert!(follow.contains(&format!("return {{\"{}\": ...", b[0].own_names[0])));
    assert_eq!(b[0].turns(), [t.as_str(), follow]);
    assert!(t.contains("Function 1 of 1: `double`"));
    assert_eq!(b[0].own_names.len(), 5);
    // the numbers are in the answer's start, never in the request
    let start = b[0].answer_start.as_deref().unwrap();
    let nums = super::own_values::numbers("tune-0", 5);
    for (n, v) in b[0].own_names.iter().zip(&nums) {
        assert!(start.contains(&format!("    \"{n}\": {v},\n")));
        assert!(!t.contains(&v.to_string()));
    }
    assert!(start.starts_with("```python\nCODES = {\n"));
    let v: serde_json::Value = serde_json::from_str(&b[0].to_jsonl()).unwrap();
    assert_eq!(v["answer_starts"][0], start);
    assert_eq!(v["turns"][1], follow);
    // an answer that copies its start and writes the numbers again passes the check
    let again: Vec<String> = b[0]
        .own_names
        .iter()
        .zip(&nums)
        .map(|(n, v)| format!("\"{n}\": {v}"))
        .collect();
    let answer = format!(
        "{start}def double(x):\n    return 2 * x\n\n\ndef codes_again():\n    return {{{}}}\n```\n",
        again.join(", ")
    );
    assert!(super::own_values::check(&answer, &b[0].own_names).all_recalled());
    assert_ne!(b[0].digest(), b[2].digest());
    assert_ne!(nums, super::own_values::numbers("tune-1", 5));
    let many = super::own_values::numbers("x", 48);
    let mut d = many.clone();
    d.sort_unstable();
    d.dedup();
    assert_eq!(d.len(), 48);
    assert!(many.iter().all(|v| (100..=999).contains(v)));
    let s = settings(&["--own-values", "12"]).unwrap();
    assert_eq!((s.own_values, s.bundle_size), (12, 4));
    assert!(settings(&["--own-values", "49"])
        .unwrap_err()
        .contains("--own-values"));
    assert!(fingerprint(&s, Path::new("/m/q.gguf")).contains(" own_values=12 "));
    assert!(!fingerprint(&settings(&[]).unwrap(), Path::new("/m/q.gguf")).contains("own_values"));
}

#[test]
fn own_values_tables_count_and_pair_the_requests() {
    let mk = |bundle: &str, policy: &str, budget: u32, recalled: u32| Row {
        settings: "s".into(),
        bundle: bundle.into(),
        split: Split::Tune,
        digest: "d".into(),
        policy: policy.into(),
        budget,
        config: "c".into(),
        checker: CHECKER.into(),
        tasks: vec!["HumanEval/0".into()],
        passed: vec![true],
        reasons: vec![String::new()],
        own: Some(super::own_values::OwnValues {
            asked: 4,
            defined: 4,
            recalled,
            patterned: false,
            gap_chars: 50,
            answer_chars: 100,
            reason: if recalled == 4 {
                String::new()
            } else {
                "x".into()
            },
        }),
        n_prompt: 10,
        n_gen: 200,
        cut: false,
        cells_peak: 0,
        prefix_len: 0,
        evicted: 0,
        compress_events: 0,
        recalled: 0,
        seconds: 0.0,
        output: String::new(),
    };
    let mut s = settings(&[
        "--own-values",
        "4",
        "--split",
        "tune",
        "--budgets",
        "64",
        "--policies",
        "streaming",
    ])
    .unwrap();
    s.policies = vec!["streaming".into()];
    let cells = vec![("none".to_string(), 0), ("streaming".to_string(), 64)];
    let rows = vec![
        mk("tune-0", "none", 0, 4),
        mk("tune-1", "none", 0, 4),
        mk("tune-0", "streaming", 64, 4),
        mk("tune-1", "streaming", 64, 1),
    ];
    let rep = Report::new(&s, &cells, &rows, &[]);
    let full = rep.get("none", 0);
    assert_eq!(full.own[&Split::Tune].all, 2);
    assert_eq!(full.own[&Split::Tune].mean_gap(), 100.0);
    let st = rep.get("streaming", 64);
    assert_eq!(
        (st.own[&Split::Tune].all, st.own[&Split::Tune].recalled),
        (1, 5)
    );
    let p = super::report::paired_own(&full, &st, None);
    assert_eq!((p.pairs, p.lost, p.won), (2, 1, 0));
    let t = rep.own_table();
    assert!(t.contains("| streaming | 64"), "{t}");
    assert!(t.contains("62.5%"), "{t}");
    assert!(rep.own_mcnemar_table().contains("−1 +0, p=1.00 (n=2)"));
    // the functions, asked in both bundles, stay two pairs
    assert_eq!(paired(&full, &st, None).pairs, 2);
}
