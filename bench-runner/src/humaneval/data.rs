//! HumanEval problems and the bundles the model is asked to write: a bundle is one user request
//! holding the specifications (the problems' prompts) of several functions, asking for one
//! ```python block per function in order. Bundles are consecutive problem numbers of one split.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// Problems numbered below this are the tuning split; the rest (100–163) the held-out split.
pub const HELDOUT_FROM: u32 = 100;

/// One HumanEval problem (a line of HumanEval.jsonl).
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Problem {
    pub task_id: String,
    /// Imports, helper functions and the function's signature with its docstring.
    pub prompt: String,
    pub entry_point: String,
    /// Defines `check(candidate)`.
    pub test: String,
    /// The body that completes `prompt`.
    pub canonical_solution: String,
    /// The number in `task_id` ("HumanEval/17": 17); filled in by [`load`].
    #[serde(skip)]
    pub number: u32,
}

impl Problem {
    /// The problem's split.
    pub fn split(&self) -> Split {
        if self.number < HELDOUT_FROM {
            Split::Tune
        } else {
            Split::Heldout
        }
    }
}

/// Reads HumanEval.jsonl: every line a problem with a distinct `HumanEval/N` id.
pub fn load(path: &Path) -> Result<Vec<Problem>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// [`load`] from the text of the file.
pub fn parse(text: &str) -> Result<Vec<Problem>, String> {
    let mut problems: Vec<Problem> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut p: Problem =
            serde_json::from_str(line).map_err(|e| format!("line {}: {e}", i + 1))?;
        p.number = p
            .task_id
            .strip_prefix("HumanEval/")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("line {}: task_id '{}' is not HumanEval/N", i + 1, p.task_id))?;
        if !is_identifier(&p.entry_point) {
            return Err(format!(
                "{}: entry_point '{}' is not a name",
                p.task_id, p.entry_point
            ));
        }
        if problems.iter().any(|q| q.number == p.number) {
            return Err(format!("{} is given twice", p.task_id));
        }
        problems.push(p);
    }
    if problems.is_empty() {
        return Err("no problems".into());
    }
    problems.sort_by_key(|p| p.number);
    Ok(problems)
}

/// A Python identifier of ASCII letters, digits and `_`, not starting with a digit.
pub fn is_identifier(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    /// Problems 0–99: the set tuning may look at.
    Tune,
    /// Problems 100–163: reported in a column of their own.
    Heldout,
}

impl Split {
    pub fn as_str(self) -> &'static str {
        match self {
            Split::Tune => "tune",
            Split::Heldout => "heldout",
        }
    }

    /// The column heading.
    pub fn title(self) -> &'static str {
        match self {
            Split::Tune => "tuning (0–99)",
            Split::Heldout => "held-out (100–163)",
        }
    }
}

/// One request: several problems of one split, in number order.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Bundle {
    /// "tune-0", "heldout-3": the split and the bundle's place in it.
    pub id: String,
    pub split: Split,
    /// Indices into the problems (not problem numbers).
    pub problems: Vec<usize>,
    /// The user message.
    pub text: String,
    /// The names of the own-values dictionary asked for (empty: none, [`super::own_values`]).
    pub own_names: Vec<&'static str>,
    /// What the answer starts with, teacher-forced as if generated (the own-values dictionary).
    pub answer_start: Option<String>,
    /// A second user turn after the answer (the own values asked for again).
    pub follow_up: Option<String>,
}

/// The request for some problems: the task, then each problem's prompt in a code block.
pub fn request(problems: &[&Problem]) -> String {
    let n = problems.len();
    let t = if n == 1 {
        "Write the Python function below. Give it complete (its `def` line, its body, and any \
         imports or helper functions it needs) in a ```python code block. Do not add tests or \
         example usage.\n"
            .to_string()
    } else {
        format!(
            "Write the {n} Python functions below. Give each one complete (its `def` line, its \
             body, and any imports or helper functions it needs) in a ```python code block of its \
             own, in the order given. Do not add tests or example usage.\n"
        )
    };
    t + &specifications(problems)
}

/// Each problem's prompt in a code block, numbered.
fn specifications(problems: &[&Problem]) -> String {
    let n = problems.len();
    let mut t = String::new();
    for (i, p) in problems.iter().enumerate() {
        t.push_str(&format!(
            "\nFunction {} of {n}: `{}`\n```python\n{}\n```\n",
            i + 1,
            p.entry_point,
            p.prompt.trim_matches('\n')
        ));
    }
    t
}

/// How the requests are made: functions per request, and the own values asked for besides
/// (0: none).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shape {
    pub size: usize,
    pub own_values: u32,
}

impl Shape {
    #[cfg(test)]
    pub fn functions(size: usize) -> Shape {
        Shape {
            size,
            own_values: 0,
        }
    }
}

fn make_bundle(
    problems: &[Problem],
    split: Split,
    id: String,
    ids: Vec<usize>,
    shape: Shape,
) -> Bundle {
    let ps: Vec<&Problem> = ids.iter().map(|&i| &problems[i]).collect();
    if shape.own_values == 0 {
        return Bundle {
            id,
            split,
            problems: ids,
            text: request(&ps),
            own_names: Vec::new(),
            answer_start: None,
            follow_up: None,
        };
    }
    use super::own_values as own;
    let names = own::names(&id, shape.own_values as usize);
    let start = own::answer_start(&names, &own::numbers(&id, names.len()));
    Bundle {
        text: own::request(names.len(), ps.len(), &specifications(&ps)),
        follow_up: Some(own::follow_up(&names)),
        answer_start: Some(start),
        own_names: names,
        id,
        split,
        problems: ids,
    }
}

/// The bundles of one split: its problems in number order, `size` at a time (the last one may
/// hold fewer), at most `limit` of them. With own values, a second grouping follows ("tune-s0",
/// ...): the split's problems taken `size` apart (0, 25, 50, 75 of 100 at size 4), so that a
/// split gives twice as many requests, each a different set of functions.
pub fn bundles(
    problems: &[Problem],
    split: Split,
    shape: Shape,
    limit: Option<usize>,
) -> Vec<Bundle> {
    let ids: Vec<usize> = (0..problems.len())
        .filter(|&i| problems[i].split() == split)
        .collect();
    let size = shape.size.max(1);
    let mut groups: Vec<(String, Vec<usize>)> = ids
        .chunks(size)
        .enumerate()
        .map(|(k, c)| (format!("{}-{k}", split.as_str()), c.to_vec()))
        .collect();
    if shape.own_values > 0 {
        let stride = ids.len().div_ceil(size);
        for k in 0..stride {
            let g: Vec<usize> = ids.iter().skip(k).step_by(stride).copied().collect();
            groups.push((format!("{}-s{k}", split.as_str()), g));
        }
    }
    groups
        .into_iter()
        .take(limit.unwrap_or(usize::MAX))
        .map(|(id, g)| make_bundle(problems, split, id, g, shape))
        .collect()
}

/// The bundles of the splits run, interleaved (tune-0, heldout-0, tune-1, ...), so that a run
/// cut short has answers from both splits.
pub fn all_bundles(
    problems: &[Problem],
    splits: &[Split],
    shape: Shape,
    limit: Option<usize>,
) -> Vec<Bundle> {
    let per: Vec<Vec<Bundle>> = splits
        .iter()
        .map(|&s| bundles(problems, s, shape, limit))
        .collect();
    let most = per.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = Vec::new();
    for k in 0..most {
        for b in &per {
            if let Some(x) = b.get(k) {
                out.push(x.clone());
            }
        }
    }
    out
}

impl Bundle {
    /// The `--tasks` line of `beaconkv-eval --mode reason`: a conversation of one turn.
    pub fn to_jsonl(&self) -> String {
        let mut v = serde_json::json!({"id": self.id, "turns": self.turns()});
        if let Some(a) = &self.answer_start {
            v["answer_starts"] = serde_json::json!([a]);
        }
        v.to_string()
    }

    /// The user turns: the request, and the follow-up if any.
    pub fn turns(&self) -> Vec<&str> {
        std::iter::once(self.text.as_str())
            .chain(self.follow_up.as_deref())
            .collect()
    }

    /// A digest of what the model is shown, kept with every answer so that a rerun never mixes
    /// answers to another wording.
    pub fn digest(&self) -> String {
        format!("{:016x}", crate::tasks::fnv(&self.to_jsonl()))
    }

    /// The problems' task ids.
    pub fn task_ids(&self, problems: &[Problem]) -> Vec<String> {
        self.problems
            .iter()
            .map(|&i| problems[i].task_id.clone())
            .collect()
    }
}
