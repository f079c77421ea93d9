//! Orthonormal Walsh-Hadamard rotation, as llama.cpp applies it to quantised K.
//!
//! PLACEHOLDER written by the engine branch so it compiles; replaced at merge.

/// Orthonormal Sylvester Hadamard transform of each `block`-sized chunk (self-inverse).
pub fn hadamard_inplace(x: &mut [f32], block: usize) {
    if block < 2 || !block.is_power_of_two() {
        return;
    }
    let norm = 1.0 / (block as f32).sqrt();
    for chunk in x.chunks_exact_mut(block) {
        let mut h = 1;
        while h < block {
            for i in (0..block).step_by(2 * h) {
                for j in i..i + h {
                    let (a, b) = (chunk[j], chunk[j + h]);
                    chunk[j] = a + b;
                    chunk[j + h] = a - b;
                }
            }
            h *= 2;
        }
        chunk.iter_mut().for_each(|v| *v *= norm);
    }
}
