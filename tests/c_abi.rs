//! Builds tests/c/test_capi.c against the crate's static library, runs it, and checks that the
//! library defines no llama_*/ggml_* symbol (the host links libllama once).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// target/<profile>, found from this test executable (target/<profile>/deps/c_abi-*).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .to_path_buf()
}

/// The static library, freshly built. `cargo test` only builds the rlib for its test
/// executables and leaves a libbeaconkv.a from an earlier build untouched, so build the lib
/// target (all its crate types) once here; it is a no-op when nothing changed.
fn static_lib() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = profile_dir();
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let mut cmd = Command::new(cargo);
            cmd.args(["build", "--lib"])
                .current_dir(env!("CARGO_MANIFEST_DIR"));
            if dir.file_name().is_some_and(|n| n == "release") {
                cmd.arg("--release");
            }
            let status = cmd.status().expect("run cargo build --lib");
            assert!(status.success(), "cargo build --lib failed");
            let lib = dir.join("libbeaconkv.a");
            assert!(lib.exists(), "{} not found", lib.display());
            lib
        })
        .clone()
}

#[test]
fn c_program_drives_every_policy() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join("test_capi");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(root.join("tests/c/test_capi.c"))
        .arg(static_lib())
        .args(["-lpthread", "-ldl", "-lm"])
        .output()
        .expect("run the C compiler");
    assert!(
        out.status.success(),
        "compiling test_capi.c failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("run test_capi");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    println!("{stdout}");
    assert!(
        run.status.success(),
        "test_capi failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("all checks passed"));
}

fn defined_symbols(lib: &Path) -> Vec<String> {
    let out = Command::new("nm")
        .args(["--defined-only", "-g"])
        .arg(lib)
        .output()
        .expect("run nm");
    assert!(out.status.success(), "nm failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let (_addr, kind, name) = (it.next()?, it.next()?, it.next()?);
            matches!(kind, "T" | "D" | "B" | "R").then(|| name.to_string())
        })
        .collect()
}

#[test]
fn static_lib_defines_no_llama_or_ggml_symbol() {
    let syms = defined_symbols(&static_lib());
    let bad: Vec<_> = syms
        .iter()
        .filter(|s| {
            let s = s.trim_start_matches('_');
            s.starts_with("llama_") || s.starts_with("ggml_") || s.starts_with("gguf_")
        })
        .collect();
    assert!(bad.is_empty(), "foreign symbols defined: {bad:?}");
}

/// Names of the functions the header declares or mentions as calls (`beaconkv_xxx(`).
fn header_functions(header: &str) -> Vec<String> {
    let mut names: Vec<String> = header
        .match_indices("beaconkv_")
        .filter_map(|(i, _)| {
            let rest = &header[i..];
            let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))?;
            rest[end..]
                .starts_with('(')
                .then(|| rest[..end].to_string())
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn static_lib_exports_every_header_function() {
    let header =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("include/beaconkv.h"))
            .unwrap();
    let syms = defined_symbols(&static_lib());
    let functions = header_functions(&header);
    assert!(functions.len() >= 20, "parsed {functions:?}");
    for f in functions {
        assert!(syms.contains(&f), "{f} declared but not exported");
    }
}
