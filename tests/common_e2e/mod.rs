//! Shared helpers of the end-to-end tests: where the built llama.cpp tools and the models are.
//! These tests need `make build` (patched llama.cpp + the project's C++ tools) and run only with
//! `cargo test --features e2e`; without the build they fail with a message saying what to run.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A binary built by `make build` (build/bin/NAME).
pub fn tool(name: &str) -> PathBuf {
    let dir = std::env::var_os("BEACONKV_BIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("build/bin"));
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: run `make build` first",
        path.display()
    );
    path
}

/// The tiny random-weight test model written by `make build` (scripts/make_tiny_gguf.py).
pub fn tiny_model() -> PathBuf {
    let path = repo_root().join("build/models/tiny.gguf");
    assert!(
        path.exists(),
        "{} is missing: run `make build` first",
        path.display()
    );
    path
}

/// A real model fetched by scripts/fetch-models.sh (smollm2 | gemma3).
pub fn real_model(which: &str) -> PathBuf {
    let out = Command::new(repo_root().join("scripts/fetch-models.sh"))
        .arg(which)
        .output()
        .expect("run scripts/fetch-models.sh");
    assert!(
        out.status.success(),
        "fetch-models.sh {which} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Run a tool, assert success, return stdout.
pub fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().expect("spawn");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let tail: String = stderr
        .lines()
        .rev()
        .take(30)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        out.status.success(),
        "{:?} failed ({}):\nstdout:\n{stdout}\nstderr (tail):\n{tail}",
        cmd,
        out.status
    );
    stdout
}
