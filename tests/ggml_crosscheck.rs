//! Cross-check of BeaconKV's Rust RoPE and dequantisers against ggml itself: build/bin/ggml_reference
//! (cpp/tests/ggml_reference.cpp, linked with the project's ggml) prints ggml's results as JSON
//! (`%.9g`, which round-trips an f32 exactly).
//!
//! `Rope::rotate` must give ggml's bits exactly (the project builds ggml-cpu with FMA, which
//! `rope.rs` reproduces); `unrotate` inverts in f64 and is held to the bound `rope.rs` states.
//! Every dequantiser must give ggml's bits exactly.
#![cfg(feature = "e2e")]

mod common_e2e;

use beaconkv::testing::ggml::dequantize_row;
use beaconkv::testing::ggml::GgmlType;
use beaconkv::testing::ggml::Rope;
use common_e2e::*;
use serde_json::Value;
use std::process::Command;

fn reference() -> Value {
    let out = run_ok(&mut Command::new(tool("ggml_reference")));
    serde_json::from_str(&out).expect("ggml_reference prints JSON")
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

#[test]
fn rope_matches_ggml() {
    let r = reference();
    let cases = r["rope"].as_array().unwrap();
    assert!(cases.len() >= 70, "too few rope cases");
    // the M-RoPE / IMRoPE cases, read as NEOX with pairs that do not turn (llama-kv-plugin-rope.h)
    let still = cases
        .iter()
        .filter(|c| {
            c["freq_factors"]
                .as_array()
                .is_some_and(|f| f.iter().any(|v| v.as_f64().unwrap() > 1e38))
        })
        .count();
    assert!(
        still >= 12,
        "too few M-RoPE cases with pairs that do not turn: {still}"
    );
    let mut worst = 0.0f32;
    for c in cases {
        let rope = Rope {
            n_dims: c["n_dims"].as_u64().unwrap() as usize,
            mode: Rope::mode_from_ggml(c["mode"].as_i64().unwrap() as i32).unwrap(),
            n_ctx_orig: c["n_ctx_orig"].as_i64().unwrap() as i32,
            freq_base: c["freq_base"].as_f64().unwrap() as f32,
            freq_scale: c["freq_scale"].as_f64().unwrap() as f32,
            ext_factor: c["ext_factor"].as_f64().unwrap() as f32,
            attn_factor: c["attn_factor"].as_f64().unwrap() as f32,
            beta_fast: c["beta_fast"].as_f64().unwrap() as f32,
            beta_slow: c["beta_slow"].as_f64().unwrap() as f32,
            freq_factors: c["freq_factors"]
                .as_array()
                .map(|_| floats(&c["freq_factors"])),
        };
        let pos = c["pos"].as_i64().unwrap() as i32;
        let mut x = floats(&c["input"]);
        let want = floats(&c["output"]);
        rope.rotate(&mut x, pos);
        for (i, (a, b)) in x.iter().zip(&want).enumerate() {
            assert_eq!(
                a.to_bits(),
                b.to_bits(),
                "rope {c:?}: dim {i}: rust {a:e} vs ggml {b:e}"
            );
        }
        // and back: un-rotating ggml's output recovers the input within rope.rs's stated bound
        let mut y = want.clone();
        rope.unrotate(&mut y, pos);
        for (a, b) in y.iter().zip(floats(&c["input"])) {
            let rel = (a - b).abs() / (1.0 + b.abs());
            worst = worst.max(rel);
            assert!(rel <= 4e-6, "unrotate {a:e} vs {b:e}: {rel:e}");
        }
    }
    eprintln!(
        "rope: {} cases bit-exact; unrotate worst relative error {worst:e}",
        cases.len()
    );
}

#[test]
fn dequantisers_match_ggml_bit_for_bit() {
    let r = reference();
    let cases = r["dequant"].as_array().unwrap();
    let covered: Vec<GgmlType> = cases
        .iter()
        .map(|c| GgmlType::from_id(c["type"].as_i64().unwrap() as i32).expect("supported type"))
        .collect();
    for ty in GgmlType::ALL {
        // ggml has no to_float for F32 (its rows are used as they are); it is checked below.
        assert!(
            ty == GgmlType::F32 || covered.contains(&ty),
            "ggml_reference printed no case for {}",
            ty.name()
        );
    }
    // F32: ggml stores a row as the floats' native bytes (ggml_quantize_chunk copies them), so
    // ggml's own values of every case, as bytes, must read back bit for bit.
    for c in cases {
        let want = floats(&c["values"]);
        let bytes: Vec<u8> = want.iter().flat_map(|v| v.to_ne_bytes()).collect();
        assert_eq!(bytes.len(), GgmlType::F32.row_size(want.len()));
        let mut got = vec![0.0f32; want.len()];
        dequantize_row(GgmlType::F32, &bytes, &mut got);
        let (gb, wb): (Vec<u32>, Vec<u32>) = (
            got.iter().map(|v| v.to_bits()).collect(),
            want.iter().map(|v| v.to_bits()).collect(),
        );
        assert_eq!(gb, wb, "f32 rows of ggml's {} values", c["name"]);
    }
    for c in cases {
        let ty = GgmlType::from_id(c["type"].as_i64().unwrap() as i32).expect("supported type");
        let hex = c["bytes_hex"].as_str().unwrap();
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        let want = floats(&c["values"]);
        assert_eq!(
            bytes.len(),
            ty.row_size(want.len()),
            "{}: row size",
            ty.name()
        );
        let mut got = vec![0.0f32; want.len()];
        dequantize_row(ty, &bytes, &mut got);
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                a.to_bits(),
                b.to_bits(),
                "{}: value {i}: rust {a:e} vs ggml {b:e}",
                ty.name()
            );
        }
    }
}
