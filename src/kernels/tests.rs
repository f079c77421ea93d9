//! The kernels against their portable versions and the definitions.

use super::dot::{dot, max_dot_generic};
use super::lanes::max_dot_lanes_generic;
use super::*;

fn data(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (s >> 8) as f32 / (1 << 24) as f32 - 0.5
        })
        .collect()
}

#[test]
fn matches_generic_for_all_query_counts() {
    for d in [8, 64, 128, 256, 12] {
        for nq in 0..11 {
            let q = data(nq * d, 1 + nq as u32);
            let k = data(d, 99);
            let want = max_dot_generic(&q, &k);
            let got = max_dot(&q, &k);
            if nq == 0 {
                assert_eq!(got, f32::NEG_INFINITY);
            } else {
                assert!(
                    (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                    "d={d} nq={nq}: {got} vs {want}"
                );
            }
        }
    }
}

#[test]
fn sum_exp_minus_matches_f32_exp() {
    // the range probability scoring feeds it: logits minus their largest, so <= 0
    for n in [0, 1, 7, 8, 9, 1003] {
        let row: Vec<f32> = (0..n)
            .map(|i| -((i * 37 % 101) as f32) * 0.4 + 2.0)
            .collect();
        let want: f64 = row.iter().map(|&v| ((v - 2.0) as f64).exp()).sum();
        let got = sum_exp_minus(&row, 2.0) as f64;
        assert!(
            (got - want).abs() <= 1e-6 * want.max(1e-30),
            "n={n}: {got} vs {want}"
        );
    }
    // lane by lane, without large terms hiding small errors
    for k in 0..800 {
        let x = -(k as f32) * 0.11;
        let (got, want) = (sum_exp_minus(&[x; 8], 0.0) / 8.0, x.exp());
        if want > 1e-37 {
            assert!(
                ((got - want) / want).abs() <= 4e-7,
                "x={x}: {got} vs {want}"
            );
        } else {
            assert!(got < 2e-37, "x={x}: {got}");
        }
    }
}

#[test]
fn add_exp_minus_adds_scaled_exponentials() {
    for n in [0, 1, 7, 8, 9, 1003] {
        let row: Vec<f32> = (0..n).map(|i| -((i * 37 % 101) as f32) * 0.4).collect();
        let init = data(n, 5);
        let mut acc = init.clone();
        add_exp_minus(&row, -1.5, 0.25, &mut acc);
        for i in 0..n {
            let want = init[i] as f64 + 0.25 * ((row[i] + 1.5) as f64).exp();
            assert!(
                (acc[i] as f64 - want).abs() <= 1e-6 * want.abs().max(1.0),
                "n={n} i={i}: {} vs {want}",
                acc[i]
            );
        }
    }
}

#[test]
fn dot_tile_all_gives_every_logit() {
    for (d, nq) in [(64, 0), (64, 1), (64, 7), (64, 13), (8, 6), (12, 5)] {
        let q = data(nq * d, 3 + nq as u32);
        let keys = data(TILE * d, 9);
        let mut kt = vec![0.0; TILE * d];
        transpose_tile(&keys, d, &mut kt);
        let mut out = vec![f32::NAN; nq * TILE];
        dot_tile_all(&q, &kt, &mut out);
        for i in 0..nq {
            for t in 0..TILE {
                let want = dot(&q[i * d..(i + 1) * d], &keys[t * d..(t + 1) * d]);
                let got = out[i * TILE + t];
                assert!(
                    (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                    "d={d} q={i} t={t}"
                );
            }
        }
    }
}

#[test]
fn dots_match_the_scalar_dot() {
    for d in [8, 64, 12] {
        for nq in 0..9 {
            let q = data(nq * d, 7 + nq as u32);
            let k = data(d, 5);
            let mut out = vec![0.0; nq];
            dots(&q, &k, &mut out);
            for (i, o) in out.iter().enumerate() {
                let want = dot(&q[i * d..(i + 1) * d], &k);
                assert!(
                    (o - want).abs() <= 1e-5 * (1.0 + want.abs()),
                    "d={d} nq={nq} i={i}"
                );
            }
        }
    }
}

#[test]
fn dot_fast_matches_the_scalar_dot() {
    for d in [8, 16, 64, 12, 256] {
        let (a, b) = (data(d, 1), data(d, 2));
        let (got, want) = (dot_fast(&a, &b), dot(&a, &b));
        assert!((got - want).abs() <= 1e-5 * (1.0 + want.abs()), "d={d}");
    }
}

#[test]
fn picks_the_largest_not_the_first() {
    let k = vec![1.0f32; 64];
    let mut q = vec![0.0f32; 64 * 6];
    q[64 * 4..64 * 5].iter_mut().for_each(|v| *v = 2.0); // query 4 dots to 128
    q[64 * 5] = -1.0;
    assert_eq!(max_dot(&q, &k), 128.0);
}

#[test]
fn lanes_match_generic_and_per_query_dots() {
    for (nq, da, db, n) in [
        (12usize, 64usize, 64usize, 8usize),
        (3, 8, 8, 5),
        (9, 16, 0, 1),
        (24, 256, 256, 8),
    ] {
        let nqp = nq.next_multiple_of(QUERY_LANES);
        let queries: Vec<Vec<f32>> = (0..nq)
            .map(|i| {
                (0..da + db)
                    .map(|j| (((i * 31 + j * 7) % 23) as f32 - 11.0) * 0.05)
                    .collect()
            })
            .collect();
        let mut qt = vec![0.0f32; (da + db) * nqp];
        for (i, q) in queries.iter().enumerate() {
            for (j, &v) in q.iter().enumerate() {
                qt[j * nqp + i] = v;
            }
        }
        // padding columns hold large values: they must not count
        for j in 0..da + db {
            for i in nq..nqp {
                qt[j * nqp + i] = 1e6;
            }
        }
        let keys: Vec<Vec<f32>> = (0..n)
            .map(|t| {
                (0..da + db)
                    .map(|j| (((t * 13 + j * 5) % 17) as f32 - 8.0) * 0.1)
                    .collect()
            })
            .collect();
        let a: Vec<&[f32]> = keys.iter().map(|k| &k[..da]).collect();
        let b: Vec<&[f32]> = keys.iter().map(|k| &k[da..]).collect();
        let mut out = vec![0.0f32; n];
        let mut reference = vec![0.0f32; n];
        max_dot_lanes(&qt, nq, &a, &b, &mut out);
        max_dot_lanes_generic(&qt, nq, &a, &b, &mut reference);
        for t in 0..n {
            let exact = queries
                .iter()
                .map(|q| q.iter().zip(&keys[t]).map(|(x, k)| x * k).sum::<f32>())
                .fold(f32::NEG_INFINITY, f32::max);
            assert!(
                (out[t] - exact).abs() < 1e-3 * (1.0 + exact.abs()),
                "{nq} {da} {t}"
            );
            assert!((reference[t] - exact).abs() < 1e-3 * (1.0 + exact.abs()));
        }
    }
}

#[test]
fn tile_matches_per_key_max_dot() {
    for d in [8, 64, 12, 256] {
        for nq in 0..15 {
            let q = data(nq * d, 3 + nq as u32);
            let keys = data(TILE * d, 11);
            let mut kt = vec![0.0; TILE * d];
            for t in 0..TILE {
                for j in 0..d {
                    kt[j * TILE + t] = keys[t * d + j];
                }
            }
            let mut out = [0.0; TILE];
            max_dot_tile(&q, &kt, &mut out);
            for t in 0..TILE {
                let want = max_dot_generic(&q, &keys[t * d..(t + 1) * d]);
                if nq == 0 {
                    assert_eq!(out[t], f32::NEG_INFINITY);
                } else {
                    assert!(
                        (out[t] - want).abs() <= 1e-5 * (1.0 + want.abs()),
                        "d={d} nq={nq} t={t}: {} vs {want}",
                        out[t]
                    );
                }
            }
        }
    }
}

#[test]
fn transpose_tile_matches_the_definition() {
    for d in [8, 64, 12] {
        let stride = 3 * d;
        let rows = data((TILE - 1) * stride + d, 4);
        let mut kt = vec![0.0; TILE * d];
        transpose_tile(&rows, stride, &mut kt);
        for t in 0..TILE {
            for j in 0..d {
                assert_eq!(kt[j * TILE + t], rows[t * stride + j], "d={d} t={t} j={j}");
            }
        }
    }
}

#[test]
fn dot_matches_f64_reference() {
    for n in [0usize, 1, 7, 8, 9, 63, 64, 100, 128] {
        let a: Vec<f32> = (0..n)
            .map(|i| ((i * 37 % 11) as f32 - 5.0) * 0.25)
            .collect();
        let b: Vec<f32> = (0..n).map(|i| ((i * 17 % 13) as f32 - 6.0) * 0.5).collect();
        let want: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
        // all products and partial sums are exact multiples of 1/8 well inside f32's range
        assert_eq!(dot(&a, &b) as f64, want, "n={n}");
    }
    let a: Vec<f32> = (0..77).map(|i| (i as f32 * 0.731).sin()).collect();
    let b: Vec<f32> = (0..77).map(|i| (i as f32 * 0.377).cos()).collect();
    let want: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
    assert!((dot(&a, &b) as f64 - want).abs() < 1e-5);
}
