//! The Walsh-Hadamard rotation llama.cpp applies to Q and K when the K cache is quantised.
//!
//! Keys in a quantised cache are stored as `H * k` per `block` values (llama.cpp 11434,
//! `attn_rot_k`); queries get the same rotation, so `q·k` is unchanged and scoring may use
//! either both rotated or both plain vectors. `H` is symmetric and orthonormal, hence its own
//! inverse: applying it once more undoes it.

/// Orthonormal Sylvester Hadamard (natural order, 1/sqrt(block)), applied independently to each
/// consecutive block of `block` values of x (x.len() % block == 0, block a power of two). Same
/// matrix as llama.cpp's ggml_gen_hadamard; self-inverse.
///
/// Computed as an in-place fast Walsh-Hadamard transform (n log n adds) followed by one scale,
/// so results equal ggml's matrix product up to f32 summation order, not bit for bit.
pub fn hadamard_inplace(x: &mut [f32], block: usize) {
    assert!(
        block.is_power_of_two(),
        "Hadamard block {block} is not a power of two"
    );
    assert!(
        x.len().is_multiple_of(block),
        "length {} is not a multiple of {block}",
        x.len()
    );
    let scale = hadamard_scale(block);
    for chunk in x.chunks_exact_mut(block) {
        fwht(chunk);
        chunk.iter_mut().for_each(|v| *v *= scale);
    }
}

/// The entry magnitude ggml uses: `1.0 / sqrtf(n)` evaluated in double, stored as f32.
fn hadamard_scale(n: usize) -> f32 {
    (1.0f64 / (n as f32).sqrt() as f64) as f32
}

/// Unnormalised Sylvester transform: at stride `h`, pairs (i, i+h) become (a+b, a-b). Row `r`
/// of the implied matrix has sign (-1)^popcount(r & c) at column `c`, i.e. natural order.
fn fwht(v: &mut [f32]) {
    let mut h = 1;
    while h < v.len() {
        for pair in v.chunks_exact_mut(2 * h) {
            let (lo, hi) = pair.split_at_mut(h);
            for (a, b) in lo.iter_mut().zip(hi.iter_mut()) {
                (*a, *b) = (*a + *b, *a - *b);
            }
        }
        h *= 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sylvester's recursive construction H_2n = [[H, H], [H, -H]], the way ggml_gen_hadamard
    /// builds it, as a dense row-major matrix.
    fn sylvester(n: usize) -> Vec<f32> {
        let mut m = vec![0f32; n * n];
        m[0] = hadamard_scale(n);
        let mut s = 1;
        while s < n {
            for i in 0..s {
                for j in 0..s {
                    let v = m[i * n + j];
                    m[(i + s) * n + j] = v;
                    m[i * n + j + s] = v;
                    m[(i + s) * n + j + s] = -v;
                }
            }
            s *= 2;
        }
        m
    }

    fn matvec(m: &[f32], x: &[f32]) -> Vec<f32> {
        let n = x.len();
        (0..n)
            .map(|r| (0..n).map(|c| m[r * n + c] * x[c]).sum())
            .collect()
    }

    fn sample(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| ((i as f32 + 0.5) * (seed as f32 * 0.61 + 1.3)).sin() * 3.0)
            .collect()
    }

    #[test]
    fn matches_explicit_sylvester_for_small_n() {
        let half = 0.5f32;
        let h4 = sylvester(4);
        #[rustfmt::skip]
        let want = [half, half, half, half,  half, -half, half, -half,
                    half, half, -half, -half,  half, -half, -half, half];
        assert_eq!(h4, want);
        for n in [2usize, 4, 8] {
            let m = sylvester(n);
            for col in 0..n {
                let mut e = vec![0f32; n];
                e[col] = 1.0;
                hadamard_inplace(&mut e, n);
                let want: Vec<f32> = (0..n).map(|r| m[r * n + col]).collect();
                assert_eq!(e, want, "n={n} column {col}");
            }
            let x = sample(n, 3);
            let mut y = x.clone();
            hadamard_inplace(&mut y, n);
            for (a, b) in y.iter().zip(matvec(&m, &x)) {
                assert!((a - b).abs() < 1e-5, "n={n}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn self_inverse_and_norm_preserving() {
        for block in [64usize, 128] {
            let x = sample(block * 3, 7);
            let mut y = x.clone();
            hadamard_inplace(&mut y, block);
            let n0: f32 = x.iter().map(|v| v * v).sum();
            let n1: f32 = y.iter().map(|v| v * v).sum();
            assert!((n0 - n1).abs() <= 1e-5 * n0, "block {block}: {n0} vs {n1}");
            assert_ne!(x, y);
            hadamard_inplace(&mut y, block);
            for (a, b) in x.iter().zip(&y) {
                assert!((a - b).abs() < 1e-5, "block {block}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn blocks_are_independent_and_match_the_matrix() {
        let block = 64;
        let m = sylvester(block);
        let x = sample(2 * block, 11);
        let mut y = x.clone();
        hadamard_inplace(&mut y, block);
        for b in 0..2 {
            let want = matvec(&m, &x[b * block..(b + 1) * block]);
            for (a, w) in y[b * block..].iter().zip(want) {
                assert!((a - w).abs() < 1e-4, "{a} vs {w}");
            }
        }
    }

    #[test]
    fn preserves_dot_products() {
        let (q, k) = (sample(128, 1), sample(128, 2));
        let d0: f32 = q.iter().zip(&k).map(|(a, b)| a * b).sum();
        let (mut hq, mut hk) = (q.clone(), k.clone());
        hadamard_inplace(&mut hq, 128);
        hadamard_inplace(&mut hk, 128);
        let d1: f32 = hq.iter().zip(&hk).map(|(a, b)| a * b).sum();
        assert!((d0 - d1).abs() < 1e-3, "{d0} vs {d1}");
    }

    #[test]
    #[should_panic(expected = "power of two")]
    fn rejects_non_power_of_two() {
        hadamard_inplace(&mut [0.0; 12], 12);
    }
}
