//! The generator (by an independent evaluator), the answer parser, options, the resume plan and
//! the tables.

use super::driver::{
    append_row, check_cells, check_row, eval_args, fingerprint, load_rows, plan, recheck,
    EvalConversation, EvalTurn, Job, Row,
};
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

const SHAPE: Shape = Shape { turns: 4, steps: 3 };

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
    // the digest follows what the model is shown
    let d = generate(7, 0, SHAPE);
    assert_eq!(d.digest(), generate(7, 0, SHAPE).digest());
    assert_eq!(d.digest().len(), 16);
    assert_ne!(d.digest(), generate(7, 1, SHAPE).digest());
    let mut reworded = d.clone();
    reworded.turns[2].text.push(' ');
    assert_ne!(d.digest(), reworded.digest());
    for i in 0..20 {
        assert_eq!(generate(7, i, SHAPE), generate(7, i, SHAPE));
    }
    let a: Vec<Conversation> = (0..20).map(|i| generate(7, i, SHAPE)).collect();
    let b: Vec<Conversation> = (0..20).map(|i| generate(8, i, SHAPE)).collect();
    assert!(a.iter().zip(&b).all(|(x, y)| x.turns != y.turns));
    // the same index gives the same conversation however many a run generates
    assert_eq!(generate(7, 13, SHAPE), a[13]);
    let ids: std::collections::BTreeSet<&str> = a.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids.len(), a.len());
    // the tool's input line: id, system message, the turns' texts
    let v: serde_json::Value = serde_json::from_str(&a[0].to_jsonl()).unwrap();
    assert_eq!(v["id"], "conversation-0");
    assert_eq!(v["system"], SYSTEM);
    assert_eq!(v["turns"].as_array().unwrap().len(), SHAPE.turns);
    assert_eq!(v["turns"][2], a[0].turns[2].text.as_str());
}

#[test]
fn answers_are_right_by_an_independent_evaluator() {
    for seed in [1, 7, 99] {
        for i in 0..200 {
            let p = generate(seed, i, SHAPE);
            assert_eq!(p.turns.len(), SHAPE.turns);
            let mut answers = Vec::new();
            for (k, t) in p.turns.iter().enumerate() {
                let v = eval_expr(&t.expr, &answers)
                    .unwrap_or_else(|| panic!("{}: bad expression {}", p.id, t.expr));
                assert_eq!(v, t.answer, "{} turn {}: {}", p.id, k + 1, t.expr);
                assert!((MIN_VALUE..=MAX_VALUE).contains(&v), "{}: {v}", p.id);
                // each operation wraps the expression in one pair of parentheses
                assert_eq!(t.expr.matches('(').count(), SHAPE.steps);
                assert!(t.text.starts_with(&format!("Problem {}: ", k + 1)));
                // the text holds every number of the computation
                for n in t.expr.split(|c: char| !c.is_ascii_digit() && c != '#') {
                    if let Some(j) = n.strip_prefix('#') {
                        let j: usize = j.parse().unwrap();
                        assert_eq!(t.from, Some(j));
                        assert!(t.text.contains(&format!("as your answer to Problem {j}.")));
                    } else if !n.is_empty() {
                        assert!(t.text.contains(n), "{}: {n} not in {}", p.id, t.text);
                    }
                }
                answers.push(v);
            }
            // every turn counts something else, so that a reference names one turn
            let mut nouns: Vec<&str> = p
                .turns
                .iter()
                .map(|t| t.text.rsplit("How many ").next().unwrap())
                .collect();
            nouns.sort();
            nouns.dedup();
            assert_eq!(nouns.len(), SHAPE.turns, "{}", p.id);
        }
    }
}

#[test]
fn later_turns_depend_on_an_answer_at_least_two_turns_back() {
    let mut far = 0;
    for i in 0..100 {
        let p = generate(7, i, SHAPE);
        let answers = p.answers();
        for (k, t) in p.turns.iter().enumerate() {
            let k = k + 1;
            if k <= 2 {
                assert_eq!(t.from, None, "{} turn {k}", p.id);
                assert!(!t.expr.contains('#'));
                continue;
            }
            let j = t
                .from
                .unwrap_or_else(|| panic!("{} turn {k} starts from no earlier answer", p.id));
            assert!(j + 2 <= k, "{} turn {k} starts from turn {j}", p.id);
            far += (j + 3 <= k) as u32;
            // changing turn j's answer changes this turn's answer by as much: the turn is
            // computed from it, not merely mentions it
            let mut changed = answers.clone();
            changed[j - 1] += 7;
            assert_eq!(
                eval_expr(&t.expr, &changed[..k - 1]),
                Some(t.answer + 7),
                "{} turn {k}: {}",
                p.id,
                t.expr
            );
            // and no other answer matters
            for other in (1..k).filter(|&o| o != j) {
                let mut c = answers.clone();
                c[other - 1] += 7;
                assert_eq!(eval_expr(&t.expr, &c[..k - 1]), Some(t.answer));
            }
        }
    }
    // some turns reach three or more turns back
    assert!(far >= 30, "{far}");
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
    assert_eq!(
        parse_answer("the answer to Problem 1 is 57", "answer"),
        None
    );
    // "1,23" is not a thousands separator
    assert_eq!(parse_answer("Answer: 1,23", "answer"), Some(1));
    assert_eq!(
        parse_answer("Answer 12: 5\nAnswer 1: 9", "answer 1"),
        Some(9)
    );
    assert_eq!(parse_answer("Answer 12: 5", "answer 1"), None);
    // a numbered label is not the number after "Answer"
    assert_eq!(parse_answer("Answer 2: 40", "answer"), None);
    assert_eq!(parse_answer("Answer 57", "answer"), Some(57));
    assert_eq!(
        last_boxed("so \\boxed{22 \\text{ sheep}} and \\boxed{23}"),
        Some(23)
    );
    assert_eq!(last_boxed("Answer: 5"), None);
    // a turn's answer: its line, a line numbered with its problem, else the last box
    assert_eq!(parse_turn("...\nAnswer: 81", 3), Some(81));
    assert_eq!(parse_turn("...\nAnswer 3: 81", 3), Some(81));
    assert_eq!(parse_turn("...\n**Answer to Problem 3:** 81", 3), Some(81));
    assert_eq!(
        parse_turn("from the answer to Problem 1 (57)... Answer: 81", 3),
        Some(81)
    );
    assert_eq!(parse_turn("...\\[\\boxed{81}\\]", 3), Some(81));
    // a line labelled with another problem is not this turn's line; 81 is still the output's
    // last number
    assert_eq!(parse_answer("...\nAnswer 2: 81", "answer 3"), None);
    assert_eq!(parse_answer("...\nAnswer 2: 81", "answer"), None);
    assert_eq!(parse_turn("...\nAnswer 2: 81", 3), Some(81));
    assert_eq!(parse_turn("I cannot tell.", 3), None);
    // no answer line and no box: the last number of the output
    assert_eq!(
        parse_turn("75 - 42 = 33, so the jar now has 33 coins.", 3),
        Some(33)
    );
    assert_eq!(parse_turn("so it has 1,234 coins", 3), Some(1234));
    assert_eq!(parse_turn("from 75-42", 3), Some(42));
    assert_eq!(last_number("steps 1,2,3"), Some(3));
    assert_eq!(last_number("12,345,678 and 9"), Some(9));
    assert_eq!(last_number("12,345,678."), Some(12345678));
    assert_eq!(last_number("1234,567"), Some(567));
    assert_eq!(last_number("has 123,456 now"), Some(123456));
    assert_eq!(last_number("a,456"), Some(456));
    assert_eq!(last_number("no digits"), None);
    // an answer line wins over a later number
    assert_eq!(
        parse_turn("Answer to Problem 3: 81\nNext, Problem 4.", 3),
        Some(81)
    );
}

#[test]
fn conversations_are_checked_turn_by_turn() {
    let p = generate(7, 1, SHAPE);
    let a = p.answers();
    let right: Vec<String> = a.iter().map(|v| format!("steps...\nAnswer: {v}")).collect();
    let c = check(&p, &right);
    assert!(c.correct && c.final_right, "{c:?}");
    assert_eq!((c.turns_right, c.turns), (4, 4));
    assert_eq!(c.given, a.iter().map(|&v| Some(v)).collect::<Vec<_>>());
    // one wrong turn: the conversation is wrong, the others still count
    let mut one = right.clone();
    one[1] = format!("Answer: {}", a[1] + 1);
    let c = check(&p, &one);
    assert!(!c.correct && c.final_right && c.turns_right == 3, "{c:?}");
    // the last turn missing its line, and a turn never answered
    let mut last = right.clone();
    last[3] = "so it has some left".into();
    let c = check(&p, &last);
    assert!(!c.correct && !c.final_right && c.turns_right == 3, "{c:?}");
    assert_eq!(c.given[3], None);
    let c = check(&p, &right[..2]);
    assert_eq!((c.turns_right, c.turns), (2, 4));
    // an answer line wins over a box
    let mut boxed = right.clone();
    boxed[0] = format!("\\boxed{{{}}}\nAnswer: {}", a[0], a[0] + 1);
    assert_eq!(check(&p, &boxed).turns_right, 3);
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
    assert_eq!(s.budgets, vec![256, 384]);
    assert_eq!(s.policies, DEFAULT_POLICIES.to_vec());
    assert!(s.default_policies);
    assert!(s.policies.contains(&"rkv".to_string()));
    assert_eq!(
        (s.conversations, s.n_tokens, s.parallel, s.min_ratio),
        (8, 256, 24, 4.0)
    );
    assert_eq!(
        s.shape,
        Shape {
            turns: 14,
            steps: 3
        }
    );
    let q = settings(&["--quick"]).unwrap();
    assert_eq!(
        (
            q.budgets.clone(),
            q.conversations,
            q.n_tokens,
            q.parallel,
            q.shape
        ),
        (vec![32, 64], 2, 16, 2, Shape { turns: 3, steps: 1 })
    );
    let c = settings(&[
        "--policies",
        "rkv,beacon+archive/archive=1024",
        "--budgets",
        "256,128",
    ])
    .unwrap();
    assert!(!c.default_policies);
    assert_eq!(c.policies, vec!["rkv", "beacon+archive/archive=1024"]);
    // budget-major: a run cut short has every policy at the first budget
    assert_eq!(
        cells(&c),
        vec![
            ("none".to_string(), 0),
            ("rkv".to_string(), 256),
            ("beacon+archive/archive=1024".to_string(), 256),
            ("rkv".to_string(), 128),
            ("beacon+archive/archive=1024".to_string(), 128)
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
    // "none" alone: the full cache only
    let f = settings(&["--policies", "none"]).unwrap();
    assert!(f.policies.is_empty() && !f.default_policies);
    assert_eq!(cells(&f), vec![("none".to_string(), 0)]);
    assert_eq!(config_of("none", 0, "/span=3"), "none");
    for (bad, names) in [
        (&["--policies", "none,beacon"][..], "'none'"),
        (&["--policies", "beacon,beacon"], "twice"),
        (&["--policies", "beacon/score"], "beacon/score"),
        (&["--policies", "beacon/a=b/c"], "beacon/a=b/c"),
        (&["--policies", "be acon"], "be acon"),
        (&["--budgets", "4"], "--budgets"),
        (&["--turns", "2"], "--turns"),
        (&["--steps", "0"], "--steps"),
        (&["--conversations", "0"], "--conversations"),
        (&["--parallel", "0"], "--parallel"),
        (&["--n-tokens", "0"], "--n-tokens"),
        (&["--min-ratio", "nan"], "--min-ratio"),
    ] {
        let err = settings(bad).unwrap_err();
        assert!(err.contains(names), "{bad:?}: {err}");
    }
}

#[test]
fn eval_arguments() {
    let s = settings(&[
        "--n-tokens",
        "99",
        "-t",
        "1",
        "--parallel",
        "6",
        "--",
        "-fa",
        "on",
    ])
    .unwrap();
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
        line.contains("--n-tokens 99")
            && line.contains("-np 6")
            && line.contains("-t 1")
            && line.ends_with("-fa on"),
        "{line}"
    );
}

/// The tool's line for a conversation, every turn answered with `answers`.
fn eval_line(p: &Conversation, config: &str, answers: &[i64], n_gen: u64) -> EvalConversation {
    EvalConversation {
        id: p.id.clone(),
        config: config.into(),
        turns: answers
            .iter()
            .map(|a| EvalTurn {
                n_prompt: 40,
                n_gen,
                stopped: true,
                output: format!("...\nAnswer: {a}"),
            })
            .collect(),
        n_prompt: 40 * answers.len() as u64,
        n_gen: n_gen * answers.len() as u64,
        cells_peak: 100,
        prefix_len: 30,
        evicted: 5,
        compress_events: 1,
        recalled: 0,
        seconds: 1.0,
    }
}

fn row(
    p: &Conversation,
    index: u32,
    policy: &str,
    budget: u32,
    wrong_turns: usize,
    n_gen: u64,
) -> Row {
    let s = settings(&["--turns", "4", "--n-tokens", "1000"]).unwrap();
    let mut answers = p.answers();
    for a in answers.iter_mut().take(wrong_turns) {
        *a += 1;
    }
    let config = config_of(policy, budget, "");
    check_row(
        &s,
        "S",
        p,
        index,
        &(policy.to_string(), budget),
        &eval_line(p, &config, &answers, n_gen),
    )
    .unwrap()
}

#[test]
fn tool_lines_become_checked_rows() {
    let s = settings(&["--turns", "4", "--n-tokens", "100"]).unwrap();
    let p = generate(7, 3, SHAPE);
    let cell = ("beacon".to_string(), 64);
    let mut answers = p.answers();
    answers[3] += 1;
    let r = check_row(
        &s,
        "S",
        &p,
        3,
        &cell,
        &eval_line(&p, "beacon:64", &answers, 90),
    )
    .unwrap();
    assert!(!r.correct && !r.final_right);
    assert_eq!((r.turns_right, r.turns, r.n_gen, r.cut), (3, 4, 360, 0));
    assert_eq!(r.turn_gen, vec![90; 4]);
    assert_eq!(r.from[0], None);
    assert_eq!(r.from[2], p.turns[2].from.map(|j| j as u32));
    // a line of another conversation or config, a turn missing, a turn over the cap
    let mut other = eval_line(&p, "beacon:64", &answers, 90);
    other.config = "beacon:128".into();
    assert!(check_row(&s, "S", &p, 3, &cell, &other).is_err());
    let mut short = eval_line(&p, "beacon:64", &answers, 90);
    short.turns.pop();
    assert!(check_row(&s, "S", &p, 3, &cell, &short)
        .unwrap_err()
        .contains("3 turns answered, expected 4"));
    let long = eval_line(&p, "beacon:64", &answers, 101);
    assert!(check_row(&s, "S", &p, 3, &cell, &long)
        .unwrap_err()
        .contains("101 tokens"));
    // a turn cut at the cap counts as cut
    let mut cut = eval_line(&p, "beacon:64", &answers, 100);
    cut.turns[1].stopped = false;
    assert_eq!(check_row(&s, "S", &p, 3, &cell, &cut).unwrap().cut, 1);
}

#[test]
fn resume_plans_what_is_missing_in_rounds() {
    let dir = std::env::temp_dir().join(format!("beaconkv-reason-resume-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("results.jsonl");
    let _ = std::fs::remove_file(&path);
    let s = settings(&["--policies", "beacon,recent", "--budgets", "64"]).unwrap();
    let cells = cells(&s);
    let conversations: Vec<Conversation> = (0..5).map(|i| generate(7, i, SHAPE)).collect();
    assert!(load_rows(&path).unwrap().is_empty());
    // rounds of 2 conversations: every cell gets a round before the next round starts
    let all = plan(&conversations, &cells, &[], "S", 2).unwrap();
    let job = |cell, conversations: &[usize]| Job {
        cell,
        conversations: conversations.to_vec(),
    };
    assert_eq!(
        all,
        vec![
            job(0, &[0, 1]),
            job(1, &[0, 1]),
            job(2, &[0, 1]),
            job(0, &[2, 3]),
            job(1, &[2, 3]),
            job(2, &[2, 3]),
            job(0, &[4]),
            job(1, &[4]),
            job(2, &[4]),
        ]
    );
    // three conversations written, then a line cut short by a kill
    append_row(&path, &row(&conversations[0], 0, "none", 0, 0, 5)).unwrap();
    append_row(&path, &row(&conversations[1], 1, "recent", 64, 1, 5)).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(&mut f, b"{\"settings\":\"S\",\"sess").unwrap();
    drop(f);
    let rows = load_rows(&path).unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0], row(&conversations[0], 0, "none", 0, 0, 5));
    // the cut line is gone from the file, so the next append starts a line
    append_row(&path, &row(&conversations[4], 4, "beacon", 64, 0, 5)).unwrap();
    let rows = load_rows(&path).unwrap();
    assert_eq!(rows.len(), 3);
    let left = plan(&conversations, &cells, &rows, "S", 2).unwrap();
    assert_eq!(
        left,
        vec![
            job(0, &[1]),
            job(1, &[0, 1]),
            job(2, &[0]),
            job(0, &[2, 3]),
            job(1, &[2, 3]),
            job(2, &[2, 3]),
            job(0, &[4]),
            job(2, &[4]),
        ]
    );
    // answers of other settings are refused, a corrupt line in the middle is an error
    assert!(plan(&conversations, &cells, &rows, "T", 2)
        .unwrap_err()
        .contains("--out"));
    // an answer to a conversation worded otherwise (an older generator) is refused, naming it
    let mut reworded = rows.clone();
    reworded[1].digest = "0123456789abcdef".into();
    let err = plan(&conversations, &cells, &reworded, "S", 2).unwrap_err();
    assert!(
        err.contains("conversation-1") && err.contains("--out"),
        "{err}"
    );
    // so is one of another conversation at that index
    let mut moved = rows.clone();
    moved[1].conversation = "conversation-9".into();
    assert!(plan(&conversations, &cells, &moved, "S", 2).is_err());
    // rows of conversations beyond this run's count are kept, not checked
    let fewer = plan(&conversations[..1], &cells, &rows, "S", 2).unwrap();
    assert_eq!(fewer, vec![job(1, &[0]), job(2, &[0])]);
    std::fs::write(&path, "garbage\n{}\n").unwrap();
    assert!(load_rows(&path).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
    // the fingerprint names what changes the answers
    let f = fingerprint(&s, Path::new("/x/m.gguf"));
    for part in [
        "model=m.gguf",
        "seed=7",
        "turns=14",
        "steps=3",
        "n_tokens=256",
        "parallel=24",
    ] {
        assert!(f.contains(part), "{part}: {f}");
    }
}

#[test]
fn tables_flag_short_conversations() {
    let s = settings(&[
        "--policies",
        "beacon",
        "--budgets",
        "8,64",
        "--conversations",
        "2",
        "--turns",
        "4",
    ])
    .unwrap();
    let cells = cells(&s);
    let p: Vec<Conversation> = (0..2).map(|i| generate(7, i, SHAPE)).collect();
    let rows = vec![
        row(&p[0], 0, "none", 0, 0, 25),
        row(&p[1], 1, "none", 0, 1, 25),
        row(&p[0], 0, "beacon", 8, 0, 10),
        row(&p[1], 1, "beacon", 8, 0, 10),
        row(&p[0], 0, "beacon", 64, 4, 50),
        row(&p[1], 1, "beacon", 64, 0, 50),
        row(&p[1], 1, "other", 64, 0, 50),
    ];
    let rep = Report::new(&cells, &rows);
    let t = rep.table(&s);
    assert!(
        t.contains("| none (full cache) | 50% [9–91] (1/2), turns 88% [53–98] (7/8), 100 tok | 50% [9–91] (1/2), turns 88% [53–98] (7/8), 100 tok |"),
        "{t}"
    );
    // 40 >= 4 x 8; 200 < 4 x 64
    assert!(
        t.contains("| beacon | 100% [34–100] (2/2), turns 100% [68–100] (8/8), 40 tok | 50% [9–91] (1/2), turns 50% [22–78] (4/8), 200 tok * |"),
        "{t}"
    );
    rep.check_shape(&s).unwrap();
    let d = rep.detail_table();
    // the first turn wrong: the last is right; two turns of four reach back in each conversation
    assert!(
        d.contains(
            "| none | – | 50% [9–91] (1/2) | 100% (2/2) | 88% (7/8) | 100% (4/4) | 25 | 0/8 | 5 |"
        ),
        "{d}"
    );
    assert!(
        d.contains(
            "| beacon | 64 | 50% [9–91] (1/2) | 50% (1/2) | 50% (4/8) | 50% (2/4) | 50 | 0/8 | 5 |"
        ),
        "{d}"
    );
    let csv = rep.csv();
    assert_eq!(csv.lines().count(), 1 + 3);
    assert!(csv.contains("beacon,64,1,2,0.5000,"), "{csv}");
    // a cell short of conversations fails the --quick shape check
    let rep = Report::new(&cells, &rows[..5]);
    assert!(rep.check_shape(&s).is_err());
}

#[test]
fn quick_checks_the_cells_the_tool_reports() {
    let p = generate(7, 0, SHAPE);
    // eval_line: 4 turns of 40 prompt tokens and 25 generated, 100 cells at most, 5 evicted
    let full = row(&p, 0, "none", 0, 0, 25);
    let b64 = row(&p, 0, "beacon", 64, 0, 25);
    let mut ok_full = full.clone();
    ok_full.cells_peak = 260;
    ok_full.evicted = 0;
    let mut ok_b = b64.clone();
    ok_b.cells_peak = 64;
    check_cells(&[ok_full.clone(), ok_b.clone()]).unwrap();
    // the full cache holding fewer cells than tokens, or evicting
    assert!(check_cells(&[full])
        .unwrap_err()
        .contains("held 100 cells of 260 tokens"));
    // a compressed cell above its budget and prompt room (the default prompt=keep: as many
    // prompt cells again), or never evicting past them
    check_cells(std::slice::from_ref(&b64)).unwrap();
    let mut over = b64;
    over.cells_peak = 129;
    assert!(check_cells(&[over]).unwrap_err().contains("held 129 cells"));
    let mut kept_all = ok_b.clone();
    kept_all.evicted = 0;
    assert!(check_cells(&[kept_all])
        .unwrap_err()
        .contains("evicted nothing from 260 tokens"));
    // a conversation within its budget need not evict
    let mut short = ok_b;
    short.budget = 300;
    short.evicted = 0;
    check_cells(&[short]).unwrap();
}

#[test]
fn tables_follow_the_checker_of_this_version() {
    let p: Vec<Conversation> = (0..2).map(|i| generate(7, i, SHAPE)).collect();
    // a row written by a checker that missed the last turn's answer ("... has 57 coins.")
    let mut r = row(&p[0], 0, "beacon", 64, 0, 25);
    let last = p[0].answers()[3];
    r.outputs[3] = format!("so the jar now has {last} coins.");
    r.correct = false;
    r.turns_right = 3;
    r.final_right = false;
    r.given[3] = None;
    let fixed = recheck(vec![r.clone()], &p);
    assert!(fixed[0].correct && fixed[0].final_right, "{:?}", fixed[0]);
    assert_eq!((fixed[0].turns_right, fixed[0].given[3]), (4, Some(last)));
    // a conversation beyond this run's count is left as written
    assert_eq!(recheck(vec![r.clone()], &p[..0]), vec![r]);
}
