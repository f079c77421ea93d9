//! Hybrid models (attention + recurrent layers) end to end inside the patched llama.cpp: Gated
//! DeltaNet (Qwen3.5 `qwen35`, Qwen3-Next `qwen3next`), short convolution (LFM2 `lfm2`), and the
//! layouts the plugin refuses (LFM2 with sliding-window attention = hybrid iSWA without a global
//! layer, Mamba-2 = recurrent only, Qwen4exp = hybrid with a sparse-attention indexer cache,
//! dots3note = DSA with sliding-window layers). The models are tiny random-weight GGUFs written by
//! scripts/make_tiny_hybrid_gguf.py into build/models/ when missing (no download).
//!
//! The cases test_e2e has (bounded cells, fork, state save/restore, `none` vs no plugin) run here on
//! the hybrid models; cpp/tests/test_hybrid.cpp (build/bin/test_hybrid) adds what only hybrid
//! memory needs: the recurrent state untouched by eviction, speculative rollback through
//! recurrent snapshots and checkpoints, fork with the recurrent state, refusal.
//! `cargo test --release --features e2e --test hybrid -- --test-threads 1` after `make build`.
#![cfg(feature = "e2e")]

mod common_e2e;

use common_e2e::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Architectures with an attention part the plugin compresses.
const COMPRESSED: [&str; 3] = ["qwen35", "qwen3next", "lfm2"];

/// `build/models/tiny-<arch>[-l<layers>].gguf`, written by scripts/make_tiny_hybrid_gguf.py with
/// build/venv's Python (the `gguf` package `make build` installs) when missing.
///
/// Default layouts (the script's): qwen35/qwen3next 8 layers = Gated DeltaNet x3 + attention,
/// twice; lfm2 6 layers = conv, conv, attention, twice. `layers` = 4 (qwen) / 3 (lfm2) gives a
/// model whose only attention layer is the last one, so its recurrent state depends on the tokens
/// alone (what the recurrent-state comparisons need).
fn hybrid_model(arch: &str, layers: Option<u32>) -> PathBuf {
    static LOCK: Mutex<()> = Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let name = match layers {
        Some(n) => format!("tiny-{arch}-l{n}.gguf"),
        None => format!("tiny-{arch}.gguf"),
    };
    let dir = repo_root().join("build/models");
    let path = dir.join(&name);
    if path.is_file() {
        return path;
    }
    let python = repo_root().join("build/venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run `make build` first (it creates the venv with the gguf package)",
        python.display()
    );
    std::fs::create_dir_all(&dir).expect("create build/models");
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let mut cmd = Command::new(python);
    cmd.arg(repo_root().join("scripts/make_tiny_hybrid_gguf.py"))
        .arg(arch)
        .arg(&tmp);
    if let Some(n) = layers {
        cmd.args(["--layers", &n.to_string()]);
    }
    run_ok(&mut cmd);
    std::fs::rename(&tmp, &path).expect("move the model into place");
    path
}

/// The model whose only attention layer is the last one.
fn attention_last(arch: &str) -> PathBuf {
    hybrid_model(arch, Some(if arch == "lfm2" { 3 } else { 4 }))
}

/// Threads of the tools. The models are tiny: one thread is as fast as two on an idle machine and
/// many times faster on a busy one (ggml's threads spin at every barrier while the other core is
/// taken). `cache_types_and_flash_attention` runs with 2 threads, so the multi-threaded kernels
/// are covered too.
const THREADS: &[&str] = &["-t", "1"];

/// One case of build/bin/test_e2e (a later `-t` in `flags` wins).
fn e2e(model: &Path, test: &str, flags: &[&str]) -> String {
    let mut cmd = Command::new(tool("test_e2e"));
    cmd.arg(model).arg(test).args(THREADS).args(flags);
    run_ok(&mut cmd)
}

/// One case of build/bin/test_hybrid (cpp/tests/test_hybrid.cpp).
fn hybrid(model: &Path, test: &str, flags: &[&str]) -> String {
    let mut cmd = Command::new(tool("test_hybrid"));
    cmd.arg(model).arg(test).args(THREADS).args(flags);
    run_ok(&mut cmd)
}

fn assert_ok(out: &str, test: &str) {
    assert!(out.contains(&format!("ok {test}")), "{out}");
}

// ---- compression stays within the budget --------------------------------------------------------

/// 8x the budget (64 cells; 549 tokens) with every policy: the attention cells never exceed the
/// budget, positions run past the physical cells, evicted positions are gone from llama.cpp's own
/// listing and never come back, the prompt and the newest token stay, and the plugin's count of
/// evicted cells equals what llama.cpp lost.
#[test]
fn attention_cells_stay_within_the_budget_for_8x_the_budget() {
    for arch in COMPRESSED {
        let model = hybrid_model(arch, None);
        // every policy on one model of each family; Qwen3-Next differs from Qwen3.5 in its FFN only
        let policies: &[&str] = if arch == "qwen3next" {
            &["beacon"]
        } else {
            &["beacon", "recent", "streaming", "random"]
        };
        for policy in policies {
            let out = e2e(&model, &format!("bounded_cells:{policy}"), &[]);
            assert!(out.contains("ok bounded_cells"), "{arch} {policy}: {out}");
        }
    }
}

/// The same with flash attention and a quantised (Hadamard-rotated) K cache, on two threads.
#[test]
fn cache_types_and_flash_attention() {
    let cases: &[&[&str]] = &[
        &["-t", "2", "-fa", "on", "-ctk", "f16", "-ctv", "f16"],
        &["-t", "2", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0"],
        &["-t", "2", "-fa", "off", "-ctk", "q8_0"],
    ];
    for arch in ["qwen35", "lfm2"] {
        let model = hybrid_model(arch, None);
        for flags in cases {
            let out = e2e(&model, "bounded_cells:beacon", flags);
            assert!(out.contains("ok bounded_cells"), "{arch} {flags:?}: {out}");
        }
    }
}

/// A prompt of 1500 tokens through a budget of 96 cells, chunk by chunk.
#[test]
fn prompt_longer_than_the_budget() {
    for arch in ["qwen35", "lfm2"] {
        let out = e2e(&hybrid_model(arch, None), "long_prompt", &[]);
        assert_ok(&out, "long_prompt");
    }
}

/// The queries the plugin reads are the attention queries of the graph (Qwen's attention layers
/// name their post-RoPE query "Qcur", which test_e2e's eval callback compares against; LFM2
/// names its post-RoPE query differently, so the check does not apply to it).
#[test]
fn captured_queries_equal_the_graph_queries() {
    for arch in ["qwen35", "qwen3next"] {
        let out = e2e(&hybrid_model(arch, None), "query_capture", &[]);
        assert_ok(&out, "query_capture");
    }
}

// ---- the recurrent part ---------------------------------------------------------------------------

/// Eviction never touches the recurrent state: fed the same tokens as an uncompressed context for
/// 8x the budget, the compressed context's recurrent state (conv + SSM/delta-rule state and
/// position) stays bit-identical at every step while 512 attention cells are evicted.
#[test]
fn recurrent_state_is_never_touched_by_eviction() {
    for arch in COMPRESSED {
        let model = attention_last(arch);
        for policy in ["beacon", "random"] {
            let out = hybrid(&model, &format!("recurrent_untouched:{policy}"), &[]);
            assert!(out.contains("bit-identical"), "{arch} {policy}: {out}");
        }
    }
}

/// The host's eviction call: asked to evict every cell of a sequence it keeps the newest one,
/// the recurrent state and the sequence's positions stay, the next token lands right after it.
#[test]
fn eviction_keeps_the_newest_cell_for_the_recurrent_part() {
    for arch in COMPRESSED {
        let out = hybrid(&hybrid_model(arch, None), "direct_evict", &[]);
        assert_ok(&out, "direct_evict");
        if arch == "qwen35" {
            // its IMRoPE layer is described as NEOX (exact for text positions), so its queries
            // are moved to the scoring position like any NEOX layer's
            assert!(out.contains("rope mode 2 over"), "{out}");
        }
    }
}

// ---- speculative rollback -------------------------------------------------------------------------

/// Qwen3.5 keeps recurrent-state snapshots (n_rs_seq): rejected drafts are removed with
/// llama_memory_seq_rm like on an attention-only model. Budget covering the run: logits
/// bit-identical to the context without the plugin; budget 64 for 8x as many tokens: every
/// rollback length 0..4 after evictions, cells bounded, the recurrent state equal to the
/// uncompressed context's after every round.
#[test]
fn speculative_rollback_through_recurrent_snapshots() {
    let out = hybrid(&attention_last("qwen35"), "rollback_rs", &[]);
    assert!(out.contains("bit-identical"), "{out}");
    assert_ok(&out, "rollback_rs");
}

/// Without snapshots (LFM2, Qwen3-Next; Qwen3.5 with n_rs_seq = 0) a partial seq_rm is refused
/// and changes nothing; llama-server then checkpoints the recurrent state (PARTIAL_ONLY), restores
/// it after a rejection, removes the verified batch and replays the accepted tokens. Same checks.
#[test]
fn speculative_rollback_through_checkpoints() {
    for arch in COMPRESSED {
        let out = hybrid(&attention_last(arch), "rollback_ckpt", &[]);
        assert!(out.contains("bit-identical"), "{arch}: {out}");
        assert_ok(&out, "rollback_ckpt");
    }
}

// ---- several sequences ----------------------------------------------------------------------------

/// test_e2e's multi-sequence case: 4 sequences decoded together for 400 steps, one forked from
/// seq 0 (seq_cp), every sequence within its budget, the fork loses positions only through its
/// own compression passes, removing all sequences leaves no cell and no plugin state.
#[test]
fn several_sequences_with_fork() {
    for arch in ["qwen35", "lfm2"] {
        let model = hybrid_model(arch, None);
        for mode in ["unified", "split"] {
            let out = e2e(&model, &format!("multi_seq:{mode}"), &[]);
            assert!(out.contains("max cells per seq 64"), "{arch} {mode}: {out}");
        }
    }
}

/// A compressed sequence forked after its first compression passes: fed the same tokens, fork and
/// original keep the same positions and the same recurrent state (and, in split streams, the same
/// logits bit for bit); diverged, both stay bounded; removing the fork leaves the original as it was.
#[test]
fn fork_continues_like_the_original() {
    for arch in COMPRESSED {
        let model = hybrid_model(arch, None);
        for mode in ["split", "unified"] {
            let out = hybrid(&model, &format!("fork:{mode}"), &[]);
            assert_ok(&out, &format!("fork:{mode}"));
        }
    }
}

// ---- state -------------------------------------------------------------------------------------------

/// llama_state_seq_get/set_data of a compressed hybrid sequence (attention cells with holes,
/// recurrent state, the plugin's block): a fresh context continues with the same 300 tokens as
/// the uninterrupted one.
#[test]
fn saved_and_restored_sequence_continues_identically() {
    for arch in COMPRESSED {
        let out = e2e(&hybrid_model(arch, None), "state_roundtrip", &[]);
        assert!(
            out.contains("with plugin state): 300 of 300"),
            "{arch}: {out}"
        );
    }
}

// ---- no compression --------------------------------------------------------------------------------

/// Policy `none` with the plugin attached computes the logits of the context without a plugin
/// bit for bit; a budget above the run's length evicts nothing and changes no logit either.
#[test]
fn none_and_a_budget_above_the_length_are_bit_identical_to_no_plugin() {
    for arch in COMPRESSED {
        let model = hybrid_model(arch, None);
        assert_ok(&e2e(&model, "detached_vs_none", &[]), "detached_vs_none");
        assert_ok(&e2e(&model, "budget_covers_all", &[]), "budget_covers_all");
    }
}

fn cli(model: &Path, n: u32, extra: &[&str]) -> (Vec<u8>, String, Option<Value>) {
    // every run its own directory: tests may run in parallel
    static RUN: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "beaconkv-hybrid-cli-{}-{}",
        std::process::id(),
        RUN.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("stats.json");
    let _ = std::fs::remove_file(&json);
    let mut cmd = Command::new(tool("beaconkv-cli"));
    cmd.arg("-m")
        .arg(model)
        .args(THREADS)
        .args(["--temp", "0", "--ignore-eos", "-c", "4096"])
        .args(["-p", "The lighthouse keeper wrote in his log", "-n"])
        .arg(n.to_string())
        .args(extra)
        .arg("--stats-json")
        .arg(&json);
    let out = cmd.output().expect("spawn beaconkv-cli");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{stderr}",
        out.status
    );
    let stats = std::fs::read_to_string(&json)
        .ok()
        .map(|s| serde_json::from_str(&s).expect("stats json"));
    (out.stdout, stderr, stats)
}

/// The command-line tool: `--kv-compress none` prints the same text as a run without any --kv
/// flag; a compressed run of 8x the budget reports a peak within the budget.
#[test]
fn command_line_none_matches_no_flag_and_budget_holds() {
    for arch in COMPRESSED {
        let model = hybrid_model(arch, None);
        let (plain, _, _) = cli(&model, 300, &[]);
        let (none, _, _) = cli(&model, 300, &["--kv-compress", "none"]);
        assert!(
            plain == none,
            "{arch}: --kv-compress none changed the output"
        );
        let (_, err, stats) = cli(
            &model,
            600,
            &[
                "--kv-compress",
                "beacon",
                "--kv-budget",
                "64",
                "--kv-window",
                "16",
            ],
        );
        let s = stats.expect("stats json");
        assert_eq!(s["policy"], "beacon", "{arch}: {s}\n{err}");
        // the default prompt=keep holds the prompt (here under the room of 64 cells) beside the budget
        let prompt = s["n_prompt"].as_i64().unwrap().min(64);
        assert!(
            s["cells_peak"].as_i64().unwrap() <= 64 + prompt,
            "{arch}: {s}"
        );
        assert!(s["evicted"].as_i64().unwrap() >= 500, "{arch}: {s}");
    }
}

// ---- refused layouts ---------------------------------------------------------------------------

/// Layouts the plugin cannot compress: LFM2 with sliding-window attention (llama.cpp builds a
/// hybrid iSWA memory whose base, non-SWA, attention cache has no layer: nothing the budget could
/// bound), Mamba-2 (recurrent only), Qwen4-Exp (`llama_memory_hybrid_idx`: its sparse-attention
/// indexer cache mirrors the attention cells one to one) and dots3-note (`llama_kv_cache_dsa_iswa`:
/// MLA with a DSA indexer cache plus an SWA cache). Through common_init_from_params, as every tool:
/// exactly one warning naming the reason, no plugin, the full cache, and for 8x the budget greedy
/// logits bit-identical to a context without the plugin.
#[test]
fn refused_layouts_warn_once_and_run_uncompressed() {
    let cases = [
        ("lfm2-swa", "the attention cache has no layers"),
        ("mamba2", "the memory type is not supported"),
        (
            "qwen4exp",
            "the memory type is not supported (hybrid with a sparse-attention indexer cache)",
        ),
        (
            "dots3note",
            "the memory type is not supported (recurrent-only, DSA, DSA-iSWA, DSv4, MSA or another \
             cache layout)",
        ),
    ];
    for (arch, reason) in cases {
        let out = hybrid(&hybrid_model(arch, None), "refused", &[]);
        assert_ok(&out, "refused");
        let line = out
            .lines()
            .find(|l| l.starts_with("refusal:"))
            .unwrap_or_default();
        assert!(line.contains(reason), "{arch}: {line}");
    }
}

/// The same through the command-line tool: one warning, the run completes with the full cache
/// (as many cells as the logical context) and no eviction, and for Mamba-2 the text is the run's
/// without --kv flags.
#[test]
fn command_line_on_a_refused_layout() {
    for arch in ["lfm2-swa", "mamba2"] {
        let model = hybrid_model(arch, None);
        let (text, err, stats) = cli(&model, 300, &["--kv-budget", "64", "--kv-window", "16"]);
        assert_eq!(
            err.matches("KV plugin not attached").count(),
            1,
            "{arch}: {err}"
        );
        let s = stats.expect("stats json");
        assert_eq!(s["policy"], "off", "{arch}: {s}");
        assert_eq!(s["evicted"], 0, "{arch}: {s}");
        assert!(s["cells_physical"].as_u64().unwrap() >= 4096, "{arch}: {s}");
        if arch == "mamba2" {
            let (plain, _, _) = cli(&model, 300, &[]);
            assert!(
                plain == text,
                "{arch}: output differs from the run without --kv flags"
            );
        }
    }
}
