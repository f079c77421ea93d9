//! End-to-end tests inside the patched llama.cpp (cpp/tests/test_e2e.cpp does the work; each
//! test here runs one of its cases). `cargo test --features e2e` after `make build`.
#![cfg(feature = "e2e")]

mod common_e2e;

use common_e2e::*;
use std::path::PathBuf;
use std::process::Command;

/// `test` on the tiny model with flash attention off (f16 cache, transposed V) and on with a
/// q8_0 cache.
fn e2e_fa_off_and_on_q8(test: &str) {
    for flags in [
        &["-fa", "off"][..],
        &["-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0"][..],
    ] {
        let out = e2e(&tiny_model(), test, flags);
        assert!(out.contains(&format!("ok {test}")), "{flags:?}: {out}");
    }
}

fn e2e(model: &std::path::Path, test: &str, flags: &[&str]) -> String {
    let mut cmd = Command::new(tool("test_e2e"));
    cmd.arg(model).arg(test).args(["-t", "2"]).args(flags);
    run_ok(&mut cmd)
}

#[test]
fn detached_and_none_give_identical_logits() {
    e2e(&tiny_model(), "detached_vs_none", &[]);
}

#[test]
fn budget_above_length_gives_identical_output() {
    e2e(&tiny_model(), "budget_covers_all", &[]);
}

#[test]
fn cells_stay_bounded_for_every_policy() {
    for policy in [
        "beacon",
        "recent",
        "streaming",
        "random",
        "beacon,prompt=inside",
        "streaming,prompt=inside",
    ] {
        let out = e2e(&tiny_model(), &format!("bounded_cells:{policy}"), &[]);
        assert!(out.contains("ok bounded_cells"), "{out}");
    }
}

#[test]
fn captured_queries_equal_the_graph_queries() {
    e2e(&tiny_model(), "query_capture", &[]);
}

#[test]
fn cache_types_and_flash_attention() {
    let cases: &[&[&str]] = &[
        &["-fa", "off", "-ctk", "f16"],
        &["-fa", "on", "-ctk", "f16", "-ctv", "f16"],
        &["-fa", "off", "-ctk", "bf16"],
        &["-fa", "on", "-ctk", "bf16", "-ctv", "bf16"],
        // quantised K is Hadamard-rotated by this llama.cpp (head_dim 64)
        &["-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0"],
        &["-fa", "off", "-ctk", "q8_0"],
    ];
    for flags in cases {
        e2e(&tiny_model(), "bounded_cells:beacon", flags);
        e2e(&tiny_model(), "budget_covers_all", flags);
    }
}

/// Gemma 3 270M from the model cache (`$BEACONKV_MODELS`, default `~/.cache/beaconkv/models`),
/// which `scripts/fetch-models.sh gemma3` fills (`make test` runs it before the tests). Tests do
/// not download: without the file this fails and says what is missing and how to fetch it.
fn cached_gemma3() -> PathBuf {
    let dir = std::env::var_os("BEACONKV_MODELS")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/beaconkv/models"))
        })
        .expect("neither BEACONKV_MODELS nor HOME is set: cannot locate the model cache");
    let path = dir.join("gemma-3-270m-q4_k_m.gguf");
    assert!(
        path.is_file(),
        "missing model {}: Gemma 3 270M Q4_K_M (238 MB) is not in the cache; fetch it with \
         `scripts/fetch-models.sh gemma3` (make test runs it first)",
        path.display()
    );
    path
}

/// Real model with interleaved sliding-window attention (Gemma 3 270M).
#[test]
fn gemma3_iswa_compresses_only_global_layers() {
    let out = e2e(&cached_gemma3(), "iswa_global_only", &[]);
    assert!(out.contains("ok iswa_global_only"), "{out}");
}

#[test]
fn several_sequences_in_one_unified_cache() {
    let out = e2e(&tiny_model(), "multi_seq:unified", &[]);
    assert!(out.contains("max cells per seq 64"), "{out}");
}

#[test]
fn several_sequences_in_split_streams() {
    let out = e2e(&tiny_model(), "multi_seq:split", &[]);
    assert!(out.contains("max cells per seq 64"), "{out}");
}

#[test]
fn load_of_eight_sequences_has_no_leak() {
    let out = e2e(&tiny_model(), "load", &[]);
    assert!(out.contains("max 64 cells/seq"), "{out}");
}

#[test]
fn prompt_longer_than_the_budget() {
    e2e(&tiny_model(), "long_prompt", &[]);
}

#[test]
fn saved_and_restored_sequence_continues_identically() {
    let out = e2e(&tiny_model(), "state_roundtrip", &[]);
    assert!(out.contains("with plugin state): 300 of 300"), "{out}");
}

#[test]
fn speculative_decoding_with_a_compressed_draft_and_target() {
    let out = e2e(&tiny_model(), "speculative", &[]);
    assert!(out.contains("ok speculative"), "{out}");
}

#[test]
fn copy_path_for_non_host_buffers_matches_the_direct_path() {
    let out = e2e(&tiny_model(), "copy_path", &[]);
    assert!(out.contains("identical decisions"), "{out}");
}

/// The scores of a pass computed as a ggml graph on K's backend (`llama_kv_plugin_score_keys`)
/// match a reference computed from the K rows in double, for cell counts on and off the graph's
/// padding, with F16, BF16 and quantised K (test_e2e_scoring.cpp states the tolerance).
#[test]
fn backend_scores_match_a_host_reference() {
    for flags in [
        &[][..],
        &["-ctk", "bf16", "-fa", "on"],
        &["-ctk", "q8_0"],
        &["-fa", "on", "-ctk", "q4_0", "-ctv", "q4_0"],
    ] {
        let out = e2e(&tiny_model(), "score_keys", flags);
        assert!(out.contains("scores within tolerance"), "{flags:?}: {out}");
    }
}

/// The archive's host callbacks move K and V rows between cells exactly, with flash attention on
/// and off (transposed V) and with quantised caches (Hadamard-rotated K).
#[test]
fn archive_rows_move_between_cells_exactly() {
    let cases: &[&[&str]] = &[
        &["-fa", "off"],
        &["-fa", "on"],
        &["-fa", "off", "-ctk", "bf16"],
        &["-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0"],
        &["-fa", "off", "-ctk", "q8_0"],
        &["-fa", "on", "-ctk", "q4_0", "-ctv", "q4_0"],
    ];
    for flags in cases {
        let out = e2e(&tiny_model(), "archive_swap_in", flags);
        assert!(out.contains("ok archive_swap_in"), "{flags:?}: {out}");
    }
}

/// Token ids reach the plugin through the patched llama.cpp: a passage that comes again is
/// recalled by its tokens, with flash attention off and on and a quantised cache.
#[test]
fn archive_recalls_a_repeated_passage_by_its_tokens() {
    e2e_fa_off_and_on_q8("archive_recall_by_tokens");
}

/// Token ids reach the plugin before a batch is placed: a user turn that quotes how an evicted
/// passage began gets the phrase and what followed it back, flash attention off and on.
#[test]
fn archive_recalls_a_quoted_passage_at_a_user_turn() {
    e2e_fa_off_and_on_q8("archive_recall_at_batch_start");
}

/// A long generation with the archive: cells bounded, every token accounted for.
#[test]
fn archive_generation_stays_bounded() {
    e2e_fa_off_and_on_q8("archive_run");
}
