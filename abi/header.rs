//! A small reader of C headers for the ABI checks (`build.rs`, `tests/c_abi.rs`): comments,
//! struct bodies and their field names, numeric constants. It reads the subset of C the project's
//! headers use (one level of braces, function-pointer fields, several declarators per line).

/// `text` without its C comments (block and line), each replaced by a space.
pub fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let block = rest.find("/*");
        let line = rest.find("//");
        let (start, end_marker) = match (block, line) {
            (Some(b), Some(l)) if l < b => (l, "\n"),
            (Some(b), _) => (b, "*/"),
            (None, Some(l)) => (l, "\n"),
            (None, None) => break,
        };
        out.push_str(&rest[..start]);
        out.push(' ');
        let after = &rest[start + 2..];
        match after.find(end_marker) {
            Some(e) if end_marker == "\n" => rest = &after[e..],
            Some(e) => rest = &after[e + 2..],
            None => {
                rest = "";
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

fn is_ident(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with(|c: char| c.is_ascii_digit())
}

/// The field names of one struct body, in order (`float a, b;` gives two fields, a function
/// pointer `int (*f)(...)` gives `f`).
fn body_fields(body: &str) -> Vec<String> {
    let mut decls = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in body.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ';' if depth == 0 => {
                decls.push(body[start..i].trim().to_string());
                start = i + 1;
            }
            _ => {}
        }
    }
    assert!(body[start..].trim().is_empty(), "unterminated: {body}");
    let mut names = Vec::new();
    for decl in decls.iter().filter(|d| !d.is_empty()) {
        if let Some(p) = decl.find("(*") {
            let name = decl[p + 2..].split(')').next().unwrap().trim();
            assert!(is_ident(name), "function pointer field in {decl:?}");
            names.push(name.to_string());
            continue;
        }
        for (k, part) in decl.split(',').enumerate() {
            let token = if k == 0 {
                part.split(|c: char| c.is_whitespace() || c == '*')
                    .rfind(|t| !t.is_empty())
                    .unwrap_or("")
            } else {
                part.trim().trim_start_matches('*').trim()
            };
            assert!(is_ident(token), "field name in {decl:?}: {token:?}");
            names.push(token.to_string());
        }
    }
    names
}

/// Every `struct NAME { ... }` definition of a (comment-free) header: name and field names.
pub fn header_structs(header: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(p) = header[at..].find("struct ") {
        let start = at + p + "struct ".len();
        at = start;
        let rest = &header[start..];
        let name_end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let name = &rest[..name_end];
        let after = rest[name_end..].trim_start();
        if name.is_empty() || !after.starts_with('{') {
            continue;
        }
        let open = start + name_end + (rest[name_end..].len() - after.len());
        let close = open + header[open..].find('}').expect("closing brace");
        out.push((name.to_string(), body_fields(&header[open + 1..close])));
        at = close;
    }
    out
}

/// Names of the numeric constants a (comment-free) header defines: `#define NAME <int>` and
/// enumerators `NAME = <int>`.
pub fn header_constants(header: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in header.lines() {
        let mut it = line.split_whitespace();
        if let (Some("#define"), Some(name), Some(value)) = (it.next(), it.next(), it.next()) {
            if value.parse::<i64>().is_ok() {
                names.push(name.to_string());
            }
        }
    }
    for (i, _) in header.match_indices('=') {
        let before = header[..i].trim_end();
        let name_start = before
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |p| p + 1);
        let name = &before[name_start..];
        let value: String = header[i + 1..]
            .trim_start()
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '-')
            .collect();
        if name.starts_with("BEACONKV_") && value.parse::<i64>().is_ok() {
            names.push(name.to_string());
        }
    }
    names
}
