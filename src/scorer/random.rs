//! `random`: a seeded hash of (seed, position), so the control run is reproducible and a cell
//! keeps its score across passes.

use super::{ScoreCtx, ScoreError, ScoreRows, Scorer};
use crate::host::Host;

pub struct RandomScorer;

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

impl Scorer for RandomScorer {
    fn score(
        &mut self,
        ctx: &ScoreCtx,
        _: &mut dyn Host,
        rows: &mut ScoreRows,
    ) -> Result<(), ScoreError> {
        for (s, &p) in rows.add_rows(1).iter_mut().zip(ctx.pos) {
            *s = random_score(ctx.seed, p);
        }
        Ok(())
    }
}
