//! The scoring pass's kernels: tiles of keys stored transposed, against many queries.

#[cfg(target_arch = "x86_64")]
use super::has_avx2_fma;

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

/// Portable [`max_dot_tile`] (and the reference the AVX2 kernel is tested against).
pub(super) fn max_dot_tile_generic(queries: &[f32], kt: &[f32], out: &mut [f32; TILE]) {
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
