//! The recall bounds' kernel: queries stored transposed, against keys read in place.

#[cfg(target_arch = "x86_64")]
use super::has_avx2_fma;

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

/// Portable [`max_dot_lanes`] (and the reference the AVX2 kernel is tested against).
pub(super) fn max_dot_lanes_generic(
    qt: &[f32],
    nq: usize,
    a: &[&[f32]],
    b: &[&[f32]],
    out: &mut [f32],
) {
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
