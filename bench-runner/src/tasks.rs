//! Synthetic long-context tasks in the spirit of RULER, generated here from a fixed seed (no data
//! set download), and their scoring.
//!
//! A [`Doc`] is one haystack (an instruction, then filler prose with the task's facts inserted at
//! chosen depths) and one or more questions about it. `beaconkv-eval --mode task` prefills the
//! document once per KV configuration and asks every question from that same state, so a
//! document with four questions costs about one prefill.
//!
//! - `niah`: single needle, one magic number for one key; one question.
//! - `multikey`: four magic numbers for four keys; each key asked in turn (the other three are
//!   distractors: an answer that names one of them is wrong).
//! - `vt`: variable tracking, two chains `VAR A = n`, `VAR B = VAR A`, ...; for each chain, every
//!   variable that holds its value must be listed (and none of the other chain).
//! - `chain`: two chains of arithmetic rules (`blip is 7`, `crom is blip plus 5`, ...); the model
//!   has to work the chain out step by step, carrying each intermediate result forward in its own
//!   output, and end with `Answer: N`.
//!
//! Every question carries a known-correct output (`reference`) that the scorer must accept.

use serde::Serialize;
use std::fmt::Write as _;

/// The tasks, in table order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Task {
    Niah,
    Multikey,
    Vt,
    Chain,
}

impl Task {
    pub const ALL: [Task; 4] = [Task::Niah, Task::Multikey, Task::Vt, Task::Chain];

    pub fn as_str(self) -> &'static str {
        match self {
            Task::Niah => "niah",
            Task::Multikey => "multikey",
            Task::Vt => "vt",
            Task::Chain => "chain",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Task::Niah => "single needle",
            Task::Multikey => "multi-key needle (4 keys, one asked)",
            Task::Vt => "variable tracking (3 hops, all variables of a value)",
            Task::Chain => "arithmetic chain (4 rules, worked out step by step)",
        }
    }

    /// Questions per document.
    pub fn questions(self) -> usize {
        match self {
            Task::Niah => 1,
            Task::Multikey => MULTIKEY_KEYS,
            Task::Vt => VT_CHAINS,
            Task::Chain => CHAINS,
        }
    }

    /// Most tokens an answer may take.
    pub fn max_tokens(self) -> u32 {
        match self {
            Task::Niah | Task::Multikey => 16,
            Task::Vt => 40,
            Task::Chain => 96,
        }
    }
}

impl std::fmt::Display for Task {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

const MULTIKEY_KEYS: usize = 4;
const VT_CHAINS: usize = 2;
const VT_HOPS: usize = 3;
const CHAINS: usize = 2;
const CHAIN_RULES: usize = 4;

/// SplitMix64: small, seedable, good enough for generating test data.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        // Multiply-shift: bias below 2^-32 for the small n used here.
        ((self.next_u64() >> 32) * n) >> 32
    }

    /// Uniform in lo..=hi.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// FNV-1a, for a stable per-document seed (and the reason bench's session digests).
pub fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The seed of one document: independent of how many other documents a run generates.
pub fn doc_seed(seed: u64, task: Task, length: u32, index: u32) -> u64 {
    let mut r =
        Rng::new(seed ^ fnv(task.as_str()) ^ ((length as u64) << 20) ^ ((index as u64) << 44));
    r.next_u64()
}

// Filler prose: no digits, and no word that a task uses for keys or names.
const SUBJECTS: [&str; 12] = [
    "The old farmer",
    "A young painter",
    "The village baker",
    "Our neighbour",
    "The quiet librarian",
    "A travelling merchant",
    "The ship's cook",
    "The schoolteacher",
    "A curious child",
    "The night watchman",
    "My grandmother",
    "The shepherd",
];
const VERBS: [&str; 10] = [
    "carried",
    "painted",
    "repaired",
    "found",
    "sold",
    "counted",
    "cleaned",
    "borrowed",
    "described",
    "forgot",
];
const OBJECTS: [&str; 12] = [
    "a basket of apples",
    "the wooden gate",
    "an old map",
    "the broken clock",
    "a letter from the coast",
    "the copper pot",
    "a bundle of firewood",
    "the garden bench",
    "a jar of honey",
    "the red umbrella",
    "a pair of boots",
    "the fishing net",
];
const TAILS: [&str; 12] = [
    "before the rain started.",
    "near the river.",
    "on a windy afternoon.",
    "while the bells were ringing.",
    "after a long walk.",
    "in the market square.",
    "without saying a word.",
    "as the sun went down.",
    "for the third time that week.",
    "with great care.",
    "behind the old mill.",
    "when nobody was looking.",
];

// Needle keys: adjective-noun.
const KEY_ADJ: [&str; 20] = [
    "amber", "brisk", "calm", "dusty", "eager", "faint", "gentle", "hollow", "icy", "jolly",
    "keen", "lively", "mellow", "noble", "proud", "rusty", "silent", "tidy", "vivid", "zesty",
];
const KEY_NOUN: [&str; 20] = [
    "anchor", "badger", "candle", "falcon", "harbor", "island", "jacket", "kettle", "lantern",
    "meadow", "needle", "orchard", "pepper", "quarry", "ribbon", "saddle", "tunnel", "valley",
    "walnut", "beacon",
];
// Arithmetic chain variables: made-up words.
const CHAIN_NAMES: [&str; 20] = [
    "blip", "crom", "dask", "fenn", "gorp", "hilt", "jux", "kren", "lom", "mip", "norr", "pell",
    "quib", "ress", "sorn", "tav", "uld", "vex", "wib", "zell",
];

fn filler_sentence(r: &mut Rng) -> String {
    format!(
        "{} {} {} {}",
        r.pick(&SUBJECTS),
        r.pick(&VERBS),
        r.pick(&OBJECTS),
        r.pick(&TAILS)
    )
}

/// What a correct answer contains.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Expected {
    /// This number, and none of the distractors (other values in the same document).
    Number {
        value: String,
        distractors: Vec<String>,
    },
    /// Every one of these names, and none of the distractors.
    Names {
        names: Vec<String>,
        distractors: Vec<String>,
    },
    /// The number after the last `Answer:` (else the last number of the output).
    Final { value: i64 },
}

impl Expected {
    /// The answer as a short string for tables and CSV.
    pub fn answer(&self) -> String {
        match self {
            Expected::Number { value, .. } => value.clone(),
            Expected::Names { names, .. } => names.join(" "),
            Expected::Final { value } => value.to_string(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Question {
    /// The question (appended after the document, inside the same user turn).
    pub q: String,
    pub max_tokens: u32,
    /// Depth (0..1) of the fact the question starts from (a chain: its first link).
    pub depth: f64,
    pub expected: Expected,
    /// A known-correct output: the scorer accepts it.
    pub reference: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Doc {
    pub id: String,
    pub task: Task,
    /// Target length in tokens.
    pub length: u32,
    pub index: u32,
    /// Instruction and haystack.
    pub text: String,
    pub questions: Vec<Question>,
}

impl Doc {
    /// One line of the `--tasks` file of `beaconkv-eval --mode task` (the fake tool of the
    /// tests answers with `expect`).
    pub fn to_jsonl(&self) -> String {
        let qs: Vec<serde_json::Value> = self
            .questions
            .iter()
            .map(|q| {
                serde_json::json!({
                    "q": q.q,
                    "max_tokens": q.max_tokens,
                    "expect": q.reference,
                })
            })
            .collect();
        serde_json::json!({
            "id": self.id,
            "task": self.task,
            "length": self.length,
            "doc": self.text,
            "questions": qs,
        })
        .to_string()
    }
}

/// Facts inserted at depths: (depth 0..1, sentence).
type Inserts = Vec<(f64, String)>;

/// `n` increasing depths in [0.03, 0.97], one in each of n equal slices (jittered).
fn spread_depths(r: &mut Rng, n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let slice = 0.94 / n as f64;
            0.03 + slice * (i as f64 + 0.15 + 0.7 * r.unit())
        })
        .collect()
}

/// Builds the haystack: the head, then filler sentences up to `target_chars`, the inserts
/// placed between sentences at their depth (by character offset), in depth order.
fn build_text(r: &mut Rng, head: &str, inserts: &Inserts, target_chars: usize) -> String {
    let insert_chars: usize = inserts.iter().map(|(_, s)| s.len() + 1).sum();
    let body_chars = target_chars
        .saturating_sub(head.len() + insert_chars)
        .max(1);
    let mut sentences = Vec::new();
    let mut n = 0;
    while n < body_chars {
        let s = filler_sentence(r);
        n += s.len() + 1;
        sentences.push(s);
    }
    let mut order: Vec<&(f64, String)> = inserts.iter().collect();
    order.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out = String::with_capacity(target_chars + 64);
    out.push_str(head);
    let mut next = 0;
    let mut chars = 0usize;
    for (i, s) in sentences.iter().enumerate() {
        while next < order.len() && (chars as f64) >= order[next].0 * n as f64 {
            out.push_str(&order[next].1);
            out.push(' ');
            next += 1;
        }
        out.push_str(s);
        out.push(if i % 6 == 5 { '\n' } else { ' ' });
        chars += s.len() + 1;
    }
    for (_, s) in &order[next..] {
        out.push_str(s);
        out.push(' ');
    }
    out.trim_end().to_string()
}

fn distinct<T: Clone + PartialEq>(
    r: &mut Rng,
    n: usize,
    mut draw: impl FnMut(&mut Rng) -> T,
) -> Vec<T> {
    let mut out: Vec<T> = Vec::with_capacity(n);
    while out.len() < n {
        let x = draw(r);
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

fn magic_key(r: &mut Rng) -> String {
    format!("{}-{}", r.pick(&KEY_ADJ), r.pick(&KEY_NOUN))
}

fn magic_value(r: &mut Rng) -> String {
    r.range(1_000_000, 9_999_999).to_string()
}

fn vt_name(r: &mut Rng) -> String {
    (0..5).map(|_| (b'A' + r.below(26) as u8) as char).collect()
}

/// Generates document `index` of `task` at about `length` tokens (`chars_per_token` converts;
/// `beaconkv-eval --mode count` measures the real ratio for a model).
pub fn generate(task: Task, length: u32, index: u32, seed: u64, chars_per_token: f64) -> Doc {
    let mut r = Rng::new(doc_seed(seed, task, length, index));
    let target_chars = (length as f64 * chars_per_token).round().max(1.0) as usize;
    let id = format!("{task}-{length}-{index}");
    let mut inserts: Inserts = Vec::new();
    let mut questions = Vec::new();
    let head;
    match task {
        Task::Niah | Task::Multikey => {
            head = "Below is a long text. Special magic numbers are hidden in it. Memorize them: \
                    I will ask you about one of them afterwards.\n\n";
            let n = if task == Task::Niah { 1 } else { MULTIKEY_KEYS };
            let keys = distinct(&mut r, n, magic_key);
            let values = distinct(&mut r, n, magic_value);
            let depths: Vec<f64> = if task == Task::Niah {
                // the depth grid is cycled over documents
                vec![[0.1, 0.3, 0.5, 0.7, 0.9][index as usize % 5]]
            } else {
                spread_depths(&mut r, n)
            };
            for i in 0..n {
                inserts.push((
                    depths[i],
                    format!(
                        "One of the special magic numbers for {} is: {}.",
                        keys[i], values[i]
                    ),
                ));
            }
            // multikey: every key is asked, in a shuffled order
            let mut order: Vec<usize> = (0..n).collect();
            for i in (1..n).rev() {
                order.swap(i, r.below(i as u64 + 1) as usize);
            }
            for &i in &order {
                questions.push(Question {
                    q: format!(
                        "What is the special magic number for {} mentioned in the text above? \
                         Answer with the number only.",
                        keys[i]
                    ),
                    max_tokens: task.max_tokens(),
                    depth: depths[i],
                    expected: Expected::Number {
                        value: values[i].clone(),
                        distractors: values
                            .iter()
                            .enumerate()
                            .filter(|&(j, _)| j != i)
                            .map(|(_, v)| v.clone())
                            .collect(),
                    },
                    reference: format!(
                        "The special magic number for {} is {}.",
                        keys[i], values[i]
                    ),
                });
            }
        }
        Task::Vt => {
            head = "Below is a long text with variable assignments hidden in it. Memorize them: \
                    I will ask you which variables hold a value.\n\n";
            let names = distinct(&mut r, VT_CHAINS * (VT_HOPS + 1), vt_name);
            let values = distinct(&mut r, VT_CHAINS, |r| r.range(10_000, 99_999));
            let chains: Vec<Vec<String>> = names.chunks(VT_HOPS + 1).map(|c| c.to_vec()).collect();
            for (c, chain) in chains.iter().enumerate() {
                let depths = spread_depths(&mut r, VT_HOPS + 1);
                for (k, name) in chain.iter().enumerate() {
                    let line = if k == 0 {
                        format!("VAR {name} = {}.", values[c])
                    } else {
                        format!("VAR {name} = VAR {}.", chain[k - 1])
                    };
                    inserts.push((depths[k], line));
                }
                let distractors: Vec<String> = chains
                    .iter()
                    .enumerate()
                    .filter(|&(o, _)| o != c)
                    .flat_map(|(_, ch)| ch.iter().cloned())
                    .collect();
                questions.push(Question {
                    q: format!(
                        "Find all variables that are assigned the value {} in the text above, \
                         directly or through other variables. Answer with their names only, \
                         separated by spaces.",
                        values[c]
                    ),
                    max_tokens: task.max_tokens(),
                    depth: depths[0],
                    expected: Expected::Names {
                        names: chain.clone(),
                        distractors,
                    },
                    reference: chain.join(" "),
                });
            }
        }
        Task::Chain => {
            head = "Below is a long text with a few arithmetic rules hidden in it. Memorize them: \
                    you will compute with them afterwards.\n\n";
            let names = distinct(&mut r, CHAINS * CHAIN_RULES, |r| {
                r.pick(&CHAIN_NAMES).to_string()
            });
            for chain in names.chunks(CHAIN_RULES) {
                let depths = spread_depths(&mut r, CHAIN_RULES);
                let mut value = r.range(2, 19);
                let mut reference = format!("{} = {value}\n", chain[0]);
                inserts.push((depths[0], format!("Rule: {} is {value}.", chain[0])));
                for k in 1..CHAIN_RULES {
                    let b = r.range(1, 9);
                    // stay within 1..99
                    let plus = value - b < 1 || (value + b <= 99 && r.below(2) == 0);
                    let (word, sign, next) = if plus {
                        ("plus", '+', value + b)
                    } else {
                        ("minus", '-', value - b)
                    };
                    inserts.push((
                        depths[k],
                        format!("Rule: {} is {} {word} {b}.", chain[k], chain[k - 1]),
                    ));
                    let _ = writeln!(reference, "{} = {value} {sign} {b} = {next}", chain[k]);
                    value = next;
                }
                let _ = write!(reference, "Answer: {value}");
                let last = &chain[CHAIN_RULES - 1];
                questions.push(Question {
                    q: format!(
                        "Using the rules in the text above, compute {last}. Work it out step by \
                         step, one short line per rule, then end with \"Answer: \" and the number."
                    ),
                    max_tokens: task.max_tokens(),
                    depth: depths[0],
                    expected: Expected::Final { value },
                    reference,
                });
            }
        }
    }
    let text = build_text(&mut r, head, &inserts, target_chars);
    Doc {
        id,
        task,
        length,
        index,
        text,
        questions,
    }
}

/// The maximal runs of ASCII digits in `s`.
fn digit_runs(s: &str) -> Vec<&str> {
    s.split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .collect()
}

/// The maximal runs of ASCII letters in `s`.
fn words(s: &str) -> Vec<&str> {
    s.split(|c: char| !c.is_ascii_alphabetic())
        .filter(|w| !w.is_empty())
        .collect()
}

/// The integers in `s` with their byte offsets (a `-` right before the digits makes one
/// negative).
fn integers(s: &str) -> Vec<(usize, i64)> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() {
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            if let Ok(v) = s[start..i].parse::<i64>() {
                let neg = start > 0 && b[start - 1] == b'-';
                out.push((start, if neg { -v } else { v }));
            }
        } else {
            i += 1;
        }
    }
    out
}

/// The final answer of a chain output: the first integer after the last "answer" (any case),
/// else the last integer of the output.
pub fn final_number(output: &str) -> Option<i64> {
    let lower = output.to_ascii_lowercase();
    let ints = integers(output);
    if let Some(at) = lower.rfind("answer") {
        if let Some(&(_, v)) = ints.iter().find(|(p, _)| *p > at) {
            return Some(v);
        }
    }
    ints.last().map(|&(_, v)| v)
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Score {
    /// Exact match: what the task counts as a correct answer.
    pub correct: bool,
    /// Partial credit in 0..1 (vt: share of the variables named; else 0 or 1).
    pub partial: f64,
}

/// Scores one output (exact string match of the answer, see [`Expected`]).
pub fn score(expected: &Expected, output: &str) -> Score {
    match expected {
        Expected::Number { value, distractors } => {
            let runs = digit_runs(output);
            let ok = runs.contains(&value.as_str())
                && !distractors.iter().any(|d| runs.contains(&d.as_str()));
            Score {
                correct: ok,
                partial: if ok { 1.0 } else { 0.0 },
            }
        }
        Expected::Names { names, distractors } => {
            let ws = words(output);
            let found = names.iter().filter(|n| ws.contains(&n.as_str())).count();
            let wrong = distractors.iter().any(|d| ws.contains(&d.as_str()));
            Score {
                correct: found == names.len() && !wrong,
                partial: found as f64 / names.len().max(1) as f64,
            }
        }
        Expected::Final { value } => {
            let ok = final_number(output) == Some(*value);
            Score {
                correct: ok,
                partial: if ok { 1.0 } else { 0.0 },
            }
        }
    }
}

/// Wilson score interval (95%, z = 1.96) of k successes in n trials; (0, 1) when n = 0.
pub fn wilson(k: u64, n: u64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let z = 1.96f64;
    let n_f = n as f64;
    let p = k as f64 / n_f;
    let denom = 1.0 + z * z / n_f;
    let centre = (p + z * z / (2.0 * n_f)) / denom;
    let half = z * ((p * (1.0 - p) / n_f) + z * z / (4.0 * n_f * n_f)).sqrt() / denom;
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// "75% [41–93] (6/8)": accuracy, its Wilson interval, the counts.
pub fn fmt_accuracy(k: u64, n: u64) -> String {
    if n == 0 {
        return "–".to_string();
    }
    let (lo, hi) = wilson(k, n);
    format!(
        "{:.0}% [{:.0}–{:.0}] ({k}/{n})",
        100.0 * k as f64 / n as f64,
        100.0 * lo,
        100.0 * hi
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPT: f64 = 4.0;

    fn all_docs() -> Vec<Doc> {
        let mut v = Vec::new();
        for task in Task::ALL {
            for length in [256, 2048] {
                for index in 0..6 {
                    v.push(generate(task, length, index, 12, CPT));
                }
            }
        }
        v
    }

    #[test]
    fn deterministic_and_seed_dependent() {
        for task in Task::ALL {
            let a = generate(task, 2048, 3, 12, CPT);
            assert_eq!(a, generate(task, 2048, 3, 12, CPT));
            assert_ne!(a.text, generate(task, 2048, 3, 13, CPT).text);
            assert_ne!(a.text, generate(task, 2048, 4, 12, CPT).text);
            assert_eq!(a.id, format!("{task}-2048-3"));
        }
    }

    #[test]
    fn lengths_follow_the_target() {
        for d in all_docs() {
            let want = d.length as f64 * CPT;
            let got = d.text.len() as f64;
            assert!(
                (got - want).abs() < 0.05 * want + 120.0,
                "{}: {got} chars for a target of {want}",
                d.id
            );
        }
    }

    #[test]
    fn facts_are_in_the_text_and_questions_well_formed() {
        for d in all_docs() {
            assert_eq!(d.questions.len(), d.task.questions(), "{}", d.id);
            for q in &d.questions {
                assert!((0.0..=1.0).contains(&q.depth));
                assert_eq!(q.max_tokens, d.task.max_tokens());
                assert!(q.q.len() < 260, "questions fit the recent window");
                match &q.expected {
                    Expected::Number { value, distractors } => {
                        assert_eq!(value.len(), 7);
                        assert_eq!(d.text.matches(value.as_str()).count(), 1, "{}", d.id);
                        assert_eq!(distractors.len(), d.task.questions() - 1);
                        assert!(!distractors.contains(value));
                    }
                    Expected::Names { names, distractors } => {
                        assert_eq!(names.len(), VT_HOPS + 1);
                        assert!(d
                            .text
                            .contains(&format!("VAR {} = VAR {}.", names[1], names[0])));
                        assert!(names.iter().all(|n| !distractors.contains(n)));
                    }
                    Expected::Final { value } => {
                        assert!((1..=99).contains(value), "{value}");
                    }
                }
            }
            // no digits outside the inserted facts
            let facts: usize = match d.task {
                Task::Niah | Task::Multikey => d.questions.len(),
                Task::Vt => VT_CHAINS,
                Task::Chain => CHAINS * CHAIN_RULES,
            };
            let lines_with_digits = d
                .text
                .split(['.', '\n'])
                .filter(|s| s.chars().any(|c| c.is_ascii_digit()))
                .count();
            assert!(
                lines_with_digits <= facts,
                "{}: {lines_with_digits} > {facts}",
                d.id
            );
        }
    }

    #[test]
    fn facts_sit_at_their_depth() {
        for index in 0..5 {
            let d = generate(Task::Niah, 2048, index, 12, CPT);
            let Expected::Number { value, .. } = &d.questions[0].expected else {
                panic!()
            };
            let at = d.text.find(value.as_str()).unwrap() as f64 / d.text.len() as f64;
            assert!(
                (at - d.questions[0].depth).abs() < 0.05,
                "needle at {at}, depth {}",
                d.questions[0].depth
            );
        }
        // chains appear in order
        let d = generate(Task::Chain, 2048, 0, 12, CPT);
        let mut last = 0;
        let Expected::Final { .. } = d.questions[0].expected else {
            panic!()
        };
        for name in d.questions[0]
            .reference
            .lines()
            .filter_map(|l| l.split(" = ").next())
        {
            if name.starts_with("Answer") {
                continue;
            }
            let at = d.text.find(&format!("Rule: {name} is")).unwrap();
            assert!(at >= last, "rule {name} out of order");
            last = at;
        }
    }

    #[test]
    fn scorer_accepts_known_correct_outputs() {
        for d in all_docs() {
            for q in &d.questions {
                let s = score(&q.expected, &q.reference);
                assert!(s.correct, "{}: '{}' rejected", d.id, q.reference);
                assert_eq!(s.partial, 1.0);
            }
        }
    }

    #[test]
    fn chain_reference_is_the_arithmetic() {
        for index in 0..20 {
            let d = generate(Task::Chain, 256, index, 7, CPT);
            for q in &d.questions {
                // recompute the chain from the rules in the text
                let mut vals: std::collections::HashMap<&str, i64> = Default::default();
                for rule in d.text.split("Rule: ").skip(1) {
                    let rule = rule.split('.').next().unwrap();
                    let w: Vec<&str> = rule.split(' ').collect();
                    let v = match w.as_slice() {
                        [_, "is", n] => n.parse().unwrap(),
                        [_, "is", a, "plus", b] => vals[a] + b.parse::<i64>().unwrap(),
                        [_, "is", a, "minus", b] => vals[a] - b.parse::<i64>().unwrap(),
                        other => panic!("bad rule {other:?}"),
                    };
                    vals.insert(w[0], v);
                }
                let Expected::Final { value } = q.expected else {
                    panic!()
                };
                let last =
                    q.q.split("compute ")
                        .nth(1)
                        .unwrap()
                        .split('.')
                        .next()
                        .unwrap();
                assert_eq!(vals[last], value, "{}", d.id);
            }
        }
    }

    #[test]
    fn scorer_rejects_wrong_outputs() {
        let num = Expected::Number {
            value: "1234567".into(),
            distractors: vec!["7654321".into()],
        };
        assert!(score(&num, " 1234567").correct);
        assert!(score(&num, "The number is 1234567.\n").correct);
        assert!(
            !score(&num, "12345678").correct,
            "a longer number is not it"
        );
        assert!(!score(&num, "123456").correct);
        assert!(
            !score(&num, "1234567 or 7654321").correct,
            "a distractor too"
        );
        assert!(!score(&num, "").correct);

        let names = Expected::Names {
            names: vec!["ABCDE".into(), "FGHIJ".into()],
            distractors: vec!["KLMNO".into()],
        };
        assert!(score(&names, "FGHIJ, ABCDE").correct);
        let half = score(&names, "ABCDE only");
        assert!(!half.correct);
        assert_eq!(half.partial, 0.5);
        assert!(!score(&names, "ABCDE FGHIJ KLMNO").correct);
        assert!(!score(&names, "ABCDEF FGHIJ").correct, "whole words only");

        let fin = Expected::Final { value: 21 };
        assert!(score(&fin, "a = 7\nb = 7 + 14 = 21\nAnswer: 21").correct);
        assert!(score(&fin, "so the answer is 21.").correct);
        assert!(score(&fin, "b = 21").correct, "no Answer: the last number");
        assert!(!score(&fin, "Answer: 22, not 21").correct);
        assert!(!score(&fin, "Answer: -21").correct);
        assert!(!score(&fin, "no idea").correct);
        assert_eq!(final_number("x = 3\nANSWER: 5 (from 3 + 2)"), Some(5));
    }

    #[test]
    fn wilson_interval() {
        assert_eq!(wilson(0, 0), (0.0, 1.0));
        let (lo, hi) = wilson(0, 10);
        assert_eq!(lo, 0.0);
        assert!((hi - 0.2775).abs() < 1e-3, "{hi}");
        let (lo, hi) = wilson(10, 10);
        assert!((lo - 0.7225).abs() < 1e-3 && hi == 1.0, "{lo}");
        let (lo, hi) = wilson(6, 8);
        assert!(
            (lo - 0.4093).abs() < 1e-3 && (hi - 0.9285).abs() < 1e-3,
            "{lo} {hi}"
        );
        assert_eq!(fmt_accuracy(6, 8), "75% [41–93] (6/8)");
        assert_eq!(fmt_accuracy(0, 0), "–");
    }

    #[test]
    fn jsonl_lines_parse() {
        let d = generate(Task::Chain, 256, 0, 12, CPT);
        let line = d.to_jsonl();
        assert!(!line.contains('\n'));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["id"], d.id);
        assert_eq!(v["doc"], d.text);
        assert_eq!(v["questions"].as_array().unwrap().len(), CHAINS);
        assert_eq!(v["questions"][0]["max_tokens"], Task::Chain.max_tokens());
        assert_eq!(v["questions"][1]["expect"], d.questions[1].reference);
    }

    #[test]
    fn rng_ranges() {
        let mut r = Rng::new(1);
        for _ in 0..1000 {
            let x = r.range(3, 5);
            assert!((3..=5).contains(&x));
            let u = r.unit();
            assert!((0.0..1.0).contains(&u));
        }
        let hits: Vec<u64> = (0..3000).map(|_| r.below(3)).collect();
        for v in 0..3 {
            let c = hits.iter().filter(|&&h| h == v).count();
            assert!((800..1200).contains(&c), "{v}: {c}");
        }
    }
}
