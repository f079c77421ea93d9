//! Rotations shared by the heads and layers of one call.

use super::{inverse_rotation, Rope};

/// Rotations computed during one call (a capture, a scoring pass), shared by every head and
/// every layer with the same RoPE: layers usually share one, so a token's 270 head rotations
/// (SmolLM2) cost one evaluation of sin and cos. Cleared at the start of each call, so an id
/// never outlives the layer list that assigned it.
#[derive(Default)]
pub struct RotationMemo {
    index: std::collections::HashMap<(usize, i32), usize>,
    tables: Vec<[f32; 2]>,
    inverses: Vec<[f64; 2]>,
    one: Vec<[f32; 2]>,
    one_inverse: Vec<[f64; 2]>,
}

impl RotationMemo {
    pub fn clear(&mut self) {
        self.index.clear();
        self.tables.clear();
        self.inverses.clear();
    }

    /// The rotation of `rope` (whose layers share `rope_id`) at `pos`.
    pub fn get(&mut self, rope_id: usize, rope: &Rope, pos: i32) -> &[[f32; 2]] {
        let at = self.entry(rope_id, rope, pos);
        &self.tables[at..at + rope.n_dims / 2]
    }

    /// The inverse of [`RotationMemo::get`]'s rotation, for [`Rope::unrotate_with`].
    pub fn get_inverse(&mut self, rope_id: usize, rope: &Rope, pos: i32) -> &[[f64; 2]] {
        let at = self.entry(rope_id, rope, pos);
        &self.inverses[at..at + rope.n_dims / 2]
    }

    fn entry(&mut self, rope_id: usize, rope: &Rope, pos: i32) -> usize {
        if let Some(&at) = self.index.get(&(rope_id, pos)) {
            return at;
        }
        rope.rotation(pos, &mut self.one);
        inverse_rotation(&self.one, &mut self.one_inverse);
        let at = self.tables.len();
        self.tables.extend_from_slice(&self.one);
        self.inverses.extend_from_slice(&self.one_inverse);
        self.index.insert((rope_id, pos), at);
        at
    }
}
