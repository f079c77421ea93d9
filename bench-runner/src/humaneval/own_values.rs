//! The own-values family (`--own-values N`): the answer starts with a dictionary `CODES` of N
//! names mapped to random three-digit numbers, teacher-forced one token per decode step as if the
//! model had written it (so the cache holds it as answer, not as prompt); the model writes the
//! functions after it, and a second turn asks for a function `codes_again()` that types the same
//! numbers out again. The numbers exist nowhere but in the answer's own first lines, several
//! hundred tokens back, so a cache that evicted them cannot write them again: this is what a long
//! reasoning trace asks of its cache when a late step reuses an early result.
//!
//! decision: the numbers are forced, not chosen by the model, because Qwen2.5-Coder-1.5B's own
//! choices were 123, 456, 789, 101, 202, ... or 101, 102, 103, ... (3 of 3 answers), which it can
//! write again without remembering them.
//! decision: `codes_again()` is asked for in a second turn, not at the end of the first request,
//! because with the full cache the model skipped it or wrote `return CODES` in 2 of 4 answers.
//!
//! The check reads both dictionaries from the answer's text (no Python needed): a value counts
//! when the first dictionary typed out in `codes_again()` (its return value, or a doctest in its
//! docstring, as the model often writes before `return CODES`) gives the name the number `CODES`
//! gave it. It measures what the model can write again, not whether the function is correct.

use serde::{Deserialize, Serialize};

/// Names the dictionaries use; a bundle takes N of them, chosen by its id.
const NAMES: [&str; 48] = [
    "amber", "basil", "cedar", "delta", "ember", "fjord", "garnet", "harbor", "indigo", "juniper",
    "kelp", "lumen", "maple", "nectar", "onyx", "pepper", "quartz", "raven", "saffron", "tundra",
    "umber", "velvet", "walnut", "xenon", "yarrow", "zephyr", "anchor", "bramble", "cobalt",
    "dune", "elm", "flint", "glacier", "hazel", "iris", "jasper", "kestrel", "lagoon", "mica",
    "nutmeg", "orchid", "pine", "quill", "reef", "sable", "thistle", "umbra", "willow",
];

/// The most names a request may ask for.
pub const MAX_VALUES: u32 = NAMES.len() as u32;

/// `n` distinct names for the bundle `id` (a different choice and order per bundle).
pub fn names(id: &str, n: usize) -> Vec<&'static str> {
    let len = NAMES.len();
    let h = crate::tasks::fnv(id) as usize;
    // a step coprime with 48 visits every name once
    let steps = [5, 7, 11, 13, 17, 19, 23, 25];
    let step = steps[(h / len) % steps.len()];
    (0..n.min(len))
        .map(|i| NAMES[(h + i * step) % len])
        .collect()
}

/// `n` distinct random numbers in 100..=999 for the bundle `id` (a seeded xorshift: the same
/// every run).
pub fn numbers(id: &str, n: usize) -> Vec<u32> {
    let mut x = crate::tasks::fnv(&format!("own-values {id}")) | 1;
    let mut out: Vec<u32> = Vec::with_capacity(n);
    while out.len() < n.min(900) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let v = 100 + (x % 900) as u32;
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

/// The start of the answer: the code block's first lines, `CODES` and a line leading on.
pub fn answer_start(names: &[&str], numbers: &[u32]) -> String {
    let mut t = String::from("```python\nCODES = {\n");
    for (n, v) in names.iter().zip(numbers) {
        t.push_str(&format!("    \"{n}\": {v},\n"));
    }
    t.push_str("}\n\n");
    t
}

/// The request: the program's start, the functions' specifications (`functions`: the text
/// [`super::data::request`] would give for them, without its first paragraph).
pub fn request(n_values: usize, n_functions: usize, functions: &str) -> String {
    format!(
        "Write one Python program in a single ```python code block. It begins with a dictionary \
         `CODES` of {n_values} numbers, already written for you at the start of your answer. \
         Continue the same code block with the {n_functions} functions below, in the order given, \
         each complete (its `def` line, its body, and any imports or helper functions it needs). \
         Do not add tests or example usage.\n{functions}"
    )
}

/// The second turn: `codes_again()`, typing out the numbers of the first answer's `CODES`.
pub fn follow_up(names: &[&str]) -> String {
    let n = names.len();
    let first = names.first().copied().unwrap_or("name");
    format!(
        "Now write a function `codes_again()` that returns a dictionary literal with the same {n} \
         names and the same numbers as `CODES` at the start of your answer, every number typed out \
         again (`return {{\"{first}\": ..., ...}}`). Do not use `CODES` in it. Give only this \
         function, in a ```python code block.\n"
    )
}

/// What one answer did with its own values.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct OwnValues {
    /// Names asked for.
    pub asked: u32,
    /// Names `CODES` maps to a number.
    pub defined: u32,
    /// Names `codes_again()` maps to the number `CODES` gave them.
    pub recalled: u32,
    /// `CODES`'s numbers, in the names' order, are sorted or step by a constant (they could be
    /// written again without remembering them).
    pub patterned: bool,
    /// Characters from the end of `CODES` to the start of `codes_again`, and the answer's length
    /// in characters (0 when either is missing).
    pub gap_chars: u64,
    pub answer_chars: u64,
    /// Empty when every value came back; else why not.
    pub reason: String,
}

impl OwnValues {
    /// Every name defined with a distinct number and written again with it.
    pub fn all_recalled(&self) -> bool {
        self.asked > 0 && self.reason.is_empty()
    }

    /// The gap in tokens, estimated from the answer's tokens in proportion to characters.
    pub fn gap_tokens(&self, n_gen: u64) -> Option<f64> {
        (self.gap_chars > 0 && self.answer_chars > 0)
            .then(|| n_gen as f64 * self.gap_chars as f64 / self.answer_chars as f64)
    }
}

/// A dictionary's `name: number` entries, in the order written.
type Entries = Vec<(String, i64)>;

/// The entries `"name": number` (or with single quotes) of the brace-delimited dictionary that
/// starts at the first `{` at or after `from`, and the byte range of that dictionary.
fn dict_at(text: &str, from: usize) -> Option<(Entries, usize, usize)> {
    let open = from + text[from..].find('{')?;
    let mut depth = 0usize;
    let mut close = None;
    for (i, ch) in text[open..].char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    close = Some(open + i);
                    break;
                }
            }
            _ => {}
        }
    }
    let close = close?;
    let body = &text[open + 1..close];
    let mut entries = Vec::new();
    for part in body.split(',') {
        let Some((k, v)) = part.split_once(':') else {
            continue;
        };
        let k = k
            .lines()
            .map(|l| l.split('#').next().unwrap_or(""))
            .collect::<String>();
        let k = k.trim().trim_matches(|c| c == '"' || c == '\'');
        let v = v.split('#').next().unwrap_or("").trim();
        if let Ok(n) = v.replace('_', "").parse::<i64>() {
            entries.push((k.to_string(), n));
        }
    }
    Some((entries, open, close + 1))
}

/// Where `CODES` is assigned a dictionary: the byte after `=`.
fn codes_assignment(text: &str) -> Option<usize> {
    let mut at = 0;
    while let Some(i) = text[at..].find("CODES") {
        let start = at + i;
        let after = start + "CODES".len();
        let line_start = text[..start].rfind('\n').map_or(0, |p| p + 1);
        let starts_line = text[line_start..start].trim().is_empty();
        let rest = &text[after..];
        // `CODES = {` or `CODES: dict[str, int] = {`
        let eq = rest.find('=');
        if starts_line {
            if let Some(eq) = eq {
                let between = &rest[..eq];
                if !between.contains('\n') && rest[eq + 1..].trim_start().starts_with('{') {
                    return Some(after + eq + 1);
                }
            }
        }
        at = after;
    }
    None
}

/// A function's text from its `def` line: up to the next line that starts at column 0 (not
/// blank, not a comment) or a closing code fence.
fn function_text(text: &str) -> &str {
    let mut end = text.len();
    let mut at = text.find('\n').map_or(text.len(), |i| i + 1);
    while at < text.len() {
        let line = &text[at..];
        let first = line.chars().next().unwrap_or(' ');
        if !(first.is_whitespace() || first == '#') || line.starts_with("```") {
            end = at;
            break;
        }
        at += line.find('\n').map_or(line.len(), |i| i + 1);
    }
    &text[..end]
}

/// Sorted either way, or a constant step, over at least three numbers.
fn patterned(values: &[i64]) -> bool {
    if values.len() < 3 {
        return false;
    }
    let w: Vec<i64> = values.windows(2).map(|p| p[1] - p[0]).collect();
    w.iter().all(|&d| d > 0) || w.iter().all(|&d| d < 0) || w.iter().all(|&d| d == w[0])
}

/// Reads `CODES` and `codes_again()` out of `answer` and compares them for `names`.
pub fn check(answer: &str, names: &[&str]) -> OwnValues {
    let mut o = OwnValues {
        asked: names.len() as u32,
        answer_chars: answer.chars().count() as u64,
        ..OwnValues::default()
    };
    let Some((codes, _, codes_end)) = codes_assignment(answer).and_then(|at| dict_at(answer, at))
    else {
        o.reason = "no CODES dictionary".into();
        return o;
    };
    let lookup =
        |d: &[(String, i64)], name: &str| d.iter().find(|(k, _)| k == name).map(|&(_, v)| v);
    let defined: Vec<Option<i64>> = names.iter().map(|n| lookup(&codes, n)).collect();
    o.defined = defined.iter().flatten().count() as u32;
    let numbers: Vec<i64> = defined.iter().flatten().copied().collect();
    o.patterned = patterned(&numbers);
    let mut distinct = numbers.clone();
    distinct.sort_unstable();
    distinct.dedup();
    let Some(fn_at) = answer[codes_end..]
        .find("def codes_again")
        .map(|i| codes_end + i)
    else {
        o.reason = "no codes_again after CODES".into();
        return o;
    };
    o.gap_chars = answer[codes_end..fn_at].chars().count() as u64;
    let body = function_text(&answer[fn_at..]);
    // the first dictionary typed out in the function (its return value, or a doctest in its
    // docstring: either way the numbers were written again)
    let again = dict_at(body, 0).map(|d| d.0).unwrap_or_default();
    o.recalled = names
        .iter()
        .zip(&defined)
        .filter(|(n, d)| d.is_some() && lookup(&again, n) == **d)
        .count() as u32;
    o.reason = if again.is_empty() {
        "codes_again types out no dictionary".into()
    } else if o.defined < o.asked {
        format!("CODES defines {} of {} names", o.defined, o.asked)
    } else if distinct.len() < numbers.len() {
        "CODES repeats a number".into()
    } else if o.recalled < o.asked {
        format!("{} of {} values written again", o.recalled, o.asked)
    } else {
        String::new()
    };
    o
}
