//! The generator (by an independent evaluator), the answer parser, options, the resume file and
//! the tables.

use super::driver::{append_row, eval_args, fingerprint, load_rows, pending, Row};
use super::problems::*;
use super::report::Report;
use super::*;
use crate::tasks::wilson;

#[derive(clap::Parser, Debug)]
struct Wrap {
    #[command(flatten)]
    r: ReasonCli,
}

fn settings(args: &[&str]) -> Result<ReasonSettings, String> {
    use clap::Parser;
    let w = Wrap::try_parse_from(std::iter::once("x").chain(args.iter().copied()))
        .map_err(|e| e.to_string())?;
    resolve(w.r, Path::new("/repo"))
}

const SHAPE: Shape = Shape {
    single_steps: 6,
    steps: 3,
    parts: 4,
};

/// Evaluates `+ - * /` with parentheses and `#j` (answer j, 1-based) over the integers; None on
/// a syntax error, an inexact division or a reference to a missing answer. Written apart from the
/// generator, which computes step by step.
fn eval_expr(e: &str, answers: &[i64]) -> Option<i64> {
    fn atom(t: &[u8], i: &mut usize, a: &[i64]) -> Option<i64> {
        skip(t, i);
        match *t.get(*i)? {
            b'(' => {
                *i += 1;
                let v = sum(t, i, a)?;
                skip(t, i);
                (t.get(*i) == Some(&b')')).then(|| *i += 1)?;
                Some(v)
            }
            b'#' => {
                *i += 1;
                let j = digits(t, i)? as usize;
                a.get(j.checked_sub(1)?).copied()
            }
            _ => digits(t, i),
        }
    }
    fn digits(t: &[u8], i: &mut usize) -> Option<i64> {
        let start = *i;
        while t.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        std::str::from_utf8(&t[start..*i]).ok()?.parse().ok()
    }
    fn skip(t: &[u8], i: &mut usize) {
        while t.get(*i) == Some(&b' ') {
            *i += 1;
        }
    }
    fn product(t: &[u8], i: &mut usize, a: &[i64]) -> Option<i64> {
        let mut v = atom(t, i, a)?;
        loop {
            skip(t, i);
            match t.get(*i) {
                Some(b'*') => {
                    *i += 1;
                    v *= atom(t, i, a)?;
                }
                Some(b'/') => {
                    *i += 1;
                    let d = atom(t, i, a)?;
                    if d == 0 || v % d != 0 {
                        return None;
                    }
                    v /= d;
                }
                _ => return Some(v),
            }
        }
    }
    fn sum(t: &[u8], i: &mut usize, a: &[i64]) -> Option<i64> {
        let mut v = product(t, i, a)?;
        loop {
            skip(t, i);
            match t.get(*i) {
                Some(b'+') => {
                    *i += 1;
                    v += product(t, i, a)?;
                }
                Some(b'-') => {
                    *i += 1;
                    v -= product(t, i, a)?;
                }
                _ => return Some(v),
            }
        }
    }
    let t = e.as_bytes();
    let mut i = 0;
    let v = sum(t, &mut i, answers)?;
    skip(t, &mut i);
    (i == t.len()).then_some(v)
}

#[test]
fn the_evaluator_itself() {
    assert_eq!(eval_expr("((83 + 4 * 6) - 7) / 5", &[]), Some(20));
    assert_eq!(eval_expr("(#2 * 3)", &[1, 7]), Some(21));
    assert_eq!(eval_expr("7 / 2", &[]), None);
    assert_eq!(eval_expr("(#3 + 1)", &[1]), None);
    assert_eq!(eval_expr("(1 + 2", &[]), None);
}

#[test]
fn generator_is_deterministic_and_seeded() {
    for i in 0..20 {
        assert_eq!(generate(7, i, SHAPE), generate(7, i, SHAPE));
    }
    let a: Vec<Problem> = (0..20).map(|i| generate(7, i, SHAPE)).collect();
    let b: Vec<Problem> = (0..20).map(|i| generate(8, i, SHAPE)).collect();
    assert!(a.iter().zip(&b).all(|(x, y)| x.prompt != y.prompt));
    // the same index gives the same problem however many a run generates
    assert_eq!(generate(7, 13, SHAPE), a[13]);
    let ids: std::collections::BTreeSet<&str> = a.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids.len(), a.len());
}

#[test]
fn answers_are_right_by_an_independent_evaluator() {
    for seed in [1, 7, 99] {
        for i in 0..200 {
            let p = generate(seed, i, SHAPE);
            assert_eq!(
                p.kind,
                if i % 2 == 0 {
                    Kind::Chain
                } else {
                    Kind::Single
                }
            );
            let mut answers = Vec::new();
            for (k, part) in p.parts.iter().enumerate() {
                let v = eval_expr(&part.expr, &answers)
                    .unwrap_or_else(|| panic!("{}: bad expression {}", p.id, part.expr));
                assert_eq!(v, part.answer, "{} part {}: {}", p.id, k + 1, part.expr);
                assert!((20..=600).contains(&v), "{}: {v}", p.id);
                // the prompt holds the part, and every number of its computation
                assert!(p.prompt.contains(&part.text), "{}", p.id);
                for n in part.expr.split(|c: char| !c.is_ascii_digit() && c != '#') {
                    if let Some(j) = n.strip_prefix('#') {
                        let j: usize = j.parse().unwrap();
                        assert!(j <= k, "{}: part {} uses a later answer", p.id, k + 1);
                        assert!(part.text.contains(&format!("the answer to Problem {j}")));
                    } else if !n.is_empty() {
                        assert!(part.text.contains(n), "{}: {n} not in {}", p.id, part.text);
                    }
                }
                answers.push(v);
            }
            match p.kind {
                Kind::Single => {
                    assert_eq!(p.parts.len(), 1);
                    // each operation wraps the expression in one pair of parentheses
                    assert_eq!(p.parts[0].expr.matches('(').count(), SHAPE.single_steps);
                    assert!(p.prompt.contains("\"Answer: N\""));
                }
                Kind::Chain => {
                    assert_eq!(p.parts.len(), SHAPE.parts);
                    assert!(p
                        .parts
                        .iter()
                        .all(|x| x.expr.matches('(').count() == SHAPE.steps));
                    assert!(
                        p.parts.iter().skip(1).any(|x| x.expr.contains('#')),
                        "{}",
                        p.id
                    );
                    assert!(!p.parts[0].expr.contains('#'));
                    assert!(p.prompt.contains("\"Answer k: N\""));
                }
            }
        }
    }
}

#[test]
fn later_problems_come_back_to_earlier_answers() {
    // over many chains some part uses an answer two or more problems back
    let far = (0..100)
        .map(|i| generate(7, 2 * i, SHAPE))
        .filter(|p| {
            p.parts.iter().enumerate().any(|(k, x)| {
                (1..k).any(|j| {
                    x.expr
                        .starts_with(&format!("{}#{j}", "(".repeat(SHAPE.steps)))
                })
            })
        })
        .count();
    assert!(far >= 20, "{far}");
}

#[test]
fn answer_lines_are_parsed() {
    assert_eq!(parse_answer("so 3 + 4 = 7\nAnswer: 7", "answer"), Some(7));
    assert_eq!(
        parse_answer("**Answer:** 1,234 sheep", "answer"),
        Some(1234)
    );
    assert_eq!(parse_answer("Answer: $45.", "answer"), Some(45));
    assert_eq!(parse_answer("answer: -3", "answer"), Some(-3));
    assert_eq!(
        parse_answer("Answer: 5\nwait\nAnswer: 6", "answer"),
        Some(6)
    );
    assert_eq!(parse_answer("Answer: N = 64 - 45", "answer"), None);
    assert_eq!(parse_answer("no final line 12", "answer"), None);
    assert_eq!(parse_answer("the answers: 12", "answer"), None);
    // "1,23" is not a thousands separator; "12,345,6" stops before the short group
    assert_eq!(parse_answer("Answer: 1,23", "answer"), Some(1));
    assert_eq!(
        parse_answer("Answer 12: 5\nAnswer 1: 9", "answer 1"),
        Some(9)
    );
    assert_eq!(parse_answer("Answer 12: 5", "answer 1"), None);
    assert_eq!(
        parse_answer("Answer 2: 40\n\nAnswer 2: 41", "answer 2"),
        Some(41)
    );
    assert_eq!(
        last_boxed("so \\boxed{22 \\text{ sheep}} and \\boxed{23}"),
        Some(23)
    );
    assert_eq!(last_boxed("Answer: 5"), None);
}

#[test]
fn outputs_are_checked() {
    let single = generate(7, 1, SHAPE);
    let a = single.parts[0].answer;
    assert!(check(&single, &format!("steps...\nAnswer: {a}")).correct);
    assert!(check(&single, &format!("steps...\n\\[\\boxed{{{a}}}\\]")).correct);
    assert!(!check(&single, &format!("Answer: {}", a + 1)).correct);
    // an answer line wins over a box
    assert!(!check(&single, &format!("\\boxed{{{a}}}\nAnswer: {}", a + 1)).correct);
    let chain = generate(7, 0, SHAPE);
    let all: String = chain
        .answers()
        .iter()
        .enumerate()
        .map(|(k, v)| format!("Problem {}: ...\nAnswer {}: {v}\n", k + 1, k + 1))
        .collect();
    let c = check(&chain, &all);
    assert!(c.correct && c.parts_right == 4 && c.parts == 4, "{c:?}");
    let three: String = all.lines().take(6).collect::<Vec<_>>().join("\n");
    let c = check(&chain, &three);
    assert!(!c.correct && c.parts_right == 3, "{c:?}");
    assert_eq!(c.given[3], None);
    // a chain answered with one box per problem and no answer lines
    let boxes: String = chain
        .answers()
        .iter()
        .map(|v| format!("\\[\\boxed{{{v}}}\\]\n"))
        .collect();
    assert!(check(&chain, &boxes).correct, "{boxes}");
    let fewer: String = boxes.lines().take(3).collect::<Vec<_>>().join("\n");
    assert_eq!(check(&chain, &fewer).parts_right, 0);
    // answer lines win over boxes
    assert_eq!(check(&chain, &format!("{boxes}{three}")).parts_right, 3);
}

#[test]
fn wilson_interval() {
    let (lo, hi) = wilson(8, 10);
    assert!(
        (lo - 0.4902).abs() < 1e-3 && (hi - 0.9433).abs() < 1e-3,
        "{lo} {hi}"
    );
    let (lo, hi) = wilson(24, 40);
    assert!(
        (lo - 0.4460).abs() < 1e-3 && (hi - 0.7365).abs() < 1e-3,
        "{lo} {hi}"
    );
    assert_eq!(wilson(0, 0), (0.0, 1.0));
    let (lo, hi) = wilson(40, 40);
    assert!(lo > 0.9 && hi == 1.0);
}

#[test]
fn options() {
    let s = settings(&[]).unwrap();
    assert_eq!(s.budgets, vec![32, 64]);
    assert_eq!(s.policies, DEFAULT_POLICIES.to_vec());
    assert_eq!((s.problems, s.n_tokens, s.min_ratio), (40, 768, 4.0));
    assert_eq!(
        s.shape,
        Shape {
            single_steps: 6,
            steps: 2,
            parts: 3
        }
    );
    let q = settings(&["--quick"]).unwrap();
    assert_eq!(
        (q.budgets.clone(), q.problems, q.n_tokens),
        (vec![32, 64], 4, 256)
    );
    let c = settings(&[
        "--policies",
        "rkv,beacon+archive/archive=1024",
        "--budgets",
        "256",
    ])
    .unwrap();
    assert_eq!(c.policies, vec!["rkv", "beacon+archive/archive=1024"]);
    assert_eq!(
        cells(&c),
        vec![
            ("none".to_string(), 0),
            ("rkv".to_string(), 256),
            ("beacon+archive/archive=1024".to_string(), 256)
        ]
    );
    assert_eq!(
        config_of("beacon/score=prob", 64, ""),
        "beacon:64/score=prob"
    );
    assert_eq!(
        config_of("beacon/score=prob", 64, "/span=3"),
        "beacon:64/score=prob/span=3"
    );
    assert_eq!(config_of("rkv", 128, ""), "rkv:128");
    assert_eq!(config_of("none", 0, "/span=3"), "none");
    for bad in [
        &["--policies", "none"][..],
        &["--policies", "beacon,beacon"],
        &["--policies", "beacon/score"],
        &["--policies", "beacon/a=b/c"],
        &["--policies", "be acon"],
        &["--budgets", "4"],
        &["--parts", "1"],
        &["--single-steps", "0"],
        &["--problems", "0"],
        &["--min-ratio", "nan"],
    ] {
        assert!(settings(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn eval_arguments() {
    let s = settings(&["--n-tokens", "99", "-t", "1", "--", "-fa", "on"]).unwrap();
    let a = eval_args(
        &s,
        Path::new("/m.gguf"),
        "beacon:64",
        Path::new("/p.jsonl"),
        Path::new("/o.json"),
    );
    let line = a.join(" ");
    assert!(
        line.starts_with("--mode reason --configs beacon:64 --tasks /p.jsonl --out /o.json"),
        "{line}"
    );
    assert!(
        line.contains("--n-tokens 99") && line.contains("-t 1") && line.ends_with("-fa on"),
        "{line}"
    );
}

fn row(p: &Problem, index: u32, policy: &str, budget: u32, correct: bool, n_gen: u64) -> Row {
    Row {
        settings: "S".into(),
        problem: p.id.clone(),
        index,
        kind: p.kind,
        policy: policy.into(),
        budget,
        config: config_of(policy, budget, ""),
        correct,
        parts_right: correct as u32,
        parts: 1,
        expected: p.answers(),
        given: vec![None],
        n_prompt: 10,
        n_gen,
        stopped: true,
        cells_peak: 0,
        evicted: 0,
        compress_events: 0,
        recalled: 0,
        plugin_ms: 0.0,
        prefill_ms: 0.0,
        gen_ms: 0.0,
        seconds: 1.0,
        output: "Answer: 1\n\"quoted\"".into(),
    }
}

#[test]
fn resume_skips_what_is_done() {
    let dir = std::env::temp_dir().join(format!("beaconkv-reason-resume-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("results.jsonl");
    let _ = std::fs::remove_file(&path);
    let s = settings(&["--policies", "beacon,recent", "--budgets", "64"]).unwrap();
    let cells = cells(&s);
    let problems: Vec<Problem> = (0..3).map(|i| generate(7, i, SHAPE)).collect();
    assert!(load_rows(&path).unwrap().is_empty());
    let all = pending(&problems, &cells, &[], "S").unwrap();
    assert_eq!(all.len(), 9);
    assert_eq!(&all[..3], &[(0, 0), (0, 1), (0, 2)]);
    // two answers written, then a line cut short by a kill
    append_row(&path, &row(&problems[0], 0, "none", 0, true, 5)).unwrap();
    append_row(&path, &row(&problems[1], 1, "recent", 64, false, 5)).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(&mut f, b"{\"settings\":\"S\",\"prob").unwrap();
    drop(f);
    let rows = load_rows(&path).unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0], row(&problems[0], 0, "none", 0, true, 5));
    // the cut line is gone from the file, so the next append starts a line
    append_row(&path, &row(&problems[2], 2, "beacon", 64, true, 5)).unwrap();
    let rows = load_rows(&path).unwrap();
    assert_eq!(rows.len(), 3);
    let left = pending(&problems, &cells, &rows, "S").unwrap();
    assert_eq!(left.len(), 6);
    assert!(!left.contains(&(0, 0)) && !left.contains(&(1, 2)) && !left.contains(&(2, 1)));
    // answers of other settings are refused, a corrupt line in the middle is an error
    assert!(pending(&problems, &cells, &rows, "T")
        .unwrap_err()
        .contains("--out"));
    std::fs::write(&path, "garbage\n{}\n").unwrap();
    assert!(load_rows(&path).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
    // the fingerprint names what changes the answers
    let f = fingerprint(&s, Path::new("/x/m.gguf"));
    assert!(
        f.contains("model=m.gguf") && f.contains("seed=7") && f.contains("n_tokens=768"),
        "{f}"
    );
}

#[test]
fn tables_flag_short_answers() {
    let s = settings(&[
        "--policies",
        "beacon",
        "--budgets",
        "8,64",
        "--problems",
        "2",
    ])
    .unwrap();
    let cells = cells(&s);
    let p: Vec<Problem> = (0..2).map(|i| generate(7, i, SHAPE)).collect();
    let rows = vec![
        row(&p[0], 0, "none", 0, true, 100),
        row(&p[1], 1, "none", 0, false, 100),
        row(&p[0], 0, "beacon", 8, true, 40),
        row(&p[1], 1, "beacon", 8, true, 40),
        row(&p[0], 0, "beacon", 64, false, 200),
        row(&p[1], 1, "beacon", 64, true, 200),
        row(&p[1], 1, "other", 64, true, 200),
    ];
    let rep = Report::new(&s, &cells, &rows);
    let t = rep.table(&s);
    assert!(
        t.contains("| none (full cache) | 50% [9–91] (1/2), 100 tok | 50% [9–91] (1/2), 100 tok |"),
        "{t}"
    );
    // 40 >= 4 x 8; 200 < 4 x 64
    assert!(
        t.contains("| beacon | 100% [34–100] (2/2), 40 tok | 50% [9–91] (1/2), 200 tok * |"),
        "{t}"
    );
    rep.check_shape(&s).unwrap();
    let csv = rep.csv();
    assert_eq!(csv.lines().count(), 1 + 3 * 3);
    assert!(csv.contains("beacon,64,all,1,2,0.5000,"), "{csv}");
    let k = rep.kind_table(&s);
    assert!(
        k.contains("| beacon | 8 | 100% [21–100] (1/1) | 100% [21–100] (1/1) |"),
        "{k}"
    );
    // a cell short of answers fails the --quick shape check
    let rep = Report::new(&s, &cells, &rows[..5]);
    assert!(rep.check_shape(&s).is_err());
}
