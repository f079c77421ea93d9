//! The result tables of docs/results.md and README.md are what the committed result files give:
//! `scripts/results_tables.py --check` renders every generated block again and compares.

use std::process::Command;

#[test]
fn result_tables_match_their_result_files() {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new("python3")
        .arg(format!("{root}/scripts/results_tables.py"))
        .arg("--check")
        .output()
        .expect("python3 runs scripts/results_tables.py");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("tables checked"), "{said}");
}
