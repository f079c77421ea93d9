//! The general dequantiser: any supported ggml row type to f32, bit-exact with ggml.
//!
//! [`dequantize_row`] converts a row of any [`GgmlType`] (the archive reads its pages with it);
//! [`read_k_row`] locates one head's key row in a llama.cpp K-cache tensor and converts it.
//! Scoring reads one row per (layer, kv-head, cell), so these functions sit on the hot path:
//! they never allocate, and each dequantiser is a plain per-block loop that reproduces
//! `dequantize_row_*` of `ggml/src/ggml-quants.c` bit for bit (same products, same order).

use crate::ggml::types::GgmlType;
use half::f16;
use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};

/// IQ4_NL's non-linear code book (`kvalues_iq4nl` in ggml-common.h), pre-widened to f32
/// (exact: small integers) so the hot loop does a lookup and one multiply.
const KVALUES_IQ4NL: [f32; 16] = [
    -127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0, 1.0, 13.0, 25.0, 38.0, 53.0, 69.0,
    89.0, 113.0,
];

/// Values per quantised block.
const QK: usize = 32;

/// Dequantise n = dst.len() values of type ty from src (src.len() >= ty.row_size(n)),
/// bit-exact with ggml's to_float.
///
/// Panics if `dst.len()` is not a whole number of blocks or `src` is too short: both are
/// caller bugs that would otherwise read garbage.
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) {
    let need = ty.row_size(dst.len());
    assert!(
        dst.len().is_multiple_of(ty.block_size()),
        "row is not whole blocks"
    );
    assert!(
        src.len() >= need,
        "source row too short: {} < {need}",
        src.len()
    );
    let src = &src[..need];
    match ty {
        GgmlType::F32 => f32_row(src, dst),
        GgmlType::F16 => f16_row(src, dst),
        GgmlType::BF16 => bf16_row(src, dst),
        GgmlType::Q8_0 => blocks(src, dst, ty, q8_0_block),
        GgmlType::Q4_0 => blocks(src, dst, ty, q4_0_block),
        GgmlType::Q4_1 => blocks(src, dst, ty, q4_1_block),
        GgmlType::Q5_0 => blocks(src, dst, ty, q5_0_block),
        GgmlType::Q5_1 => blocks(src, dst, ty, q5_1_block),
        GgmlType::IQ4_NL => blocks(src, dst, ty, iq4_nl_block),
    }
}

/// Read the key row of kv-head `head` of cell `cell` in stream `stream` from a raw K tensor:
/// base + stream*nb2 + cell*nb1 + head*row_size(ty, head_dim); dequantises head_dim values
/// into dst.
///
/// The K cache is `[n_embd_k_gqa, kv_size, n_stream]` with the heads of one cell packed
/// contiguously, so a head's row starts `head` rows into the cell's row.
///
/// # Safety
/// base must point to a live tensor covering that row.
// The argument list is the agreed C-side contract (strides as ggml's nb1/nb2); a struct
// would only move the same eight values around.
#[allow(clippy::too_many_arguments)]
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
    let offset = stream * nb2 + cell * nb1 + head * row;
    // SAFETY: the caller guarantees the tensor covers [offset, offset + row).
    let src = unsafe { std::slice::from_raw_parts(base.add(offset), row) };
    dequantize_row(ty, src, dst);
}

/// F32 rows: a byte copy (the tensor data need not be 4-aligned as a `&[u8]`).
fn f32_row(src: &[u8], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
        *d = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
    }
}

/// F16 to F32 eight values per instruction (exact, like every f16 to f32 conversion); the
/// scoring pass converts every K row it reads, so this is on its path.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
unsafe fn f16_row_f16c(src: &[u8], dst: &mut [f32]) {
    use std::arch::x86_64::*;
    for (i, out) in dst.chunks_exact_mut(8).enumerate() {
        let h = _mm_loadu_si128(src.as_ptr().add(16 * i) as *const __m128i);
        _mm256_storeu_ps(out.as_mut_ptr(), _mm256_cvtph_ps(h));
    }
}

/// F16 rows: IEEE half to single is exact, so F16C's conversion (eight at a time) and `half`'s
/// slice conversion both equal ggml's `GGML_FP16_TO_FP32`. Without F16C, ggml rows are 2-aligned
/// and viewed in place; an odd address falls back to copying through a stack buffer.
fn f16_row(src: &[u8], dst: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if dst.len().is_multiple_of(8) && src.len() >= 2 * dst.len() && crate::kernels::has_f16c() {
            // SAFETY: the CPU has F16C and AVX (checked above); src holds 2 bytes per value.
            return unsafe { f16_row_f16c(src, dst) };
        }
    }
    // SAFETY: every bit pattern is a valid u16; align_to only splits off misaligned ends.
    let (head, halves, _) = unsafe { src.align_to::<u16>() };
    if cfg!(target_endian = "little") && head.is_empty() && halves.len() >= dst.len() {
        halves[..dst.len()]
            .reinterpret_cast::<f16>()
            .convert_to_f32_slice(dst);
        return;
    }
    let mut buf = [f16::ZERO; 64];
    for (s, d) in src.chunks(128).zip(dst.chunks_mut(64)) {
        let h = &mut buf[..d.len()];
        for (x, b) in h.iter_mut().zip(s.chunks_exact(2)) {
            *x = f16::from_bits(u16::from_le_bytes([b[0], b[1]]));
        }
        h.convert_to_f32_slice(d);
    }
}

/// BF16 rows: the top half of an f32, exactly `ggml_compute_bf16_to_fp32` (no NaN rewriting).
fn bf16_row(src: &[u8], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *d = f32::from_bits((u16::from_le_bytes([s[0], s[1]]) as u32) << 16);
    }
}

/// Run a per-block dequantiser over a whole row (generic, so each block loop is inlined).
fn blocks(src: &[u8], dst: &mut [f32], ty: GgmlType, f: impl Fn(&[u8], &mut [f32])) {
    for (b, y) in src
        .chunks_exact(ty.type_size())
        .zip(dst.chunks_exact_mut(QK))
    {
        f(b, y);
    }
}

/// Little-endian f16 at byte `i`, widened exactly.
#[inline(always)]
fn half_at(b: &[u8], i: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f32()
}

/// block_q8_0: d (f16), qs[32] (i8). y = q*d.
fn q8_0_block(b: &[u8], y: &mut [f32]) {
    let d = half_at(b, 0);
    for (v, &q) in y.iter_mut().zip(&b[2..2 + QK]) {
        *v = (q as i8) as f32 * d;
    }
}

/// block_q4_0: d, qs[16]; low nibbles are values 0..16, high nibbles 16..32; y = (q-8)*d.
fn q4_0_block(b: &[u8], y: &mut [f32]) {
    let d = half_at(b, 0);
    let (lo, hi) = y.split_at_mut(QK / 2);
    for (j, &q) in b[2..2 + QK / 2].iter().enumerate() {
        lo[j] = ((q & 0x0F) as i32 - 8) as f32 * d;
        hi[j] = ((q >> 4) as i32 - 8) as f32 * d;
    }
}

/// block_q4_1: d, m, qs[16]; y = q*d + m (two roundings, no fused multiply-add, like ggml).
fn q4_1_block(b: &[u8], y: &mut [f32]) {
    let (d, m) = (half_at(b, 0), half_at(b, 2));
    let (lo, hi) = y.split_at_mut(QK / 2);
    for (j, &q) in b[4..4 + QK / 2].iter().enumerate() {
        lo[j] = (q & 0x0F) as f32 * d + m;
        hi[j] = (q >> 4) as f32 * d + m;
    }
}

/// The 5-bit codes of a q5 block: nibble plus bit j (low half) or j+16 (high half) of qh.
#[inline(always)]
fn q5_codes(qh: u32, q: u8, j: usize) -> (i32, i32) {
    let h0 = ((qh >> j) << 4) & 0x10;
    let h1 = (qh >> (j + 12)) & 0x10;
    ((q as u32 & 0x0F | h0) as i32, ((q as u32 >> 4) | h1) as i32)
}

/// block_q5_0: d, qh[4], qs[16]; y = (code-16)*d.
fn q5_0_block(b: &[u8], y: &mut [f32]) {
    let d = half_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let (lo, hi) = y.split_at_mut(QK / 2);
    for (j, &q) in b[6..6 + QK / 2].iter().enumerate() {
        let (x0, x1) = q5_codes(qh, q, j);
        lo[j] = (x0 - 16) as f32 * d;
        hi[j] = (x1 - 16) as f32 * d;
    }
}

/// block_q5_1: d, m, qh[4], qs[16]; y = code*d + m.
fn q5_1_block(b: &[u8], y: &mut [f32]) {
    let (d, m) = (half_at(b, 0), half_at(b, 2));
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let (lo, hi) = y.split_at_mut(QK / 2);
    for (j, &q) in b[8..8 + QK / 2].iter().enumerate() {
        let (x0, x1) = q5_codes(qh, q, j);
        lo[j] = x0 as f32 * d + m;
        hi[j] = x1 as f32 * d + m;
    }
}

/// block_iq4_nl: d, qs[16]; each nibble indexes the non-linear code book; y = d*kvalue.
fn iq4_nl_block(b: &[u8], y: &mut [f32]) {
    let d = half_at(b, 0);
    let (lo, hi) = y.split_at_mut(QK / 2);
    for (j, &q) in b[2..2 + QK / 2].iter().enumerate() {
        lo[j] = d * KVALUES_IQ4NL[(q & 0x0F) as usize];
        hi[j] = d * KVALUES_IQ4NL[(q >> 4) as usize];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    fn h(x: f32) -> [u8; 2] {
        f16::from_f32(x).to_bits().to_le_bytes()
    }

    /// Pack 32 4-bit codes the ggml way: byte j holds code j (low) and code j+16 (high).
    fn nibbles(codes: &[u8; 32]) -> Vec<u8> {
        (0..16)
            .map(|j| codes[j] & 0xF | (codes[j + 16] & 0xF) << 4)
            .collect()
    }

    /// A deterministic spread of 4-bit codes covering every value.
    fn codes4() -> [u8; 32] {
        std::array::from_fn(|i| ((i * 7 + 3) % 16) as u8)
    }

    fn deq(ty: GgmlType, src: &[u8], n: usize) -> Vec<f32> {
        let mut out = vec![f32::NAN; n];
        dequantize_row(ty, src, &mut out);
        out
    }

    #[test]
    fn q8_0_hand_block() {
        let mut b = h(0.5).to_vec();
        let qs: Vec<i8> = (0..32).map(|i| (i as i8 - 16) * 8 + 1).collect();
        b.extend(qs.iter().map(|&q| q as u8));
        let out = deq(GgmlType::Q8_0, &b, 32);
        for (i, &q) in qs.iter().enumerate() {
            assert_eq!(out[i], q as f32 * 0.5, "i={i}");
        }
        assert_eq!(out[0], -63.5);
        assert_eq!(out[31], 60.5);
    }

    #[test]
    fn q4_0_hand_block() {
        let c = codes4();
        let mut b = h(-0.25).to_vec();
        b.extend(nibbles(&c));
        let out = deq(GgmlType::Q4_0, &b, 32);
        for i in 0..32 {
            assert_eq!(out[i], (c[i] as f32 - 8.0) * -0.25, "i={i}");
        }
        // code 3 at i=0 -> (3-8)*-0.25
        assert_eq!(out[0], 1.25);
    }

    #[test]
    fn q4_1_hand_block() {
        let c = codes4();
        let mut b = h(0.125).to_vec();
        b.extend(h(-1.5));
        b.extend(nibbles(&c));
        let out = deq(GgmlType::Q4_1, &b, 32);
        for i in 0..32 {
            assert_eq!(out[i], c[i] as f32 * 0.125 - 1.5, "i={i}");
        }
        assert_eq!(out[0], 3.0 * 0.125 - 1.5);
    }

    /// 5-bit codes 0..32 split into nibbles and the qh bit field (bit i = high bit of code i).
    fn q5_parts() -> ([u8; 32], Vec<u8>, Vec<u8>) {
        let c: [u8; 32] = std::array::from_fn(|i| ((i * 13 + 5) % 32) as u8);
        let qh: u32 = (0..32).map(|i| ((c[i] as u32 >> 4) & 1) << i).sum();
        (c, qh.to_le_bytes().to_vec(), nibbles(&c))
    }

    #[test]
    fn q5_0_hand_block() {
        let (c, qh, qs) = q5_parts();
        let mut b = h(2.0).to_vec();
        b.extend(qh);
        b.extend(qs);
        let out = deq(GgmlType::Q5_0, &b, 32);
        for i in 0..32 {
            assert_eq!(out[i], (c[i] as f32 - 16.0) * 2.0, "i={i}");
        }
        assert!(c.iter().any(|&x| x >= 16) && c[16..].iter().any(|&x| x >= 16));
    }

    #[test]
    fn q5_1_hand_block() {
        let (c, qh, qs) = q5_parts();
        let mut b = h(0.75).to_vec();
        b.extend(h(-3.0));
        b.extend(qh);
        b.extend(qs);
        let out = deq(GgmlType::Q5_1, &b, 32);
        for i in 0..32 {
            assert_eq!(out[i], c[i] as f32 * 0.75 - 3.0, "i={i}");
        }
    }

    #[test]
    fn iq4_nl_hand_block() {
        let c = codes4();
        let mut b = h(0.5).to_vec();
        b.extend(nibbles(&c));
        let out = deq(GgmlType::IQ4_NL, &b, 32);
        let table = [
            -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
        ];
        for i in 0..32 {
            assert_eq!(out[i], table[c[i] as usize] as f32 * 0.5, "i={i}");
        }
    }

    #[test]
    fn two_blocks_use_their_own_scales() {
        let mut b = h(1.0).to_vec();
        b.extend([1u8; 32]);
        b.extend(h(-2.0));
        b.extend([3u8; 32]);
        let out = deq(GgmlType::Q8_0, &b, 64);
        assert!(out[..32].iter().all(|&v| v == 1.0));
        assert!(out[32..].iter().all(|&v| v == -6.0));
    }

    #[test]
    fn float_rows_are_exact() {
        let vals: Vec<f32> = (0..100).map(|i| (i as f32 - 50.0) * 0.37 + 1e-3).collect();
        let f32b: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(deq(GgmlType::F32, &f32b, 100), vals);

        let halves: Vec<f16> = vals.iter().map(|&v| f16::from_f32(v)).collect();
        let f16b: Vec<u8> = halves
            .iter()
            .flat_map(|v| v.to_bits().to_le_bytes())
            .collect();
        let want: Vec<f32> = halves.iter().map(|v| v.to_f32()).collect();
        assert_eq!(deq(GgmlType::F16, &f16b, 100), want);

        let bfs: Vec<bf16> = vals.iter().map(|&v| bf16::from_f32(v)).collect();
        let bfb: Vec<u8> = bfs.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect();
        let want: Vec<f32> = bfs.iter().map(|v| v.to_f32()).collect();
        assert_eq!(deq(GgmlType::BF16, &bfb, 100), want);
    }

    #[test]
    fn f16_specials_and_unaligned_source() {
        let bits = [0x0001u16, 0x8000, 0x7C00, 0xFC00, 0x3C00, 0x7BFF, 0x0400];
        let mut bytes = vec![0xAAu8]; // shift by one byte to force misalignment
        bytes.extend(bits.iter().flat_map(|b| b.to_le_bytes()));
        let out = deq(GgmlType::F16, &bytes[1..], bits.len());
        assert_eq!(out[0], 2f32.powi(-24));
        assert_eq!(out[1].to_bits(), 0x8000_0000);
        assert_eq!(out[2], f32::INFINITY);
        assert_eq!(out[3], f32::NEG_INFINITY);
        assert_eq!(out[4], 1.0);
        assert_eq!(out[5], 65504.0);
        assert_eq!(out[6], 2f32.powi(-14));
    }

    #[test]
    fn f16_aligned_and_unaligned_paths_agree() {
        let vals: Vec<u16> = (0..150u16).map(|i| i.wrapping_mul(437) ^ 0x3000).collect();
        let want: Vec<f32> = vals.iter().map(|&b| f16::from_bits(b).to_f32()).collect();
        for pad in 0..4 {
            let mut bytes = vec![0u8; pad];
            bytes.extend(vals.iter().flat_map(|b| b.to_le_bytes()));
            let got = deq(GgmlType::F16, &bytes[pad..], vals.len());
            let gb: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
            let wb: Vec<u32> = want.iter().map(|v| v.to_bits()).collect();
            assert_eq!(gb, wb, "pad {pad}");
        }
    }

    #[test]
    fn bf16_is_a_plain_shift() {
        let bytes = 0x3FC0u16.to_le_bytes();
        assert_eq!(deq(GgmlType::BF16, &bytes, 1), [1.5]);
    }

    #[test]
    #[should_panic(expected = "too short")]
    fn short_source_is_refused() {
        deq(GgmlType::Q8_0, &[0u8; 33], 32);
    }

    /// A synthetic [head_dim*n_head, n_cells, n_stream] K tensor with padded strides: every
    /// row encodes its (stream, cell, head) so a wrong offset is caught.
    #[test]
    fn read_k_row_walks_strides() {
        let (hd, n_head, n_cell, n_stream) = (32usize, 3, 5, 2);
        let ty = GgmlType::Q8_0;
        let nb1 = ty.row_size(hd) * n_head + 6; // padded cell stride
        let nb2 = nb1 * n_cell + 10;
        let mut buf = vec![0u8; nb2 * n_stream];
        for s in 0..n_stream {
            for c in 0..n_cell {
                for hh in 0..n_head {
                    let off = s * nb2 + c * nb1 + hh * ty.row_size(hd);
                    buf[off..off + 2].copy_from_slice(&h(1.0));
                    for j in 0..hd {
                        buf[off + 2 + j] = (s * 60 + c * 10 + hh * 3 + j % 2) as u8;
                    }
                }
            }
        }
        let mut dst = vec![0f32; hd];
        for s in 0..n_stream {
            for c in 0..n_cell {
                for hh in 0..n_head {
                    unsafe { read_k_row(buf.as_ptr(), ty, nb1, nb2, s, c, hh, &mut dst) };
                    let base = (s * 60 + c * 10 + hh * 3) as f32;
                    assert_eq!(dst[0], base, "s={s} c={c} h={hh}");
                    assert_eq!(dst[1], base + 1.0);
                }
            }
        }
    }

    #[test]
    fn read_k_row_f16() {
        // head_dim 4: two heads per cell (nb1 = 16) or one head per cell (nb1 = 8)
        let vals = [1.0f32, -2.0, 0.5, 3.0, 7.0, 8.0, 9.0, 10.0];
        let bytes: Vec<u8> = vals.iter().flat_map(|&v| h(v)).collect();
        let mut dst = [0f32; 4];
        unsafe { read_k_row(bytes.as_ptr(), GgmlType::F16, 16, 16, 0, 0, 1, &mut dst) };
        assert_eq!(dst, [7.0, 8.0, 9.0, 10.0]);
        unsafe { read_k_row(bytes.as_ptr(), GgmlType::F16, 8, 16, 0, 1, 0, &mut dst) };
        assert_eq!(dst, [7.0, 8.0, 9.0, 10.0]);
        unsafe { read_k_row(bytes.as_ptr(), GgmlType::F16, 8, 16, 0, 0, 0, &mut dst) };
        assert_eq!(dst, [1.0, -2.0, 0.5, 3.0]);
    }
}
