//! Compression across machines: llama.cpp's RPC backend (`ggml-rpc-server` on 127.0.0.1) holds every
//! layer, so the K cache and the query stores live in a buffer the plugin cannot map and every read
//! takes the copy path. The run must evict the same cells and produce the same tokens as the local one.
#![cfg(feature = "e2e")]

mod common_e2e;

use common_e2e::*;
use serde_json::Value;
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// ggml-rpc-server on a free loopback port; killed on drop.
struct RpcServer {
    child: Child,
    port: u16,
}

impl RpcServer {
    fn start() -> RpcServer {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(tool("ggml-rpc-server"))
            .args(["-H", "127.0.0.1", "-p", &port.to_string(), "-t", "2"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "ggml-rpc-server did not listen within 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        RpcServer { child, port }
    }
}

impl Drop for RpcServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Generated text and the stats JSON of one beaconkv-cli run at budget 96.
fn generate(tag: &str, extra: &[&str]) -> (String, Value, String) {
    generate_at(tag, "96", extra)
}

/// Generated text and the stats JSON of one beaconkv-cli run at `budget`.
fn generate_at(tag: &str, budget: &str, extra: &[&str]) -> (String, Value, String) {
    let dir = std::env::temp_dir().join(format!("beaconkv-rpc-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("stats.json");
    let out = Command::new(tool("beaconkv-cli"))
        .arg("-m")
        .arg(tiny_model())
        .args([
            "-t",
            "2",
            "--temp",
            "0",
            "--ignore-eos",
            "-n",
            "600",
            "-c",
            "4096",
        ])
        .args(["-p", "the lighthouse keeper counted the barrels twice"])
        .args([
            "--kv-compress",
            "beacon",
            "--kv-budget",
            budget,
            "--kv-window",
            "16",
        ])
        .args(extra)
        .arg("--stats-json")
        .arg(&json)
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{tag} run failed:\n{log}");
    let stats = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        stats,
        log,
    )
}

#[test]
fn compression_through_rpc_matches_the_local_run() {
    let (local_text, local, _) = generate("local", &[]);
    let rpc = RpcServer::start();
    let endpoint = format!("127.0.0.1:{}", rpc.port);
    let (rpc_text, remote, log) = generate("rpc", &["--rpc", &endpoint, "-ngl", "99", "-lv", "4"]);

    // the KV cache really lives on the RPC device
    assert!(
        log.lines()
            .any(|l| l.contains("llama_kv_cache: RPC0") && l.contains("KV buffer")),
        "the KV cache is not on the RPC device:\n{log}"
    );
    assert!(remote["evicted"].as_u64().unwrap() > 400, "{remote}");
    // the default prompt=keep holds the prompt beside the budget
    let prompt = remote["n_prompt"].as_i64().unwrap();
    assert!(
        remote["cells_peak"].as_i64().unwrap() <= 96 + prompt,
        "{remote}"
    );
    for key in [
        "evicted",
        "compress_events",
        "cells_peak",
        "cells_in_use",
        "spec",
    ] {
        assert_eq!(
            local[key], remote[key],
            "{key} differs between local and RPC"
        );
    }
    assert_eq!(local_text, rpc_text, "generated text differs through RPC");
}

/// With K on the RPC device, a compression pass reads the scores of every layer from it in one
/// read, not one K row per cell: the reads per pass are the same at budgets 96 and 192 (one), and
/// query capture reads all layers at once, the decode steps' rows together (not per token). The
/// copy path (`read=copy`)
/// reads at least a row per cell and layer.
#[test]
fn rpc_passes_read_a_constant_number_of_times_per_layer() {
    let rpc = RpcServer::start();
    let endpoint = format!("127.0.0.1:{}", rpc.port);
    let remote = ["--rpc", endpoint.as_str(), "-ngl", "99"];
    let layers = 2u64; // scripts/make_tiny_gguf.py's default
    let run = |tag: &str, budget: &str, extra: &[&str]| {
        let args: Vec<&str> = remote.iter().chain(extra).copied().collect();
        generate_at(tag, budget, &args).1
    };
    let per_pass = |s: &Value| {
        s["reads_pass"].as_u64().unwrap() as f64 / s["compress_events"].as_u64().unwrap() as f64
    };
    let small = run("rpc-96", "96", &[]);
    let large = run("rpc-192", "192", &[]);
    let copy = run("rpc-copy", "96", &["--kv-compress-spec", "read=copy"]);
    for s in [&small, &large] {
        assert!(
            s["scoring"].as_str().unwrap().starts_with("backend ("),
            "{s}"
        );
        assert!(s["compress_events"].as_u64().unwrap() > 10, "{s}");
        assert_eq!(per_pass(s), 1.0, "one read per pass for all layers: {s}");
        // capture reads all layers at once: after each of the prompt's ubatches of 32 tokens
        // (n_ubatch is clamped to max(budget / 8, 32)), then the generated tokens' rows together
        // from the store's ring of 2 * 64 rows: before a pass, or before the ring could wrap onto
        // them (a run that wraps is two reads)
        let prompt_ubatches = s["n_prompt"].as_u64().unwrap().div_ceil(32);
        let generated = s["n_generated"].as_u64().unwrap();
        let passes = s["compress_events"].as_u64().unwrap();
        let most = prompt_ubatches + passes + generated / 64 + generated / 128 + 2;
        let reads = s["reads_capture"].as_u64().unwrap();
        assert!(reads <= most && reads * 4 < generated, "{reads} reads: {s}");
    }
    assert_eq!(per_pass(&small), per_pass(&large));
    assert!(
        copy["scoring"].as_str().unwrap().starts_with("copy ("),
        "{copy}"
    );
    assert!(
        per_pass(&copy) >= (96 - 16) as f64 * layers as f64,
        "{copy}"
    );
    assert_eq!(small["evicted"], copy["evicted"]);
}
