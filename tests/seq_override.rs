//! A sequence's own budget and policy (`beaconkv_seq_override`): a sequence with a smaller budget
//! stays within it while another keeps the context's, its policy decides what it keeps, the
//! setting lasts until the sequence is removed, and bad values are refused naming the field.

use std::ffi::{c_char, CStr, CString};

use beaconkv::ffi::*;
use beaconkv::testing::config::{Params, Policy};
use beaconkv::testing::engine::Engine;
use beaconkv::testing::fake_host::{FakeHost, Lcg};
use half::f16;

const D: usize = 16;

/// One decode call: one token for each of `seqs` at `pos`, random K and queries.
fn step(engine: &mut Engine, host: &mut FakeHost, rng: &mut Lcg, seqs: &[i32], pos: i32) {
    let n = vec![1; seqs.len()];
    engine.before_batch(host, seqs, &n, None).unwrap();
    for (row, &s) in seqs.iter().enumerate() {
        let cell = host.place(s, pos);
        for l in &mut host.layers {
            for k in &mut l.k[cell * D..(cell + 1) * D] {
                *k = f16::from_f32(rng.next());
            }
            for q in &mut l.q[row * 2 * D..(row + 1) * 2 * D] {
                *q = rng.next();
            }
        }
    }
    let rows: Vec<i32> = (0..seqs.len() as i32).collect();
    engine
        .after_ubatch(host, &vec![pos; seqs.len()], seqs, &rows)
        .unwrap();
    engine.after_decode(host).unwrap();
}

#[test]
fn a_smaller_budget_holds_for_its_sequence_only() {
    let params = Params::parse("beacon,budget=128,window=8").unwrap();
    let mut host = FakeHost::new(2, 2, 1, D, 512, 64).with_rope();
    let mut engine = Engine::new(params, &mut host);
    engine.set_seq_override(1, Some(48), None, None).unwrap();
    let mut rng = Lcg(5);
    let (mut peak0, mut peak1) = (0, 0);
    for p in 0..400 {
        step(&mut engine, &mut host, &mut rng, &[0, 1], p);
        peak0 = peak0.max(host.count(0));
        peak1 = peak1.max(host.count(1));
    }
    assert_eq!(peak1, 48, "sequence 1 filled and kept its own budget");
    assert_eq!(peak0, 128, "sequence 0 kept the context's");
    assert_eq!(engine.seq_params(1).budget, 48);
    assert_eq!(engine.seq_params(1).budget_min, 0, "min stays budget*7/8");
    assert_eq!(engine.seq_params(0), *engine.params());
    // a pass leaves the sequence's own min (48*7/8 = 42)
    assert!(
        host.count(1) >= 42 && host.count(1) <= 48,
        "{}",
        host.count(1)
    );

    // back to the context's settings: the sequence grows to the context's budget again
    engine.set_seq_override(1, None, None, None).unwrap();
    assert_eq!(engine.seq_params(1), *engine.params());
    for p in 400..600 {
        step(&mut engine, &mut host, &mut rng, &[0, 1], p);
        assert!(host.count(1) <= 128);
    }
    assert!(host.count(1) > 100, "{}", host.count(1));
}

#[test]
fn the_setting_lasts_until_the_sequence_is_removed() {
    let params = Params::parse("beacon,budget=128,window=8").unwrap();
    let mut host = FakeHost::new(1, 2, 1, D, 512, 64).with_rope();
    let mut engine = Engine::new(params, &mut host);
    let mut rng = Lcg(9);
    let own = (Some(64), Some(Policy::Streaming));
    engine.set_seq_override(0, own.0, own.1, None).unwrap();
    for p in 0..100 {
        step(&mut engine, &mut host, &mut rng, &[0], p);
        assert!(host.count(0) <= 64);
    }
    // a removed tail (prompt reuse) and a restored state keep it
    engine.seq_removed(0, 90, -1);
    host.remove(0, 90, -1);
    let saved = engine.save_seq(0).unwrap();
    engine.load_seq(0, &saved).unwrap();
    assert_eq!(engine.seq_params(0).budget, 64);
    assert_eq!(engine.seq_params(0).policy, Policy::Streaming);
    for p in 90..200 {
        step(&mut engine, &mut host, &mut rng, &[0], p);
        assert!(host.count(0) <= 64);
    }
    // streaming (no prompt here: every call brought one token): the newest cells only
    let kept = host.positions(0);
    let newest: Vec<i32> = (200 - kept.len() as i32..200).collect();
    assert_eq!(kept, newest);
    // a whole copy passes it on
    engine.seq_copied(0, 2, -1, -1);
    assert_eq!(engine.seq_params(2).budget, 64);
    // removing the whole sequence forgets it
    engine.seq_removed(0, -1, -1);
    host.remove(0, -1, -1);
    assert_eq!(engine.seq_params(0), *engine.params());
    for p in 0..200 {
        step(&mut engine, &mut host, &mut rng, &[0], p);
    }
    assert!(
        host.count(0) > 100,
        "the context's budget again: {}",
        host.count(0)
    );
}

/// No RoPE: keys aligned with every query (at positions 30, 31, 100) survive under `beacon`;
/// `own` runs sequence 0 with another policy. Returns the planted positions kept.
fn planted_kept(spec: &str, own: Option<Policy>) -> Vec<i32> {
    let params = Params::parse(spec).unwrap();
    let mut host = FakeHost::new(2, 2, 1, D, 512, 64);
    let mut engine = Engine::new(params, &mut host);
    engine.set_seq_override(0, None, own, None).unwrap();
    let mut rng = Lcg(3);
    let planted = [30, 31, 100];
    for p in 0..400i32 {
        engine.before_batch(&mut host, &[0], &[1], None).unwrap();
        let cell = host.place(0, p);
        for l in &mut host.layers {
            for (i, k) in l.k[cell * D..(cell + 1) * D].iter_mut().enumerate() {
                let v = match (planted.contains(&p), i) {
                    (true, 0) => 4.0,
                    (true, _) | (false, 0) => 0.0,
                    _ => 0.3 * rng.next(),
                };
                *k = f16::from_f32(v);
            }
            for q_head in l.q[..2 * D].chunks_exact_mut(D) {
                for (i, q) in q_head.iter_mut().enumerate() {
                    *q = if i == 0 { 1.0 } else { 0.0 } + 0.1 * rng.next();
                }
            }
        }
        engine.after_ubatch(&mut host, &[p], &[0], &[0]).unwrap();
        engine.after_decode(&mut host).unwrap();
        assert!(host.count(0) <= 64);
    }
    let kept = host.positions(0);
    planted.into_iter().filter(|p| kept.contains(p)).collect()
}

#[test]
fn the_sequence_policy_decides_what_is_kept() {
    let spec = "beacon,budget=64,min=48,window=8,prefix=4,beacons=4,recent=4";
    assert_eq!(planted_kept(spec, None), [30, 31, 100], "beacon keeps them");
    assert_eq!(planted_kept(spec, Some(Policy::Beacon)), [30, 31, 100]);
    assert_eq!(planted_kept(spec, Some(Policy::Streaming)), [] as [i32; 0]);
    // random keeps what its seeded hash keeps, whatever the keys hold
    let random = planted_kept(spec, Some(Policy::Random));
    assert_ne!(random, [30, 31, 100]);
    assert_eq!(
        random,
        planted_kept(&spec.replace("beacon,", "random,"), None)
    );
}

#[test]
fn bad_values_are_refused_and_nothing_changes() {
    let params = Params::parse("beacon,budget=256,window=16").unwrap();
    let mut host = FakeHost::new(1, 2, 1, D, 512, 64).with_rope();
    let mut engine = Engine::new(params, &mut host);
    engine.set_seq_override(0, Some(100), None, None).unwrap();
    let e = engine
        .set_seq_override(0, Some(257), None, None)
        .unwrap_err();
    assert_eq!(e.key, "budget");
    // min = budget*7/8 must hold window + 1 = 17: 20*7/8 = 17
    assert!(e.message.ends_with("allowed range 20..=256"), "{e}");
    let e = engine
        .set_seq_override(0, Some(19), None, None)
        .unwrap_err();
    assert_eq!(e.key, "budget");
    let e = engine
        .set_seq_override(0, None, Some(Policy::Recent), None)
        .unwrap_err();
    assert_eq!(e.key, "policy");
    assert!(
        e.message
            .ends_with("allowed here: beacon, streaming, random"),
        "{e}"
    );
    let e = engine
        .set_seq_override(0, None, Some(Policy::None), Some(4096))
        .unwrap_err();
    assert_eq!(e.key, "policy");
    assert_eq!(engine.seq_params(0).budget, 100, "unchanged");
    // none where the sequence cannot outgrow the budget
    engine
        .set_seq_override(0, None, Some(Policy::None), Some(256))
        .unwrap();
    assert_eq!(engine.seq_params(0).policy, Policy::None);
}

// ---- the C functions ---------------------------------------------------------------------

fn c_params(spec: &str) -> beaconkv_params {
    let mut p = beaconkv_params_default();
    let spec = CString::new(spec).unwrap();
    assert_eq!(
        unsafe { beaconkv_params_parse(spec.as_ptr(), &mut p, std::ptr::null_mut(), 0) },
        BEACONKV_OK
    );
    p
}

fn check(p: &beaconkv_params, budget: i32, policy: i32, n_ctx: u32) -> (i32, String) {
    let mut err = [0 as c_char; 512];
    let rc = unsafe {
        beaconkv_seq_override_check(p, budget, policy, n_ctx, err.as_mut_ptr(), err.len())
    };
    let msg = unsafe { CStr::from_ptr(err.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    (rc, msg)
}

#[test]
fn c_check_names_the_field_and_the_allowed_values() {
    let p = c_params("beacon,budget=1024");
    assert_eq!(check(&p, 0, -1, 0), (BEACONKV_OK, String::new()));
    assert_eq!(check(&p, 512, Policy::Streaming as i32, 0).0, BEACONKV_OK);
    let (rc, msg) = check(&p, 50, -1, 0);
    assert_eq!(rc, BEACONKV_ERR_INVALID);
    assert!(
        msg.starts_with("beaconkv: budget: 50 is below")
            && msg.ends_with("allowed range 75..=1024"),
        "{msg}"
    );
    let (rc, msg) = check(&p, 2048, -1, 0);
    assert_eq!(rc, BEACONKV_ERR_INVALID);
    assert!(msg.starts_with("beaconkv: budget: 2048 exceeds"), "{msg}");
    let (rc, msg) = check(&p, -3, -1, 0);
    assert_eq!(rc, BEACONKV_ERR_INVALID);
    assert!(
        msg.starts_with("beaconkv: budget: -3 is negative; allowed range 75..=1024"),
        "{msg}"
    );
    let (rc, msg) = check(&p, 0, 9, 0);
    assert_eq!(rc, BEACONKV_ERR_INVALID);
    assert!(
        msg.starts_with("beaconkv: policy: 9 is not a policy"),
        "{msg}"
    );
    let (rc, msg) = check(&p, 0, Policy::Recent as i32, 0);
    assert_eq!(rc, BEACONKV_ERR_INVALID);
    assert!(
        msg.starts_with("beaconkv: policy: recent scores with"),
        "{msg}"
    );
    assert_eq!(
        check(&p, 0, Policy::None as i32, 0).0,
        BEACONKV_ERR_INVALID,
        "unknown context"
    );
    assert_eq!(check(&p, 0, Policy::None as i32, 1024).0, BEACONKV_OK);
    // NULL params; a NULL error buffer is allowed
    assert_eq!(
        unsafe { beaconkv_seq_override_check(std::ptr::null(), 0, -1, 0, std::ptr::null_mut(), 0) },
        BEACONKV_ERR_NULL
    );
    assert_eq!(
        unsafe { beaconkv_seq_override_check(&p, 50, -1, 0, std::ptr::null_mut(), 0) },
        BEACONKV_ERR_INVALID
    );
}

#[test]
fn c_override_sets_reads_and_refuses() {
    let mut host = Box::new(FakeHost::new(1, 2, 1, D, 512, 64).with_rope());
    let table = host.c_host();
    let p = c_params("beacon,budget=256,window=16");
    let ctx = unsafe { beaconkv_context_new(&p, &table, std::ptr::null_mut(), 0) };
    assert!(!ctx.is_null());
    let seq_params = |seq| {
        let mut out = beaconkv_params_default();
        assert_eq!(
            unsafe { beaconkv_seq_params(ctx, seq, &mut out) },
            BEACONKV_OK
        );
        out
    };
    assert_eq!(
        unsafe { beaconkv_seq_override(ctx, 3, 128, Policy::Random as i32, 0) },
        BEACONKV_OK
    );
    let own = seq_params(3);
    assert_eq!((own.budget, own.policy), (128, Policy::Random as i32));
    assert_eq!(
        seq_params(4).budget,
        256,
        "another sequence keeps the context's"
    );
    assert_eq!(
        unsafe { beaconkv_seq_override(ctx, 3, 512, -1, 0) },
        BEACONKV_ERR_INVALID
    );
    let msg = unsafe { CStr::from_ptr(beaconkv_last_error(ctx)) }
        .to_string_lossy()
        .into_owned();
    assert!(
        msg.starts_with("beaconkv_seq_override: beaconkv: budget: 512 exceeds"),
        "{msg}"
    );
    assert_eq!(seq_params(3).budget, 128, "unchanged");
    assert_eq!(
        unsafe { beaconkv_seq_override(ctx, -1, 0, -1, 0) },
        BEACONKV_ERR_INVALID
    );
    assert_eq!(
        unsafe { beaconkv_seq_override(ctx, 3, 0, -1, 0) },
        BEACONKV_OK
    );
    assert_eq!(seq_params(3).budget, 256, "back to the context's");
    unsafe { beaconkv_seq_removed(ctx, 3, -1, -1) };
    // NULL context or out
    assert_eq!(
        unsafe { beaconkv_seq_override(std::ptr::null_mut(), 0, 0, -1, 0) },
        BEACONKV_ERR_NULL
    );
    assert_eq!(
        unsafe { beaconkv_seq_params(std::ptr::null(), 0, &mut beaconkv_params_default()) },
        BEACONKV_ERR_NULL
    );
    assert_eq!(
        unsafe { beaconkv_seq_params(ctx, 0, std::ptr::null_mut()) },
        BEACONKV_ERR_NULL
    );
    unsafe { beaconkv_context_free(ctx) };
    drop(host);
}
