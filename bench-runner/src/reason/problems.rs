//! Multi-turn chain-of-thought conversations generated from a seed. A conversation is a conversation of
//! short turns, one arithmetic word problem each; from the third turn on, a problem starts from
//! the answer of a problem at least two turns back, so the model has to come back to its own
//! earlier answer while each turn's prompt stays short. Every answer is a whole number, known by
//! construction; the checker reads the `Answer: N` line each turn ends with.

use crate::tasks::Rng;
use serde::{Deserialize, Serialize};

/// How large the conversations are.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Shape {
    /// Turns (problems) per conversation.
    pub turns: usize,
    /// Operations per problem (after the starting amount).
    pub steps: usize,
}

/// The system message: short, so that the protected prefix (the first turn's prompt, at most
/// budget/4 cells) holds it.
pub const SYSTEM: &str = "You are a careful math tutor. Solve each problem step by step in plain \
text (no code), showing every calculation. End your answer with a line \"Answer to Problem k: \
N\", where k is the problem's number.";

/// One operation on the running amount: additions and subtractions only. With the 1.5B model,
/// "n boxes with k in each" was read as adding k n times or once often enough to measure the
/// wording rather than the memory ("doubles" and "splits into equal parts" more so).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Add(i64),
    Sub(i64),
}

/// One turn: the user's problem and its answer.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Turn {
    /// The user message.
    pub text: String,
    /// The computation as an arithmetic expression; `#j` stands for turn j's answer (1-based).
    pub expr: String,
    pub answer: i64,
    /// The earlier turn (1-based) whose answer the problem starts from.
    pub from: Option<usize>,
}

/// One conversation as the model sees it, with what the checker expects.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Conversation {
    pub id: String,
    pub system: String,
    pub turns: Vec<Turn>,
}

impl Conversation {
    /// The expected answers, turn by turn.
    pub fn answers(&self) -> Vec<i64> {
        self.turns.iter().map(|t| t.answer).collect()
    }

    /// A digest of what the model is shown (system message and turns), kept with every answer so
    /// that a rerun refuses answers to conversations the generator now words differently.
    pub fn digest(&self) -> String {
        format!("{:016x}", crate::tasks::fnv(&self.to_jsonl()))
    }

    /// The `--tasks` line of `beaconkv-eval --mode reason`.
    pub fn to_jsonl(&self) -> String {
        let turns: Vec<&str> = self.turns.iter().map(|t| t.text.as_str()).collect();
        serde_json::json!({"id": self.id, "system": self.system, "turns": turns}).to_string()
    }
}

/// Things counted in a word problem: (plural noun, holder, verb for a gain, verb for a loss).
type Theme = (&'static str, &'static str, &'static str, &'static str);

/// The themes; a conversation uses each at most once, so that the model cannot mix up the amounts of
/// two problems by their names.
pub const THEMES: [Theme; 10] = [
    ("sheep", "a farm", "buys", "sells"),
    ("books", "a library", "receives", "lends out"),
    ("apples", "an orchard stall", "harvests", "sells"),
    ("marbles", "a child", "wins", "loses"),
    ("bricks", "a builder", "orders", "uses"),
    ("stamps", "a collector", "buys", "trades away"),
    ("coins", "a jar", "gets", "spends"),
    ("pencils", "a school", "orders", "hands out"),
    ("tickets", "a theatre", "prints", "sells"),
    ("bottles", "a shop", "stocks", "sells"),
];

/// Largest running amount a problem reaches: small numbers keep the arithmetic about reasoning.
pub const MAX_VALUE: i64 = 600;

/// Smallest running amount: near zero the models tested start to reason about running out
/// (or go negative) instead of doing the arithmetic.
pub const MIN_VALUE: i64 = 20;

/// The next operation on `v`: results between MIN_VALUE and MAX_VALUE.
fn next_op(r: &mut Rng, v: i64) -> Op {
    loop {
        let op = match r.below(2) {
            0 => Op::Add(r.range(5, 60)),
            _ => Op::Sub(r.range(3, 60)),
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
    }
}

/// The sentence of one operation, and its expression applied to `e`.
fn sentence(op: Op, theme: Theme, e: &str) -> (String, String) {
    let (noun, _, gain, loss) = theme;
    match op {
        Op::Add(a) => (
            format!("Then it {gain} {a} more {noun}."),
            format!("({e} + {a})"),
        ),
        Op::Sub(a) => (
            format!("Then it {loss} {a} {noun}."),
            format!("({e} - {a})"),
        ),
    }
}

/// Turn `k` (1-based) about `theme`: a word problem from a number, or from the answer of turn
/// `from` (its number and answer).
fn turn(r: &mut Rng, k: usize, steps: usize, theme: Theme, from: Option<(usize, i64)>) -> Turn {
    let (noun, holder, ..) = theme;
    let (mut v, mut expr, mut text) = match from {
        Some((j, a)) => (
            a,
            format!("#{j}"),
            format!(
                "Problem {k}: {} starts with as many {noun} as your answer to Problem {j}.",
                capitalise(holder)
            ),
        ),
        None => {
            let s = r.range(30, 90);
            (
                s,
                s.to_string(),
                format!("Problem {k}: {} has {s} {noun}.", capitalise(holder)),
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
    Turn {
        text,
        expr,
        answer: v,
        from: from.map(|(j, _)| j),
    }
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
        .unwrap_or_default()
}

/// Conversation `index` of a run with `seed`. Turns 1 and 2 start from a number; turn k >= 3 starts
/// from the answer of a turn j <= k-2, drawn uniformly, so every later turn reaches back past the
/// answer just given. The same (seed, index, shape) always gives the same conversation, however many
/// a run generates. Turns beyond the number of themes reuse them.
pub fn generate(seed: u64, index: u32, shape: Shape) -> Conversation {
    let mut r = Rng::new(seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    r.next_u64();
    // the themes in a seeded order (Fisher-Yates)
    let mut themes = THEMES;
    for i in (1..themes.len()).rev() {
        themes.swap(i, r.below(i as u64 + 1) as usize);
    }
    let mut turns: Vec<Turn> = Vec::new();
    for k in 1..=shape.turns {
        let from = (k >= 3).then(|| {
            let j = 1 + r.below(k as u64 - 2) as usize;
            (j, turns[j - 1].answer)
        });
        let theme = themes[(k - 1) % themes.len()];
        turns.push(turn(&mut r, k, shape.steps.max(1), theme, from));
    }
    Conversation {
        id: format!("conversation-{index}"),
        system: SYSTEM.to_string(),
        turns,
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

/// The answer the output gives under `label` (e.g. "answer", "answer 3"): the number after the
/// label's last occurrence (case-insensitive, as a whole word; "Answer 12" is not "Answer 1",
/// and "Answer 2: 40" is not "Answer: 2").
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
        if before_ok && after_ok && !numbered_label(&lower[end..]) {
            if let Some(v) = number_after(output, end) {
                found = Some(v);
            }
        }
        from = end;
    }
    found
}

/// Whether text after a label starts with another number and a colon ("Answer 2: 40" read
/// under the label "answer"): a numbered label, not "2".
fn numbered_label(rest: &str) -> bool {
    let rest = rest.trim_start();
    let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    digits > 0 && rest[digits..].trim_start().starts_with(':')
}

/// The number in the last `\boxed{N}` of the output (LaTeX's final-answer box, which models
/// trained on maths write even when asked for an answer line).
pub fn last_boxed(output: &str) -> Option<i64> {
    let at = output.rfind("\\boxed{")?;
    number_after(output, at + "\\boxed{".len())
}

/// The last whole number of the output ("1,234" read as one; a sign is not read: every answer
/// is positive, and "75-42" ends with 42).
pub fn last_number(output: &str) -> Option<i64> {
    let b = output.as_bytes();
    let end = b.iter().rposition(u8::is_ascii_digit)? + 1;
    let run_from = b[..end]
        .iter()
        .rposition(|c| !(c.is_ascii_digit() || *c == b','))
        .map_or(0, |i| i + 1);
    // the trailing groups of exactly three digits, then the group before them (one to three digits)
    let groups: Vec<&str> = output[run_from..end].split(',').collect();
    let threes = groups.iter().rev().take_while(|g| g.len() == 3).count();
    let head = groups.len() - threes;
    let take = match head {
        _ if threes == 0 => 1,
        0 => groups.len(),
        _ if (1..=3).contains(&groups[head - 1].len()) => threes + 1,
        _ => 1,
    };
    groups[groups.len() - take..].concat().parse().ok()
}

/// The answer of turn `k` (1-based): its `Answer: N` line; labelled with the problem
/// ("Answer 3: N", "Answer to Problem 3: N") when the model numbers it; else the last
/// `\boxed{N}`; else the last number of the output (an answer whose line was left out, e.g.
/// "So, the jar now has 57 coins.").
pub fn parse_turn(output: &str, k: usize) -> Option<i64> {
    parse_answer(output, &format!("answer to problem {k}"))
        .or_else(|| parse_answer(output, &format!("answer {k}")))
        .or_else(|| parse_answer(output, "answer"))
        .or_else(|| last_boxed(output))
        .or_else(|| last_number(output))
}

/// A checked conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Check {
    /// Every turn right.
    pub correct: bool,
    pub turns_right: u32,
    pub turns: u32,
    /// The last turn right.
    pub final_right: bool,
    pub given: Vec<Option<i64>>,
}

/// Checks the outputs of a conversation's turns (one per turn; a missing one counts as wrong).
pub fn check(s: &Conversation, outputs: &[String]) -> Check {
    let given: Vec<Option<i64>> = (0..s.turns.len())
        .map(|k| outputs.get(k).and_then(|o| parse_turn(o, k + 1)))
        .collect();
    let right: Vec<bool> = given
        .iter()
        .zip(s.answers())
        .map(|(g, a)| *g == Some(a))
        .collect();
    Check {
        correct: right.iter().all(|&r| r),
        turns_right: right.iter().filter(|&&r| r).count() as u32,
        turns: s.turns.len() as u32,
        final_right: right.last().copied().unwrap_or(false),
        given,
    }
}
