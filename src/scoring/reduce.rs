//! Folding per-(layer, kv head) scores into one score per cell, and span pooling.
//!
//! llama.cpp shares a cell between all layers and heads, so eviction is per token; how the
//! per-head opinions are combined is a quality lever (see docs/design.md).

use super::rows::{fold_column_max, ScoreRows};
use crate::config::Reduce;

/// Scratch reused between passes.
#[derive(Debug, Default)]
pub struct ReduceScratch {
    order: Vec<u32>,
    pooled: Vec<f32>,
}

/// Write one score per cell into `out` (`rows.n_cols()` long). No rows: all zeros.
pub fn reduce(rows: &ScoreRows, how: Reduce, out: &mut [f32], scratch: &mut ReduceScratch) {
    let n = rows.n_cols();
    debug_assert_eq!(out.len(), n);
    let n_rows = rows.n_rows();
    if n_rows == 0 || n == 0 {
        out.fill(0.0);
        return;
    }
    match how {
        Reduce::Max => {
            out.fill(f32::NEG_INFINITY);
            for r in 0..n_rows {
                fold_column_max(rows.row(r), out);
            }
        }
        Reduce::ZMean => {
            out.fill(0.0);
            for r in 0..n_rows {
                let row = rows.row(r);
                let mean = row.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
                let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n as f64;
                let inv_sd = if var > 0.0 { 1.0 / var.sqrt() } else { 0.0 };
                for (o, &s) in out.iter_mut().zip(row) {
                    *o += ((s as f64 - mean) * inv_sd / n_rows as f64) as f32;
                }
            }
        }
        Reduce::Rank => {
            out.fill(0.0);
            let denom = (n.max(2) - 1) as f32 * n_rows as f32;
            for r in 0..n_rows {
                let row = rows.row(r);
                scratch.order.clear();
                scratch.order.extend(0..n as u32);
                scratch.order.sort_unstable_by(|&a, &b| {
                    row[a as usize].total_cmp(&row[b as usize]).then(a.cmp(&b))
                });
                for (rank, &c) in scratch.order.iter().enumerate() {
                    out[c as usize] += rank as f32 / denom;
                }
            }
        }
    }
}

/// Max-pool scores over `span` neighbouring cells (position order), so runs of tokens around an
/// important one are kept together. `span` is odd; 1 leaves the scores unchanged.
pub fn span_pool(scores: &mut [f32], span: usize, scratch: &mut ReduceScratch) {
    let half = span / 2;
    if half == 0 || scores.is_empty() {
        return;
    }
    scratch.pooled.clear();
    scratch.pooled.extend_from_slice(scores);
    let n = scores.len();
    for (i, s) in scores.iter_mut().enumerate() {
        let lo = i.saturating_sub(half);
        let hi = (i + half + 1).min(n);
        *s = scratch.pooled[lo..hi]
            .iter()
            .copied()
            .fold(f32::NEG_INFINITY, f32::max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(data: &[&[f32]]) -> ScoreRows {
        let mut r = ScoreRows::default();
        r.reset(data[0].len());
        for row in data {
            r.add_rows(1).copy_from_slice(row);
        }
        r
    }

    fn run(data: &[&[f32]], how: Reduce) -> Vec<f32> {
        let r = rows(data);
        let mut out = vec![0.0; r.n_cols()];
        reduce(&r, how, &mut out, &mut ReduceScratch::default());
        out
    }

    #[test]
    fn max_takes_the_largest_opinion() {
        assert_eq!(
            run(&[&[1.0, 5.0, 2.0], &[4.0, 0.0, 3.0]], Reduce::Max),
            vec![4.0, 5.0, 3.0]
        );
    }

    #[test]
    fn zmean_ignores_per_row_scale() {
        let out = run(&[&[1.0, 2.0, 3.0], &[100.0, 200.0, 300.0]], Reduce::ZMean);
        assert!(out[0] < out[1] && out[1] < out[2]);
        assert!((out[0] + out[2]).abs() < 1e-6);
        assert_eq!(run(&[&[7.0, 7.0]], Reduce::ZMean), vec![0.0, 0.0]);
    }

    #[test]
    fn rank_is_mean_normalised_rank() {
        let out = run(&[&[3.0, 1.0, 2.0], &[0.0, 1.0, 2.0]], Reduce::Rank);
        assert_eq!(out, vec![0.5, 0.25, 0.75]);
    }

    #[test]
    fn no_rows_gives_zeros() {
        let mut r = ScoreRows::default();
        r.reset(3);
        let mut out = vec![1.0; 3];
        reduce(&r, Reduce::Max, &mut out, &mut ReduceScratch::default());
        assert_eq!(out, vec![0.0; 3]);
    }

    #[test]
    fn span_pool_spreads_peaks() {
        let mut s = vec![0.0, 0.0, 9.0, 0.0, 0.0, 1.0];
        span_pool(&mut s, 3, &mut ReduceScratch::default());
        assert_eq!(s, vec![0.0, 9.0, 9.0, 9.0, 1.0, 1.0]);
    }
}
