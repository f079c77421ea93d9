//! The redundancy term of `rkv`: per kv head, how much of each key the other cached keys already
//! hold, measured by cosine similarity (R-KV, Cai et al. 2025).
//!
//! A key's redundancy is its mean cosine similarity to the other keys, except that for every key
//! i, the newest later key j with `cos(k_i, k_j) > SIMILAR` does not count its similarity to i.
//! So of a group of near-duplicates the newest scores as least redundant and the oldest as most,
//! and a pair of duplicates evicts its older member first. (R-KV's own rule takes each key's newest
//! near-duplicate in either direction, which clears both members of a pair.)
//!
//! Costs: the mean similarity is one dot product per key with the sum of the unit keys, O(n d).
//! The near-duplicates take pairs: per tile of keys, the newer keys are compared newest first
//! (the tile kernel of a scoring pass, `BLOCK` keys at a time) until every key of the tile has
//! found its newest near-duplicate, so keys with close successors stop early and keys with none
//! compare against all newer keys: O(n² d) per head at worst.

use crate::kernels::{dot_fast, dot_tile_all, transpose_tile, TILE};

/// Cosine similarity above which a newer key counts as a near-duplicate (R-KV's threshold).
pub const SIMILAR: f32 = 0.5;

/// Newer keys compared with one tile at a time while looking for near-duplicates.
const BLOCK: usize = 64;

/// Scratch reused between passes.
#[derive(Default)]
pub struct Redundancy {
    /// One tile of keys, transposed for the tile kernel.
    kt: Vec<f32>,
    /// `[newer key of the block][TILE]`: their similarities to the tile's keys.
    sims: Vec<f32>,
    /// The sum of the unit keys.
    total: Vec<f32>,
    /// Per key: the sum of its counted similarities.
    sum: Vec<f32>,
}

impl Redundancy {
    /// `out[c]` (the first `n` values) = the redundancy of key c among the `n` keys: rows of `d`
    /// values of unit (or zero) length in `keys`, which holds `n.next_multiple_of(TILE)` rows
    /// (the padding rows are read, never counted).
    pub fn redundancy(&mut self, keys: &[f32], n: usize, d: usize, out: &mut [f32]) {
        let n_pad = n.next_multiple_of(TILE);
        assert!(
            d > 0 && keys.len() >= n_pad * d && out.len() >= n,
            "redundancy: shapes disagree"
        );
        // every other key's similarity: k_c . (sum of all) - k_c . k_c
        self.total.clear();
        self.total.resize(d, 0.0);
        for k in keys[..n * d].chunks_exact(d) {
            self.total.iter_mut().zip(k).for_each(|(t, &v)| *t += v);
        }
        self.sum.clear();
        self.sum.extend(
            keys[..n * d]
                .chunks_exact(d)
                .map(|k| dot_fast(k, &self.total) - dot_fast(k, k)),
        );
        // a key's newest later near-duplicate does not count its similarity to the key
        self.kt.resize(d * TILE, 0.0);
        for c0 in (0..n).step_by(TILE) {
            let width = TILE.min(n - c0);
            transpose_tile(&keys[c0 * d..], d, &mut self.kt);
            let mut found = [None::<(usize, f32)>; TILE];
            let mut missing = width;
            let mut hi = n;
            while hi > c0 + 1 && missing > 0 {
                let lo = hi.saturating_sub(BLOCK).max(c0);
                let sims = &mut self.sims;
                sims.resize((hi - lo) * TILE, 0.0);
                dot_tile_all(&keys[lo * d..hi * d], &self.kt, sims);
                // most blocks of keys with no near-duplicate are passed over by this test alone
                let mut any = false;
                for &s in sims.iter() {
                    any |= s > SIMILAR;
                }
                if any {
                    for (r, lanes) in sims.chunks_exact(TILE).enumerate().rev() {
                        let i = lo + r;
                        for (t, (f, &s)) in found.iter_mut().zip(lanes).take(width).enumerate() {
                            if f.is_none() && i > c0 + t && s > SIMILAR {
                                *f = Some((i, s));
                                missing -= 1;
                            }
                        }
                    }
                }
                hi = lo;
            }
            for &(i, s) in found.iter().flatten() {
                self.sum[i] -= s;
            }
        }
        let others = n.saturating_sub(1).max(1) as f32;
        for (o, &s) in out[..n].iter_mut().zip(&self.sum) {
            *o = s / others;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(v: &mut [f32]) {
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x /= norm);
    }

    /// The definition, pair by pair.
    fn reference(keys: &[f32], n: usize, d: usize) -> Vec<f32> {
        let cos =
            |i: usize, j: usize| -> f32 { (0..d).map(|e| keys[i * d + e] * keys[j * d + e]).sum() };
        let mut sum: Vec<f32> = (0..n)
            .map(|c| (0..n).filter(|&i| i != c).map(|i| cos(i, c)).sum())
            .collect();
        for i in 0..n {
            if let Some(j) = (i + 1..n).rev().find(|&j| cos(i, j) > SIMILAR) {
                sum[j] -= cos(i, j);
            }
        }
        sum.iter().map(|s| s / (n.max(2) - 1) as f32).collect()
    }

    /// `n` unit keys, padded, of values uniform in [-shift, 1 - shift): the larger `shift`, the
    /// fewer near-duplicates.
    fn keys(n: usize, d: usize, seed: u64, shift: f32) -> Vec<f32> {
        let mut s = seed;
        let mut k: Vec<f32> = (0..n.next_multiple_of(TILE) * d)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) - shift
            })
            .collect();
        for (r, row) in k.chunks_exact_mut(d).enumerate() {
            if r < n {
                unit(row);
            } else {
                row.fill(0.0);
            }
        }
        k
    }

    #[test]
    fn matches_the_pairwise_definition() {
        let mut red = Redundancy::default();
        let cases = [
            (0, 8),
            (1, 8),
            (2, 8),
            (15, 8),
            (16, 64),
            (17, 64),
            (70, 16),
            (200, 64),
        ];
        // a few near-duplicates (full scans), and most pairs near-duplicates (early stops)
        for ((n, d), shift) in cases.into_iter().flat_map(|c| [(c, 0.3), (c, 0.0)]) {
            let k = keys(n, d, n as u64 + 1, shift);
            let want = reference(&k, n, d);
            let near = (0..n)
                .flat_map(|i| (i + 1..n).map(move |j| (i, j)))
                .filter(|&(i, j)| {
                    (0..d).map(|e| k[i * d + e] * k[j * d + e]).sum::<f32>() > SIMILAR
                })
                .count();
            let pairs = n * n.saturating_sub(1) / 2;
            assert!(
                n < 17 || (near > 0 && (shift > 0.0 || near > pairs / 2)),
                "n={n} shift={shift}: {near} of {pairs} pairs are near-duplicates"
            );
            let mut got = vec![f32::NAN; n];
            red.redundancy(&k, n, d, &mut got);
            for c in 0..n {
                assert!(
                    (got[c] - want[c]).abs() <= 1e-5,
                    "n={n} d={d} shift={shift} c={c}: {} vs {}",
                    got[c],
                    want[c]
                );
            }
        }
    }

    #[test]
    fn the_older_of_two_duplicates_is_the_redundant_one() {
        // three orthogonal keys, key 3 a copy of key 1
        let d = 8;
        let mut k = vec![0.0f32; TILE * d];
        for (r, e) in [(0, 0), (1, 1), (2, 2), (3, 1)] {
            k[r * d + e] = 1.0;
        }
        let mut out = vec![0.0; 4];
        Redundancy::default().redundancy(&k, 4, d, &mut out);
        assert_eq!(out, [0.0, 1.0 / 3.0, 0.0, 0.0]);
    }
}
