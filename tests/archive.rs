//! The archive over the fake host: a passage that no query needs is evicted into the archive,
//! and when the queries turn to it again it is placed back at its own positions with its own K
//! and V rows, while the sequence never holds more than its budget. Without the archive it is
//! gone for good; removed positions never come back; the archive rides in the sequence state.

use beaconkv::testing::config::{Params, ReadPath};
use beaconkv::testing::engine::Engine;
use beaconkv::testing::fake_host::{FakeHost, Lcg};
use half::f16;

const D: usize = 16;
const BUDGET: usize = 64;
/// Page 96 / 8 = 12 holds positions 96..104.
const PLANTED: std::ops::Range<i32> = 96..104;
/// The position just before the passage (see `holes_after_a_kept_cell_come_back_between_passes`).
const ANCHOR: i32 = 95;

fn spec(extra: &str) -> String {
    format!("beacon,budget={BUDGET},min=48,window=8,prefix=4,beacons=4,recent=4,page=8,prompt=inside{extra}")
}

fn v_of(pos: i32, j: usize) -> f32 {
    (pos as f32) * 0.01 + j as f32 * 0.001
}

/// One decode step at `pos`: K planted along e0 for PLANTED positions (noise elsewhere, e0 = 0),
/// V encodes the position; the query looks along e0 when `seek`, along e1 otherwise.
fn step(engine: &mut Engine, host: &mut FakeHost, rng: &mut Lcg, pos: i32, seek: bool) {
    step_along(
        engine,
        host,
        rng,
        pos,
        (if seek { 0 } else { 1 }, 1.0),
        false,
        None,
    );
}

/// `step` with the query `gain` along `axis`; with `anchor`, the key of ANCHOR points along e2;
/// with `token`, the host reports that token id at `pos`.
fn step_along(
    engine: &mut Engine,
    host: &mut FakeHost,
    rng: &mut Lcg,
    pos: i32,
    (axis, gain): (usize, f32),
    anchor: bool,
    token: Option<i32>,
) {
    if let Some(t) = token {
        engine.record_tokens(&[pos], &[0], &[t]);
    }
    engine.before_batch(host, &[0], &[1], None).unwrap();
    let cell = host.place(0, pos);
    for l in &mut host.layers {
        for i in 0..D {
            let k = if PLANTED.contains(&pos) {
                if i == 0 {
                    4.0
                } else {
                    0.1 * rng.next()
                }
            } else if anchor && pos == ANCHOR {
                match i {
                    0 => 0.0,
                    2 => 4.0,
                    _ => 0.1 * rng.next(),
                }
            } else if i == 0 {
                0.0
            } else {
                0.3 * rng.next()
            };
            l.k[cell * D + i] = f16::from_f32(k);
            l.v[cell * D + i] = f16::from_f32(v_of(pos, i));
        }
        for q_head in l.q[..2 * D].chunks_exact_mut(D) {
            for (i, q) in q_head.iter_mut().enumerate() {
                *q = if i == axis {
                    gain
                } else if i == 0 {
                    0.0 // never along e0 unless seeking
                } else {
                    0.1 * rng.next()
                };
            }
        }
    }
    engine.after_ubatch(host, &[pos], &[0], &[0]).unwrap();
    engine.after_decode(host).unwrap();
    assert!(
        host.count(0) <= BUDGET,
        "position {pos}: {} cells held, budget {BUDGET}",
        host.count(0)
    );
}

fn setup(spec: &str) -> (Engine, FakeHost, Lcg) {
    let mut host = FakeHost::new(2, 2, 1, D, 256, 64);
    let engine = Engine::new(Params::parse(spec).unwrap(), &mut host);
    (engine, host, Lcg(7))
}

/// Phase A: 300 steps that never look along e0 (the passage is evicted).
fn phase_a(engine: &mut Engine, host: &mut FakeHost, rng: &mut Lcg) {
    for p in 0..300 {
        step(engine, host, rng, p, false);
    }
    let kept = host.positions(0);
    assert!(
        PLANTED.clone().all(|p| !kept.contains(&p)),
        "the passage should have been evicted: {kept:?}"
    );
}

/// Phase B: steps that look along e0; returns the step (from 0) at which the whole passage is
/// back, if it comes back within `n` steps.
fn phase_b(engine: &mut Engine, host: &mut FakeHost, rng: &mut Lcg, n: i32) -> Option<i32> {
    for i in 0..n {
        step(engine, host, rng, 300 + i, true);
        let kept = host.positions(0);
        if PLANTED.clone().all(|p| kept.contains(&p)) {
            return Some(i);
        }
    }
    None
}

/// The passage's cells hold exactly the K and V rows they had before eviction.
fn assert_rows_restored(host: &FakeHost) {
    for (c, &m) in host.cell_seqs.iter().enumerate() {
        let pos = host.cell_pos[c];
        if m & 1 == 0 || !PLANTED.contains(&pos) {
            continue;
        }
        for l in &host.layers {
            assert_eq!(l.k[c * D], f16::from_f32(4.0), "K of position {pos}");
            for j in 0..D {
                assert_eq!(
                    l.v[c * D + j],
                    f16::from_f32(v_of(pos, j)),
                    "V of position {pos}, {j}"
                );
            }
        }
    }
}

#[test]
fn a_returning_passage_is_recalled_within_a_few_steps() {
    let (mut engine, mut host, mut rng) = setup(&spec(",archive=1024,recall_every=2"));
    phase_a(&mut engine, &mut host, &mut rng);
    let st = engine.stats(0);
    assert!(
        st.archived >= PLANTED.len() as u64,
        "archived {}",
        st.archived
    );
    assert_eq!(
        st.archived as usize + host.count(0),
        300,
        "every evicted cell is archived"
    );
    let back = phase_b(&mut engine, &mut host, &mut rng, 16).expect("the passage comes back");
    assert!(back <= 4, "recalled after {back} steps");
    assert_rows_restored(&host);
    let st = engine.stats(0);
    assert!(st.recalled >= PLANTED.len() as u64);
    assert!(st.archive_bytes > 0);
    // it stays: the next passes keep what the queries need
    for i in 0..64 {
        step(&mut engine, &mut host, &mut rng, 320 + i, true);
    }
    let kept = host.positions(0);
    assert!(PLANTED.clone().all(|p| kept.contains(&p)), "{kept:?}");
}

#[test]
fn under_score_prob_the_per_step_check_recalls_between_passes() {
    // the rows of a prob pass are log probabilities; the check compares raw logits, which the
    // scorer keeps for the cells a pass keeps
    let (mut engine, mut host, mut rng) = setup(&spec(
        ",archive=1024,recall_every=1,recall_margin=0,score=prob",
    ));
    phase_a(&mut engine, &mut host, &mut rng);
    // cells recalled at steps where no compression pass ran
    let mut between = 0;
    for i in 0..16 {
        let before = engine.stats(0);
        step(&mut engine, &mut host, &mut rng, 300 + i, true);
        let after = engine.stats(0);
        if after.compress_events == before.compress_events {
            between += after.recalled - before.recalled;
        }
        let kept = host.positions(0);
        if PLANTED.clone().all(|p| kept.contains(&p)) {
            assert!(between > 0, "step {i}: only passes recalled the passage");
            assert_rows_restored(&host);
            return;
        }
    }
    panic!("the passage did not come back within 16 steps");
}

#[test]
fn holes_after_a_kept_cell_come_back_between_passes() {
    // the cell before the passage is kept (queries look along its key now and then, too weakly
    // for a check: logit 1 against a margin of 2) while the passage is evicted; when the queries
    // turn to that cell in earnest (logit 4), the check brings back the page after it although
    // no query looks along the passage's own keys
    let (mut engine, mut host, mut rng) = setup(&spec(",archive=1024,recall_every=1"));
    for p in 0..300 {
        let axis = if p > ANCHOR && p % 40 == 0 { 2 } else { 1 };
        step_along(&mut engine, &mut host, &mut rng, p, (axis, 1.0), true, None);
    }
    let kept = host.positions(0);
    assert!(kept.contains(&ANCHOR), "the anchor was evicted: {kept:?}");
    assert!(PLANTED.clone().all(|p| !kept.contains(&p)), "{kept:?}");
    let mut between = 0;
    for i in 0..8 {
        let before = engine.stats(0);
        step_along(
            &mut engine,
            &mut host,
            &mut rng,
            300 + i,
            (2, 4.0),
            true,
            None,
        );
        let after = engine.stats(0);
        if after.compress_events == before.compress_events {
            between += after.recalled - before.recalled;
        }
        let kept = host.positions(0);
        if PLANTED.clone().all(|p| kept.contains(&p)) {
            assert!(
                between >= PLANTED.len() as u64,
                "step {i}: {between} recalled between passes"
            );
            assert_rows_restored(&host);
            return;
        }
    }
    panic!("the page after the anchor did not come back within 8 steps");
}

/// The token id the text has at position `p` the first time through: all distinct.
fn token_at(p: i32) -> i32 {
    1000 + p
}

/// A step whose query never looks along the passage's keys, with the host reporting `token`.
fn step_token(engine: &mut Engine, host: &mut FakeHost, rng: &mut Lcg, pos: i32, token: i32) {
    step_along(engine, host, rng, pos, (1, 1.0), false, Some(token));
}

/// Phase A with token ids: 300 steps of distinct tokens; the passage is evicted.
fn phase_a_with_tokens(engine: &mut Engine, host: &mut FakeHost, rng: &mut Lcg) {
    for p in 0..300 {
        step_token(engine, host, rng, p, token_at(p));
    }
    let kept = host.positions(0);
    assert!(PLANTED.clone().all(|p| !kept.contains(&p)), "{kept:?}");
}

#[test]
fn a_repeated_passage_is_recalled_by_its_tokens_alone() {
    // the text of positions 88..104 comes again at 300.. while no query looks along the
    // passage's keys: the tokens alone bring the passage back once `recall_match` of them match
    let (mut engine, mut host, mut rng) = setup(&spec(",archive=1024,recall_every=1"));
    phase_a_with_tokens(&mut engine, &mut host, &mut rng);
    let from = PLANTED.start - 8;
    for i in 0..16 {
        step_token(
            &mut engine,
            &mut host,
            &mut rng,
            300 + i,
            token_at(from + i),
        );
        let kept = host.positions(0);
        if PLANTED.clone().all(|p| kept.contains(&p)) {
            // the 8th repeated token (i = 7) is the first on which 8 tokens match
            assert_eq!(i, 7, "recalled at repeated token {i}");
            assert_rows_restored(&host);
            assert!(engine.stats(0).recalled >= PLANTED.len() as u64);
            return;
        }
    }
    panic!("the repeated passage did not come back");
}

/// The host's side of a batch of `tokens` at positions `first..` asking for `n_outputs`
/// logits, up to placement: the ids, then `before_batch`. Returns the positions held then.
fn batch_before_placement(
    engine: &mut Engine,
    host: &mut FakeHost,
    first: i32,
    tokens: &[i32],
    n_outputs: i32,
) -> Vec<i32> {
    let n = tokens.len() as i32;
    let pos: Vec<i32> = (first..first + n).collect();
    engine.record_tokens(&pos, &vec![0; pos.len()], tokens);
    engine
        .before_batch(host, &[0], &[n], Some(&[n_outputs]))
        .unwrap();
    assert!(host.count(0) + tokens.len() <= BUDGET);
    host.positions(0)
}

#[test]
fn a_user_turn_that_quotes_a_phrase_gets_what_followed_it_before_it_is_computed() {
    // a turn of 12 tokens ending with the 4 tokens before the evicted passage (a question that
    // quotes how the passage began): the passage is back before the turn is placed
    let turn = |tail: std::ops::Range<i32>| -> Vec<i32> {
        let mut t: Vec<i32> = (0..8).map(|i| 7 + i).collect(); // new words
        t.extend(tail.map(token_at));
        t
    };
    let held = |outputs: i32, tail: std::ops::Range<i32>, extra: &str| {
        let (mut engine, mut host, mut rng) = setup(&spec(&format!(",archive=1024{extra}")));
        phase_a_with_tokens(&mut engine, &mut host, &mut rng);
        let kept = batch_before_placement(&mut engine, &mut host, 300, &turn(tail), outputs);
        let back = PLANTED.clone().filter(|p| kept.contains(p)).count();
        (back, engine.stats(0).recalled)
    };
    let (back, recalled) = held(1, ANCHOR - 3..ANCHOR + 1, "");
    assert_eq!(back, PLANTED.len(), "the passage after the quoted phrase");
    assert!(recalled >= PLANTED.len() as u64);
    // teacher-forced or speculative batches (logits for every token) are not user turns, and a
    // chunk that asks for no output is not the end of one
    assert_eq!(held(12, ANCHOR - 3..ANCHOR + 1, ""), (0, 0));
    assert_eq!(held(0, ANCHOR - 3..ANCHOR + 1, ""), (0, 0));
    // 3 tokens are fewer than recall_match / 2
    assert_eq!(held(1, ANCHOR - 2..ANCHOR + 1, "").0, 0);
    // recall_match=6: 3 tokens do
    assert_eq!(
        held(1, ANCHOR - 2..ANCHOR + 1, ",recall_match=6").0,
        PLANTED.len()
    );
}

#[test]
fn a_turn_whose_last_token_comes_alone_is_checked_with_the_chunk_before_it() {
    // llama-server reads a turn in chunks that ask for no output; a turn of 32k + 1 tokens ends
    // with its last token alone: the quote that token completes is looked up then
    let (mut engine, mut host, mut rng) = setup(&spec(",archive=1024"));
    phase_a_with_tokens(&mut engine, &mut host, &mut rng);
    let mut chunk: Vec<i32> = (0..8).map(|i| 7 + i).collect();
    chunk.extend((ANCHOR - 3..ANCHOR).map(token_at)); // 3 of the quote's 4 tokens
    let kept = batch_before_placement(&mut engine, &mut host, 300, &chunk, 0);
    assert!(
        PLANTED.clone().all(|p| !kept.contains(&p)),
        "3 tokens quote nothing"
    );
    let pos: Vec<i32> = (300..300 + chunk.len() as i32).collect();
    for &p in &pos {
        let cell = host.place(0, p);
        for l in 0..host.layers.len() {
            for k in host.k_row_mut(l, cell) {
                *k = f16::from_f32(0.3 * rng.next());
            }
        }
    }
    engine
        .after_ubatch(&mut host, &pos, &vec![0; pos.len()], &vec![-1; pos.len()])
        .unwrap();
    engine.after_decode(&mut host).unwrap();
    let last = 300 + chunk.len() as i32;
    let kept = batch_before_placement(&mut engine, &mut host, last, &[token_at(ANCHOR)], 1);
    let back = PLANTED.clone().filter(|p| kept.contains(p)).count();
    assert_eq!(back, PLANTED.len(), "{kept:?}");
}

#[test]
fn a_phrase_that_occurred_more_than_once_points_at_no_passage() {
    // the text uses the 4 tokens before the passage twice (at 92..96 and again at 200..204, as
    // a chat template recurs): a turn ending with them recalls nothing
    let (mut engine, mut host, mut rng) = setup(&spec(",archive=1024"));
    for p in 0..300 {
        let t = if (200..204).contains(&p) {
            token_at(p - 200 + ANCHOR - 3)
        } else {
            token_at(p)
        };
        step_token(&mut engine, &mut host, &mut rng, p, t);
    }
    let tail: Vec<i32> = (ANCHOR - 3..=ANCHOR).map(token_at).collect();
    let kept = batch_before_placement(&mut engine, &mut host, 300, &tail, 1);
    assert!(PLANTED.clone().all(|p| !kept.contains(&p)), "{kept:?}");
    assert_eq!(engine.stats(0).recalled, 0);
}

#[test]
fn the_token_ids_ride_in_the_sequence_state() {
    // saved before the passage comes again and restored into a fresh context, the token ids
    // still tell where it was; a version-3 state (no token ids) loads, and then they cannot
    let run_to_gap = || {
        let (mut engine, mut host, mut rng) = setup(&spec(",archive=1024,recall_every=1"));
        phase_a_with_tokens(&mut engine, &mut host, &mut rng);
        (engine.save_seq(0).unwrap(), host, rng)
    };
    let repeat = |engine: &mut Engine, host: &mut FakeHost, rng: &mut Lcg| {
        for i in 0..16 {
            step_token(engine, host, rng, 300 + i, token_at(PLANTED.start - 8 + i));
        }
        let kept = host.positions(0);
        PLANTED.clone().all(|p| kept.contains(&p))
    };
    let params = Params::parse(&spec(",archive=1024,recall_every=1")).unwrap();
    let (blob, mut host, mut rng) = run_to_gap();
    let mut restored = Engine::new(params.clone(), &mut host);
    restored.load_seq(0, &blob).unwrap();
    assert!(
        repeat(&mut restored, &mut host, &mut rng),
        "not recalled after a restore"
    );
    assert_rows_restored(&host);
    // version 3: the same bytes up to the token ids
    let (mut blob, mut host, mut rng) = run_to_gap();
    // the ids are the array [token_at(0), token_at(1), ..] of 300: cut the state there
    let mut ids = 300u64.to_le_bytes().to_vec();
    ids.extend_from_slice(&token_at(0).to_le_bytes());
    let at = blob
        .windows(ids.len())
        .rposition(|w| w == ids)
        .expect("the token ids in the state");
    blob.truncate(at);
    blob[4..8].copy_from_slice(&3u32.to_le_bytes());
    let mut old = Engine::new(params, &mut host);
    old.load_seq(0, &blob).unwrap();
    assert!(old.stats(0).archived > 0);
    assert!(
        !repeat(&mut old, &mut host, &mut rng),
        "recalled without token ids"
    );
}

#[test]
fn text_that_repeats_nothing_runs_as_eviction_alone() {
    // token ids that never repeat: the archive archives, but nothing comes back, not even when
    // the queries look along the passage's keys (which recall by queries answers), and every
    // step keeps exactly the cells eviction alone keeps
    let (mut plain, mut host_a, mut rng_a) = setup(&spec(""));
    let (mut archived, mut host_b, mut rng_b) = setup(&spec(",archive=1024,recall_every=1"));
    for p in 0..400 {
        let axis = if p >= 300 { 0 } else { 1 };
        let t = Some(token_at(p));
        step_along(
            &mut plain,
            &mut host_a,
            &mut rng_a,
            p,
            (axis, 1.0),
            false,
            t,
        );
        step_along(
            &mut archived,
            &mut host_b,
            &mut rng_b,
            p,
            (axis, 1.0),
            false,
            t,
        );
        assert_eq!(host_a.positions(0), host_b.positions(0), "position {p}");
    }
    let st = archived.stats(0);
    assert!(st.archived > 0);
    assert_eq!(st.recalled, 0);
    // the same run recalling by queries (recall_match=0) does bring the passage back
    let (mut by_queries, mut host_c, mut rng_c) =
        setup(&spec(",archive=1024,recall_every=1,recall_match=0"));
    for p in 0..400 {
        let axis = if p >= 300 { 0 } else { 1 };
        let t = Some(token_at(p));
        step_along(
            &mut by_queries,
            &mut host_c,
            &mut rng_c,
            p,
            (axis, 1.0),
            false,
            t,
        );
    }
    assert!(by_queries.stats(0).recalled > 0);
}

#[test]
fn every_cell_is_accounted_for_when_recall_meets_a_full_archive() {
    // text that repeats every 100 tokens recalls at most checks while the archive is at its cap:
    // cells held + archived + dropped = tokens seen, evicted + held = tokens + recalled
    let (mut engine, mut host, mut rng) = setup(&spec(",archive=40,recall_every=1"));
    for p in 0..600 {
        step_token(&mut engine, &mut host, &mut rng, p, p % 100);
        let st = engine.stats(0);
        let held = host.count(0) as u64;
        let seen = p as u64 + 1;
        assert!(st.archived <= 40, "position {p}: {} archived", st.archived);
        assert_eq!(
            st.archived + st.archive_dropped + held,
            seen,
            "position {p}"
        );
        assert_eq!(st.evicted + held, seen + st.recalled, "position {p}");
    }
    let st = engine.stats(0);
    assert!(st.recalled > 0 && st.archive_dropped > 0, "{st:?}");
}

#[test]
fn without_the_archive_the_passage_is_gone() {
    let (mut engine, mut host, mut rng) = setup(&spec(""));
    phase_a(&mut engine, &mut host, &mut rng);
    assert_eq!(phase_b(&mut engine, &mut host, &mut rng, 64), None);
    assert_eq!(engine.stats(0).archived, 0);
}

#[test]
fn recall_at_compression_passes_only() {
    // recall_every=0: no per-step check; the next compression pass brings the passage back
    let (mut engine, mut host, mut rng) = setup(&spec(",archive=1024,recall_every=0"));
    phase_a(&mut engine, &mut host, &mut rng);
    let back = phase_b(&mut engine, &mut host, &mut rng, 40).expect("back at a pass");
    assert!(back >= 1);
    assert_rows_restored(&host);
}

#[test]
fn quantised_archive_recalls_close_rows() {
    let (mut engine, mut host, mut rng) = setup(&spec(",archive=1024,archive_type=q4_0"));
    phase_a(&mut engine, &mut host, &mut rng);
    phase_b(&mut engine, &mut host, &mut rng, 16).expect("the passage comes back");
    for (c, &m) in host.cell_seqs.iter().enumerate() {
        let pos = host.cell_pos[c];
        if m & 1 != 0 && PLANTED.contains(&pos) {
            let k0 = host.layers[0].k[c * D].to_f32();
            assert!((k0 - 4.0).abs() < 0.3, "K of {pos}: {k0}");
        }
    }
}

#[test]
fn archive_cap_bounds_the_archive() {
    let (mut engine, mut host, mut rng) = setup(&spec(",archive=40"));
    for p in 0..300 {
        step(&mut engine, &mut host, &mut rng, p, false);
        assert!(engine.stats(0).archived <= 40);
    }
    let st = engine.stats(0);
    assert!(st.archive_dropped > 0);
    assert_eq!(st.archived + st.archive_dropped + host.count(0) as u64, 300);
}

#[test]
fn removed_positions_never_come_back() {
    let (mut engine, mut host, mut rng) = setup(&spec(",archive=1024"));
    phase_a(&mut engine, &mut host, &mut rng);
    let before = engine.stats(0).archived;
    host.remove(0, PLANTED.start, PLANTED.end);
    engine.seq_removed(0, PLANTED.start, PLANTED.end);
    assert_eq!(engine.stats(0).archived, before - PLANTED.len() as u64);
    assert_eq!(phase_b(&mut engine, &mut host, &mut rng, 32), None);
}

#[test]
fn the_archive_rides_in_the_sequence_state() {
    let (mut engine, mut host, mut rng) = setup(&spec(",archive=1024"));
    phase_a(&mut engine, &mut host, &mut rng);
    let blob = engine.save_seq(0).unwrap();
    let archived = engine.stats(0).archived;
    let mut restored = Engine::new(Params::parse(&spec(",archive=1024")).unwrap(), &mut host);
    restored.load_seq(0, &blob).unwrap();
    assert_eq!(restored.stats(0).archived, archived);
    phase_b(&mut restored, &mut host, &mut rng, 16).expect("recalled from the restored archive");
    assert_rows_restored(&host);
}

#[test]
fn a_host_without_archive_callbacks_runs_without_it() {
    let mut host = FakeHost::new(2, 2, 1, D, 256, 64);
    host.has_archive = false;
    let mut engine = Engine::new(Params::parse(&spec(",archive=1024")).unwrap(), &mut host);
    let mut rng = Lcg(7);
    phase_a(&mut engine, &mut host, &mut rng);
    assert_eq!(engine.stats(0).archived, 0);
    assert_eq!(
        host.logs
            .iter()
            .filter(|l| l.contains("archive off"))
            .count(),
        1,
        "{:?}",
        host.logs
    );
}

#[test]
fn a_failing_read_kv_turns_the_archive_off_and_eviction_goes_on() {
    let (mut engine, mut host, mut rng) = setup(&spec(",archive=1024"));
    host.fail.read_kv = u32::MAX;
    phase_a(&mut engine, &mut host, &mut rng);
    assert_eq!(engine.stats(0).archived, 0);
    assert!(
        host.logs.iter().any(|l| l.contains("archive off")),
        "{:?}",
        host.logs
    );
    assert!(engine.is_enabled(), "the policy itself keeps running");
}

#[test]
fn a_failing_write_kv_drops_the_placed_cells_and_turns_the_archive_off() {
    // a margin above the noise logits (~0.1) and below the passage's (1): with 0 every check
    // would fill holes after some kept cell already in phase A
    let (mut engine, mut host, mut rng) =
        setup(&spec(",archive=1024,recall_every=1,recall_margin=0.5"));
    phase_a(&mut engine, &mut host, &mut rng);
    host.fail.write_kv = u32::MAX;
    // the passage is found, placed, its rows cannot be written: the cells go again
    for i in 0..16 {
        step(&mut engine, &mut host, &mut rng, 300 + i, true);
    }
    assert!(host.placed > 0, "no recall was attempted");
    let kept = host.positions(0);
    assert!(
        PLANTED.clone().all(|p| !kept.contains(&p)),
        "cells without rows stayed: {kept:?}"
    );
    assert!(
        host.logs.iter().any(|l| l.contains("archive off")),
        "{:?}",
        host.logs
    );
    assert!(engine.is_enabled(), "the policy itself keeps running");
}

/// The scorer's page bounds (through the tile kernel, from centre and radius) are never below the
/// exact logit of any key inside the page's box, on every (layer, kv head) row, for queries of
/// mixed signs and sizes, and the best corner of the box reaches them (tight, not just safe).
#[test]
fn page_bounds_never_underestimate_exact_logits() {
    use beaconkv::testing::host::LayerDesc;
    use beaconkv::testing::queries::{LayerQueries, QueryConfig, QueryScratch, SeqQueries};
    use beaconkv::testing::scoring::RecallProbe;
    use beaconkv::testing::scoring::{ExtraKeys, QueryScorer, ScoreCtx, ScoreRows};

    const HEADS: usize = 4;
    const KV: usize = 2;
    const DIM: usize = 32;
    const PAGES: usize = 21; // more than one tile, the last one partial
    const KEYS: usize = 8; // keys per page: the corners of its box
    let host = FakeHost::new(2, HEADS, KV, DIM, 8, 1);
    let layers: Vec<LayerDesc> = host
        .layers
        .iter()
        .enumerate()
        .map(|(i, l)| LayerDesc::from_raw(i as i32, &l.raw, ReadPath::Auto, true, false).unwrap())
        .collect();
    let cfg = QueryConfig {
        n_beacons: 2,
        n_recent: 4,
        fps: true,
        ring: false,
    };
    let mut rng = Lcg(7);
    let mut queries = SeqQueries {
        layers: layers
            .iter()
            .map(|_| LayerQueries::new(&cfg, HEADS, DIM))
            .collect(),
    };
    for p in 0..6 {
        for lq in &mut queries.layers {
            let q: Vec<f32> = (0..HEADS * DIM).map(|_| 3.0 * rng.next()).collect();
            lq.push(&q, p, &mut QueryScratch::default());
        }
    }
    // per layer and page: a box (min, max), wide in 3 dims of each kv head and flat in the rest,
    // and its 8 corners as keys: the corner a query likes best is among them, so a bound that
    // shaved any width off the box would fall below an exact logit
    const WIDE: [usize; 3] = [1, 9, 30];
    let row = KV * DIM;
    let mut boxes = vec![vec![(vec![0.0f32; row], vec![0.0f32; row]); PAGES]; layers.len()];
    let mut keys = vec![vec![0.0f32; PAGES * KEYS * row]; layers.len()];
    for (li, layer_boxes) in boxes.iter_mut().enumerate() {
        for (p, (mn, mx)) in layer_boxes.iter_mut().enumerate() {
            for j in 0..row {
                let a = 2.0 * rng.next();
                let b = if WIDE.contains(&(j % DIM)) {
                    2.0 * rng.next()
                } else {
                    a
                };
                (mn[j], mx[j]) = (a.min(b), a.max(b));
                for k in 0..KEYS {
                    let w = WIDE.iter().position(|&x| x == j % DIM);
                    let hi = w.is_some_and(|w| (k >> w) & 1 == 1);
                    keys[li][(p * KEYS + k) * row + j] = if hi { mx[j] } else { mn[j] };
                }
            }
        }
    }
    let ctx = |extra| ScoreCtx::new(0, &layers, &queries, 6, 1).with_extra(extra);
    // the beacon policy's scorer, as the archive probes it
    let probe: &mut dyn RecallProbe = &mut QueryScorer::beacon();
    // as the archive keeps them: centre and radius, rounded outwards
    let centred: Vec<Vec<(Vec<f32>, Vec<f32>)>> = boxes
        .iter()
        .map(|pages| {
            pages
                .iter()
                .map(|(mn, mx)| {
                    let r: Vec<f32> = mn.iter().zip(mx).map(|(a, b)| (b - a) * 0.5).collect();
                    let c = mn.iter().zip(&r).map(|(a, r)| a + r).collect();
                    (c, r.iter().map(|r| r * (1.0 + 1e-6)).collect())
                })
                .collect()
        })
        .collect();
    let summary = |p: usize, li: usize| (&centred[li][p].0[..], &centred[li][p].1[..]);
    let mut bounds = ScoreRows::default();
    probe.page_bounds(&ctx(None), PAGES, &summary, &mut bounds);
    let mut exact = ScoreRows::default();
    let extra = ExtraKeys {
        n: PAGES * KEYS,
        k: &keys,
    };
    probe.key_rows(&ctx(Some(extra)), &mut exact);
    assert_eq!(bounds.n_rows(), layers.len() * KV);
    assert_eq!(exact.n_rows(), bounds.n_rows());
    for r in 0..bounds.n_rows() {
        for p in 0..PAGES {
            let best = (0..KEYS).fold(f32::NEG_INFINITY, |m, k| m.max(exact.row(r)[p * KEYS + k]));
            let bound = bounds.row(r)[p];
            assert!(
                bound >= best - 1e-4,
                "row {r} page {p}: bound {bound} < exact {best}"
            );
            // the best corner reaches the bound: it is tight, not just safe
            assert!(
                bound <= best + 1e-3 * (1.0 + best.abs()),
                "row {r} page {p}: bound {bound} vs {best}"
            );
        }
    }
}

/// The query of step `pos` in `a_restored_sequence_continues_exactly`: away from the passage,
/// then towards it, away again, towards it again.
fn seeks_at(pos: i32) -> bool {
    (300..330).contains(&pos) || (360..390).contains(&pos)
}

/// Runs steps 0..400 and returns the positions held after each step from `from` on and the
/// final counters; with `save_at`, the sequence is saved after that step and restored into a
/// fresh context on the same host, which runs the rest.
fn run_restoring(spec: &str, from: i32, save_at: Option<i32>) -> (Vec<Vec<i32>>, Vec<u64>) {
    let (mut engine, mut host, mut rng) = setup(spec);
    let mut held = Vec::new();
    for pos in 0..400 {
        step(&mut engine, &mut host, &mut rng, pos, seeks_at(pos));
        if save_at == Some(pos) {
            let blob = engine.save_seq(0).unwrap();
            engine = Engine::new(Params::parse(spec).unwrap(), &mut host);
            engine.load_seq(0, &blob).unwrap();
        }
        if pos >= from {
            held.push(host.positions(0));
        }
    }
    let st = engine.stats(0);
    let counters = vec![
        st.cells_in_use as u64,
        st.evicted,
        st.compress_events,
        st.archived,
        st.recalled,
        st.archive_dropped,
        st.archive_bytes,
    ];
    (held, counters)
}

#[test]
fn a_restored_sequence_continues_exactly() {
    // saved at any step (before the passage returns, while it is being recalled, between the
    // two returns) and restored into a fresh context, the sequence keeps and recalls exactly the
    // cells the uninterrupted one does, and reports the same counters
    let spec = spec(",archive=96,recall_every=1");
    for save_at in [290, 302, 310, 340, 365] {
        let (want, want_counters) = run_restoring(&spec, save_at + 1, None);
        assert!(
            want_counters[4] > 0,
            "nothing recalled: the test checks nothing"
        );
        let (got, got_counters) = run_restoring(&spec, save_at + 1, Some(save_at));
        for (i, (w, g)) in want.iter().zip(&got).enumerate() {
            assert_eq!(
                w,
                g,
                "saved after {save_at}: cells differ at {}",
                save_at + 1 + i as i32
            );
        }
        assert_eq!(
            want_counters, got_counters,
            "saved after {save_at}: counters"
        );
    }
}
