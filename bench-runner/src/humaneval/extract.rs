//! Takes one function out of an answer that writes several: the first code block that defines
//! it at top level (`def NAME(`), with the top-level imports, definitions, classes and
//! assignments of the answer that it names, and those they name in turn (its block's first, then
//! the other blocks'), so that a sibling function's mistake in the same block does not count
//! against it. Top-level statements that run something (example calls, prints, asserts, loops,
//! `if __name__ == "__main__":`, assignments that call a function of the answer) are left out.
//! Without any fenced block the whole answer is read as code; when no block defines the
//! function, the answer's text outside and inside the fences is read as one piece of code.
//!
//! The reading is line by line: a statement starts at a line with no indentation outside
//! brackets, strings and line continuations; decorators go with the definition after them.

use std::collections::BTreeSet;

/// The fenced code blocks of an answer, in order, with the fence's indentation removed; a block
/// left open at the end (an answer cut at the token cap) runs to the end.
pub fn code_blocks(answer: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut cur: Option<(usize, String)> = None;
    for line in answer.lines() {
        let trimmed = line.trim_start();
        let fence = trimmed.starts_with("```");
        match cur.take() {
            None => {
                if fence {
                    cur = Some((line.len() - trimmed.len(), String::new()));
                }
            }
            Some((indent, mut text)) => {
                if fence {
                    blocks.push(text);
                } else {
                    let cut = line
                        .char_indices()
                        .take_while(|&(i, c)| i < indent && c == ' ')
                        .count();
                    text.push_str(&line[cut..]);
                    text.push('\n');
                    cur = Some((indent, text));
                }
            }
        }
    }
    if let Some((_, text)) = cur {
        blocks.push(text);
    }
    blocks
}

/// What a top-level statement is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Def,
    Class,
    Import,
    /// `NAME = ...`, `A, B = ...`, `NAME: T = ...`.
    Assign,
    Decorator,
    /// `if __name__ == "__main__":`.
    Main,
    /// Anything else: calls, prints, asserts, loops, prose.
    Other,
}

impl Kind {
    /// Statements that define something, kept with the function.
    fn defines(self) -> bool {
        matches!(self, Kind::Def | Kind::Class | Kind::Import | Kind::Assign)
    }
}

/// One top-level statement: its lines, the names it binds, the names it uses.
#[derive(Clone, Debug, PartialEq)]
pub struct Stmt {
    pub kind: Kind,
    pub binds: Vec<String>,
    pub uses: BTreeSet<String>,
    pub text: String,
}

/// Where the scan of a piece of code is between lines.
#[derive(Default)]
struct Scan {
    depth: i32,
    /// Inside a triple-quoted string opened with this quote.
    triple: Option<u8>,
    /// The last line ended with a backslash.
    cont: bool,
}

impl Scan {
    /// Reads one line: bracket depth, strings, comments; the identifiers outside strings and
    /// comments (not those after a `.`) go to `uses`.
    fn line(&mut self, line: &str, uses: &mut BTreeSet<String>) {
        let b = line.as_bytes();
        let mut i = 0;
        self.cont = false;
        while i < b.len() {
            if let Some(q) = self.triple {
                if b[i] == b'\\' {
                    i += 2;
                    continue;
                }
                if b[i] == q && b.get(i + 1) == Some(&q) && b.get(i + 2) == Some(&q) {
                    self.triple = None;
                    i += 3;
                } else {
                    i += 1;
                }
                continue;
            }
            let c = b[i];
            match c {
                b'#' => return,
                b'\'' | b'"' => {
                    if b.get(i + 1) == Some(&c) && b.get(i + 2) == Some(&c) {
                        self.triple = Some(c);
                        i += 3;
                        continue;
                    }
                    // a one-line string: to its closing quote or the end of the line
                    i += 1;
                    while i < b.len() && b[i] != c {
                        i += if b[i] == b'\\' { 2 } else { 1 };
                    }
                    i += 1;
                }
                b'(' | b'[' | b'{' => {
                    self.depth += 1;
                    i += 1;
                }
                b')' | b']' | b'}' => {
                    self.depth = (self.depth - 1).max(0);
                    i += 1;
                }
                b'\\' if i + 1 == b.len() => {
                    self.cont = true;
                    i += 1;
                }
                _ if c.is_ascii_alphabetic() || c == b'_' => {
                    let start = i;
                    while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                        i += 1;
                    }
                    // a string prefix (r"", f'', b"") is not a name
                    if matches!(b.get(i), Some(b'\'' | b'"')) && i - start <= 2 {
                        continue;
                    }
                    let after_dot = line[..start].trim_end().ends_with('.');
                    if !after_dot {
                        uses.insert(line[start..i].to_string());
                    }
                }
                _ => i += 1,
            }
        }
    }

    /// Between statements: no open bracket, string or continuation.
    fn at_top(&self) -> bool {
        self.depth == 0 && self.triple.is_none() && !self.cont
    }
}

/// The first identifier of `s` (after leading spaces), and the rest.
fn ident(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start();
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    let name = &s[..end];
    super::data::is_identifier(name).then_some((name, &s[end..]))
}

/// The names an import statement binds (`import a.b as c` binds c, `import a.b` binds a,
/// `from x import *` binds "*").
fn import_binds(text: &str) -> Vec<String> {
    let flat: String = text
        .replace(['(', ')', '\\'], " ")
        .split('\n')
        .map(|l| l.split('#').next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join(" ");
    let list = if let Some(rest) = flat.trim_start().strip_prefix("from ") {
        match rest.split_once(" import ") {
            Some((_, names)) => names.to_string(),
            None => return Vec::new(),
        }
    } else if let Some(rest) = flat.trim_start().strip_prefix("import ") {
        rest.to_string()
    } else {
        return Vec::new();
    };
    let from = flat.trim_start().starts_with("from ");
    list.split([',', ';'])
        .filter_map(|item| {
            let words: Vec<&str> = item.split_whitespace().collect();
            match words.as_slice() {
                [.., "as", alias] => Some(alias.to_string()),
                ["*"] => Some("*".into()),
                [name] if from => Some(name.to_string()),
                [name] => Some(name.split('.').next().unwrap_or(name).to_string()),
                _ => None,
            }
        })
        .collect()
}

/// The targets of an assignment's first line (`a = 1`, `a, b = f()`, `a: int = 3`), or None
/// for any other statement (augmented assignments, subscripts, attributes, calls).
fn assign_binds(line: &str) -> Option<Vec<String>> {
    let b = line.as_bytes();
    let mut depth = 0i32;
    let mut eq = None;
    for i in 0..b.len() {
        match b[i] {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth -= 1,
            b'\'' | b'"' | b'#' => return None,
            b'=' if depth == 0 => {
                let prev = if i > 0 { b[i - 1] } else { b' ' };
                let next = b.get(i + 1).copied().unwrap_or(b' ');
                if next == b'=' || b"=<>!+-*/%&|^@:".contains(&prev) {
                    return None;
                }
                eq = Some(i);
                break;
            }
            _ => {}
        }
    }
    let lhs = &line[..eq?];
    let lhs = lhs.split(':').next().unwrap_or(lhs);
    let names: Vec<String> = lhs
        .split(',')
        .map(|n| n.trim().trim_matches(|c| c == '(' || c == ')').trim())
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect();
    (!names.is_empty() && names.iter().all(|n| super::data::is_identifier(n))).then_some(names)
}

/// What a statement starting with `line` is, and the names it binds (imports: from the whole
/// statement, filled in when it ends).
fn classify(line: &str) -> (Kind, Vec<String>) {
    let s = line.strip_prefix("async ").unwrap_or(line);
    if s.starts_with('@') {
        return (Kind::Decorator, Vec::new());
    }
    match ident(s) {
        Some(("def", rest)) | Some(("class", rest)) => {
            let kind = if s.starts_with("def") {
                Kind::Def
            } else {
                Kind::Class
            };
            match ident(rest) {
                Some((name, _)) => (kind, vec![name.to_string()]),
                None => (Kind::Other, Vec::new()),
            }
        }
        Some(("import", _)) | Some(("from", _)) => (Kind::Import, Vec::new()),
        Some(("if", rest)) if rest.trim_start().starts_with("__name__") => (Kind::Main, Vec::new()),
        _ => match assign_binds(line) {
            Some(names) => (Kind::Assign, names),
            None => (Kind::Other, Vec::new()),
        },
    }
}

/// The clauses that continue a compound statement at the same indentation.
fn continues(line: &str) -> bool {
    matches!(
        ident(line),
        Some(("else" | "elif" | "except" | "finally", _))
    )
}

/// The top-level statements of a piece of code, decorators joined to their definition.
pub fn statements(code: &str) -> Vec<Stmt> {
    let mut out: Vec<Stmt> = Vec::new();
    let mut scan = Scan::default();
    for line in code.lines() {
        let starts = scan.at_top()
            && !line.trim().is_empty()
            && !line.starts_with([' ', '\t', '#'])
            && (out.is_empty() || !continues(line));
        if starts || out.is_empty() {
            let (kind, binds) = if starts {
                classify(line)
            } else {
                (Kind::Other, Vec::new())
            };
            out.push(Stmt {
                kind,
                binds,
                uses: BTreeSet::new(),
                text: String::new(),
            });
        }
        let cur = out.last_mut().expect("a statement is open");
        cur.text.push_str(line);
        cur.text.push('\n');
        scan.line(line, &mut cur.uses);
    }
    for s in &mut out {
        if s.kind == Kind::Import {
            s.binds = import_binds(&s.text);
        }
        let trimmed = s.text.trim_end().len();
        s.text.truncate(trimmed);
        s.text.push('\n');
    }
    // decorators go with the definition after them; others are dropped
    let mut joined: Vec<Stmt> = Vec::new();
    let mut pending: Option<Stmt> = None;
    for s in out {
        match (s.kind, pending.take()) {
            (Kind::Decorator, Some(mut p)) => {
                p.text.push_str(&s.text);
                p.uses.extend(s.uses);
                pending = Some(p);
            }
            (Kind::Decorator, None) => pending = Some(s),
            (Kind::Def | Kind::Class, Some(p)) => joined.push(Stmt {
                text: p.text + &s.text,
                uses: p.uses.into_iter().chain(s.uses).collect(),
                ..s
            }),
            (_, _) => joined.push(s),
        }
    }
    joined
}

/// The answer's text as code: the fence lines removed, everything else kept.
fn unfenced(answer: &str) -> String {
    answer
        .lines()
        .filter(|l| !l.trim_start().starts_with("```"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The code that defines `entry` in the answer, with what it needs from the rest of the answer,
/// or None when no top-level `def entry(` is found.
pub fn extract(answer: &str, entry: &str) -> Option<String> {
    extract_nth(answer, entry, 0)
}

/// [`extract`] for the `nth` (from 0) function of that name in the answer: a request may ask for
/// two functions of the same name (HumanEval 56 and 61 are both `correct_bracketing`), which the
/// answer then defines in the order asked. None when the answer has fewer. The other definitions
/// of the name in the chosen block are left out.
pub fn extract_nth(answer: &str, entry: &str, nth: usize) -> Option<String> {
    let mut blocks = code_blocks(answer);
    if blocks.is_empty() {
        blocks.push(answer.to_string());
    }
    let mut parsed: Vec<Vec<Stmt>> = blocks.iter().map(|b| statements(b)).collect();
    let is_entry =
        |s: &Stmt| s.kind == Kind::Def && s.binds.first().map(String::as_str) == Some(entry);
    let found: Vec<(usize, usize)> = parsed
        .iter()
        .enumerate()
        .flat_map(|(b, ss)| {
            ss.iter()
                .enumerate()
                .filter(|(_, s)| is_entry(s))
                .map(move |(i, _)| (b, i))
        })
        .collect();
    let (home, at) = match found.get(nth) {
        Some(&x) => x,
        None => {
            let all = statements(&unfenced(answer));
            let &at = all
                .iter()
                .enumerate()
                .filter(|(_, s)| is_entry(s))
                .map(|(i, _)| i)
                .collect::<Vec<_>>()
                .get(nth)?;
            parsed.push(all);
            (parsed.len() - 1, at)
        }
    };
    // an assignment that calls a function of the answer is an example run, not a definition
    let functions: BTreeSet<&str> = parsed
        .iter()
        .flatten()
        .filter(|s| s.kind == Kind::Def)
        .flat_map(|s| s.binds.iter().map(String::as_str))
        .collect();
    let keep = |s: &Stmt| {
        s.kind.defines()
            && !(s.kind == Kind::Assign && s.uses.iter().any(|u| functions.contains(u.as_str())))
    };
    // (from another block, block, statement): what another block gives goes first
    let key = |b: usize, i: usize| (b == home, b, i);
    let mut kept: BTreeSet<(bool, usize, usize)> = parsed[home]
        .iter()
        .enumerate()
        .filter(|&(i, s)| i == at || (s.kind == Kind::Import && s.binds.iter().any(|n| n == "*")))
        .map(|(i, _)| key(home, i))
        .collect();
    // the home block first, then the others in order: the first binding of a name wins
    let order: Vec<usize> = std::iter::once(home)
        .chain((0..parsed.len()).filter(|&b| b != home))
        .collect();
    loop {
        let stmt = |&(_, b, i): &(bool, usize, usize)| &parsed[b][i];
        let bound: BTreeSet<&str> = kept
            .iter()
            .flat_map(|k| stmt(k).binds.iter().map(String::as_str))
            .collect();
        let missing: BTreeSet<&str> = kept
            .iter()
            .flat_map(|k| stmt(k).uses.iter().map(String::as_str))
            .filter(|u| !bound.contains(u))
            .collect();
        let mut added = Vec::new();
        let mut given: BTreeSet<&str> = BTreeSet::new();
        for &b in &order {
            for (i, s) in parsed[b].iter().enumerate() {
                let wanted: Vec<&str> = s
                    .binds
                    .iter()
                    .map(String::as_str)
                    .filter(|n| missing.contains(n) && !given.contains(n))
                    .collect();
                if keep(s) && !is_entry(s) && !wanted.is_empty() && !kept.contains(&key(b, i)) {
                    given.extend(wanted);
                    added.push(key(b, i));
                }
            }
        }
        if added.is_empty() {
            break;
        }
        kept.extend(added);
    }
    let mut code = String::new();
    for &(_, b, i) in &kept {
        if !code.is_empty() {
            code.push('\n');
        }
        code.push_str(&parsed[b][i].text);
    }
    Some(code)
}
