//! Builds tests/c/test_capi.c against the crate's static library, runs it, and checks that the
//! library defines no llama_*/ggml_* symbol (the host links libllama once).
//!
//! The same C program also runs under valgrind (memcheck: invalid reads/writes and definite leaks
//! fail) and built with gcc's AddressSanitizer + UndefinedBehaviorSanitizer (leak detection on).
//! A missing valgrind or libasan FAILS these tests; set BEACONKV_NO_VALGRIND=1 to skip them on a
//! machine without the tools (see docs/testing.md).

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

/// Compile tests/c/test_capi.c with `cc` and `flags` into `name`; `Err(stderr)` on failure.
fn compile_capi(cc: &str, name: &str, flags: &[&str]) -> Result<PathBuf, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let out = Command::new(cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror"])
        .args(flags)
        .arg("-o")
        .arg(&exe)
        .arg(root.join("tests/c/test_capi.c"))
        .arg(static_lib())
        .args(["-lpthread", "-ldl", "-lm"])
        .output()
        .unwrap_or_else(|e| panic!("run the C compiler {cc}: {e}"));
    if out.status.success() {
        Ok(exe)
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Run a built test program (`cmd`) and require a clean pass.
fn run_capi(mut cmd: Command, what: &str) -> String {
    let run = cmd.output().unwrap_or_else(|e| panic!("run {what}: {e}"));
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    println!("{stdout}");
    assert!(
        run.status.success(),
        "{what} failed ({}):\n{stdout}\n{stderr}",
        run.status
    );
    assert!(stdout.contains("all checks passed"), "{what}:\n{stdout}");
    stderr.into_owned()
}

/// BEACONKV_NO_VALGRIND=1: the memory-checking tools may be missing (the tests then skip).
fn tools_optional() -> bool {
    std::env::var("BEACONKV_NO_VALGRIND").is_ok_and(|v| v == "1")
}

#[test]
fn c_program_drives_every_policy() {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let exe = compile_capi(&cc, "test_capi", &["-O1"])
        .unwrap_or_else(|e| panic!("compiling test_capi.c failed:\n{e}"));
    run_capi(Command::new(&exe), "test_capi");
}

/// Decode steps per policy under valgrind, fewer than the program's default of 2000 because
/// valgrind runs a debug build many times slower; still past the budget of 256 with the
/// 100-token prompt, so every policy compresses often.
const VALGRIND_STEPS: &str = "300";
/// Decode steps per policy under ASan + UBSan.
const ASAN_STEPS: &str = "1000";

#[test]
fn c_program_is_clean_under_valgrind() {
    let have = Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        assert!(
            tools_optional(),
            "valgrind is not installed (apt-get install valgrind), or set BEACONKV_NO_VALGRIND=1"
        );
        eprintln!("valgrind not installed; skipped (BEACONKV_NO_VALGRIND=1)");
        return;
    }
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let exe = compile_capi(&cc, "test_capi_valgrind", &["-O1", "-g"])
        .unwrap_or_else(|e| panic!("compiling test_capi.c failed:\n{e}"));
    let mut cmd = Command::new("valgrind");
    cmd.args([
        "--error-exitcode=99",
        "--leak-check=full",
        "--errors-for-leak-kinds=definite",
        "--show-leak-kinds=definite",
        "--track-origins=yes",
        "--quiet",
    ])
    .arg(&exe)
    .arg(VALGRIND_STEPS);
    let stderr = run_capi(cmd, "test_capi under valgrind");
    assert!(
        !stderr.contains("definitely lost") && !stderr.contains("Invalid "),
        "valgrind reported:\n{stderr}"
    );
}

#[test]
fn c_program_is_clean_under_asan_and_ubsan() {
    let flags = [
        "-O1",
        "-g",
        "-fsanitize=address,undefined",
        "-fno-sanitize-recover=all",
        "-fno-omit-frame-pointer",
    ];
    let exe = match compile_capi("gcc", "test_capi_asan", &flags) {
        Ok(exe) => exe,
        Err(e) if e.contains("asan") || e.contains("ubsan") || e.contains("sanitize") => {
            assert!(
                tools_optional(),
                "gcc cannot build with -fsanitize=address,undefined (libasan/libubsan missing?), \
                 or set BEACONKV_NO_VALGRIND=1:\n{e}"
            );
            eprintln!("gcc sanitizers unavailable; skipped (BEACONKV_NO_VALGRIND=1):\n{e}");
            return;
        }
        Err(e) => panic!("compiling test_capi.c with sanitizers failed:\n{e}"),
    };
    let mut cmd = Command::new(&exe);
    cmd.arg(ASAN_STEPS)
        .env(
            "ASAN_OPTIONS",
            "detect_leaks=1:abort_on_error=0:halt_on_error=1:exitcode=98",
        )
        // Leaks are checked at exit, when no frame should hold a heap pointer: do not let
        // stale stack slots or registers hide a leaked context (LeakSanitizer scans them by
        // default, and then can miss a leaked context that valgrind reports).
        .env("LSAN_OPTIONS", "use_stacks=0:use_registers=0")
        .env("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
        .env_remove("LD_PRELOAD");
    let stderr = run_capi(cmd, "test_capi under ASan+UBSan");
    assert!(
        !stderr.contains("ERROR: AddressSanitizer")
            && !stderr.contains("ERROR: LeakSanitizer")
            && !stderr.contains("runtime error:"),
        "sanitizers reported:\n{stderr}"
    );
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

// ---- one source of truth for the ABI -------------------------------------------------------
//
// The structs are checked at every build: `build.rs` requires the header's structs and fields to
// be those of `beaconkv::ffi::types`, both ways, and compiles C11 assertions of every size,
// alignment, offset and field type (callback signatures included), for `include/beaconkv.h` and
// for libllama's plugin tables in cpp/llama/include/llama-kv-plugin.h. The constants are checked
// here: a generated C program prints the value of every constant the header defines, and the
// list must equal the Rust side's (`CONSTANTS` and the ids of the setting enums) both ways.

#[allow(dead_code)] // its struct reader serves build.rs
#[path = "../abi/header.rs"]
mod header;

use beaconkv::ffi::types::CONSTANTS;
use beaconkv::testing::config::{
    ArchiveType, Policy, PromptMode, ReadPath, Reduce, KEYS, KEY_FLAGS,
};
use header::{header_constants, strip_comments};
use std::collections::BTreeMap;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

/// Compile and run a C program that includes include/beaconkv.h and prints the value of
/// `constants`.
fn c_constants(constants: &[String]) -> BTreeMap<String, i64> {
    let mut src = String::from("#include <stdio.h>\n#include \"beaconkv.h\"\nint main(void) {\n");
    for c in constants {
        src += &format!("    printf(\"{c} %lld\\n\", (long long)({c}));\n");
    }
    src += "    return 0;\n}\n";
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let (c_file, exe) = (dir.join("abi_constants.c"), dir.join("abi_constants"));
    std::fs::write(&c_file, src).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Werror", "-I"])
        .arg(root().join("include"))
        .arg("-o")
        .arg(&exe)
        .arg(&c_file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "compiling {}:\n{}",
        c_file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success());
    String::from_utf8(run.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let (name, value) = line.split_once(' ').unwrap();
            (name.to_string(), value.parse().unwrap())
        })
        .collect()
}

fn rust_constants() -> BTreeMap<String, i64> {
    let mut all: BTreeMap<String, i64> =
        CONSTANTS.iter().map(|(n, v)| (n.to_string(), *v)).collect();
    let mut add = |prefix: &str, name: &str, id: i32| {
        all.insert(
            format!("BEACONKV_{prefix}_{}", name.to_uppercase()),
            id as i64,
        );
    };
    Policy::ALL
        .iter()
        .for_each(|p| add("POLICY", p.name(), *p as i32));
    Reduce::ALL
        .iter()
        .for_each(|r| add("REDUCE", r.name(), *r as i32));
    ArchiveType::ALL
        .iter()
        .for_each(|t| add("ARCHIVE", t.name(), *t as i32));
    ReadPath::ALL
        .iter()
        .for_each(|t| add("READ", t.name(), *t as i32));
    PromptMode::ALL
        .iter()
        .for_each(|t| add("PROMPT", t.name(), *t as i32));
    all
}

#[test]
fn header_and_rust_declare_the_same_constants() {
    let constants = header_constants(&strip_comments(&read("include/beaconkv.h")));
    assert!(constants.len() >= 10, "parsed {constants:?}");
    assert_eq!(
        c_constants(&constants),
        rust_constants(),
        "constants: header (left) vs Rust (right)"
    );
}

#[test]
fn every_exported_function_is_declared_in_the_header() {
    let header = strip_comments(&read("include/beaconkv.h"));
    let declared = header_functions(&header);
    let exported: Vec<String> = defined_symbols(&static_lib())
        .into_iter()
        .filter(|s| s.starts_with("beaconkv_"))
        .collect();
    assert!(exported.len() >= 20, "{exported:?}");
    for f in &exported {
        assert!(
            declared.contains(f),
            "{f} exported but not declared in beaconkv.h"
        );
    }
    for f in &declared {
        assert!(exported.contains(f), "{f} declared but not exported");
    }
}

/// The header documents the flag of each key (`key -> --flag`, at beaconkv_spec_check); it must
/// be the key table's.
#[test]
fn header_flag_list_is_the_key_tables() {
    let header = read("include/beaconkv.h");
    let mut documented = BTreeMap::new();
    for (i, _) in header.match_indices(" -> ") {
        let key = header[..i]
            .rsplit(|c: char| c.is_whitespace() || c == ',')
            .next()
            .unwrap();
        let flag = header[i + 4..]
            .split(|c: char| c.is_whitespace() || c == ',')
            .next()
            .unwrap();
        if KEYS.contains(&key) {
            documented.insert(key.to_string(), flag.to_string());
        }
    }
    let table: BTreeMap<String, String> = KEY_FLAGS
        .iter()
        .filter_map(|(k, f)| f.map(|f| (k.to_string(), f.to_string())))
        .collect();
    assert_eq!(
        documented, table,
        "beaconkv_spec_check's list (left) vs config/keys.rs (right)"
    );
    assert!(
        header.contains("any other key K ->"),
        "the header names the flag of the other keys"
    );
}

/// docs/flags.md documents every key once (its "Spec keys" table) and the flag of each key that
/// has one (its "Flags" table); both must be the key table's.
#[test]
fn flags_doc_lists_the_key_tables_keys_and_flags() {
    let doc = read("docs/flags.md");
    let cell = |row: &str, i: usize| -> Option<String> {
        let c = row.split('|').nth(i + 1)?.trim();
        Some(c.strip_prefix('`')?.split(['`', ' ']).next()?.to_string())
    };
    let mut flags = BTreeMap::new();
    let mut keys = Vec::new();
    for row in doc.lines().filter(|l| l.starts_with("| `")) {
        let row = &row.replace("\\|", "/"); // an escaped `|` inside a cell
        let first = cell(row, 0).unwrap();
        if first.starts_with("--kv-") {
            // | `--kv-x N` | env | `key` | ...: keys of their own only (not `any`, not `–`)
            if let Some(key) = cell(row, 2).filter(|k| KEYS.contains(&k.as_str())) {
                flags.insert(key, first);
            }
        } else if row.split('|').count() == 6 {
            // | `key` | default | range | meaning |
            keys.push(first);
        }
    }
    let table: BTreeMap<String, String> = KEY_FLAGS
        .iter()
        .filter_map(|(k, f)| f.map(|f| (k.to_string(), f.to_string())))
        .collect();
    assert_eq!(
        flags, table,
        "docs/flags.md Flags table (left) vs config/keys.rs (right)"
    );
    keys.sort();
    let mut all: Vec<String> = KEYS.iter().map(|k| k.to_string()).collect();
    all.sort();
    assert_eq!(
        keys, all,
        "docs/flags.md Spec keys table (left) vs config/keys.rs (right)"
    );
}

/// The help of `--kv-compress-spec` (cpp/llama/common/kv-compress.cpp) lists every key.
#[test]
fn spec_flag_help_lists_every_key() {
    let glue = read("cpp/llama/common/kv-compress.cpp");
    let start = glue
        .find("(policy, ")
        .expect("the key list of --kv-compress-spec")
        + 1;
    let end = start + glue[start..].find("; see beaconkv.h").unwrap();
    let listed: Vec<&str> = glue[start..end].split(", ").collect();
    let mut sorted = listed.clone();
    sorted.sort();
    let mut all = KEYS.to_vec();
    all.sort();
    assert_eq!(
        sorted, all,
        "--kv-compress-spec help (left) vs config/keys.rs (right)"
    );
}
