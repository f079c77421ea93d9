//! Scorers that read nothing but positions, so they need no layer, no K and no query:
//! `streaming` (StreamingLLM: score = position, so selection keeps the sink prefix and the newest
//! cells; also the fallback of a context whose policy failed), `random` (a seeded hash of the
//! position, so the control run is reproducible and a cell keeps its score across passes) and
//! `none` (all equal; the policy never compresses).

use super::{ScoreCtx, ScoreError, ScoreRows, Scorer};
use crate::host::Host;

/// One score per cell from its position (and the context's seed).
pub struct PositionScorer(fn(u64, i32) -> f32);

impl PositionScorer {
    pub fn streaming() -> Self {
        PositionScorer(|_, pos| pos as f32)
    }

    pub fn random() -> Self {
        PositionScorer(random_score)
    }

    pub fn none() -> Self {
        PositionScorer(|_, _| 0.0)
    }
}

impl Scorer for PositionScorer {
    fn score(
        &mut self,
        ctx: &ScoreCtx,
        _: &mut dyn Host,
        rows: &mut ScoreRows,
    ) -> Result<(), ScoreError> {
        for (s, &p) in rows.add_rows(1).iter_mut().zip(ctx.pos) {
            *s = (self.0)(ctx.seed, p);
        }
        Ok(())
    }
}

/// splitmix64 finaliser: a well-mixed 64-bit hash.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Uniform value in [0, 1) for a position.
pub fn random_score(seed: u64, pos: i32) -> f32 {
    (mix(mix(seed) ^ pos as u32 as u64) >> 40) as f32 / (1u64 << 24) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_scores_are_seeded_uniform_and_stable() {
        let a: Vec<f32> = (0..1000).map(|p| random_score(7, p)).collect();
        assert!(a.iter().all(|&v| (0.0..1.0).contains(&v)));
        assert_eq!(a, (0..1000).map(|p| random_score(7, p)).collect::<Vec<_>>());
        assert_ne!(
            a[..10],
            (0..10).map(|p| random_score(8, p)).collect::<Vec<_>>()[..]
        );
        let mean = a.iter().sum::<f32>() / a.len() as f32;
        assert!((mean - 0.5).abs() < 0.05, "mean {mean}");
    }
}
