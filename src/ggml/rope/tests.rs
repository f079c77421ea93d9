//! RoPE against a transcription of ggml's CPU code, hand-computed values and its properties.

use super::*;
use proptest::prelude::*;

/// A transcription of ggml's CPU path, loop for loop: the cos/sin cache is filled for all
/// `ne0` values with the running theta, then `rotate_pairs` walks `i0` in steps of two with
/// `ic = i0` (NORM, scale 1) or `ic = i0/2` (NEOX), and the tail is copied. Products that
/// GCC fuses in a GGML_FMA build are written as `mul_add` (see the `rope` module docs).
#[allow(clippy::manual_clamp)] // spelled as ggml's MIN/MAX on purpose
fn ggml_reference(r: &Rope, src: &[f32], pos: i32) -> Vec<f32> {
    let ne0 = src.len();
    let n_dims = r.n_dims;
    let theta_scale = r.freq_base.powf(-2.0f32 / n_dims as f32);
    let corr = ref_corr_dims(
        n_dims as i32,
        r.n_ctx_orig,
        r.freq_base,
        r.beta_fast,
        r.beta_slow,
    );
    let mut cache = vec![0f32; ne0];
    let mut theta = pos as i64 as f32;
    for i0 in (0..ne0).step_by(2) {
        let ff = r
            .freq_factors
            .as_ref()
            .and_then(|f| f.get(i0 / 2).copied())
            .unwrap_or(1.0);
        let theta_extrap = theta / ff;
        let theta_interp = r.freq_scale * theta_extrap;
        let mut th = theta_interp;
        let mut mscale = r.attn_factor;
        if r.ext_factor != 0.0 {
            let y = ((i0 / 2) as f32 - corr[0]) / f32::max(0.001, corr[1] - corr[0]);
            let ramp = 1.0 - f32::min(1.0, f32::max(0.0, y));
            let ramp_mix = ramp * r.ext_factor;
            // GCC with -mfma contracts `a*b + c*d` to fma(a, b, c*d)
            th = theta_interp.mul_add(1.0 - ramp_mix, theta_extrap * ramp_mix);
            mscale *= 0.1f32.mul_add((1.0f32 / r.freq_scale).ln(), 1.0f32);
        }
        cache[i0] = th.cos() * mscale;
        cache[i0 + 1] = th.sin() * mscale;
        theta *= theta_scale;
    }
    let (n_offset, scale) = match r.mode {
        RopeMode::Norm => (1, 1),
        RopeMode::Neox => (n_dims / 2, 2),
    };
    let mut dst = src.to_vec();
    for i0 in (0..n_dims).step_by(2) {
        let ic = i0 / scale;
        let (c, s) = (cache[i0], cache[i0 + 1]);
        let (x0, x1) = (src[ic], src[ic + n_offset]);
        dst[ic] = x0.mul_add(c, -(x1 * s));
        dst[ic + n_offset] = x0.mul_add(s, x1 * c);
    }
    dst
}

fn ref_corr_dims(n_dims: i32, n_ctx_orig: i32, base: f32, fast: f32, slow: f32) -> [f32; 2] {
    let dim = |n_rot: f32| {
        n_dims as f32 * (n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln()
            / (2.0 * base.ln())
    };
    [
        f32::max(0.0, dim(fast).floor()),
        f32::min((n_dims - 1) as f32, dim(slow).ceil()),
    ]
}

fn yarn(n_dims: usize, mode: RopeMode) -> Rope {
    Rope {
        n_ctx_orig: 4096,
        freq_scale: 0.25,
        ext_factor: 1.0,
        attn_factor: 1.0,
        ..Rope::plain(n_dims, mode, 10000.0)
    }
}

fn sample(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as f32 + 1.0) * (0.37 + seed as f32 * 0.11)).sin() * 2.0)
        .collect()
}

fn dotp(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum()
}

/// Every flavour the round-trip property must hold for.
fn configs() -> Vec<(Rope, usize)> {
    let ff: Vec<f32> = (0..32).map(|i| 1.0 + i as f32 * 0.25).collect();
    let mut v = Vec::new();
    for mode in [RopeMode::Norm, RopeMode::Neox] {
        v.push((Rope::plain(64, mode, 10000.0), 64));
        v.push((Rope::plain(32, mode, 500000.0), 64)); // partial rotary
        v.push((
            Rope {
                freq_factors: Some(ff.clone()),
                ..Rope::plain(64, mode, 1e6)
            },
            64,
        ));
        v.push((yarn(128, mode), 128));
        v.push((
            Rope {
                attn_factor: 0.7,
                freq_scale: 0.5,
                ..yarn(48, mode)
            },
            80,
        ));
    }
    v
}

fn assert_close(a: &[f32], b: &[f32], tol: f32, what: &str) {
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "{what}: [{i}] {x} vs {y}"
        );
    }
}

#[test]
fn mode_from_ggml_accepts_only_norm_and_neox() {
    assert_eq!(Rope::mode_from_ggml(0), Some(RopeMode::Norm));
    assert_eq!(Rope::mode_from_ggml(2), Some(RopeMode::Neox));
    for m in [1, 8, 24, 40, -1] {
        assert_eq!(Rope::mode_from_ggml(m), None, "mode {m}");
    }
}

#[test]
fn hand_computed_norm_one_radian() {
    let r = Rope::plain(2, RopeMode::Norm, 10000.0);
    let mut x = [1.0f32, 0.0, 5.0];
    r.rotate(&mut x, 1);
    assert!(
        (x[0] - 1f32.cos()).abs() < 1e-6 && (x[1] - 1f32.sin()).abs() < 1e-6,
        "{x:?}"
    );
    assert_eq!(x[2], 5.0, "dims >= n_dims untouched");
    assert!((x[0] - 0.540_302_3).abs() < 1e-6 && (x[1] - 0.841_470_96).abs() < 1e-6);
}

#[test]
fn hand_computed_pairing_norm_vs_neox() {
    // n_dims 4, base 10000: pair 0 turns by pos, pair 1 by pos * 10000^(-1/2) = pos / 100.
    let x = [1.0f32, 2.0, 3.0, 4.0, 9.0, -9.0];
    let (a0, a1) = (2.0f64, 0.02f64);
    let rot = |x0: f32, x1: f32, a: f64| {
        let (s, c) = a.sin_cos();
        (
            (x0 as f64 * c - x1 as f64 * s) as f32,
            (x0 as f64 * s + x1 as f64 * c) as f32,
        )
    };
    let mut n = x;
    Rope::plain(4, RopeMode::Norm, 10000.0).rotate(&mut n, 2);
    let ((p0, p1), (p2, p3)) = (rot(1.0, 2.0, a0), rot(3.0, 4.0, a1));
    assert_close(&n, &[p0, p1, p2, p3, 9.0, -9.0], 1e-6, "norm");
    let mut g = x;
    Rope::plain(4, RopeMode::Neox, 10000.0).rotate(&mut g, 2);
    let ((q0, q2), (q1, q3)) = (rot(1.0, 3.0, a0), rot(2.0, 4.0, a1));
    assert_close(&g, &[q0, q1, q2, q3, 9.0, -9.0], 1e-6, "neox");
    assert_ne!(n, g);
}

#[test]
fn ggml_constants() {
    let r = yarn(128, RopeMode::Neox);
    assert_eq!(r.theta_scale(), 10000f32.powf(-2.0 / 128.0));
    // 128*ln(4096/(32*2pi))/(2 ln 1e4) = 20.94 -> 20; with beta 1: 45.03 -> 46
    assert_eq!(r.corr_dims(), [20.0, 46.0]);
    let small = Rope {
        n_ctx_orig: 2048,
        ..yarn(16, RopeMode::Norm)
    };
    // 16*ln(2048/(64 pi))/(2 ln 1e4) = 2.016 -> 2; 16*ln(2048/(2 pi))/(2 ln 1e4) = 5.03 -> 6
    assert_eq!(small.corr_dims(), [2.0, 6.0]);
    let wide = Rope {
        n_ctx_orig: 1 << 30,
        ..yarn(16, RopeMode::Norm)
    };
    assert_eq!(wide.corr_dims()[1], 15.0, "clamped to n_dims - 1");
    let expect = 1.0 + 0.1 * 4f64.ln();
    assert!((r.mscale() as f64 - expect).abs() < 1e-6);
    assert_eq!(
        Rope {
            ext_factor: 0.0,
            attn_factor: 0.5,
            ..r.clone()
        }
        .mscale(),
        0.5
    );
    assert_eq!(
        Rope {
            attn_factor: 2.0,
            ..r
        }
        .mscale(),
        2.0 * (1.0 + 0.1 * 4f32.ln())
    );
}

#[test]
fn yarn_ramp_shape() {
    assert_eq!(yarn_ramp(20.0, 46.0, 0), 1.0);
    assert_eq!(yarn_ramp(20.0, 46.0, 20), 1.0);
    assert_eq!(yarn_ramp(20.0, 46.0, 33), 0.5);
    assert_eq!(yarn_ramp(20.0, 46.0, 46), 0.0);
    assert_eq!(yarn_ramp(5.0, 5.0, 5), 1.0);
    assert_eq!(yarn_ramp(5.0, 5.0, 6), 0.0);
}

#[test]
fn yarn_magnitude_is_applied_and_undone() {
    let r = yarn(64, RopeMode::Norm);
    let x = sample(64, 3);
    let mut y = x.clone();
    r.rotate(&mut y, 1234);
    let ratio = (dotp(&y, &y) / dotp(&x, &x)).sqrt();
    assert!(
        (ratio - (1.0 + 0.1 * 4f64.ln())).abs() < 1e-5,
        "ratio {ratio}"
    );
    r.unrotate(&mut y, 1234);
    assert_close(&y, &x, 2e-6, "yarn round trip");
}

#[test]
fn bit_exact_with_ggml_transcription() {
    for (r, hd) in configs() {
        for pos in [0i32, 1, 7, 100, 4095, 32768, 1_000_000, -5] {
            let x = sample(hd, pos.unsigned_abs() % 13);
            let mut got = x.clone();
            r.rotate(&mut got, pos);
            let want = ggml_reference(&r, &x, pos);
            let gb: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
            let wb: Vec<u32> = want.iter().map(|v| v.to_bits()).collect();
            assert_eq!(gb, wb, "{r:?} hd={hd} pos={pos}");
        }
    }
}

#[test]
fn yarn_angles_blend_interp_and_extrap() {
    let r = yarn(128, RopeMode::Neox);
    let angles: Vec<f32> = r.angles(1000).collect();
    let plain: Vec<f32> = Rope::plain(128, RopeMode::Neox, 10000.0)
        .angles(1000)
        .collect();
    assert_eq!(
        angles[0], plain[0],
        "below low corr dim: pure extrapolation"
    );
    assert_eq!(
        angles[63],
        plain[63] * 0.25,
        "above high corr dim: pure interpolation"
    );
    assert!(angles[33] > plain[33] * 0.25 && angles[33] < plain[33]);
}

#[test]
fn partial_rotary_leaves_tail_untouched() {
    let r = Rope::plain(32, RopeMode::Neox, 10000.0);
    let x = sample(64, 5);
    let mut y = x.clone();
    r.rotate(&mut y, 77);
    assert_eq!(&y[32..], &x[32..]);
    assert_ne!(&y[..32], &x[..32]);
    r.unrotate(&mut y, 77);
    assert_eq!(&y[32..], &x[32..]);
}

#[test]
fn round_trip_all_configs() {
    for (r, hd) in configs() {
        for pos in [0, 3, 511, 40000, 1_000_000] {
            let x = sample(hd, 2);
            let mut y = x.clone();
            r.rotate(&mut y, pos);
            if pos != 0 {
                assert_ne!(y, x);
            }
            r.unrotate(&mut y, pos);
            assert_close(&y, &x, 2e-6, &format!("{r:?} pos {pos}"));
        }
    }
}

#[test]
fn memo_rotations_are_the_ropes_own() {
    let mut memo = RotationMemo::default();
    for (id, (r, hd)) in configs().into_iter().enumerate() {
        for pos in [0, 7, 40000] {
            let x = sample(hd, 3);
            let (mut a, mut b) = (x.clone(), x.clone());
            r.rotate(&mut a, pos);
            r.rotate_with(&mut b, memo.get(id, &r, pos));
            assert_eq!(a, b, "{r:?} pos {pos}: memo rotation differs");
            r.unrotate_with(&mut b, memo.get_inverse(id, &r, pos));
            r.unrotate(&mut a, pos);
            assert_eq!(a, b, "{r:?} pos {pos}: memo inverse differs");
        }
    }
    // ids are trusted within a call (the engine gives equal RoPEs one id): a cleared memo
    // forgets them, so another RoPE may take an id over
    let r1 = &configs()[1].0;
    memo.clear();
    let mut fresh = Vec::new();
    r1.rotation(7, &mut fresh);
    assert_eq!(memo.get(0, r1, 7), &fresh[..]);
}

#[test]
fn relative_position_property() {
    for mode in [RopeMode::Norm, RopeMode::Neox] {
        let ff: Vec<f32> = (0..32).map(|i| 1.0 + i as f32 * 0.1).collect();
        let rs = [
            Rope::plain(64, mode, 10000.0),
            Rope {
                freq_scale: 0.5,
                freq_factors: Some(ff),
                ..Rope::plain(64, mode, 1e4)
            },
        ];
        for r in rs {
            let (q, k) = (sample(64, 1), sample(64, 2));
            let scale = dotp(&q, &q).sqrt() * dotp(&k, &k).sqrt();
            let score = |m: i32, n: i32| {
                let (mut rq, mut rk) = (q.clone(), k.clone());
                r.rotate(&mut rq, m);
                r.rotate(&mut rk, n);
                dotp(&rq, &rk)
            };
            for (m, n, t) in [(5, 2, 100), (300, 17, 1000), (40, 40, 777), (2, 9, 50)] {
                let (s0, s1) = (score(m, n), score(m + t, n + t));
                assert!(
                    (s0 - s1).abs() < 1e-3 * scale,
                    "{mode:?} {m},{n},+{t}: {s0} {s1}"
                );
            }
            // and the score genuinely depends on the offset
            assert!((score(5, 2) - score(50, 2)).abs() > 1e-2 * scale);
        }
    }
}

proptest! {
    #[test]
    fn prop_round_trip(
        neox in any::<bool>(),
        half_dims in 1usize..40,
        extra in 0usize..8,
        base in 100.0f32..1e6,
        yarn_on in any::<bool>(),
        fscale in 0.05f32..1.0,
        from in -1000i32..200_000,
        seed in 0u32..1000,
    ) {
        let mode = if neox { RopeMode::Neox } else { RopeMode::Norm };
        let n_dims = 2 * half_dims;
        let hd = n_dims + 2 * extra;
        let r = Rope {
            n_ctx_orig: 8192,
            freq_scale: fscale,
            ext_factor: if yarn_on { 1.0 } else { 0.0 },
            ..Rope::plain(n_dims, mode, base)
        };
        let x = sample(hd, seed);
        let mut y = x.clone();
        r.rotate(&mut y, from);
        r.unrotate(&mut y, from);
        for (a, b) in y.iter().zip(&x) {
            prop_assert!((a - b).abs() <= 4e-6 * (1.0 + b.abs()));
        }
    }
}
