//! The scoring hot loop: the largest dot product of one key row with many queries.
//!
//! The crate is built for baseline x86-64 (SSE2) so the static library runs anywhere; on CPUs
//! with AVX2 and FMA (detected once at run time) a hand-written kernel processes four queries per
//! pass over the key, which is what keeps a full scoring pass small next to the forward pass.

use crate::ggml::dequant::dot;

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

/// `a · b`, with the AVX2 kernel where the CPU has it (lengths a multiple of 8).
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

/// Portable version (and the reference the AVX2 kernel is tested against).
pub fn max_dot_generic(queries: &[f32], k: &[f32]) -> f32 {
    queries
        .chunks_exact(k.len())
        .fold(f32::NEG_INFINITY, |m, q| m.max(dot(q, k)))
}

/// Whether the CPU has the FMA instruction (detected once).
#[cfg(target_arch = "x86_64")]
pub fn has_fma() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| is_x86_feature_detected!("fma"))
}

/// Whether the CPU converts halves in hardware (F16C with AVX; detected once).
#[cfg(target_arch = "x86_64")]
pub fn has_f16c() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| is_x86_feature_detected!("f16c") && is_x86_feature_detected!("avx"))
}

#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx2_fma() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
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

/// Keys per tile of [`max_dot_tile`] (two AVX registers of eight lanes).
pub const TILE: usize = 16;

/// `out[t] = max_i queries[i] · key_t` for the [`TILE`] keys of `kt`, stored transposed
/// (`kt[j * TILE + t]` = element j of key t; unused key slots may hold anything, their outputs
/// are meaningless). The scoring pass's kernel: keys sit in the lanes, each query element is
/// broadcast, so one load of the keys feeds many FMAs and no horizontal sums are needed.
pub fn max_dot_tile(queries: &[f32], kt: &[f32], out: &mut [f32; TILE]) {
    let d = kt.len() / TILE;
    assert!(
        d > 0 && kt.len() == d * TILE && queries.len().is_multiple_of(d),
        "max_dot_tile: shapes disagree"
    );
    #[cfg(target_arch = "x86_64")]
    {
        if has_avx2_fma() {
            // SAFETY: the CPU supports AVX2 and FMA (checked above); lengths are checked.
            return unsafe { max_dot_tile_avx2(queries, kt, d, out) };
        }
    }
    max_dot_tile_generic(queries, kt, out)
}

/// Portable version of [`max_dot_tile`] (and the reference the AVX2 kernel is tested against).
pub fn max_dot_tile_generic(queries: &[f32], kt: &[f32], out: &mut [f32; TILE]) {
    let d = kt.len() / TILE;
    out.fill(f32::NEG_INFINITY);
    for q in queries.chunks_exact(d) {
        let mut acc = [0.0f32; TILE];
        for (&x, keys) in q.iter().zip(kt.chunks_exact(TILE)) {
            acc.iter_mut().zip(keys).for_each(|(a, &k)| *a += x * k);
        }
        out.iter_mut().zip(acc).for_each(|(o, a)| *o = o.max(a));
    }
}

/// Keys per call of [`max_dot_lanes`].
pub const LANE_KEYS: usize = 8;

/// Query lanes per register of [`max_dot_lanes`]: `nq` queries are stored as
/// `nq.next_multiple_of(QUERY_LANES)` columns.
pub const QUERY_LANES: usize = 8;

/// `out[t] = max_i q_i · (a_t ++ b_t)` for up to [`LANE_KEYS`] keys, each given as two parts that
/// lie anywhere (the archive's page boxes: centre and radius), with the `nq` queries stored
/// transposed: `qt[j * nqp + i]` = element j of query i, `nqp` = `nq` rounded up to
/// [`QUERY_LANES`] (the padding columns are ignored). The recall bounds' kernel: the queries sit in
/// the lanes and each key element is broadcast, so the keys are read in place, with none of the
/// transposition [`max_dot_tile`] needs (a check reads every archived page once).
pub fn max_dot_lanes(qt: &[f32], nq: usize, a: &[&[f32]], b: &[&[f32]], out: &mut [f32]) {
    let n = a.len();
    let (da, db) = (
        a.first().map_or(0, |k| k.len()),
        b.first().map_or(0, |k| k.len()),
    );
    let nqp = nq.next_multiple_of(QUERY_LANES);
    assert!(
        n > 0
            && n <= LANE_KEYS
            && b.len() == n
            && out.len() >= n
            && nq > 0
            && qt.len() == (da + db) * nqp
            && a.iter().all(|k| k.len() == da)
            && b.iter().all(|k| k.len() == db),
        "max_dot_lanes: shapes disagree"
    );
    #[cfg(target_arch = "x86_64")]
    {
        if has_avx2_fma() {
            // unused key slots repeat key 0 (their outputs are dropped)
            let pa: [*const f32; LANE_KEYS] = std::array::from_fn(|t| a[t.min(n - 1)].as_ptr());
            let pb: [*const f32; LANE_KEYS] = std::array::from_fn(|t| b[t.min(n - 1)].as_ptr());
            // SAFETY: the CPU supports AVX2 and FMA (checked above); every key part holds da or
            // db values and qt holds (da + db) rows of nqp, as asserted.
            let best = unsafe { max_dot_lanes_avx2(qt, nq, nqp, &pa, &pb, da, db) };
            out[..n].copy_from_slice(&best[..n]);
            return;
        }
    }
    max_dot_lanes_generic(qt, nq, a, b, out)
}

/// Portable version of [`max_dot_lanes`] (and the reference the AVX2 kernel is tested against).
pub fn max_dot_lanes_generic(qt: &[f32], nq: usize, a: &[&[f32]], b: &[&[f32]], out: &mut [f32]) {
    let nqp = nq.next_multiple_of(QUERY_LANES);
    for (t, (ka, kb)) in a.iter().zip(b).enumerate() {
        out[t] = (0..nq)
            .map(|i| {
                let elems = ka.iter().chain(kb.iter());
                elems
                    .enumerate()
                    .map(|(j, &k)| qt[j * nqp + i] * k)
                    .sum::<f32>()
            })
            .fold(f32::NEG_INFINITY, f32::max);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn max_dot_lanes_avx2(
    qt: &[f32],
    nq: usize,
    nqp: usize,
    pa: &[*const f32; LANE_KEYS],
    pb: &[*const f32; LANE_KEYS],
    da: usize,
    db: usize,
) -> [f32; LANE_KEYS] {
    use std::arch::x86_64::*;
    let mut best = [f32::NEG_INFINITY; LANE_KEYS];
    let q = qt.as_ptr();
    for blk in (0..nqp).step_by(QUERY_LANES) {
        // eight independent accumulators: enough chains to keep both FMA ports busy
        let mut acc = [_mm256_setzero_ps(); LANE_KEYS];
        for j in 0..da {
            let qv = _mm256_loadu_ps(q.add(j * nqp + blk));
            for t in 0..LANE_KEYS {
                acc[t] = _mm256_fmadd_ps(qv, _mm256_set1_ps(*pa[t].add(j)), acc[t]);
            }
        }
        for j in 0..db {
            let qv = _mm256_loadu_ps(q.add((da + j) * nqp + blk));
            for t in 0..LANE_KEYS {
                acc[t] = _mm256_fmadd_ps(qv, _mm256_set1_ps(*pb[t].add(j)), acc[t]);
            }
        }
        let valid = (nq - blk).min(QUERY_LANES);
        for t in 0..LANE_KEYS {
            let mut lanes = [0.0f32; QUERY_LANES];
            _mm256_storeu_ps(lanes.as_mut_ptr(), acc[t]);
            best[t] = lanes[..valid].iter().fold(best[t], |m, &v| m.max(v));
        }
    }
    best
}

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

/// Lay [`TILE`] key rows out for [`max_dot_tile`]: row t is `rows[t * stride..t * stride + d]`,
/// and `kt[j * TILE + t]` receives its element j (`kt.len() == d * TILE`).
pub fn transpose_tile(rows: &[f32], stride: usize, kt: &mut [f32]) {
    let d = kt.len() / TILE;
    assert!(
        d > 0 && kt.len() == d * TILE && stride >= d && rows.len() >= (TILE - 1) * stride + d,
        "transpose_tile: shapes disagree"
    );
    #[cfg(target_arch = "x86_64")]
    {
        if d.is_multiple_of(8) && has_avx2_fma() {
            // SAFETY: the CPU supports AVX2 (checked above); lengths are checked.
            return unsafe { transpose_tile_avx2(rows, stride, d, kt) };
        }
    }
    for t in 0..TILE {
        for (j, &v) in rows[t * stride..t * stride + d].iter().enumerate() {
            kt[j * TILE + t] = v;
        }
    }
}

/// [`transpose_tile`] of rows that lie anywhere: row t is `rows[t]` (each `d` long; a tile of
/// fewer than [`TILE`] rows leaves the other lanes of `kt` as they were).
pub fn transpose_rows(rows: &[&[f32]], kt: &mut [f32]) {
    let d = kt.len() / TILE;
    assert!(
        d > 0 && kt.len() == d * TILE && rows.len() <= TILE && rows.iter().all(|r| r.len() == d),
        "transpose_rows: shapes disagree"
    );
    #[cfg(target_arch = "x86_64")]
    {
        if d.is_multiple_of(8) && rows.len() == TILE && has_avx2_fma() {
            let ptrs: [*const f32; TILE] = std::array::from_fn(|t| rows[t].as_ptr());
            // SAFETY: the CPU supports AVX2 (checked above); every row holds d values.
            return unsafe { transpose_avx2(|t| ptrs[t], d, kt) };
        }
    }
    for (t, row) in rows.iter().enumerate() {
        for (j, &v) in row.iter().enumerate() {
            kt[j * TILE + t] = v;
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn transpose_tile_avx2(rows: &[f32], stride: usize, d: usize, kt: &mut [f32]) {
    let src = rows.as_ptr();
    transpose_avx2(|t| src.add(t * stride), d, kt)
}

/// 8 x 8 blocks transposed in registers (unpack, shuffle, permute); row t starts at `row(t)`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn transpose_avx2(row: impl Fn(usize) -> *const f32, d: usize, kt: &mut [f32]) {
    use std::arch::x86_64::*;
    let dst = kt.as_mut_ptr();
    for t0 in (0..TILE).step_by(8) {
        for j0 in (0..d).step_by(8) {
            let r: [__m256; 8] = std::array::from_fn(|i| _mm256_loadu_ps(row(t0 + i).add(j0)));
            let t: [__m256; 8] = std::array::from_fn(|i| {
                let (a, b) = (r[(i / 2) * 2], r[(i / 2) * 2 + 1]);
                if i % 2 == 0 {
                    _mm256_unpacklo_ps(a, b)
                } else {
                    _mm256_unpackhi_ps(a, b)
                }
            });
            // u[k] for k in 0..4 from rows 0..4, u[4 + k] from rows 4..8
            let u: [__m256; 8] = std::array::from_fn(|i| {
                let base = (i / 4) * 4;
                let (a, b) = (t[base + (i % 4) / 2], t[base + 2 + (i % 4) / 2]);
                if i % 2 == 0 {
                    _mm256_shuffle_ps::<0x44>(a, b)
                } else {
                    _mm256_shuffle_ps::<0xEE>(a, b)
                }
            });
            for k in 0..4 {
                let lo = _mm256_permute2f128_ps::<0x20>(u[k], u[4 + k]);
                let hi = _mm256_permute2f128_ps::<0x31>(u[k], u[4 + k]);
                _mm256_storeu_ps(dst.add((j0 + k) * TILE + t0), lo);
                _mm256_storeu_ps(dst.add((j0 + 4 + k) * TILE + t0), hi);
            }
        }
    }
}

/// Queries per block of the AVX2 tile kernel: 2 x 6 accumulators + 2 key registers + 1
/// broadcast fit the 16 AVX registers.
#[cfg(target_arch = "x86_64")]
const TILE_QUERIES: usize = 6;

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn max_dot_tile_avx2(queries: &[f32], kt: &[f32], d: usize, out: &mut [f32; TILE]) {
    use std::arch::x86_64::*;
    let nq = queries.len() / d;
    let mut best = [_mm256_set1_ps(f32::NEG_INFINITY); 2];
    let mut i = 0;
    while i + TILE_QUERIES <= nq {
        tile_block::<TILE_QUERIES>(queries.as_ptr().add(i * d), kt.as_ptr(), d, &mut best);
        i += TILE_QUERIES;
    }
    while i < nq {
        tile_block::<1>(queries.as_ptr().add(i * d), kt.as_ptr(), d, &mut best);
        i += 1;
    }
    _mm256_storeu_ps(out.as_mut_ptr(), best[0]);
    _mm256_storeu_ps(out.as_mut_ptr().add(8), best[1]);
}

/// `R` consecutive queries against one tile; folds their dot products into `best`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn tile_block<const R: usize>(
    q: *const f32,
    kt: *const f32,
    d: usize,
    best: &mut [std::arch::x86_64::__m256; 2],
) {
    use std::arch::x86_64::*;
    for a in &tile_acc::<R>(q, kt, d) {
        best[0] = _mm256_max_ps(best[0], a[0]);
        best[1] = _mm256_max_ps(best[1], a[1]);
    }
}

/// The dot products of `R` consecutive queries with the [`TILE`] keys of a tile, two registers
/// of eight lanes per query.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn tile_acc<const R: usize>(
    q: *const f32,
    kt: *const f32,
    d: usize,
) -> [[std::arch::x86_64::__m256; 2]; R] {
    use std::arch::x86_64::*;
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    for j in 0..d {
        let k0 = _mm256_loadu_ps(kt.add(j * TILE));
        let k1 = _mm256_loadu_ps(kt.add(j * TILE + 8));
        for (r, a) in acc.iter_mut().enumerate() {
            let x = _mm256_broadcast_ss(&*q.add(r * d + j));
            a[0] = _mm256_fmadd_ps(x, k0, a[0]);
            a[1] = _mm256_fmadd_ps(x, k1, a[1]);
        }
    }
    acc
}

/// `out[i * TILE + t] = queries[i] · key_t` for every query and the [`TILE`] keys of `kt`
/// (transposed as for [`max_dot_tile`]): all the logits of a tile, for probability scoring.
pub fn dot_tile_all(queries: &[f32], kt: &[f32], out: &mut [f32]) {
    let d = kt.len() / TILE;
    assert!(
        d > 0 && kt.len() == d * TILE && queries.len() / d * TILE == out.len(),
        "dot_tile_all: shapes disagree"
    );
    #[cfg(target_arch = "x86_64")]
    {
        if has_avx2_fma() {
            // SAFETY: the CPU supports AVX2 and FMA (checked above); lengths are checked.
            return unsafe { dot_tile_all_avx2(queries, kt, d, out) };
        }
    }
    for (q, o) in queries.chunks_exact(d).zip(out.chunks_exact_mut(TILE)) {
        o.fill(0.0);
        for (&x, keys) in q.iter().zip(kt.chunks_exact(TILE)) {
            o.iter_mut().zip(keys).for_each(|(a, &k)| *a += x * k);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_tile_all_avx2(queries: &[f32], kt: &[f32], d: usize, out: &mut [f32]) {
    use std::arch::x86_64::*;
    let nq = queries.len() / d;
    let (q, o) = (queries.as_ptr(), out.as_mut_ptr());
    let store = |i: usize, acc: &[[__m256; 2]]| {
        for (r, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(o.add((i + r) * TILE), a[0]);
            _mm256_storeu_ps(o.add((i + r) * TILE + 8), a[1]);
        }
    };
    let mut i = 0;
    while i + TILE_QUERIES <= nq {
        store(i, &tile_acc::<TILE_QUERIES>(q.add(i * d), kt.as_ptr(), d));
        i += TILE_QUERIES;
    }
    while i < nq {
        store(i, &tile_acc::<1>(q.add(i * d), kt.as_ptr(), d));
        i += 1;
    }
}

#[cfg(test)]
mod tests {
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
}
