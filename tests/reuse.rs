//! Exact prompt reuse over the fake host: a sequence that keeps part of its prompt (at the point
//! `reuse_point` gives) and computes the rest of a new prompt continues exactly as a fresh
//! sequence given the new prompt; keeping more than that does not.

use beaconkv::testing::config::Params;
use beaconkv::testing::engine::Engine;
use beaconkv::testing::fake_host::{FakeHost, Lcg};
use half::f16;

const D: usize = 16;
const UBATCH: i32 = 64;
const SPEC: &str = "beacon,budget=1100,window=16,beacons=4,recent=4,prompt=inside";

/// K and the query of `pos` in text `version` (positions before 600 are the same in both).
fn write(host: &mut FakeHost, pos: i32, version: u64, row: usize) {
    let version = if pos < 600 { 0 } else { version };
    let mut rng = Lcg(pos as u64 * 7919 + version * 1_000_003 + 1);
    let cell = host.place(0, pos);
    for k in host.k_row_mut(0, cell) {
        *k = f16::from_f32(rng.next());
    }
    for q in host.q_row_mut(0, row) {
        *q = rng.next();
    }
}

/// Positions `from..to` of text `version` in ubatches of UBATCH starting at multiples of it
/// (llama-server's chunks), the last asking for one output; then `after_decode`.
fn prompt(engine: &mut Engine, host: &mut FakeHost, from: i32, to: i32, version: u64) {
    let mut p = from;
    while p < to {
        let end = ((p / UBATCH + 1) * UBATCH).min(to);
        let n = end - p;
        let outputs = if end == to { 1 } else { 0 };
        engine
            .before_batch(host, &[0], &[n], Some(&[outputs]))
            .unwrap();
        let pos: Vec<i32> = (p..end).collect();
        for (row, &q) in pos.iter().enumerate() {
            write(host, q, version, row);
        }
        let rows: Vec<i32> = (0..n).collect();
        engine
            .after_ubatch(host, &pos, &vec![0; n as usize], &rows)
            .unwrap();
        engine.after_decode(host).unwrap();
        p = end;
    }
}

/// Single-token decode steps at `from..to`; returns the positions held after each.
fn decode(
    engine: &mut Engine,
    host: &mut FakeHost,
    from: i32,
    to: i32,
    version: u64,
) -> Vec<Vec<i32>> {
    (from..to)
        .map(|p| {
            engine.before_batch(host, &[0], &[1], Some(&[1])).unwrap();
            write(host, p, version, 0);
            engine.after_ubatch(host, &[p], &[0], &[0]).unwrap();
            engine.after_decode(host).unwrap();
            host.positions(0)
        })
        .collect()
}

fn setup() -> (Engine, FakeHost) {
    let mut host = FakeHost::new(1, 2, 1, D, 2048, UBATCH as usize);
    let engine = Engine::new(Params::parse(SPEC).unwrap(), &mut host);
    (engine, host)
}

/// The new request (text 2: positions 0..900, 600 of them shared with the first request) on a
/// fresh sequence: the positions held after each of 400 decode steps.
fn fresh() -> Vec<Vec<i32>> {
    let (mut engine, mut host) = setup();
    prompt(&mut engine, &mut host, 0, 900, 2);
    decode(&mut engine, &mut host, 900, 1300, 3)
}

/// The first request (prompt 0..700 of text 1 and 300 generated tokens, within the budget),
/// then the new request keeping `keep(engine)` positions.
fn reused(keep: impl Fn(&Engine) -> i32) -> (i32, Vec<Vec<i32>>) {
    let (mut engine, mut host) = setup();
    prompt(&mut engine, &mut host, 0, 700, 1);
    decode(&mut engine, &mut host, 700, 1000, 1);
    assert_eq!(
        engine.stats(0).evicted,
        0,
        "the first request stays within the budget"
    );
    let n_past = keep(&engine);
    host.remove(0, n_past, -1);
    engine.seq_removed(0, n_past, -1);
    prompt(&mut engine, &mut host, n_past, 900, 2);
    (n_past, decode(&mut engine, &mut host, 900, 1300, 3))
}

#[test]
fn a_prompt_reused_from_its_reuse_point_continues_as_on_a_fresh_sequence() {
    let want = fresh();
    assert!(
        want.windows(2).any(|w| w[0] != w[1]),
        "the new request never compressed: the test checks nothing"
    );
    // the shared prefix is 600 positions; the last mark at or before it is 512
    let (n_past, got) = reused(|e| e.reuse_point(0, 600));
    assert_eq!(n_past, 512);
    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
        assert_eq!(
            w, g,
            "decode step {i}: cells differ from the fresh sequence's"
        );
    }
    // keeping all 600 shared positions keeps queries the first request displaced: it differs
    let (_, approx) = reused(|_| 600);
    assert_ne!(
        approx, want,
        "keeping the whole shared prefix is exact too: the test checks nothing"
    );
}

#[test]
fn the_reuse_point_keeps_a_new_turn_and_stops_at_evictions() {
    let (mut engine, mut host) = setup();
    // unknown sequence: keep everything
    assert_eq!(engine.reuse_point(0, 42), 42);
    prompt(&mut engine, &mut host, 0, 700, 1);
    // still in the prompt phase and nothing to recompute: exact as it is
    assert_eq!(engine.reuse_point(0, 700), 700);
    // inside the prompt: back to a mark
    assert_eq!(engine.reuse_point(0, 699), 512);
    assert_eq!(engine.reuse_point(0, 300), 256);
    assert_eq!(engine.reuse_point(0, 255), 0);
    decode(&mut engine, &mut host, 700, 1000, 1);
    // past the prompt (a new turn after generated text): the compressed history is kept
    assert_eq!(engine.reuse_point(0, 900), 900);
    assert_eq!(engine.reuse_point(0, 700), 512);
    // past the budget: the passes evict prompt positions, marks above them are no longer exact
    decode(&mut engine, &mut host, 1000, 1200, 1);
    let first_evicted = (0..1000).find(|p| !host.positions(0).contains(p)).unwrap();
    let point = engine.reuse_point(0, 650);
    assert!(
        point <= first_evicted,
        "{point} > first evicted {first_evicted}"
    );
}
