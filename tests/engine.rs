//! Engine behaviour over a Rust fake host: scores against an independent reference, the
//! read_rows path, planted keys, phases, forks and host errors.

use beaconkv::testing::config::Params;
use beaconkv::testing::engine::{Engine, EngineError};
use beaconkv::testing::fake_host::{FakeHost, Lcg};
use beaconkv::testing::ggml::hadamard_inplace;
use beaconkv::testing::ggml::{Rope, RopeMode};
use half::f16;

const D: usize = 16;

fn rope() -> Rope {
    Rope {
        n_dims: D,
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

/// Pre-RoPE K and Q of every token, kept so the test can compute reference scores itself.
struct Tokens {
    k_pre: Vec<Vec<f32>>,
    q_post: Vec<Vec<f32>>,
}

/// Write token `pos` of seq 0 into the host as llama.cpp would: K rotated by RoPE (then Hadamard
/// when set), the query captured post-RoPE in row `row`.
fn write_token(
    host: &mut FakeHost,
    rng: &mut Lcg,
    toks: &mut Tokens,
    pos: i32,
    row: usize,
    hadamard: bool,
) {
    let cell = host.place(0, pos);
    let l = &mut host.layers[0];
    let (n_head, n_kv) = (l.raw.n_head as usize, l.raw.n_head_kv as usize);
    let k_pre: Vec<f32> = (0..n_kv * D).map(|_| rng.next()).collect();
    let mut k = k_pre.clone();
    for h in k.chunks_exact_mut(D) {
        rope().rotate(h, pos);
        if hadamard {
            hadamard_inplace(h, D);
        }
    }
    for (dst, v) in l.k[cell * n_kv * D..(cell + 1) * n_kv * D]
        .iter_mut()
        .zip(&k)
    {
        *dst = f16::from_f32(*v);
    }
    let mut q: Vec<f32> = (0..n_head * D).map(|_| rng.next()).collect();
    for h in q.chunks_exact_mut(D) {
        rope().rotate(h, pos);
    }
    l.q[row * n_head * D..(row + 1) * n_head * D].copy_from_slice(&q);
    toks.k_pre.push(k_pre);
    toks.q_post.push(q);
}

fn host_with_rope(via_read_rows: bool, hadamard: bool) -> FakeHost {
    let mut host = FakeHost::new(1, 4, 2, D, 256, 128).with_rope();
    host.layers[0].raw.hadamard_n = if hadamard { D as i32 } else { 0 };
    host.via_read_rows = via_read_rows;
    // read_rows stands for a device buffer; `BACKEND` adds scoring where K lives
    host.has_score_keys = BACKEND.with(|b| b.get());
    host
}

thread_local! {
    /// The reference tests below run a second time with the host scoring K on its backend.
    static BACKEND: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn on_backend(f: impl FnOnce()) {
    BACKEND.with(|b| b.set(true));
    f();
    BACKEND.with(|b| b.set(false));
}

/// One decode call of sequence 0 bringing positions `from..from + n`, queries not captured, as
/// the host makes it: `before_batch`, placement, `after_ubatch`, then `after_decode` when
/// `finish`.
fn feed(engine: &mut Engine, host: &mut FakeHost, from: i32, n: i32, finish: bool) {
    engine.before_batch(host, &[0], &[n], None).unwrap();
    let pos: Vec<i32> = (from..from + n).collect();
    for &p in &pos {
        host.place(0, p);
    }
    let n = n as usize;
    engine
        .after_ubatch(host, &pos, &vec![0; n], &vec![-1; n])
        .unwrap();
    if finish {
        engine.after_decode(host).unwrap();
    }
}

/// Single-token decode calls of sequence 0 for the positions of `range`.
fn generate(engine: &mut Engine, host: &mut FakeHost, range: std::ops::Range<i32>, finish: bool) {
    for p in range {
        feed(engine, host, p, 1, finish);
    }
}

/// Recent policy with one recent query: a cell's score is the last query (at its own position)
/// dotted with the cell's stored K, so the reference needs no RoPE code at all.
fn kept_vs_reference(via_read_rows: bool, hadamard: bool) {
    kept_vs_reference_scored(via_read_rows, hadamard, false);
}

/// `prob`: cells scored by each head's log attention probability (log-softmax over all cells of
/// q·k/sqrt(d)) instead of the raw logit.
fn kept_vs_reference_scored(via_read_rows: bool, hadamard: bool, prob: bool) {
    let spec = format!(
        "recent,recent=1,budget=64,min=48,window=8,prefix=4,prompt=inside,score={}",
        if prob { "prob" } else { "logit" }
    );
    let params = Params::parse(&spec).unwrap();
    let mut host = host_with_rope(via_read_rows, hadamard);
    let mut engine = Engine::new(params, &mut host);
    let mut rng = Lcg(7);
    let mut toks = Tokens {
        k_pre: vec![],
        q_post: vec![],
    };
    engine.before_batch(&mut host, &[0], &[64], None).unwrap();
    for p in 0..64 {
        write_token(&mut host, &mut rng, &mut toks, p, p as usize, hadamard);
    }
    let pos: Vec<i32> = (0..64).collect();
    engine
        .after_ubatch(&mut host, &pos, &[0; 64], &pos)
        .unwrap();
    engine.after_decode(&mut host).unwrap();
    assert_eq!(host.positions(0).len(), 64);

    // Reference: max over heads h of group g and kv heads g of q63_h . k_c_g / sqrt(D) (K as f16
    // sees it), minus head h's log-sum-exp over all cells when scoring by probability.
    let last = &toks.q_post[63];
    let logit = |h: usize, c: usize| -> f32 {
        let g = h / 2;
        let mut k = toks.k_pre[c][g * D..(g + 1) * D].to_vec();
        rope().rotate(&mut k, c as i32);
        let k: Vec<f32> = k.iter().map(|v| f16::from_f32(*v).to_f32()).collect();
        let dot: f32 = last[h * D..(h + 1) * D]
            .iter()
            .zip(&k)
            .map(|(a, b)| a * b)
            .sum();
        dot / (D as f32).sqrt()
    };
    let lse: Vec<f32> = (0..4)
        .map(|h| {
            let m = (0..64)
                .map(|c| logit(h, c))
                .fold(f32::NEG_INFINITY, f32::max);
            m + (0..64).map(|c| (logit(h, c) - m).exp()).sum::<f32>().ln()
        })
        .collect();
    let score = |c: usize| -> f32 {
        (0..4)
            .map(|h| logit(h, c) - if prob { lse[h] } else { 0.0 })
            .fold(f32::NEG_INFINITY, f32::max)
    };
    let mut middle: Vec<usize> = (4..56).collect();
    middle.sort_by(|&a, &b| score(b).total_cmp(&score(a)));
    let mut expected: Vec<i32> = (0..4).chain(56..64).collect();
    expected.extend(middle[..36].iter().map(|&c| c as i32));
    expected.sort_unstable();

    engine.before_batch(&mut host, &[0], &[1], None).unwrap(); // 64 + 1 > 64: compress to 48
    assert_eq!(host.positions(0), expected);
    if host.has_score_keys && via_read_rows {
        // one call for the pass, no K row copied
        assert_eq!((host.score_calls, host.k_reads), (1, 0));
    }
    let st = engine.stats(0);
    assert_eq!(
        (st.evicted, st.compress_events, st.cells_in_use),
        (16, 1, 48)
    );
}

#[test]
fn recent_scores_match_reference_with_rope() {
    kept_vs_reference(false, false);
}

#[test]
fn hadamard_rotated_k_scores_like_plain_k() {
    kept_vs_reference(false, true);
}

#[test]
fn read_rows_path_matches_direct_reads() {
    kept_vs_reference(true, false);
}

#[test]
fn probability_scores_match_reference() {
    kept_vs_reference_scored(false, false, true);
    kept_vs_reference_scored(false, true, true);
}

#[test]
fn backend_scoring_matches_reference() {
    on_backend(|| {
        for (hadamard, prob) in [(false, false), (true, false), (false, true), (true, true)] {
            kept_vs_reference_scored(true, hadamard, prob);
        }
    });
}

/// With K scored where it lives, a pass is one `score_keys` call for all layers and copies no K
/// row, whatever the number of cells; the counters say so. The copy path reads a row per cell.
#[test]
fn backend_passes_make_one_call_whatever_the_cells() {
    for budget in [64usize, 192] {
        let run = |backend: bool| {
            let spec = format!("beacon,budget={budget},window=8,prefix=4");
            let mut host = FakeHost::new(3, 4, 2, D, 512, 8).with_rope();
            host.via_read_rows = true;
            host.has_score_keys = backend;
            let mut engine = Engine::new(Params::parse(&spec).unwrap(), &mut host);
            let mut rng = Lcg(3);
            for p in 0..(3 * budget as i32) {
                engine.before_batch(&mut host, &[0], &[1], None).unwrap();
                let cell = host.place(0, p);
                for l in 0..3 {
                    host.k_row_mut(l, cell)
                        .iter_mut()
                        .for_each(|v| *v = f16::from_f32(rng.next()));
                    host.q_row_mut(l, 0)
                        .iter_mut()
                        .for_each(|v| *v = rng.next());
                }
                engine.after_ubatch(&mut host, &[p], &[0], &[0]).unwrap();
                engine.after_decode(&mut host).unwrap();
            }
            let st = engine.stats(0);
            assert!(st.compress_events > 3, "{st:?}");
            (host.positions(0), st, host.score_calls, host.k_reads)
        };
        let (kept_copy, copy, _, k_reads) = run(false);
        let (kept_backend, backend, calls, k_reads_backend) = run(true);
        assert_eq!(kept_backend, kept_copy, "budget {budget}: same cells kept");
        assert_eq!(calls as u64, backend.compress_events);
        assert_eq!(k_reads_backend, 0);
        assert!(k_reads > 0);
        // the fake host counts one read per layer scored, and one per copied row
        assert_eq!(backend.reads_pass, 3 * backend.compress_events);
        assert!(copy.reads_pass >= (budget as u64) * 3 * copy.compress_events / 2);
        assert_eq!(backend.reads_capture, copy.reads_capture);
    }
}

/// A host whose query store is a ring (`q_rows`) gets its decode-step queries read together,
/// before a pass or when the ring could wrap onto them: the same beacons, the same cells kept,
/// and a fraction of the reads. Prompt ubatches are still read one by one.
#[test]
fn queries_read_together_from_a_ring_keep_the_same_cells() {
    const RING: usize = 16;
    let run = |ring: bool| {
        let spec = "beacon,budget=48,window=8,prefix=4,beacons=4,recent=4,qcap=4";
        let mut host = FakeHost::new(2, 4, 2, D, 256, RING).with_rope();
        host.via_read_rows = true;
        if ring {
            host.layers
                .iter_mut()
                .for_each(|l| l.raw.q_rows = RING as i32);
        }
        let mut engine = Engine::new(Params::parse(spec).unwrap(), &mut host);
        let mut rng = Lcg(11);
        let mut cursor = 0;
        let mut p = 0;
        // a prompt of 5 ubatches of 4 tokens, then one token per decode call
        while p < 180 {
            let n = if p < 20 { 4 } else { 1 };
            engine.before_batch(&mut host, &[0], &[n], None).unwrap();
            let (pos, rows): (Vec<i32>, Vec<i32>) = (p..p + n)
                .map(|q| {
                    let cell = host.place(0, q);
                    let row = if ring {
                        cursor % RING
                    } else {
                        (q - p) as usize
                    };
                    cursor += 1;
                    for l in 0..2 {
                        host.k_row_mut(l, cell)
                            .iter_mut()
                            .for_each(|v| *v = f16::from_f32(rng.next()));
                        host.q_row_mut(l, row)
                            .iter_mut()
                            .for_each(|v| *v = rng.next());
                    }
                    (q, row as i32)
                })
                .unzip();
            let seqs = vec![0; pos.len()];
            engine.after_ubatch(&mut host, &pos, &seqs, &rows).unwrap();
            engine.after_decode(&mut host).unwrap();
            p += n;
        }
        // the last steps' rows wait for a pass; a flush reads them
        let waiting = engine.stats(0).bytes_capture;
        engine.flush_queries(&mut host).unwrap();
        assert_eq!(engine.stats(0).bytes_capture > waiting, ring);
        (host.positions(0), engine.stats(0), host.q_reads)
    };
    let (kept_plain, plain, reads_plain) = run(false);
    let (kept_ring, ring, reads_ring) = run(true);
    assert!(plain.compress_events > 5, "{plain:?}");
    assert_eq!(kept_ring, kept_plain, "same cells kept");
    assert_eq!(ring.compress_events, plain.compress_events);
    // read_rows calls: one per ubatch and layer without the ring (160 decode steps, 5 prompt
    // ubatches); with it one per layer every RING - qcap steps or pass, two where the ring wraps
    assert_eq!(reads_plain, 2 * 165);
    assert!(reads_ring * 4 < reads_plain, "{reads_ring} calls");
    assert_eq!(ring.bytes_capture, plain.bytes_capture);
}

/// A backend's log of a probability that underflows f32 is -inf; the engine floors it, so
/// `reduce=zmean` still ranks (its mean would be NaN) and the keys every query attends to stay.
#[test]
fn underflowing_backend_scores_still_rank() {
    for reduce in ["max", "zmean"] {
        let spec = format!("beacon,budget=64,window=8,prefix=4,reduce={reduce}");
        let mut host = FakeHost::new(2, 2, 1, D, 512, 8);
        host.has_score_keys = true;
        host.f32_underflow = true;
        host.via_read_rows = true;
        let mut engine = Engine::new(Params::parse(&spec).unwrap(), &mut host);
        let mut rng = Lcg(5);
        let mut u = [0.0f32; D];
        u[0] = 1.0;
        let hot = |p: i32| p % 16 == 5;
        for p in 0..192 {
            engine.before_batch(&mut host, &[0], &[1], None).unwrap();
            let cell = host.place(0, p);
            for l in 0..2 {
                // the hot keys' logits are thousands above the others': every other probability underflows
                let k: Vec<f16> = (0..D)
                    .map(|i| f16::from_f32(if hot(p) { 4000.0 * u[i] } else { rng.next() }))
                    .collect();
                host.k_row_mut(l, cell).copy_from_slice(&k);
                host.q_row_mut(l, 0)
                    .iter_mut()
                    .enumerate()
                    .for_each(|(i, v)| *v = u[i % D]);
            }
            engine.after_ubatch(&mut host, &[p], &[0], &[0]).unwrap();
            engine.after_decode(&mut host).unwrap();
        }
        assert!(engine.stats(0).compress_events > 0 && host.score_calls > 0);
        let kept = host.positions(0);
        let lost: Vec<i32> = (0..192).filter(|&p| hot(p) && !kept.contains(&p)).collect();
        assert!(
            lost.is_empty(),
            "reduce={reduce}: hot keys evicted: {lost:?}"
        );
    }
}

/// No RoPE: a few keys aligned with every query survive long generation under `beacon`, and are
/// dropped by `streaming`.
fn planted_survive(spec: &str) -> bool {
    let params = Params::parse(spec).unwrap();
    let mut host = FakeHost::new(2, 2, 1, D, 512, 64);
    let mut engine = Engine::new(params, &mut host);
    let mut rng = Lcg(3);
    let mut u = [0.0f32; D];
    u[0] = 1.0;
    let planted = [30, 31, 100];
    for p in 0..400i32 {
        engine.before_batch(&mut host, &[0], &[1], None).unwrap();
        let cell = host.place(0, p);
        for l in &mut host.layers {
            for (i, (k, &ui)) in l.k[cell * D..(cell + 1) * D].iter_mut().zip(&u).enumerate() {
                let noise = 0.3 * rng.next();
                let v = if planted.contains(&p) {
                    4.0 * ui
                } else if i == 0 {
                    0.0
                } else {
                    noise
                };
                *k = f16::from_f32(v);
            }
            for q_head in l.q[..2 * D].chunks_exact_mut(D) {
                for (q, &ui) in q_head.iter_mut().zip(&u) {
                    *q = ui + 0.1 * rng.next();
                }
            }
        }
        engine.after_ubatch(&mut host, &[p], &[0], &[0]).unwrap();
        engine.after_decode(&mut host).unwrap();
        assert!(host.positions(0).len() <= 64);
    }
    let kept = host.positions(0);
    planted.iter().all(|p| kept.contains(p))
}

#[test]
fn beacon_keeps_planted_keys_streaming_does_not() {
    let base = "budget=64,min=48,window=8,prefix=4,beacons=4,recent=4";
    assert!(planted_survive(&format!("beacon,{base}")));
    assert!(planted_survive(&format!("recent,{base}")));
    assert!(!planted_survive(&format!("streaming,{base}")));
}

#[test]
fn prompt_phase_sets_prefix_and_fork_inherits() {
    let params =
        Params::parse("streaming,budget=64,min=48,window=8,prefix_max=32,prompt=inside").unwrap();
    let mut host = FakeHost::new(1, 2, 1, D, 256, 64);
    let mut engine = Engine::new(params, &mut host);
    feed(&mut engine, &mut host, 0, 10, true);
    feed(&mut engine, &mut host, 10, 10, true);
    generate(&mut engine, &mut host, 20..200, true);
    let kept = host.positions(0);
    assert!((0..20).all(|p| kept.contains(&p)), "prompt kept");
    assert_eq!(engine.stats(0).prefix_len, 20);
    engine.seq_copied(0, 3, -1, -1);
    assert_eq!(engine.stats(3).n_tokens, 200);
    engine.seq_removed(-1, -1, -1);
    assert!(engine.seq_ids().is_empty());
}

#[test]
fn prefix_is_capped_with_one_warning() {
    let params =
        Params::parse("streaming,budget=64,min=48,window=8,prefix_max=64,prompt=inside").unwrap();
    let mut host = FakeHost::new(1, 2, 1, D, 256, 64);
    let mut engine = Engine::new(params, &mut host);
    feed(&mut engine, &mut host, 0, 60, false);
    generate(&mut engine, &mut host, 60..100, false);
    assert_eq!(engine.stats(0).prefix_len, 40);
    assert_eq!(host.logs.iter().filter(|m| m.contains("capped")).count(), 1);
}

/// Found by the `c_abi_sequence` fuzzer: with `prefix=prompt`, `window=0` and `min=budget`, the
/// prompt prefix was capped at `min - window = budget`, and selection also keeps the newest cell,
/// so a long prompt left `budget + 1` cells after `after_decode`.
#[test]
fn prompt_prefix_cap_leaves_room_for_the_newest_cell() {
    let params =
        Params::parse("random,budget=10,min=10,window=0,prefix=prompt,prefix_max=12,prompt=inside")
            .unwrap();
    let mut host = FakeHost::new(1, 2, 1, D, 64, 8);
    let mut engine = Engine::new(params, &mut host);
    feed(&mut engine, &mut host, 0, 12, true);
    for p in 12..30 {
        feed(&mut engine, &mut host, p, 1, true);
        let n = host.positions(0).len();
        assert!(n <= 10, "{n} cells > budget 10 at position {p}");
    }
    assert_eq!(engine.stats(0).prefix_len, 9);
}

/// A failing `seq_evict` is returned to the caller and logged once; the policy keeps running
/// and the next call tries again.
#[test]
fn host_error_is_returned_and_the_next_call_retries() {
    let params = Params::parse("random,budget=16,min=12,window=4,prefix=2").unwrap();
    let mut host = FakeHost::new(1, 2, 1, D, 64, 8);
    let mut engine = Engine::new(params, &mut host);
    host.fail.seq_evict = 3;
    let mut errors = 0;
    for p in 0..40 {
        match engine.before_batch(&mut host, &[0], &[1], None) {
            Ok(()) => {}
            Err(EngineError::Host(m)) => {
                assert!(m.contains("seq_evict"), "{m}");
                errors += 1;
            }
        }
        host.place(0, p);
        engine.after_ubatch(&mut host, &[p], &[0], &[-1]).unwrap();
        engine.after_decode(&mut host).ok();
        assert!(engine.is_enabled() && !engine.in_fallback());
    }
    assert!(errors >= 1, "no failure seen");
    assert!(
        host.count(0) <= 16,
        "the policy evicts again once the host recovers"
    );
    let logged = host.logs.iter().filter(|m| m.contains("seq_evict")).count();
    assert_eq!(logged, 1, "{:?}", host.logs);
}

/// A failed K read while scoring moves the context to position-only eviction: the pass that
/// failed is completed that way, later passes read no K, it is logged once, and the sequence
/// stays within its budget.
#[test]
fn failed_k_read_falls_back_to_position_only_eviction() {
    let params = Params::parse("beacon,budget=32,min=24,window=4,prefix=2,prompt=inside").unwrap();
    let mut host = FakeHost::new(2, 2, 1, D, 128, 8).with_rope();
    host.via_read_rows = true;
    let mut engine = Engine::new(params, &mut host);
    let mut rng = Lcg(5);
    let mut failed_at = None;
    for p in 0..200 {
        if p == 60 {
            host.fail.read_rows = 1;
        }
        let r = engine.before_batch(&mut host, &[0], &[1], None);
        if r.is_err() {
            failed_at.get_or_insert(p);
        }
        let cell = host.place(0, p);
        for l in 0..2 {
            host.k_row_mut(l, cell)
                .iter_mut()
                .for_each(|v| *v = f16::from_f32(rng.next()));
            host.q_row_mut(l, 0)
                .iter_mut()
                .for_each(|v| *v = rng.next());
        }
        let r = engine.after_ubatch(&mut host, &[p], &[0], &[0]);
        if r.is_err() {
            failed_at.get_or_insert(p);
        }
        engine.after_decode(&mut host).unwrap();
        assert!(host.count(0) <= 32, "{} cells at {p}", host.count(0));
    }
    assert!(failed_at.is_some());
    assert!(engine.in_fallback() && !engine.is_enabled());
    assert!(engine.failure().unwrap().contains("read_rows"));
    let reads = (host.k_reads, host.q_reads);
    for p in 200..260 {
        engine.before_batch(&mut host, &[0], &[1], None).unwrap();
        host.place(0, p);
        engine.after_ubatch(&mut host, &[p], &[0], &[0]).unwrap();
        engine.after_decode(&mut host).unwrap();
        assert!(host.count(0) <= 32);
    }
    assert_eq!(
        (host.k_reads, host.q_reads),
        reads,
        "no K or query read in fallback"
    );
    let kept = host.positions(0);
    assert!(kept.starts_with(&[0, 1]), "prefix kept: {kept:?}");
    assert_eq!(kept[kept.len() - 4..], [256, 257, 258, 259], "newest kept");
    let said = host
        .logs
        .iter()
        .filter(|m| m.contains("position-only"))
        .count();
    assert_eq!(said, 1, "{:?}", host.logs);
}

/// `prefix=prompt` protects at most `prefix_max` cells (default budget/4), so a long prompt
/// leaves room for scored middle cells.
#[test]
fn prompt_prefix_is_bounded_by_prefix_max() {
    let params = Params::parse("random,budget=64,min=48,window=8,prompt=inside").unwrap();
    let mut host = FakeHost::new(1, 2, 1, D, 256, 64);
    let mut engine = Engine::new(params, &mut host);
    feed(&mut engine, &mut host, 0, 40, true);
    generate(&mut engine, &mut host, 40..200, true);
    assert_eq!(engine.stats(0).prefix_len, 16);
    let kept = host.positions(0);
    assert!((0..16).all(|p| kept.contains(&p)), "bounded prefix kept");
    assert!(
        (16..40).any(|p| !kept.contains(&p)),
        "the rest of the prompt competes"
    );
    assert!(
        kept.iter().any(|&p| (40..192).contains(&p)),
        "middle cells survive: {kept:?}"
    );
    assert!(
        !host.logs.iter().any(|m| m.contains("capped")),
        "the prefix_max bound is not a warning"
    );
}

/// Decode steps that do not compress only count cells (the `cap == 0` contract); listing
/// happens in compression passes only.
#[test]
fn decode_steps_count_cells_without_listing() {
    let params = Params::parse("beacon,budget=64,min=48,window=8").unwrap();
    let mut host = FakeHost::new(1, 2, 1, D, 256, 8).with_rope();
    let mut engine = Engine::new(params, &mut host);
    for p in 0..300 {
        let (counts, lists) = (host.count_calls, host.list_calls);
        let events = engine.stats(0).compress_events;
        engine.before_batch(&mut host, &[0], &[1], None).unwrap();
        host.place(0, p);
        engine.after_ubatch(&mut host, &[p], &[0], &[0]).unwrap();
        engine.after_decode(&mut host).unwrap();
        let passes = engine.stats(0).compress_events - events;
        assert_eq!(host.list_calls - lists, passes as usize, "step {p}");
        if passes == 0 {
            assert_eq!(host.count_calls - counts, 2, "step {p}: before + after");
        }
    }
    assert!(engine.stats(0).compress_events >= 10);
}

/// `seq_copied` honours its range; `seq_removed` of a tail lowers the prompt length.
#[test]
fn ranged_copies_and_removals() {
    let params =
        Params::parse("recent,recent=8,budget=64,min=48,window=8,prefix_max=64,prompt=inside")
            .unwrap();
    let mut host = FakeHost::new(1, 2, 1, D, 256, 32).with_rope();
    let mut engine = Engine::new(params, &mut host);
    engine.before_batch(&mut host, &[0], &[30], None).unwrap();
    let pos: Vec<i32> = (0..30).collect();
    engine
        .after_ubatch(&mut host, &pos, &[0; 30], &pos)
        .unwrap();
    engine.before_batch(&mut host, &[0], &[1], None).unwrap(); // decode: prompt = 30
    assert_eq!(engine.stats(0).prefix_len, 30);

    engine.seq_copied(0, 1, 0, 20);
    let st = engine.stats(1);
    assert_eq!((st.pos_max, st.n_tokens), (19, 30));
    engine.before_batch(&mut host, &[1], &[1], None).unwrap();
    assert_eq!(
        engine.stats(1).prefix_len,
        20,
        "prompt cut to the copied range"
    );

    engine.seq_copied(0, 1, 25, -1); // into a known sequence: pos_max rises
    assert_eq!(engine.stats(1).pos_max, 29);
    engine.seq_copied(0, 0, -1, -1); // same sequence: nothing
    engine.seq_copied(-1, 2, -1, -1); // negative: nothing
    assert_eq!(engine.seq_ids(), vec![0, 1]);

    engine.seq_removed(0, 12, -1);
    engine.before_batch(&mut host, &[0], &[1], None).unwrap();
    let st = engine.stats(0);
    assert_eq!((st.pos_max, st.prefix_len), (11, 12));
    engine.seq_removed(-1, 5, 8); // a middle range of every sequence keeps them
    assert_eq!(engine.seq_ids(), vec![0, 1]);
    engine.seq_removed(1, -1, -1);
    assert_eq!(engine.seq_ids(), vec![0]);
}

#[test]
fn unusable_layers_are_skipped_and_warned_once() {
    let params = Params::parse("beacon,budget=128").unwrap();
    let mut host = FakeHost::new(2, 2, 1, D, 64, 8);
    host.layers[0].raw.k_type = 99;
    host.layers[1].raw.k_on_host = false;
    host.has_read_rows = false;
    let engine = Engine::new(params, &mut host);
    assert!(engine.layers().is_empty());
    assert!(!engine.is_enabled());
    assert!(engine.in_fallback(), "no layer: position-only eviction");
    assert_eq!(
        host.logs
            .iter()
            .filter(|m| m.contains("no layer can be scored"))
            .count(),
        1
    );
    assert_eq!(
        host.logs.iter().filter(|m| m.contains("skipped")).count(),
        2
    );
}

#[test]
fn speculative_verification_batches_end_the_prompt_phase() {
    let params = Params::parse("streaming,budget=64,min=48,window=8,prompt=inside").unwrap();
    let mut host = FakeHost::new(1, 2, 1, D, 256, 64);
    let mut engine = Engine::new(params, &mut host);
    // prompt: 12 tokens, logits for the last only
    engine
        .before_batch(&mut host, &[0], &[12], Some(&[1]))
        .unwrap();
    let pos: Vec<i32> = (0..12).collect();
    for &p in &pos {
        host.place(0, p);
    }
    engine
        .after_ubatch(&mut host, &pos, &[0; 12], &[-1; 12])
        .unwrap();
    // generation in verification batches of 5 tokens, each asking for 5 logits
    let mut next = 12;
    for _ in 0..40 {
        engine
            .before_batch(&mut host, &[0], &[5], Some(&[5]))
            .unwrap();
        let pos: Vec<i32> = (next..next + 5).collect();
        for &p in &pos {
            host.place(0, p);
        }
        engine
            .after_ubatch(&mut host, &pos, &[0; 5], &[-1; 5])
            .unwrap();
        engine.after_decode(&mut host).unwrap();
        next += 5;
    }
    assert_eq!(
        engine.stats(0).prefix_len,
        12,
        "the prompt, not every position, is protected"
    );
    let kept = host.positions(0);
    assert!(kept.len() <= 64 && (0..12).all(|p| kept.contains(&p)));
}

/// llama-server's speculative decoding: a verification batch of 1 + k drafts, then `seq_rm` of the
/// rejected drafts. Compressing at the end of the verification call would keep the (rejected)
/// newest cells as the window and evict the accepted ones before them; after the rollback the
/// sequence would end far before the next position. The newest accepted token must survive.
#[test]
fn speculative_rollback_keeps_the_accepted_tokens() {
    // a long protected prefix: prefix + window (48) leave less room than a verification batch needs
    let params =
        Params::parse("streaming,budget=64,min=56,window=8,prefix=40,prompt=inside").unwrap();
    let mut host = FakeHost::new(1, 2, 1, D, 256, 64);
    let mut engine = Engine::new(params, &mut host);
    let mut next = 0;
    // prompt and plain generation up to the budget
    for n in std::iter::once(40).chain(std::iter::repeat_n(1, 60)) {
        let outs = [1];
        engine
            .before_batch(&mut host, &[0], &[n], Some(&outs))
            .unwrap();
        let pos: Vec<i32> = (next..next + n).collect();
        for &p in &pos {
            host.place(0, p);
        }
        engine
            .after_ubatch(&mut host, &pos, &vec![0; n as usize], &vec![-1; n as usize])
            .unwrap();
        engine.after_decode(&mut host).unwrap();
        next += n;
    }
    // verification rounds: 1 + 24 drafts, only the first token accepted each time
    for _ in 0..20 {
        engine
            .before_batch(&mut host, &[0], &[25], Some(&[25]))
            .unwrap();
        let pos: Vec<i32> = (next..next + 25).collect();
        for &p in &pos {
            host.place(0, p);
        }
        engine
            .after_ubatch(&mut host, &pos, &[0; 25], &[-1; 25])
            .unwrap();
        engine.after_decode(&mut host).unwrap();
        host.remove(0, next + 1, -1); // the server rolls the rejected drafts back
        engine.seq_removed(0, next + 1, -1);
        next += 1;
        let kept = host.positions(0);
        assert_eq!(
            *kept.last().unwrap(),
            next - 1,
            "the newest accepted token was evicted: the sequence now ends at {:?}",
            kept.last()
        );
        let newest: Vec<i32> = (next - 8..next).collect();
        assert!(
            newest.iter().all(|p| kept.contains(p)),
            "the window of accepted tokens was evicted: {kept:?}"
        );
    }
    assert!(engine.stats(0).cells_peak <= 64, "{:?}", engine.stats(0));
}

/// Found by the `c_abi_sequence` fuzzer: a layer reporting a Hadamard block that is not a power of
/// two dividing head_dim was accepted, and the first scoring pass hit the assert in
/// `hadamard_inplace`, a panic that disabled compression for the context. Such layers are now
/// skipped like any other unusable layer.
#[test]
fn bad_hadamard_block_skips_the_layer() {
    let params = Params::parse("beacon,budget=128").unwrap();
    let mut host = FakeHost::new(3, 2, 1, D, 64, 8);
    host.layers[0].raw.hadamard_n = 3;
    host.layers[1].raw.hadamard_n = 2 * D as i32;
    host.layers[2].raw.hadamard_n = D as i32 / 2;
    let engine = Engine::new(params, &mut host);
    assert_eq!(engine.layers().len(), 1);
    assert_eq!(engine.layers()[0].hadamard_n, D / 2);
    assert_eq!(
        host.logs
            .iter()
            .filter(|m| m.contains("Hadamard block"))
            .count(),
        2
    );
}

/// Passes over 12 layers: the scorer scores every cell on 8 layers only and stops scoring the
/// cells that can no longer be evicted (`reduce=max`, `score=logit`, no archive). What is
/// evicted must still be exactly the full pass's choice: the reference scores every cell on every
/// layer (recent policy, one query: the last token's, no RoPE), pass after pass as the layer
/// order adapts.
#[test]
fn pruned_passes_evict_what_full_passes_would() {
    const LAYERS: usize = 12;
    let (n_head, n_kv) = (4usize, 2usize);
    let params = Params::parse(
        "recent,recent=1,budget=96,min=64,window=8,prefix=4,score=logit,prompt=inside",
    )
    .unwrap();
    let mut host = FakeHost::new(LAYERS, n_head, n_kv, D, 256, 8);
    let mut engine = Engine::new(params, &mut host);
    let mut rng = Lcg(11);
    // K as the cache holds it (f16), per position and layer
    let mut keys: Vec<Vec<Vec<f32>>> = Vec::new();
    let mut last_q: Vec<Vec<f32>> = Vec::new();
    let mut passes = 0;
    for p in 0..400i32 {
        let before = host.positions(0);
        engine.before_batch(&mut host, &[0], &[1], None).unwrap();
        let after = host.positions(0);
        if after.len() < before.len() {
            passes += 1;
            // reference: max over layers, heads of the last query . K / sqrt(D)
            let score = |pos: i32| -> f32 {
                let mut best = f32::NEG_INFINITY;
                for l in 0..LAYERS {
                    for h in 0..n_head {
                        let g = h / (n_head / n_kv);
                        let k = &keys[pos as usize][l][g * D..(g + 1) * D];
                        let q = &last_q[l][h * D..(h + 1) * D];
                        let dot: f32 = q.iter().zip(k).map(|(a, b)| a * b).sum();
                        best = best.max(dot / (D as f32).sqrt());
                    }
                }
                best
            };
            let n = before.len();
            let mut middle: Vec<i32> = before[4..n - 8].to_vec();
            middle.sort_by(|&a, &b| score(b).total_cmp(&score(a)).then(a.cmp(&b)));
            let mut expected: Vec<i32> = before[..4]
                .iter()
                .chain(&before[n - 8..])
                .copied()
                .collect();
            expected.extend(&middle[..64 - 12]);
            expected.sort_unstable();
            assert_eq!(after, expected, "pass {passes} at position {p}");
        }
        let cell = host.place(0, p);
        let mut k_pos = Vec::new();
        last_q.clear();
        for l in &mut host.layers {
            let k: Vec<f32> = (0..n_kv * D)
                .map(|_| f16::from_f32(rng.next() * 2.0).to_f32())
                .collect();
            for (dst, v) in l.k[cell * n_kv * D..(cell + 1) * n_kv * D]
                .iter_mut()
                .zip(&k)
            {
                *dst = f16::from_f32(*v);
            }
            // layers differ in scale, so maxima concentrate on some of them, and which ones
            // changes from token to token (the order learnt from the last pass is then stale)
            let scale = 1.0 + ((l.raw.il + p) % 5) as f32;
            let q: Vec<f32> = (0..n_head * D).map(|_| rng.next() * scale).collect();
            l.q[..n_head * D].copy_from_slice(&q);
            k_pos.push(k);
            last_q.push(q);
        }
        keys.push(k_pos);
        engine.after_ubatch(&mut host, &[p], &[0], &[0]).unwrap();
        engine.after_decode(&mut host).unwrap();
    }
    assert!(passes >= 8, "only {passes} passes");
}

/// A prompt of `n` tokens in ubatches of 32, then `gen` decode steps, under `spec`; the cell
/// counts after the prompt and at the end, and whether positions `0..keep` are all still there.
fn prompt_then_generate(spec: &str, n: i32, gen: i32, keep: i32) -> (usize, usize, bool, usize) {
    let params = Params::parse(spec).unwrap();
    let mut host = FakeHost::new(2, 4, 2, D, 512, 64).with_rope();
    let mut engine = Engine::new(params, &mut host);
    let mut rng = Lcg(9);
    let mut p = 0;
    let mut peak = 0;
    while p < n {
        let k = 32.min(n - p);
        engine.before_batch(&mut host, &[0], &[k], None).unwrap();
        let pos: Vec<i32> = (p..p + k).collect();
        for &q in &pos {
            let cell = host.place(0, q);
            for l in 0..2 {
                host.k_row_mut(l, cell)
                    .iter_mut()
                    .for_each(|v| *v = f16::from_f32(rng.next()));
            }
        }
        let rows: Vec<i32> = (0..k).collect();
        for l in 0..2 {
            for r in 0..k as usize {
                host.q_row_mut(l, r)
                    .iter_mut()
                    .for_each(|v| *v = rng.next());
            }
        }
        engine
            .after_ubatch(&mut host, &pos, &vec![0; k as usize], &rows)
            .unwrap();
        engine.after_decode(&mut host).unwrap();
        peak = peak.max(host.count(0));
        p += k;
    }
    let after_prompt = host.count(0);
    for q in n..n + gen {
        engine.before_batch(&mut host, &[0], &[1], None).unwrap();
        let cell = host.place(0, q);
        for l in 0..2 {
            host.k_row_mut(l, cell)
                .iter_mut()
                .for_each(|v| *v = f16::from_f32(rng.next()));
            host.q_row_mut(l, 0)
                .iter_mut()
                .for_each(|v| *v = rng.next());
        }
        engine.after_ubatch(&mut host, &[q], &[0], &[0]).unwrap();
        engine.after_decode(&mut host).unwrap();
        peak = peak.max(host.count(0));
    }
    let kept = host.positions(0);
    let whole = (0..keep).all(|q| kept.contains(&q));
    (after_prompt, host.count(0), whole, peak)
}

/// `prompt=inside`: a 160-token prompt is compressed while it is read and the sequence never
/// holds more than its budget.
#[test]
fn prompt_inside_counts_the_prompt_within_the_budget() {
    let (after_prompt, end, whole, peak) =
        prompt_then_generate("beacon,budget=64,window=8,prompt=inside", 160, 200, 160);
    assert!(
        after_prompt <= 64 && end <= 64 && peak <= 64 + 32,
        "{after_prompt} {end} {peak}"
    );
    assert!(!whole);
}

/// `prompt=keep`: the prompt's first `prompt_max` cells stay whole on top of the budget; the
/// budget bounds the rest.
#[test]
fn prompt_keep_holds_the_prompt_on_top_of_the_budget() {
    let (after_prompt, end, whole, _) = prompt_then_generate(
        "beacon,budget=64,window=8,prompt=keep,prompt_max=256",
        160,
        300,
        160,
    );
    assert_eq!(
        after_prompt, 160,
        "nothing of a prompt that fits is evicted while it is read"
    );
    assert!(whole, "the prompt is kept whole");
    assert!(end <= 160 + 64 && end > 160, "{end}");
    // a prompt longer than prompt_max: its first prompt_max cells are kept, the rest is scored
    let (_, end, whole, peak) = prompt_then_generate(
        "beacon,budget=64,window=8,prompt=keep,prompt_max=96",
        160,
        300,
        96,
    );
    assert!(whole, "the first 96 prompt cells are kept");
    assert!(end <= 96 + 64 && peak <= 96 + 64 + 32, "{end} {peak}");
}

/// `prompt=window`: the prompt is read whole into budget + prompt_max cells, then compressed
/// once at its end, and the budget bounds the whole sequence after it.
#[test]
fn prompt_window_compresses_the_prompt_once_at_its_end() {
    let spec = "beacon,budget=64,window=8,prompt=window,prompt_max=128";
    let (after_prompt, end, _, _) = prompt_then_generate(spec, 160, 0, 0);
    assert_eq!(after_prompt, 160, "read whole");
    assert!(end <= 160);
    let (_, end, whole, _) = prompt_then_generate(spec, 160, 100, 160);
    assert!(end <= 64, "{end}");
    assert!(!whole);
    // a prompt longer than the room is compressed while it is read, within budget + room
    let (after_prompt, _, _, peak) = prompt_then_generate(spec, 400, 10, 0);
    assert!(
        after_prompt <= 64 + 128 && peak <= 64 + 128 + 32,
        "{after_prompt} {peak}"
    );
}

#[test]
fn prompt_max_needs_keep_or_window() {
    let e = Params::parse("beacon,budget=64,prompt=inside,prompt_max=32").unwrap_err();
    assert_eq!(e.key, "prompt_max", "{e:?}");
}
