//! Dot products of f32 vectors: one pair, or one key against many queries.

#[cfg(target_arch = "x86_64")]
use super::has_avx2_fma;

/// `max_i queries[i*d..(i+1)*d] · k` (NEG_INFINITY for no queries); `queries.len() % k.len() == 0`.
pub fn max_dot(queries: &[f32], k: &[f32]) -> f32 {
    let d = k.len();
    assert!(
        d > 0 && queries.len().is_multiple_of(d),
        "max_dot: queries not a multiple of the key length"
    );
    #[cfg(target_arch = "x86_64")]
    {
        if d.is_multiple_of(8) && has_avx2_fma() {
            // SAFETY: the CPU supports AVX2 and FMA (checked above); lengths are checked.
            return unsafe { max_dot_avx2(queries, k) };
        }
    }
    max_dot_generic(queries, k)
}

/// `out[i] = queries[i*d..(i+1)*d] · k` for every query (`out.len()` = number of queries).
pub fn dots(queries: &[f32], k: &[f32], out: &mut [f32]) {
    let d = k.len();
    assert!(
        d > 0 && queries.len() == out.len() * d,
        "dots: shapes disagree"
    );
    #[cfg(target_arch = "x86_64")]
    {
        if d.is_multiple_of(8) && has_avx2_fma() {
            // SAFETY: the CPU supports AVX2 and FMA (checked above); lengths are checked.
            return unsafe { dots_avx2(queries, k, out) };
        }
    }
    for (o, q) in out.iter_mut().zip(queries.chunks_exact(d)) {
        *o = dot(q, k);
    }
}

/// `a · b` for hot loops: the AVX2/FMA kernel where the CPU has it and the length is a multiple
/// of 8, else the portable [`dot`]. The result's last bits depend on the CPU; use [`dot`] where
/// they must not.
pub fn dot_fast(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot of unequal lengths");
    #[cfg(target_arch = "x86_64")]
    {
        if a.len().is_multiple_of(8) && has_avx2_fma() {
            // SAFETY: the CPU supports AVX2 and FMA (checked above); lengths are checked.
            return unsafe { dot_avx2(a, b) };
        }
    }
    dot(a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 2];
    let mut j = 0;
    while j < a.len() {
        let x = _mm256_loadu_ps(pa.add(j));
        acc[(j / 8) % 2] = _mm256_fmadd_ps(x, _mm256_loadu_ps(pb.add(j)), acc[(j / 8) % 2]);
        j += 8;
    }
    let v = _mm256_add_ps(acc[0], acc[1]);
    let h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)))
}

/// Portable [`max_dot`] (and the reference the AVX2 kernel is tested against).
pub(super) fn max_dot_generic(queries: &[f32], k: &[f32]) -> f32 {
    queries
        .chunks_exact(k.len())
        .fold(f32::NEG_INFINITY, |m, q| m.max(dot(q, k)))
}
/// The dot products of queries `i..i+4` with `k`, as one 128-bit register `[s0 s1 s2 s3]`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot4_avx2(queries: &[f32], k: &[f32], i: usize) -> std::arch::x86_64::__m128 {
    use std::arch::x86_64::*;
    let d = k.len();
    let (q, kp) = (queries.as_ptr().add(i * d), k.as_ptr());
    let (mut a0, mut a1, mut a2, mut a3) = (
        _mm256_setzero_ps(),
        _mm256_setzero_ps(),
        _mm256_setzero_ps(),
        _mm256_setzero_ps(),
    );
    let mut j = 0;
    while j < d {
        let kv = _mm256_loadu_ps(kp.add(j));
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q.add(j)), kv, a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q.add(d + j)), kv, a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(q.add(2 * d + j)), kv, a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(q.add(3 * d + j)), kv, a3);
        j += 8;
    }
    // Four horizontal sums at once.
    let h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn max_dot_avx2(queries: &[f32], k: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let d = k.len();
    let nq = queries.len() / d;
    let mut best = _mm_set1_ps(f32::NEG_INFINITY);
    let mut i = 0;
    while i + 4 <= nq {
        best = _mm_max_ps(best, dot4_avx2(queries, k, i));
        i += 4;
    }
    let mut lanes = [0.0f32; 4];
    _mm_storeu_ps(lanes.as_mut_ptr(), best);
    let mut m = lanes.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for r in i..nq {
        m = m.max(dot_avx2(&queries[r * d..(r + 1) * d], k));
    }
    m
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dots_avx2(queries: &[f32], k: &[f32], out: &mut [f32]) {
    use std::arch::x86_64::*;
    let d = k.len();
    let nq = out.len();
    let mut i = 0;
    while i + 4 <= nq {
        _mm_storeu_ps(out.as_mut_ptr().add(i), dot4_avx2(queries, k, i));
        i += 4;
    }
    for r in i..nq {
        out[r] = dot_avx2(&queries[r * d..(r + 1) * d], k);
    }
}
/// The portable dot product `a · b`: sixteen accumulator lanes summed in a fixed order, so the
/// result has the same bits on every CPU. Use it where a result must not depend on the CPU, and
/// as the fallback and test reference of the AVX2 kernels; hot loops call [`dot_fast`] instead,
/// whose last bits differ between CPUs with and without AVX2 and FMA.
///
/// Sixteen independent lanes (four SSE / two AVX registers) break the add dependency chain
/// so LLVM emits packed SIMD that is not latency-bound, without fast-math; lanes are combined
/// pairwise at the end. A scalar tail covers lengths that are not a multiple of 16.
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot of unequal lengths");
    let (ca, ta) = a.as_chunks::<LANES>();
    let (cb, tb) = b.as_chunks::<LANES>();
    let mut acc = [0.0f32; LANES];
    for (x, y) in ca.iter().zip(cb) {
        for l in 0..LANES {
            acc[l] += x[l] * y[l];
        }
    }
    let tail: f32 = ta.iter().zip(tb).map(|(x, y)| x * y).sum();
    tree_sum(acc) + tail
}

/// Accumulator lanes of [`dot`].
const LANES: usize = 16;

/// Pairwise sum of the accumulator lanes (halving folds, which LLVM keeps in registers).
#[inline(always)]
fn tree_sum(mut acc: [f32; LANES]) -> f32 {
    let mut w = LANES / 2;
    while w > 0 {
        for l in 0..w {
            acc[l] += acc[l + w];
        }
        w /= 2;
    }
    acc[0]
}
