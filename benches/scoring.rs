//! Micro-benchmark of one compression pass (scoring + reduction + selection) on one thread, at
//! the shape of a small GQA model: 30 layers, 9 query heads, 3 kv heads, head_dim 64, f16 K,
//! 2048 cached cells, 16 beacons + 16 recent queries per head. Prints a markdown table.
//!
//! Keys and queries are random, so every layer scores alike and a pruned pass (docs/design.md)
//! skips next to nothing here: this measures the kernel, not the pruning real passes get.
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

fn main() {
    let mut host = FakeHost::new(LAYERS, HEADS, KV, D, CELLS, 1);
    for l in &mut host.layers {
        l.raw.rope_n_dims = D as i32;
        l.raw.rope_mode = 2;
        l.raw.rope_n_ctx_orig = 8192;
    }
    let params =
        Params::parse("beacon,budget=4096,min=3584,beacons=16,recent=16,window=64,prefix=64")
            .unwrap();
    let mut engine = Engine::new(params, &mut host);
    let mut rng = Lcg(1);

    // Fill the cache one token at a time, so capture (with its FPS refreshes) is measured too.
    let t = Instant::now();
    for p in 0..CELLS as i32 {
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
    let fill_s = t.elapsed().as_secs_f64();
    let capture_us = engine.stats(0).ms_capture * 1e3 / CELLS as f64;

    // Full passes (2048 -> 1792 cells); evictions are accepted but not applied, so every pass
    // sees the same 2048 cells.
    host.dry_evict = true;
    let runs = 7;
    let pass_ms: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            engine.compress(&mut host, 0, 1792).unwrap();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    let pass = median(pass_ms);
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
}
