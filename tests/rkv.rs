//! The `rkv` policy: its scores against an independent reference (importance of the recent
//! queries minus the redundancy of the pre-RoPE keys), duplicate keys evicted before distinct
//! ones, and the shared selection's prefix and window.

use beaconkv::testing::config::{Params, ReadPath};
use beaconkv::testing::engine::Engine;
use beaconkv::testing::fake_host::{FakeHost, Lcg};
use beaconkv::testing::ggml::{hadamard_inplace, Rope, RopeMode};
use beaconkv::testing::host::{Host, LayerDesc, RawLayer};
use beaconkv::testing::queries::{LayerQueries, QueryConfig, QueryScratch, SeqQueries};
use beaconkv::testing::scoring::{RkvScorer, ScoreCtx, ScoreRows, Scorer};
use half::f16;

/// R-KV's constants, as `src/scoring/attention/rkv.rs` and `src/scoring/redundancy.rs` fix them.
const LAMBDA: f32 = 0.1;
const POOL_HALF: usize = 3;
const SIMILAR: f32 = 0.5;

/// Scores are near 1/cells (45 here): rounding moves them by about 1e-8, taking the keys' cosines
/// after RoPE instead of before by about 1e-4.
const TOLERANCE: f32 = 1e-6;

fn rope(d: usize) -> Rope {
    Rope {
        n_dims: d,
        mode: RopeMode::Neox,
        n_ctx_orig: 4096,
        freq_base: 10000.0,
        freq_scale: 1.0,
        ext_factor: 0.0,
        attn_factor: 1.0,
        beta_fast: 32.0,
        beta_slow: 1.0,
        freq_factors: None,
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn softmax(v: &[f32]) -> Vec<f32> {
    let m = v.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    let e: Vec<f64> = v.iter().map(|&x| ((x - m) as f64).exp()).collect();
    let s: f64 = e.iter().sum();
    e.iter().map(|&x| (x / s) as f32).collect()
}

/// Write pre-RoPE key `k_pre` (all kv heads) of `pos` into a new cell as llama.cpp stores it:
/// rotated by RoPE at `pos`, then Hadamard-rotated when `hadamard`, as f16.
fn store_key(host: &mut FakeHost, pos: i32, k_pre: &[f32], d: usize, hadamard: bool) -> usize {
    let cell = host.place(0, pos);
    let mut k = k_pre.to_vec();
    for h in k.chunks_exact_mut(d) {
        rope(d).rotate(h, pos);
        if hadamard {
            hadamard_inplace(h, d);
        }
    }
    for (dst, v) in host.k_row_mut(0, cell).iter_mut().zip(&k) {
        *dst = f16::from_f32(*v);
    }
    cell
}

/// R-KV's score of every cell, per kv head, computed here from what the cache holds (`stored`:
/// each cell's K as f32, rotated by RoPE and Hadamard as stored) and the pre-RoPE queries:
/// importance = mean over the recent queries of the softmax over the cells of the largest logit
/// over the group's heads, max-pooled over 7 cells; redundancy = the mean cosine of the keys
/// taken back before RoPE to the others, without each key's similarity to its newest later
/// near-duplicate, as a softmax.
fn reference(
    stored: &[Vec<f32>],
    pos: &[i32],
    queries: &[(Vec<f32>, i32)],
    (n_head, n_kv, d, hadamard): (usize, usize, usize, bool),
    lambda: f32,
) -> Vec<Vec<f32>> {
    let n = stored.len();
    let gs = n_head / n_kv;
    (0..n_kv)
        .map(|g| {
            let k = |c: usize| &stored[c][g * d..(g + 1) * d];
            let mut imp = vec![0.0f32; n];
            for (q_pre, qp) in queries {
                let logits: Vec<f32> = (0..n)
                    .map(|c| {
                        (g * gs..(g + 1) * gs)
                            .map(|h| {
                                let mut q = q_pre[h * d..(h + 1) * d].to_vec();
                                rope(d).rotate(&mut q, *qp);
                                if hadamard {
                                    hadamard_inplace(&mut q, d);
                                }
                                dot(&q, k(c)) / (d as f32).sqrt()
                            })
                            .fold(f32::NEG_INFINITY, f32::max)
                    })
                    .collect();
                for (i, p) in softmax(&logits).iter().enumerate() {
                    imp[i] += p / queries.len() as f32;
                }
            }
            let pooled: Vec<f32> = (0..n)
                .map(|c| {
                    imp[c.saturating_sub(POOL_HALF)..(c + POOL_HALF + 1).min(n)]
                        .iter()
                        .fold(f32::NEG_INFINITY, |a, &b| a.max(b))
                })
                .collect();
            let unit: Vec<Vec<f32>> = (0..n)
                .map(|c| {
                    let mut k = k(c).to_vec();
                    if hadamard {
                        hadamard_inplace(&mut k, d);
                    }
                    rope(d).unrotate(&mut k, pos[c]);
                    let norm = dot(&k, &k).sqrt();
                    k.iter().map(|v| v / norm).collect()
                })
                .collect();
            let cos = |i: usize, j: usize| dot(&unit[i], &unit[j]);
            let mut sum: Vec<f32> = (0..n)
                .map(|c| (0..n).filter(|&i| i != c).map(|i| cos(i, c)).sum())
                .collect();
            for i in 0..n {
                if let Some(j) = (i + 1..n).rev().find(|&j| cos(i, j) > SIMILAR) {
                    sum[j] -= cos(i, j);
                }
            }
            let red = softmax(&sum.iter().map(|s| s / (n - 1) as f32).collect::<Vec<_>>());
            (0..n)
                .map(|c| lambda * pooled[c] - (1.0 - lambda) * red[c])
                .collect()
        })
        .collect()
}

/// The scorer's rows against the reference, on one layer with RoPE (and Hadamard-rotated K),
/// K read in place or through `read_rows`.
fn rows_match_reference(lambda: f32, hadamard: bool, via_read_rows: bool) {
    const HEADS: usize = 4;
    const KV: usize = 2;
    const D: usize = 32;
    const N: usize = 45; // three tiles, the last one partial
    const RECENT: usize = 3;
    let mut host = FakeHost::new(1, HEADS, KV, D, 64, 1).with_rope();
    host.layers[0].raw.hadamard_n = if hadamard { D as i32 } else { 0 };
    let mut rng = Lcg(11);
    // keys with a shared direction, so some pairs are near-duplicates, and a few exact copies
    let mut k_pre: Vec<Vec<f32>> = Vec::new();
    let mut pos = Vec::new();
    let mut cells = Vec::new();
    for c in 0..N {
        let p = 3 * c as i32 + 1;
        let k: Vec<f32> = if c % 9 == 8 {
            k_pre[c - 5].clone()
        } else {
            (0..KV * D).map(|_| rng.next() + 0.4).collect()
        };
        cells.push(store_key(&mut host, p, &k, D, hadamard) as u32);
        k_pre.push(k);
        pos.push(p);
    }
    let stored: Vec<Vec<f32>> = cells
        .iter()
        .map(|&c| {
            host.k_row_mut(0, c as usize)
                .iter()
                .map(|v| v.to_f32())
                .collect()
        })
        .collect();
    let mut raw = RawLayer::default();
    let layer = if via_read_rows {
        LayerDesc::from_raw(0, &host.layers[0].raw, ReadPath::Copy, true, false).unwrap()
    } else {
        assert!(host.get_layer(0, &mut raw) >= 0);
        LayerDesc::from_raw(0, &raw, ReadPath::Auto, true, false).unwrap()
    };
    assert_eq!(layer.k_direct, !via_read_rows);
    let cfg = QueryConfig {
        n_beacons: 0,
        n_recent: RECENT,
        fps: false,
        ring: true,
    };
    let mut lq = LayerQueries::new(&cfg, HEADS, D);
    let mut queries = Vec::new();
    for t in 0..RECENT + 2 {
        // the store keeps the last RECENT
        let q: Vec<f32> = (0..HEADS * D).map(|_| 2.0 * rng.next()).collect();
        let p = 3 * N as i32 + t as i32;
        lq.push(&q, p, &mut QueryScratch::default());
        if t >= 2 {
            queries.push((q, p));
        }
    }
    let store = SeqQueries { layers: vec![lq] };
    let layers = [layer];
    let m_pos = 3 * N as i32 + RECENT as i32 + 2;
    let ctx = ScoreCtx::new(0, &layers, &store, m_pos, 1).with_cells(&cells, &pos);
    let mut rows = ScoreRows::default();
    rows.reset(N);
    let reads = host.k_reads;
    RkvScorer::with_lambda(lambda)
        .score(&ctx, &mut host, &mut rows)
        .unwrap();
    assert_eq!(host.k_reads - reads, usize::from(via_read_rows));
    assert_eq!(rows.n_rows(), KV);
    let want = reference(&stored, &pos, &queries, (HEADS, KV, D, hadamard), lambda);
    for (g, want) in want.iter().enumerate() {
        for (c, (&got, &want)) in rows.row(g).iter().zip(want).enumerate() {
            assert!(
                (got - want).abs() <= TOLERANCE,
                "lambda {lambda} hadamard {hadamard} kv head {g} cell {c}: {got} vs {want}"
            );
        }
    }
}

#[test]
fn rkv_scores_match_the_reference() {
    rows_match_reference(LAMBDA, false, false);
    rows_match_reference(LAMBDA, true, false);
    rows_match_reference(LAMBDA, false, true);
}

/// With lambda = 1 the score is the importance alone: the recent queries' attention.
#[test]
fn rkv_with_lambda_one_ranks_by_recent_attention() {
    rows_match_reference(1.0, false, false);
}

/// Pre-RoPE keys of the duplicate test: standard basis vectors of dimension `e`.
fn basis(d: usize, e: usize) -> Vec<f32> {
    let mut k = vec![0.0; d];
    k[e] = 1.0;
    k
}

/// 48 cells, equal attention everywhere (zero queries), every key orthogonal to the others
/// before RoPE except four pairs of copies: (12, 15) and (13, 16) in dimensions 0 and 32 (RoPE's
/// fastest pair, which turns copies 3 positions apart by 3 radians, so after RoPE they point
/// away from each other), (20, 24) and (21, 25) in dimensions 1 and 33. The pass evicts 4 cells.
/// Returns the positions evicted.
fn evicted_with_duplicates(spec: &str) -> Vec<i32> {
    const D: usize = 64;
    let params = Params::parse(spec).unwrap();
    let mut host = FakeHost::new(1, 2, 1, D, 64, 64).with_rope();
    let mut engine = Engine::new(params, &mut host);
    let copies = [(12, 15, 0), (13, 16, 32), (20, 24, 1), (21, 25, 33)];
    let mut distinct = (2..32).chain(34..64);
    engine.before_batch(&mut host, &[0], &[48], None).unwrap();
    for p in 0..48 {
        let e = copies
            .iter()
            .find(|&&(a, b, _)| p == a || p == b)
            .map(|&(_, _, e)| e)
            .unwrap_or_else(|| distinct.next().unwrap());
        store_key(&mut host, p, &basis(D, e), D, false);
    }
    let pos: Vec<i32> = (0..48).collect();
    // queries stay zero: every cell gets the same attention
    engine
        .after_ubatch(&mut host, &pos, &[0; 48], &pos)
        .unwrap();
    engine.after_decode(&mut host).unwrap();
    engine.before_batch(&mut host, &[0], &[1], None).unwrap(); // 48 + 1 > 48: down to 44
    let kept = host.positions(0);
    (0..48).filter(|p| !kept.contains(p)).collect()
}

#[test]
fn rkv_evicts_the_older_copy_of_duplicate_keys() {
    let base = "budget=48,min=44,window=4,prefix=4,recent=2,prompt=inside";
    assert_eq!(
        evicted_with_duplicates(&format!("rkv,{base}")),
        [12, 13, 20, 21]
    );
    // equal scores alone evict the oldest middle cells: the redundancy term made the choice
    assert_eq!(
        evicted_with_duplicates(&format!("recent,{base}")),
        [4, 5, 6, 7]
    );
}

/// Long generation with random keys and queries: every pass keeps the protected prefix, the
/// window of newest cells and the budget, like every policy, and runs on recorded queries.
#[test]
fn rkv_keeps_prefix_window_and_budget() {
    const D: usize = 16;
    let params =
        Params::parse("rkv,budget=64,min=48,window=8,prefix=4,recent=4,prompt=inside").unwrap();
    let mut host = FakeHost::new(2, 4, 2, D, 128, 1).with_rope();
    let mut engine = Engine::new(params, &mut host);
    let mut rng = Lcg(5);
    for p in 0..400i32 {
        engine.before_batch(&mut host, &[0], &[1], None).unwrap();
        let cell = host.place(0, p);
        for l in 0..2 {
            for v in host.k_row_mut(l, cell) {
                *v = f16::from_f32(rng.next());
            }
            for v in host.q_row_mut(l, 0) {
                *v = rng.next();
            }
        }
        engine.after_ubatch(&mut host, &[p], &[0], &[0]).unwrap();
        engine.after_decode(&mut host).unwrap();
        let kept = host.positions(0);
        assert!(kept.len() <= 64, "step {p}: {} cells", kept.len());
        assert!(
            (0..4.min(p + 1)).all(|q| kept.contains(&q)),
            "step {p}: prefix lost"
        );
        assert!(
            ((p - 7).max(0)..=p).all(|q| kept.contains(&q)),
            "step {p}: window lost"
        );
    }
    let st = engine.stats(0);
    assert!(st.compress_events >= 20, "{} passes", st.compress_events);
    assert!(
        engine.is_enabled(),
        "rkv fell back to position-only eviction"
    );
    assert!(host.syncs > 0, "K was read without synchronizing");
}
