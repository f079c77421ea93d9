//! Micro-benchmark of one compression pass (scoring + reduction + selection) on one thread, at
//! the shape of a small GQA model: 30 layers, 9 query heads, 3 kv heads, head_dim 64, f16 K,
//! 2048 cached cells, 16 beacons + 16 recent queries per head. Prints a markdown table, then one
//! pass of `beacon` and `rkv` (its redundancy term is O(cells²) per kv head) by cache size.
//!
//! Keys and queries are random, so every layer scores alike and a pruned pass (docs/design.md)
//! skips next to nothing here: this measures the kernel, not the pruning real passes get.
//!
//! Last, capture at an 8B model's query shape (32 layers, 32 query heads of 128): decode-step
//! queries read from a ring-shaped store off host memory and flushed 64 rows at a time.
//!
//! Run: `cargo bench --bench scoring`

use std::time::Instant;

use beaconkv::testing::config::Params;
use beaconkv::testing::engine::Engine;
use beaconkv::testing::fake_host::{FakeHost, Lcg};
use beaconkv::testing::queries::{LayerQueries, QueryConfig, QueryScratch};
use half::f16;

const LAYERS: usize = 30;
const HEADS: usize = 9;
const KV: usize = 3;
const D: usize = 64;
const CELLS: usize = 2048;
const QUERIES: usize = 32;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A host of the benchmark's shape and an engine of `policy` over `cells` cells of sequence 0,
/// filled one token at a time (so capture, with its FPS refreshes, runs as in decoding), with
/// evictions accepted but not applied (every pass sees the same cells). Returns the fill time.
fn filled(policy: &str, cells: usize, rng: &mut Lcg) -> (FakeHost, Engine, f64) {
    let mut host = FakeHost::new(LAYERS, HEADS, KV, D, cells, 1);
    for l in &mut host.layers {
        l.raw.rope_n_dims = D as i32;
        l.raw.rope_mode = 2;
        l.raw.rope_n_ctx_orig = 8192;
    }
    let params = Params::parse(&format!(
        "{policy},budget=4096,min=3584,beacons=16,recent=16,window=64,prefix=64"
    ))
    .unwrap();
    let mut engine = Engine::new(params, &mut host);
    let t = Instant::now();
    for p in 0..cells as i32 {
        let cell = host.place(0, p);
        for l in &mut host.layers {
            for v in &mut l.k[cell * KV * D..(cell + 1) * KV * D] {
                *v = f16::from_f32(rng.next());
            }
            for v in &mut l.q {
                *v = rng.next();
            }
        }
        engine.after_ubatch(&mut host, &[p], &[0], &[0]).unwrap();
    }
    host.dry_evict = true;
    (host, engine, t.elapsed().as_secs_f64())
}

/// Median time of `runs` passes from `cells` down to 7/8 of them (a decode pass: budget -> min).
fn pass_ms(host: &mut FakeHost, engine: &mut Engine, cells: usize, runs: usize) -> f64 {
    median(
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                engine.compress(host, 0, cells * 7 / 8).unwrap();
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect(),
    )
}

fn main() {
    let mut rng = Lcg(1);
    let (mut host, mut engine, fill_s) = filled("beacon", CELLS, &mut rng);
    let capture_us = engine.stats(0).ms_capture * 1e3 / CELLS as f64;

    // Full passes (2048 -> 1792 cells); evictions are accepted but not applied, so every pass
    // sees the same 2048 cells.
    let runs = 7;
    let pass = pass_ms(&mut host, &mut engine, CELLS, runs);
    let flops = 2.0 * (LAYERS * HEADS * QUERIES * CELLS * D) as f64;

    // FPS refresh of every (layer, head): 32 queries -> 16 beacons.
    let cfg = QueryConfig {
        n_beacons: 16,
        n_recent: 16,
        fps: true,
        ring: false,
    };
    let mut stores: Vec<LayerQueries> = (0..LAYERS)
        .map(|_| LayerQueries::new(&cfg, HEADS, D))
        .collect();
    let mut scratch = QueryScratch::default();
    let fps_ms: Vec<f64> = (0..runs)
        .map(|_| {
            for s in &mut stores {
                for p in 0..32 {
                    let q: Vec<f32> = (0..HEADS * D).map(|_| rng.next()).collect();
                    s.push(&q, p, &mut scratch);
                }
            }
            let t = Instant::now();
            stores
                .iter_mut()
                .for_each(|s| s.refresh_beacons(&mut scratch));
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();

    println!("| measure ({LAYERS} layers, {HEADS}/{KV} heads, d={D}, f16 K, {CELLS} cells, {QUERIES} q/head) | value |");
    println!("|---|---|");
    println!("| scoring + reduce + selection, one pass (median of {runs}) | {pass:.1} ms |");
    println!(
        "| implied dot throughput | {:.2} GFLOP/s |",
        flops / (pass * 1e-3) / 1e9
    );
    println!(
        "| FPS refresh, all layers and heads (median of {runs}) | {:.3} ms |",
        median(fps_ms)
    );
    println!("| capture per token (un-rotate + push + amortised FPS) | {capture_us:.1} µs |");
    println!(
        "| fill of {CELLS} tokens incl. fake-host writes | {:.2} s |",
        fill_s
    );

    // One pass per policy by cache size (a budget of `cells`: cells -> 7/8 of them).
    println!();
    println!("| cells | beacon pass (median of {runs}) | rkv pass (median of {runs}) |");
    println!("|---|---|---|");
    for cells in [512, 1024, 2048] {
        let ms: Vec<f64> = ["beacon", "rkv"]
            .iter()
            .map(|policy| {
                let (mut host, mut engine, _) = filled(policy, cells, &mut rng);
                pass_ms(&mut host, &mut engine, cells, runs)
            })
            .collect();
        println!("| {cells} | {:.1} ms | {:.1} ms |", ms[0], ms[1]);
    }

    println!();
    println!(
        "| capture per token, 32 layers x 32 query heads x 128, flushed 64 rows at a time \
         (median of 3 runs of 512 tokens) | {:.0} µs |",
        capture_us_8b(&mut rng)
    );
}

/// Capture µs per token at an 8B model's query shape, its store a ring of 128 rows off host
/// memory (read through `read_rows`, which copies every row as a device host would).
fn capture_us_8b(rng: &mut Lcg) -> f64 {
    const L: usize = 32;
    const H: usize = 32;
    const D8: usize = 128;
    const RING: usize = 128;
    const TOKENS: i32 = 512;
    let runs = (0..3).map(|_| {
        let mut host = FakeHost::new(L, H, 8, D8, 1024, RING);
        host.via_read_rows = true;
        for l in &mut host.layers {
            l.raw.rope_n_dims = D8 as i32;
            l.raw.rope_mode = 2;
            l.raw.rope_n_ctx_orig = 8192;
            l.raw.q_rows = RING as i32;
            for v in &mut l.q {
                *v = rng.next();
            }
        }
        let params = Params::parse("beacon,budget=4096,qcap=64").unwrap();
        let mut engine = Engine::new(params, &mut host);
        // a one-token prompt, then decode steps (whose rows wait for a flush)
        engine.before_batch(&mut host, &[0], &[1], None).unwrap();
        engine.after_ubatch(&mut host, &[0], &[0], &[0]).unwrap();
        for p in 1..TOKENS {
            engine.before_batch(&mut host, &[0], &[1], None).unwrap();
            let row = p % RING as i32;
            engine.after_ubatch(&mut host, &[p], &[0], &[row]).unwrap();
        }
        engine.flush_queries(&mut host).unwrap();
        engine.stats(0).ms_capture * 1e3 / TOKENS as f64
    });
    median(runs.collect())
}
