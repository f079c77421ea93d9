//! Rows going into and out of the archive, and their conversion between the cache's element
//! type and the stored one.

use crate::ggml::dequant::dequantize_row;
use crate::ggml::quant::{quantize_q4_0, quantize_q8_0};
use crate::ggml::types::GgmlType;

/// Rows of evicted cells as the host handed them over (the cache's own bytes).
pub struct RawRows<'a> {
    pub pos: &'a [i32],
    pub scores: &'a [f32],
    /// Per layer, `pos.len()` rows of `k_raw` / `v_raw` bytes.
    pub k: &'a [Vec<u8>],
    pub v: &'a [Vec<u8>],
}

/// Rows taken out of the archive for a recall, per layer in `pos` order: the stored bytes, or
/// dequantised F32 when the layer is not `exact`.
#[derive(Default)]
pub struct RecallRows {
    pub pos: Vec<i32>,
    pub k: Vec<Vec<u8>>,
    pub v: Vec<Vec<u8>>,
}

/// Reused conversion buffers.
#[derive(Default)]
pub struct ArchiveScratch {
    pub(super) f: Vec<f32>,
    /// One row as the archive stores it (reused: no allocation per row).
    pub(super) row: Vec<u8>,
}

/// One row as the archive stores it: the cache's bytes, or re-quantised (into `sc.row`).
pub(super) fn store_row<'a>(
    cache: GgmlType,
    store: GgmlType,
    dim: usize,
    raw: &'a [u8],
    sc: &'a mut ArchiveScratch,
) -> &'a [u8] {
    if store == cache {
        return raw;
    }
    sc.f.resize(dim, 0.0);
    dequantize_row(cache, raw, &mut sc.f);
    sc.row.clear();
    match store {
        GgmlType::Q4_0 => quantize_q4_0(&sc.f, &mut sc.row),
        _ => quantize_q8_0(&sc.f, &mut sc.row),
    }
    &sc.row
}

pub(super) fn push_f32(
    store: GgmlType,
    dim: usize,
    row: &[u8],
    f: &mut Vec<f32>,
    out: &mut Vec<u8>,
) {
    f.resize(dim, 0.0);
    dequantize_row(store, row, f);
    for x in f.iter() {
        out.extend_from_slice(&x.to_le_bytes());
    }
}

/// Put `row` at row index `at` of `rows` (rows of `size` bytes), over the row there when
/// `replace`, else shifting the rows after it (pages fill mostly in order: usually an append).
pub(super) fn splice_row(rows: &mut Vec<u8>, at: usize, size: usize, replace: bool, row: &[u8]) {
    let start = at * size;
    if !replace {
        let old_len = rows.len();
        rows.resize(old_len + size, 0);
        rows.copy_within(start..old_len, start + size);
    }
    rows[start..start + size].copy_from_slice(row);
}

pub(super) fn remove_row(rows: &mut Vec<u8>, at: usize, size: usize) {
    let end = rows.len();
    rows.copy_within((at + 1) * size..end, at * size);
    rows.truncate(end - size);
}
