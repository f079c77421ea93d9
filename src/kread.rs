//! Reading K rows out of a cache tensor, dequantised to f32.
//!
//! PLACEHOLDER written by the engine branch so it compiles; replaced at merge. Only F32, F16,
//! BF16 and Q8_0 are decoded here; other types yield zeros.

use crate::ggml_types::GgmlType;

/// Dequantise one row of `dst.len()` values.
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) {
    match ty {
        GgmlType::F32 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
                *d = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
            }
        }
        GgmlType::F16 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = half::f16::from_le_bytes([s[0], s[1]]).to_f32();
            }
        }
        GgmlType::BF16 => {
            for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *d = half::bf16::from_le_bytes([s[0], s[1]]).to_f32();
            }
        }
        GgmlType::Q8_0 => {
            for (d, blk) in dst.chunks_mut(32).zip(src.chunks_exact(34)) {
                let scale = half::f16::from_le_bytes([blk[0], blk[1]]).to_f32();
                for (v, &q) in d.iter_mut().zip(&blk[2..]) {
                    *v = scale * (q as i8) as f32;
                }
            }
        }
        _ => dst.iter_mut().for_each(|v| *v = 0.0),
    }
}

/// Read the K row of (`stream`, `cell`, kv `head`) of `dst.len()` values.
///
/// # Safety
/// `base` must point to a tensor laid out with the given strides that holds that row.
#[allow(clippy::too_many_arguments)] // the layout is given by ggml's strides
pub unsafe fn read_k_row(
    base: *const u8,
    ty: GgmlType,
    nb1: usize,
    nb2: usize,
    stream: usize,
    cell: usize,
    head: usize,
    dst: &mut [f32],
) {
    let row = ty.row_size(dst.len());
    let p = base.add(stream * nb2 + cell * nb1 + head * row);
    dequantize_row(ty, std::slice::from_raw_parts(p, row), dst);
}

/// Dot product with several accumulators so the compiler vectorises it.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}
