//! Chain-of-thought problems generated from a seed: multi-step arithmetic word problems, and
//! sequences of several problems where a later one starts from an earlier one's answer (so the
//! answer has to come back to its own earlier steps). Every answer is a whole number, known by
//! construction; the checker reads the `Answer: N` / `Answer k: N` lines the prompt asks for.

use crate::tasks::Rng;
use serde::{Deserialize, Serialize};

/// The two kinds of problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// One word problem of several steps, one final answer.
    Single,
    /// Several word problems in one answer; later ones start from an earlier one's answer.
    Chain,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Single => "single",
            Kind::Chain => "chain",
        }
    }
}

/// How large the problems are.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Shape {
    /// Operations of a single problem (after the starting amount).
    pub single_steps: usize,
    /// Operations per word problem of a chain.
    pub steps: usize,
    /// Problems per chain (at least 2).
    pub parts: usize,
}

/// One operation on the running amount. Only additions, subtractions and added groups: with
/// 1.5B-parameter models, "doubles", "splits into equal parts and keeps one" and "sells 4 cases
/// with 8 in each" were misread often enough to measure the wording rather than the reasoning.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Add(i64),
    Sub(i64),
    /// `n` groups of `k` more.
    AddGroups(i64, i64),
}

/// One word problem: where it starts, its operations, its answer.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Part {
    /// The sentences of the problem.
    pub text: String,
    /// The computation as an arithmetic expression; `#j` stands for part j's answer (1-based).
    pub expr: String,
    pub answer: i64,
}

/// One problem as the model sees it, with what the checker expects.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Problem {
    pub id: String,
    pub kind: Kind,
    pub prompt: String,
    pub parts: Vec<Part>,
}

impl Problem {
    /// The expected answers, in order (one for a single problem).
    pub fn answers(&self) -> Vec<i64> {
        self.parts.iter().map(|p| p.answer).collect()
    }

    /// The `--tasks` line of `beaconkv-eval --mode reason`.
    pub fn to_jsonl(&self) -> String {
        serde_json::json!({"id": self.id, "prompt": self.prompt}).to_string()
    }
}

/// Things counted in a word problem: (plural noun, holder, verb for a gain, verb for a loss,
/// container for groups).
const THEMES: [(&str, &str, &str, &str, &str); 10] = [
    ("sheep", "a farm", "buys", "sells", "pens"),
    ("books", "a library", "receives", "lends out", "boxes"),
    ("apples", "an orchard stall", "harvests", "sells", "crates"),
    ("marbles", "a child", "wins", "loses", "bags"),
    ("bricks", "a builder", "orders", "uses", "pallets"),
    ("stamps", "a collector", "buys", "trades away", "albums"),
    ("coins", "a jar", "gets", "spends", "rolls"),
    ("pencils", "a school", "orders", "hands out", "packs"),
    ("tickets", "a theatre", "prints", "sells", "books"),
    ("bottles", "a shop", "stocks", "sells", "cases"),
];

/// Largest running amount a problem reaches: small numbers keep the arithmetic about reasoning.
const MAX_VALUE: i64 = 600;

/// Smallest running amount: near zero the models tested start to reason about running out
/// (or go negative) instead of doing the arithmetic.
const MIN_VALUE: i64 = 20;

/// The next operation on `v`: results between MIN_VALUE and MAX_VALUE.
fn next_op(r: &mut Rng, v: i64) -> Op {
    loop {
        let op = match r.below(3) {
            0 => Op::Add(r.range(5, 60)),
            1 => Op::Sub(r.range(3, 60)),
            _ => Op::AddGroups(r.range(2, 6), r.range(3, 15)),
        };
        let w = apply(v, op);
        if (MIN_VALUE..=MAX_VALUE).contains(&w) {
            return op;
        }
    }
}

fn apply(v: i64, op: Op) -> i64 {
    match op {
        Op::Add(a) => v + a,
        Op::Sub(a) => v - a,
        Op::AddGroups(n, k) => v + n * k,
    }
}

/// The sentence of one operation, and its expression applied to `e`.
fn sentence(op: Op, theme: (&str, &str, &str, &str, &str), e: &str) -> (String, String) {
    let (noun, _, gain, loss, groups) = theme;
    match op {
        Op::Add(a) => (
            format!("Then it {gain} {a} more {noun}."),
            format!("({e} + {a})"),
        ),
        Op::Sub(a) => (
            format!("Then it {loss} {a} {noun}."),
            format!("({e} - {a})"),
        ),
        Op::AddGroups(n, k) => (
            format!("Then it {gain} {n} {groups} with {k} {noun} in each."),
            format!("({e} + {n} * {k})"),
        ),
    }
}

/// A word problem from `start` (a number, or an earlier part's answer `from`).
fn word_problem(r: &mut Rng, steps: usize, from: Option<(usize, i64)>) -> Part {
    let theme = *r.pick(&THEMES);
    let (noun, holder, ..) = theme;
    let (mut v, mut expr, mut text) = match from {
        Some((j, a)) => (
            a,
            format!("#{j}"),
            format!(
                "{} starts with as many {noun} as the answer to Problem {j}.",
                capitalise(holder)
            ),
        ),
        None => {
            let s = r.range(30, 90);
            (
                s,
                s.to_string(),
                format!("{} has {s} {noun}.", capitalise(holder)),
            )
        }
    };
    for _ in 0..steps {
        let op = next_op(r, v);
        let (s, e) = sentence(op, theme, &expr);
        v = apply(v, op);
        text.push(' ');
        text.push_str(&s);
        expr = e;
    }
    text.push_str(&format!(" How many {noun} does it have now?"));
    Part {
        text,
        expr,
        answer: v,
    }
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
        .unwrap_or_default()
}

const SINGLE_TAIL: &str = "Think step by step: explain each step in words and show every \
calculation. When you are done, write the final whole number on a last line of the form \
\"Answer: N\".";

fn chain_head(parts: usize) -> String {
    format!(
        "Solve the following {parts} problems in order. Some problems use the answer of an earlier \
         problem. For each problem, think step by step: explain each step in words and show every \
         calculation, then write a line of the form \"Answer k: N\", where k is the problem's \
         number and N its whole-number answer. Then go on to the next problem."
    )
}

/// Problem `index` of a run with `seed`: even indices are chains, odd ones single problems. The
/// same (seed, index, shape) always gives the same problem, however many a run generates.
pub fn generate(seed: u64, index: u32, shape: Shape) -> Problem {
    let mut r = Rng::new(seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    r.next_u64();
    let kind = if index.is_multiple_of(2) {
        Kind::Chain
    } else {
        Kind::Single
    };
    let id = format!("{}-{index}", kind.as_str());
    match kind {
        Kind::Single => {
            let part = word_problem(&mut r, shape.single_steps, None);
            let prompt = format!("{}\n\n{SINGLE_TAIL}", part.text);
            Problem {
                id,
                kind,
                prompt,
                parts: vec![part],
            }
        }
        Kind::Chain => {
            let n = shape.parts.max(2);
            let mut parts: Vec<Part> = Vec::new();
            for k in 0..n {
                // From the third problem on, about half start from an answer two or more
                // problems back; the second one alternates with a fresh start.
                let from = if k == 0 || (k == 1 && r.below(2) == 0) {
                    None
                } else {
                    let j = if k >= 2 && r.below(2) == 0 {
                        r.below(k as u64 - 1) as usize
                    } else {
                        k - 1
                    };
                    Some((j + 1, parts[j].answer))
                };
                parts.push(word_problem(&mut r, shape.steps, from));
            }
            // at least one problem uses an earlier answer
            if parts.iter().all(|p| !p.expr.contains('#')) {
                let last = parts.len() - 1;
                parts[last] = word_problem(&mut r, shape.steps, Some((1, parts[0].answer)));
            }
            let mut prompt = chain_head(n);
            prompt.push_str("\n\n");
            for (k, p) in parts.iter().enumerate() {
                prompt.push_str(&format!("Problem {}: {}\n", k + 1, p.text));
            }
            let prompt = prompt.trim_end().to_string();
            Problem {
                id,
                kind,
                prompt,
                parts,
            }
        }
    }
}

/// The whole number right after position `at` of `s` (skipping spaces, `*`, `:`, `=`, `$` and
/// similar), with thousands separators; None when something else comes first.
fn number_after(s: &str, at: usize) -> Option<i64> {
    let rest = &s[at..];
    let start = rest.find(|c: char| !" \t*:=$_\\[]{}()`'\"".contains(c))?;
    let rest = &rest[start..];
    let (neg, rest) = match rest.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, rest),
    };
    let mut digits = String::new();
    let mut chars = rest.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_ascii_digit() {
            digits.push(c);
            chars.next();
        } else if c == ',' && !digits.is_empty() {
            // "1,234": a separator only when three digits follow
            let ahead: String = chars.clone().skip(1).take(4).collect();
            let three = ahead.chars().take(3).all(|d| d.is_ascii_digit()) && ahead.len() >= 3;
            let fourth_digit = ahead.chars().nth(3).is_some_and(|d| d.is_ascii_digit());
            if three && !fourth_digit {
                chars.next();
            } else {
                break;
            }
        } else {
            break;
        }
    }
    let v: i64 = digits.parse().ok()?;
    Some(if neg { -v } else { v })
}

/// The answer the output gives under `label` ("answer" for a single problem, "answer 2" for part
/// 2 of a chain): the number after the label's last occurrence (case-insensitive, as a whole
/// word; "Answer 12" is not "Answer 1").
pub fn parse_answer(output: &str, label: &str) -> Option<i64> {
    let lower = output.to_ascii_lowercase();
    let label = label.to_ascii_lowercase();
    let mut found = None;
    let mut from = 0;
    while let Some(i) = lower[from..].find(&label) {
        let at = from + i;
        let end = at + label.len();
        let before_ok = at == 0 || !lower.as_bytes()[at - 1].is_ascii_alphanumeric();
        let after_ok = lower
            .as_bytes()
            .get(end)
            .is_none_or(|b| !b.is_ascii_alphanumeric());
        if before_ok && after_ok {
            if let Some(v) = number_after(output, end) {
                found = Some(v);
            }
        }
        from = end;
    }
    found
}

/// The number in the last `\boxed{N}` of the output (LaTeX's final-answer box, which models
/// trained on maths write even when asked for an answer line).
pub fn last_boxed(output: &str) -> Option<i64> {
    let at = output.rfind("\\boxed{")?;
    let v = number_after(output, at + "\\boxed{".len())?;
    Some(v)
}

/// The numbers of every `\boxed{N}` of the output, in order.
pub fn all_boxed(output: &str) -> Vec<Option<i64>> {
    output
        .match_indices("\\boxed{")
        .map(|(at, m)| number_after(output, at + m.len()))
        .collect()
}

/// The answers an output gives to a problem, in order (None where none is found): its answer
/// lines; for a single problem without one, the last `\boxed{N}`; for a chain without any,
/// its boxes when there is exactly one per problem.
pub fn parse_answers(p: &Problem, output: &str) -> Vec<Option<i64>> {
    match p.kind {
        Kind::Single => vec![parse_answer(output, "answer").or_else(|| last_boxed(output))],
        Kind::Chain => {
            let lines: Vec<Option<i64>> = (1..=p.parts.len())
                .map(|k| parse_answer(output, &format!("answer {k}")))
                .collect();
            let boxed = all_boxed(output);
            if lines.iter().all(Option::is_none) && boxed.len() == p.parts.len() {
                boxed
            } else {
                lines
            }
        }
    }
}

/// A checked output: correct when every answer is right.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Check {
    pub correct: bool,
    /// Answers right, of `parts`.
    pub parts_right: u32,
    pub parts: u32,
    pub given: Vec<Option<i64>>,
}

pub fn check(p: &Problem, output: &str) -> Check {
    let given = parse_answers(p, output);
    let right = given
        .iter()
        .zip(p.answers())
        .filter(|(g, a)| **g == Some(*a))
        .count() as u32;
    Check {
        correct: right as usize == p.parts.len(),
        parts_right: right,
        parts: p.parts.len() as u32,
        given,
    }
}
