//! Cosine furthest-point sampling of pre-RoPE queries: how the method picks its beacons.
//!
//! Port of the seed's `_farthest_point_sampling` for one (batch, head) group. The seed builds
//! the full Q x Q similarity matrix; here only what the algorithm reads is computed:
//! each row's mean similarity equals `q_i · (Σ_j q_j) / n` (one pass, O(n·d) instead of
//! O(n²·d)), and the greedy loop needs only the similarity rows of the k selected points
//! (O(k·n·d)), so no n x n buffer is allocated. In exact arithmetic the choices are the
//! seed's; the f32 rounding order differs from torch's `bmm`, which only matters for
//! near-ties closer than ~1e-6 (the golden test keeps its cases clear of those).

use crate::kread::dot;

/// F.normalize's eps: rows with a smaller norm are divided by eps instead (zero stays zero).
const NORM_EPS: f32 = 1e-12;

/// Cosine furthest-point sampling exactly like the seed's _farthest_point_sampling for one
/// (batch, head) group: points: n rows of dim floats (row-major). Returns k indices (in
/// selection order). If n <= k returns 0..n.
/// Start = argmin of mean cosine similarity; then greedily argmin of running max similarity.
/// Ties: lowest index (torch argmin).
pub fn farthest_point_sampling(points: &[f32], n: usize, dim: usize, k: usize) -> Vec<usize> {
    assert_eq!(points.len(), n * dim, "points is not n x dim");
    if n <= k {
        return (0..n).collect();
    }
    if dim == 0 {
        return vec![0; k]; // every similarity is 0: torch's argmin keeps picking index 0
    }
    let unit = normalized_rows(points, dim);
    let start = argmin(mean_similarities(&unit, dim, n).into_iter());
    greedy(&unit, dim, start, k)
}

/// The seed's loop from `start`: keep each point's highest similarity to anything selected
/// and take the point where that is lowest; k-1 times.
fn greedy(unit: &[f32], dim: usize, start: usize, k: usize) -> Vec<usize> {
    let row = |i: usize| &unit[i * dim..(i + 1) * dim];
    let mut selected = Vec::with_capacity(k);
    let mut max_sim = vec![f32::NEG_INFINITY; unit.len() / dim];
    let mut next = start;
    while selected.len() < k {
        selected.push(next);
        if selected.len() == k {
            break; // the last pick's similarities are never read
        }
        let r = row(next);
        for (j, m) in max_sim.iter_mut().enumerate() {
            *m = m.max(dot(r, row(j)));
        }
        next = argmin(max_sim.iter().copied());
    }
    selected
}

/// Rows scaled to unit L2 norm, as `F.normalize(p=2, dim=-1, eps=1e-12)`.
fn normalized_rows(points: &[f32], dim: usize) -> Vec<f32> {
    let mut unit = points.to_vec();
    for r in unit.chunks_exact_mut(dim) {
        let norm = dot(r, r).sqrt().max(NORM_EPS);
        r.iter_mut().for_each(|v| *v /= norm);
    }
    unit
}

/// Mean cosine similarity of every row to all n rows (itself included, as the seed's matrix
/// mean): `q_i · (Σ_j q_j) / n`, one column-sum pass instead of the full Gram matrix.
/// Identical rows get bit-identical means, so exact ties stay ties.
fn mean_similarities(unit: &[f32], dim: usize, n: usize) -> Vec<f32> {
    let mut colsum = vec![0.0f32; dim];
    for r in unit.chunks_exact(dim) {
        colsum.iter_mut().zip(r).for_each(|(s, v)| *s += v);
    }
    unit.chunks_exact(dim)
        .map(|r| dot(r, &colsum) / n as f32)
        .collect()
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
        let u = normalized_rows(&[0.0, 0.0, 3.0, 4.0], 2);
        assert_eq!(u, [0.0, 0.0, 0.6, 0.8]);
    }

    #[test]
    fn mean_similarity_matches_the_gram_matrix_mean() {
        let pts: Vec<f32> = (0..7 * 5)
            .map(|i| ((i * 31 % 17) as f32 - 8.0) / 3.0)
            .collect();
        let u = normalized_rows(&pts, 5);
        let means = mean_similarities(&u, 5, 7);
        for (i, m) in means.iter().enumerate() {
            let row = &u[i * 5..i * 5 + 5];
            let full: f32 = u.chunks(5).map(|r| dot(row, r)).sum::<f32>() / 7.0;
            assert!((m - full).abs() < 1e-6, "{m} vs {full}");
        }
    }
}
