//! Exponentials for probability scoring: the sum inside a log-sum-exp, and probabilities added
//! into a row.

#[cfg(target_arch = "x86_64")]
use super::has_avx2_fma;

/// `Σ exp(row[i] - max)`: the sum inside a log-sum-exp over the cells (probability scoring,
/// `score=prob`), eight lanes at a time where the CPU has AVX2 (a Cephes-style polynomial,
/// within 2 ulp of `f32::exp` on the range scoring uses; summed in another order than a loop).
pub fn sum_exp_minus(row: &[f32], max: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if has_avx2_fma() {
            // SAFETY: the CPU supports AVX2 and FMA (checked above).
            return unsafe { sum_exp_minus_avx2(row, max) };
        }
    }
    row.iter().map(|&v| (v - max).exp()).sum()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn sum_exp_minus_avx2(row: &[f32], max: f32) -> f32 {
    use std::arch::x86_64::*;
    let (n, r) = (row.len(), row.as_ptr());
    let m = _mm256_set1_ps(max);
    let mut acc = _mm256_setzero_ps();
    let mut i = 0;
    while i + 8 <= n {
        acc = _mm256_add_ps(acc, exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(r.add(i)), m)));
        i += 8;
    }
    let mut lanes = [0.0f32; 8];
    _mm256_storeu_ps(lanes.as_mut_ptr(), acc);
    let tail: f32 = row[i..].iter().map(|&v| (v - max).exp()).sum();
    lanes.iter().sum::<f32>() + tail
}

/// `acc[i] += scale * exp(row[i] - shift)` (`row.len() == acc.len()`): with `shift` a row's
/// log-sum-exp, `scale` times its softmax added in, eight lanes at a time where the CPU has AVX2
/// (the polynomial of [`sum_exp_minus`]).
pub fn add_exp_minus(row: &[f32], shift: f32, scale: f32, acc: &mut [f32]) {
    assert_eq!(row.len(), acc.len(), "add_exp_minus: lengths disagree");
    #[cfg(target_arch = "x86_64")]
    {
        if has_avx2_fma() {
            // SAFETY: the CPU supports AVX2 and FMA (checked above); lengths are equal.
            return unsafe { add_exp_minus_avx2(row, shift, scale, acc) };
        }
    }
    for (a, &v) in acc.iter_mut().zip(row) {
        *a += scale * (v - shift).exp();
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn add_exp_minus_avx2(row: &[f32], shift: f32, scale: f32, acc: &mut [f32]) {
    use std::arch::x86_64::*;
    let (n, r, a) = (row.len(), row.as_ptr(), acc.as_mut_ptr());
    let (m, k) = (_mm256_set1_ps(shift), _mm256_set1_ps(scale));
    let mut i = 0;
    while i + 8 <= n {
        let e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(r.add(i)), m));
        _mm256_storeu_ps(a.add(i), _mm256_fmadd_ps(e, k, _mm256_loadu_ps(a.add(i))));
        i += 8;
    }
    for (a, &v) in acc[i..].iter_mut().zip(&row[i..]) {
        *a += scale * (v - shift).exp();
    }
}

/// `e^x` per lane: x = n ln2 + r with |r| <= ln2/2 (ln2 split in two for precision), a degree-6
/// polynomial for e^r, and 2^n built in the exponent bits. Inputs are clamped to the range where
/// the result is a normal float (below it the true value is under 1e-38).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn exp_avx2(x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    let x = _mm256_min_ps(
        _mm256_max_ps(x, _mm256_set1_ps(-87.33)),
        _mm256_set1_ps(88.37),
    );
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        x,
        _mm256_set1_ps(std::f32::consts::LOG2_E),
    ));
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_359_4), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.121_944_4e-4), r);
    let mut p = _mm256_set1_ps(1.987_569_1e-4);
    for c in [
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        0.5,
    ] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let p = _mm256_fmadd_ps(
        p,
        _mm256_mul_ps(r, r),
        _mm256_add_ps(r, _mm256_set1_ps(1.0)),
    );
    let bits = _mm256_slli_epi32::<23>(_mm256_add_epi32(
        _mm256_cvtps_epi32(n),
        _mm256_set1_epi32(127),
    ));
    _mm256_mul_ps(p, _mm256_castsi256_ps(bits))
}
