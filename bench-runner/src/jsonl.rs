//! JSON-lines files that a run appends to as it goes, so that what it finished survives a kill:
//! read back (a last line cut short is dropped and the file mended), appended to and synced,
//! written whole.

use crate::args::write_file;
use serde::{de::DeserializeOwned, Serialize};
use std::io::Write as _;
use std::path::Path;

/// The lines of a JSONL file (none when it does not exist). A last line cut short (a run killed
/// while writing it) is dropped and the file truncated after the last whole line; any other bad
/// line is an error.
pub fn load_lines<T: DeserializeOwned>(path: &Path) -> Result<Vec<T>, String> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    if whole < bytes.len() {
        eprintln!(
            "{}: dropping a last line cut short ({} bytes)",
            path.display(),
            bytes.len() - whole
        );
        std::fs::write(path, &bytes[..whole])
            .map_err(|e| format!("cannot rewrite {}: {e}", path.display()))?;
    }
    let text = String::from_utf8_lossy(&bytes[..whole]);
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        rows.push(
            serde_json::from_str(line)
                .map_err(|e| format!("{} line {}: {e}", path.display(), i + 1))?,
        );
    }
    Ok(rows)
}

/// The rows as JSONL text, one compact JSON object a line.
pub fn to_lines<T: Serialize>(rows: &[T]) -> Result<String, String> {
    let mut text = String::new();
    for r in rows {
        text.push_str(&serde_json::to_string(r).map_err(|e| format!("cannot encode a row: {e}"))?);
        text.push('\n');
    }
    Ok(text)
}

/// Appends one line and flushes it to the disk.
pub fn append_line<T: Serialize>(path: &Path, row: &T) -> Result<(), String> {
    append_lines(path, std::slice::from_ref(row))
}

/// Appends the rows in one write and flushes them to the disk; the file is created even when
/// there are none.
pub fn append_lines<T: Serialize>(path: &Path, rows: &[T]) -> Result<(), String> {
    let text = to_lines(rows)?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    f.write_all(text.as_bytes())
        .and_then(|_| f.sync_data())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Replaces the file with the rows: written whole beside it, then moved over it, so that a kill
/// leaves either the old file or the new one.
pub fn replace_lines<T: Serialize>(path: &Path, rows: &[T]) -> Result<(), String> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = Path::new(&tmp);
    write_file(tmp, &to_lines(rows)?)?;
    std::fs::rename(tmp, path).map_err(|e| format!("cannot replace {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn appended_lines_survive_a_line_cut_short_and_a_replace() {
        let dir = std::env::temp_dir().join(format!("beaconkv-bench-jsonl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("rows.jsonl");
        let _ = std::fs::remove_file(&f);
        assert!(load_lines::<Value>(&f).unwrap().is_empty());
        append_lines::<Value>(&f, &[]).unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "");
        append_line(&f, &json!({"a": 1})).unwrap();
        append_lines(&f, &[json!({"b": [2]}), json!("c")]).unwrap();
        assert_eq!(
            std::fs::read_to_string(&f).unwrap(),
            "{\"a\":1}\n{\"b\":[2]}\n\"c\"\n"
        );
        let mut text = std::fs::read_to_string(&f).unwrap();
        text.push_str("{\"d\":");
        std::fs::write(&f, &text).unwrap();
        assert_eq!(load_lines::<Value>(&f).unwrap().len(), 3);
        assert!(std::fs::read_to_string(&f).unwrap().ends_with("\"c\"\n"));
        replace_lines(&f, &[json!(4)]).unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "4\n");
        assert!(!dir.join("rows.jsonl.tmp").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
