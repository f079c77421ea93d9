//! Quantisers for the archive's element types (q8_0, q4_0), the reference ones of ggml
//! (`quantize_row_q8_0_ref`, `quantize_row_q4_0_ref`), so that `kread::dequantize_row` and
//! llama.cpp read the blocks back the same way.

use half::f16;

const QK: usize = 32;

/// Quantise `src` (whole blocks of 32) to q8_0, appending `src.len() / 32 * 34` bytes to `dst`.
pub fn quantize_q8_0(src: &[f32], dst: &mut Vec<u8>) {
    debug_assert!(src.len().is_multiple_of(QK));
    for block in src.chunks_exact(QK) {
        let amax = block.iter().fold(0.0f32, |m, &v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        dst.extend_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
        dst.extend(block.iter().map(|&v| ((v * id).round() as i8) as u8));
    }
}

/// Quantise `src` (whole blocks of 32) to q4_0, appending `src.len() / 32 * 18` bytes to `dst`.
pub fn quantize_q4_0(src: &[f32], dst: &mut Vec<u8>) {
    debug_assert!(src.len().is_multiple_of(QK));
    for block in src.chunks_exact(QK) {
        // the value of largest magnitude, with its sign, maps to -8
        let max = block
            .iter()
            .fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        dst.extend_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
        let code = |v: f32| ((v * id + 8.5) as i32).clamp(0, 15) as u8;
        for j in 0..QK / 2 {
            dst.push(code(block[j]) | (code(block[j + QK / 2]) << 4));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ggml::dequant::dequantize_row;
    use crate::ggml::types::GgmlType;

    fn wave(n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i as f32) * 0.37).sin() * 3.0 - 0.5)
            .collect()
    }

    #[test]
    fn q8_0_round_trip_is_within_half_a_step() {
        let x = wave(96);
        let mut q = Vec::new();
        quantize_q8_0(&x, &mut q);
        assert_eq!(q.len(), GgmlType::Q8_0.row_size(96));
        let mut y = vec![0.0; 96];
        dequantize_row(GgmlType::Q8_0, &q, &mut y);
        for (b, (xs, ys)) in x.chunks(32).zip(y.chunks(32)).enumerate() {
            let step = xs.iter().fold(0.0f32, |m, v| m.max(v.abs())) / 127.0;
            for (a, c) in xs.iter().zip(ys) {
                assert!((a - c).abs() <= step * 0.51 + 1e-3, "block {b}: {a} vs {c}");
            }
        }
    }

    #[test]
    fn q4_0_round_trip_is_within_one_step() {
        let x = wave(64);
        let mut q = Vec::new();
        quantize_q4_0(&x, &mut q);
        assert_eq!(q.len(), GgmlType::Q4_0.row_size(64));
        let mut y = vec![0.0; 64];
        dequantize_row(GgmlType::Q4_0, &q, &mut y);
        for (xs, ys) in x.chunks(32).zip(y.chunks(32)) {
            let step = xs.iter().fold(0.0f32, |m, v| m.max(v.abs())) / 8.0;
            for (a, c) in xs.iter().zip(ys) {
                assert!((a - c).abs() <= step + 1e-3, "{a} vs {c}");
            }
        }
    }

    #[test]
    fn zero_blocks_stay_zero() {
        let mut q = Vec::new();
        quantize_q8_0(&[0.0; 32], &mut q);
        quantize_q4_0(&[0.0; 32], &mut q);
        let mut y = vec![1.0; 32];
        dequantize_row(GgmlType::Q8_0, &q[..34], &mut y);
        assert!(y.iter().all(|&v| v == 0.0));
        dequantize_row(GgmlType::Q4_0, &q[34..], &mut y);
        assert!(y.iter().all(|&v| v == 0.0));
    }
}
