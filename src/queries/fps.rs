//! Cosine furthest-point sampling of pre-RoPE queries: how the method picks its beacons.
//!
//! Port of the reference implementation's `_farthest_point_sampling` for one (batch, head)
//! group. The reference implementation builds the full Q x Q similarity matrix; here only what
//! the algorithm reads is computed: each row's mean similarity equals `q_i · (Σ_j q_j) / n`
//! (one pass, O(n·d) instead of O(n²·d)), and the greedy loop needs only the similarity rows of
//! the k selected points (O(k·n·d)), so no n x n buffer is allocated. In exact arithmetic the
//! choices are the reference implementation's; the f32 rounding order differs from torch's
//! `bmm`, which only matters for near-ties closer than ~1e-6 (the golden test keeps its cases
//! clear of those).

use crate::kernels::{dot_fast, dots};

/// F.normalize's eps: rows with a smaller norm are divided by eps instead (zero stays zero).
const NORM_EPS: f32 = 1e-12;

/// Buffers of one sampling, reused between calls so that a warm sampler never allocates.
#[derive(Clone, Debug, Default)]
pub struct FpsScratch {
    unit: Vec<f32>,
    colsum: Vec<f32>,
    means: Vec<f32>,
    max_sim: Vec<f32>,
    sims: Vec<f32>,
    selected: Vec<usize>,
}

/// Cosine furthest-point sampling exactly like the reference implementation's
/// `_farthest_point_sampling` for one (batch, head) group: points: n rows of dim floats (row-major). Returns k indices (in
/// selection order). If n <= k returns 0..n.
/// Start = argmin of mean cosine similarity; then greedily argmin of running max similarity.
/// Ties: lowest index (torch argmin).
#[cfg(any(test, feature = "testing"))]
pub fn farthest_point_sampling(points: &[f32], n: usize, dim: usize, k: usize) -> Vec<usize> {
    farthest_point_sampling_in(points, n, dim, k, &mut FpsScratch::default()).to_vec()
}

/// [`farthest_point_sampling`] with caller-owned buffers; the result lives in `scratch`.
pub fn farthest_point_sampling_in<'s>(
    points: &[f32],
    n: usize,
    dim: usize,
    k: usize,
    scratch: &'s mut FpsScratch,
) -> &'s [usize] {
    assert_eq!(points.len(), n * dim, "points is not n x dim");
    let selected = &mut scratch.selected;
    selected.clear();
    if n <= k {
        selected.extend(0..n);
    } else if dim == 0 {
        selected.resize(k, 0); // every similarity is 0: torch's argmin keeps picking index 0
    } else {
        normalize_rows(points, dim, &mut scratch.unit);
        mean_similarities(
            &scratch.unit,
            dim,
            n,
            &mut scratch.colsum,
            &mut scratch.means,
        );
        let start = argmin(scratch.means.iter().copied());
        let sims = &mut scratch.sims;
        greedy(
            &scratch.unit,
            dim,
            start,
            k,
            &mut scratch.max_sim,
            sims,
            selected,
        );
    }
    &scratch.selected
}

/// The reference implementation's greedy loop from `start`: keep each point's highest similarity to anything selected
/// and take the point where that is lowest; k-1 times.
fn greedy(
    unit: &[f32],
    dim: usize,
    start: usize,
    k: usize,
    max_sim: &mut Vec<f32>,
    sims: &mut Vec<f32>,
    selected: &mut Vec<usize>,
) {
    let row = |i: usize| &unit[i * dim..(i + 1) * dim];
    let n = unit.len() / dim;
    max_sim.clear();
    max_sim.resize(n, f32::NEG_INFINITY);
    sims.resize(n, 0.0);
    let mut next = start;
    while selected.len() < k {
        selected.push(next);
        if selected.len() == k {
            break; // the last pick's similarities are never read
        }
        // one pass of the SIMD kernel: the new pick against every row
        dots(unit, row(next), sims);
        for (m, &v) in max_sim.iter_mut().zip(sims.iter()) {
            *m = m.max(v);
        }
        next = argmin(max_sim.iter().copied());
    }
}

/// Rows scaled to unit L2 norm, as `F.normalize(p=2, dim=-1, eps=1e-12)`, into `unit`.
fn normalize_rows(points: &[f32], dim: usize, unit: &mut Vec<f32>) {
    unit.clear();
    unit.extend_from_slice(points);
    for r in unit.chunks_exact_mut(dim) {
        // a multiplication by the reciprocal: within an ulp of the reference implementation's division, at a
        // fraction of its cost (FPS runs for every head each time the buffer fills)
        let inv = 1.0 / dot_fast(r, r).sqrt().max(NORM_EPS);
        r.iter_mut().for_each(|v| *v *= inv);
    }
}

/// Mean cosine similarity of every row to all n rows (itself included, as the reference implementation's matrix
/// mean): `q_i · (Σ_j q_j) / n`, one column-sum pass instead of the full Gram matrix.
/// Identical rows get bit-identical means, so exact ties stay ties.
fn mean_similarities(
    unit: &[f32],
    dim: usize,
    n: usize,
    colsum: &mut Vec<f32>,
    means: &mut Vec<f32>,
) {
    colsum.clear();
    colsum.resize(dim, 0.0);
    for r in unit.chunks_exact(dim) {
        colsum.iter_mut().zip(r).for_each(|(s, v)| *s += v);
    }
    means.resize(n, 0.0);
    dots(unit, colsum, means);
    means.iter_mut().for_each(|m| *m /= n as f32);
}

/// Index of the smallest value, first one on ties (torch/numpy argmin).
fn argmin(values: impl Iterator<Item = f32>) -> usize {
    let mut best = (0, f32::INFINITY);
    for (i, v) in values.enumerate() {
        if v < best.1 || i == 0 {
            best = (i, v);
        }
    }
    best.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::dot;

    #[test]
    fn small_n_returns_everything_in_order() {
        assert_eq!(
            farthest_point_sampling(&[1.0, 2.0, 3.0, 4.0], 2, 2, 2),
            [0, 1]
        );
        assert_eq!(farthest_point_sampling(&[1.0, 2.0], 1, 2, 5), [0]);
        assert_eq!(farthest_point_sampling(&[], 0, 3, 4), Vec::<usize>::new());
        assert_eq!(
            farthest_point_sampling(&[1.0, 0.0, 0.0, 1.0], 2, 2, 0),
            Vec::<usize>::new()
        );
    }

    /// Hand case in 2-d: three points near +x, one at +y, one at -x.
    /// Mean similarities: -x is lowest (it opposes the +x group), so it starts; the exact +x
    /// point (similarity -1 to it) is the furthest; then +y, whose running max stays 0 while
    /// the other +x points are at ~0.995.
    #[test]
    fn hand_case_2d() {
        #[rustfmt::skip]
        let pts = [1.0, 0.1,   1.0, 0.0,   0.0, 3.0,   -2.0, 0.0,   1.0, -0.1];
        assert_eq!(farthest_point_sampling(&pts, 5, 2, 3), [3, 1, 2]);
    }

    #[test]
    fn ties_go_to_the_lowest_index() {
        // Rows 1 and 3 are one direction (row 3 = 2 * row 1, so they normalise bit-identically)
        // and oppose the rest: their means tie exactly and row 1 must start. Then row 4 is the
        // least similar to it (-0.989 against -0.981 for row 0).
        #[rustfmt::skip]
        let pts = [1.0, 0.0,   -1.0, 0.2,   1.0, 0.05,   -2.0, 0.4,   1.0, -0.05];
        assert_eq!(farthest_point_sampling(&pts, 5, 2, 2), [1, 4]);
        assert_eq!(argmin([2.0, 1.0, 1.0, 3.0].into_iter()), 1);
        assert_eq!(argmin([0.0, -0.0].into_iter()), 0, "-0 == 0 is a tie");
    }

    #[test]
    fn normalize_keeps_zero_rows_zero() {
        let mut u = Vec::new();
        normalize_rows(&[0.0, 0.0, 3.0, 4.0], 2, &mut u);
        assert_eq!(u, [0.0, 0.0, 0.6, 0.8]);
    }

    #[test]
    fn reused_scratch_gives_the_same_choices() {
        let pts: Vec<f32> = (0..40 * 6)
            .map(|i| ((i * 37 % 23) as f32 - 11.0) / 5.0)
            .collect();
        let mut scratch = FpsScratch::default();
        for (n, k) in [(40, 8), (12, 3), (40, 39), (5, 9)] {
            let fresh = farthest_point_sampling(&pts[..n * 6], n, 6, k);
            let reused = farthest_point_sampling_in(&pts[..n * 6], n, 6, k, &mut scratch);
            assert_eq!(reused, &fresh[..], "n={n} k={k}");
        }
    }

    #[test]
    fn mean_similarity_matches_the_gram_matrix_mean() {
        let pts: Vec<f32> = (0..7 * 5)
            .map(|i| ((i * 31 % 17) as f32 - 8.0) / 3.0)
            .collect();
        let (mut u, mut colsum, mut means) = (Vec::new(), Vec::new(), Vec::new());
        normalize_rows(&pts, 5, &mut u);
        mean_similarities(&u, 5, 7, &mut colsum, &mut means);
        for (i, m) in means.iter().enumerate() {
            let row = &u[i * 5..i * 5 + 5];
            let full: f32 = u.chunks(5).map(|r| dot(row, r)).sum::<f32>() / 7.0;
            assert!((m - full).abs() < 1e-6, "{m} vs {full}");
        }
    }
}
