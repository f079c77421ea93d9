//! The archive: a second tier behind the KV cells. When a compression pass evicts cells, their K
//! and V rows of every layer are copied here first (host memory, per sequence, keyed by
//! position), so that they can be placed back when the text returns to them (see `tokens.rs`).
//!
//! Rows are grouped in pages of `page` consecutive positions. Each page keeps, per layer, the box
//! its (dequantised) keys lie in, element-wise, as centre c and radius r: for any query q,
//! `q·c + |q|·r` (= `sum_j max(q_j*min_j, q_j*max_j)`) bounds `q·k` of every key of the page
//! from above, so a pass can rank pages without reading them and confirm only the best with
//! exact scores. Centre and radius rather than min and max: the bound is then one dot product
//! of `[q, |q|]` with `[c, r]` (`simd::max_dot_lanes`, eight pages at a time).
//! Removing positions from a page leaves its box as it is: a bound over a superset is still one.
//!
//! Element types: `same` stores the cache's own bytes (a recall is exact); `q8_0`/`q4_0`
//! quantise on the way in (a layer whose row is not whole blocks, or whose cache type is already
//! as small, keeps the cache's bytes).

pub mod probe;
pub mod tokens;

use std::collections::BTreeMap;

use crate::config::ArchiveType;
use crate::ggml::dequant::dequantize_row;
use crate::ggml::quant::{quantize_q4_0, quantize_q8_0};
use crate::ggml::types::GgmlType;
use crate::persist::{ReadResult, Reader, Writer};

pub use probe::RecallProbe;

/// How one layer's rows are stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerFormat {
    /// Index for the host's read_kv / write_kv.
    pub host_index: i32,
    /// The cache's element types and values per cell.
    pub k_type: GgmlType,
    pub v_type: GgmlType,
    pub k_dim: usize,
    pub v_dim: usize,
    /// What the archive stores.
    pub k_store: GgmlType,
    pub v_store: GgmlType,
}

impl LayerFormat {
    pub fn new(
        host_index: i32,
        k: (GgmlType, usize),
        v: (GgmlType, usize),
        ty: ArchiveType,
    ) -> Self {
        let store = |cache: GgmlType, dim: usize| {
            let want = match ty {
                ArchiveType::Same => return cache,
                ArchiveType::Q8_0 => GgmlType::Q8_0,
                ArchiveType::Q4_0 => GgmlType::Q4_0,
            };
            let whole = dim.is_multiple_of(want.block_size());
            if whole && want.row_size(dim) < cache.row_size(dim) {
                want
            } else {
                cache
            }
        };
        LayerFormat {
            host_index,
            k_type: k.0,
            v_type: v.0,
            k_dim: k.1,
            v_dim: v.1,
            k_store: store(k.0, k.1),
            v_store: store(v.0, v.1),
        }
    }

    /// Bytes of one K / V row as the host reads and writes them.
    pub fn k_raw(&self) -> usize {
        self.k_type.row_size(self.k_dim)
    }
    pub fn v_raw(&self) -> usize {
        self.v_type.row_size(self.v_dim)
    }
    fn k_stored(&self) -> usize {
        self.k_store.row_size(self.k_dim)
    }
    fn v_stored(&self) -> usize {
        self.v_store.row_size(self.v_dim)
    }

    /// Rows go back as the cache's own bytes (else as F32 rows the host converts).
    pub fn exact(&self) -> bool {
        self.k_store == self.k_type && self.v_store == self.v_type
    }
}

/// The layers of one context's archive and its page size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub layers: Vec<LayerFormat>,
    pub page: usize,
    /// Offset of each layer's summary in a page's `centre`/`radius`.
    sum_off: Vec<usize>,
}

impl Layout {
    pub fn new(layers: Vec<LayerFormat>, page: usize) -> Self {
        let mut sum_off = Vec::with_capacity(layers.len() + 1);
        let mut at = 0;
        for l in &layers {
            sum_off.push(at);
            at += l.k_dim;
        }
        sum_off.push(at);
        Layout {
            layers,
            page: page.max(1),
            sum_off,
        }
    }

    pub fn page_of(&self, pos: i32) -> i32 {
        pos.div_euclid(self.page as i32)
    }

    fn sum_len(&self) -> usize {
        *self.sum_off.last().unwrap_or(&0)
    }
}

/// One page: archived positions (ascending) with their rows and key summary.
#[derive(Clone, Debug)]
pub struct Page {
    pub pos: Vec<i32>,
    /// Per layer, rows in `pos` order.
    k: Vec<Vec<u8>>,
    v: Vec<Vec<u8>>,
    /// Per layer (see `Layout::sum_off`): the element-wise box of the keys ever archived here,
    /// as centre and radius (`-inf` radius: empty), rounded outwards (see `widen_box`).
    centre: Vec<f32>,
    radius: Vec<f32>,
    /// Best score a cell of the page had when it was last scored (eviction order when full).
    pub score: f32,
}

impl Page {
    /// The key summary of layer `li`: (centre, radius), `k_dim` values each.
    pub fn summary<'a>(&'a self, layout: &Layout, li: usize) -> (&'a [f32], &'a [f32]) {
        let r = layout.sum_off[li]..layout.sum_off[li + 1];
        (&self.centre[r.clone()], &self.radius[r])
    }

    fn bytes(&self) -> usize {
        let rows: usize = self.k.iter().chain(&self.v).map(Vec::len).sum();
        rows + (self.centre.len() + self.radius.len()) * 4 + self.pos.len() * 4
    }
}

/// Widen the box (centre `c`, radius `r`) to hold `[lo, hi]` too. The result is rounded
/// outwards (a relative 2^-20 on the radius), so `c ± r` still covers every value it held
/// though f32 arithmetic rounds: the bound stays an upper bound.
fn widen_box(c: &mut f32, r: &mut f32, lo: f32, hi: f32) {
    let (lo, hi) = ((*c - *r).min(lo), (*c + *r).max(hi));
    let half = (hi - lo) * 0.5;
    *c = lo + half;
    *r = half.max(hi - *c).max(*c - lo) * (1.0 + 1.0 / (1 << 20) as f32);
}

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
    f: Vec<f32>,
    /// One row as the archive stores it (reused: no allocation per row).
    row: Vec<u8>,
}

/// The archive of one sequence.
#[derive(Clone, Debug, Default)]
pub struct SeqArchive {
    pages: BTreeMap<i32, Page>,
    n_cells: usize,
    bytes: usize,
    /// Cells dropped for good because the archive was full.
    pub dropped: u64,
}

impl SeqArchive {
    pub fn is_empty(&self) -> bool {
        self.n_cells == 0
    }

    pub fn n_cells(&self) -> usize {
        self.n_cells
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn pages(&self) -> impl Iterator<Item = (&i32, &Page)> {
        self.pages.iter()
    }

    pub fn page(&self, id: i32) -> Option<&Page> {
        self.pages.get(&id)
    }

    /// Whether `pos` is archived.
    pub fn contains(&self, layout: &Layout, pos: i32) -> bool {
        self.pages
            .get(&layout.page_of(pos))
            .is_some_and(|p| p.pos.binary_search(&pos).is_ok())
    }

    /// Archive evicted rows; a position already archived is replaced.
    pub fn insert(&mut self, layout: &Layout, rows: &RawRows, sc: &mut ArchiveScratch) {
        for (i, &pos) in rows.pos.iter().enumerate() {
            let id = layout.page_of(pos);
            let existed = self.pages.contains_key(&id);
            let page = self.pages.entry(id).or_insert_with(|| Page {
                pos: Vec::new(),
                k: vec![Vec::new(); layout.layers.len()],
                v: vec![Vec::new(); layout.layers.len()],
                centre: vec![0.0; layout.sum_len()],
                radius: vec![f32::NEG_INFINITY; layout.sum_len()],
                score: f32::NEG_INFINITY,
            });
            if existed {
                self.bytes -= page.bytes();
            }
            let (at, replace) = match page.pos.binary_search(&pos) {
                Ok(at) => (at, true),
                Err(at) => (at, false),
            };
            if replace {
                page.pos[at] = pos;
            } else {
                page.pos.insert(at, pos);
                self.n_cells += 1;
            }
            for (li, l) in layout.layers.iter().enumerate() {
                let k_raw = &rows.k[li][i * l.k_raw()..(i + 1) * l.k_raw()];
                let v_raw = &rows.v[li][i * l.v_raw()..(i + 1) * l.v_raw()];
                // summary from the exact keys
                sc.f.resize(l.k_dim, 0.0);
                dequantize_row(l.k_type, k_raw, &mut sc.f);
                let r = layout.sum_off[li]..layout.sum_off[li + 1];
                for ((c, rad), &x) in page.centre[r.clone()]
                    .iter_mut()
                    .zip(&mut page.radius[r])
                    .zip(&sc.f)
                {
                    widen_box(c, rad, x, x);
                }
                let k_row = store_row(l.k_type, l.k_store, l.k_dim, k_raw, sc);
                splice_row(&mut page.k[li], at, l.k_stored(), replace, k_row);
                let v_row = store_row(l.v_type, l.v_store, l.v_dim, v_raw, sc);
                splice_row(&mut page.v[li], at, l.v_stored(), replace, v_row);
            }
            page.score = page
                .score
                .max(rows.scores.get(i).copied().unwrap_or(f32::MIN));
            self.bytes += page.bytes();
        }
    }

    /// Dequantised K row (`k_dim` values) of the `idx`-th position of page `id` in layer `li`.
    pub fn k_f32(&self, layout: &Layout, id: i32, idx: usize, li: usize, out: &mut [f32]) {
        let l = &layout.layers[li];
        let page = &self.pages[&id];
        let n = l.k_stored();
        dequantize_row(l.k_store, &page.k[li][idx * n..(idx + 1) * n], out);
    }

    /// Take positions `take` (ascending, all in page `id`) out of the archive for a recall.
    pub fn take(&mut self, layout: &Layout, id: i32, take: &[i32], out: &mut RecallRows) {
        let Some(page) = self.pages.get_mut(&id) else {
            return;
        };
        self.bytes -= page.bytes();
        if out.k.len() != layout.layers.len() {
            out.k = vec![Vec::new(); layout.layers.len()];
            out.v = vec![Vec::new(); layout.layers.len()];
        }
        let mut f = Vec::new();
        for &pos in take {
            let Ok(at) = page.pos.binary_search(&pos) else {
                continue;
            };
            page.pos.remove(at);
            self.n_cells -= 1;
            out.pos.push(pos);
            for (li, l) in layout.layers.iter().enumerate() {
                let (ks, vs) = (l.k_stored(), l.v_stored());
                let (k, v) = (
                    &page.k[li][at * ks..(at + 1) * ks],
                    &page.v[li][at * vs..(at + 1) * vs],
                );
                if l.exact() {
                    out.k[li].extend_from_slice(k);
                    out.v[li].extend_from_slice(v);
                } else {
                    push_f32(l.k_store, l.k_dim, k, &mut f, &mut out.k[li]);
                    push_f32(l.v_store, l.v_dim, v, &mut f, &mut out.v[li]);
                }
                remove_row(&mut page.k[li], at, ks);
                remove_row(&mut page.v[li], at, vs);
            }
        }
        if page.pos.is_empty() {
            self.pages.remove(&id);
        } else {
            self.bytes += page.bytes();
        }
    }

    /// Forget positions `lo <= pos < hi` (the host removed them).
    pub fn remove_range(&mut self, layout: &Layout, lo: i32, hi: i32) {
        let ids: Vec<i32> = self
            .pages
            .range(layout.page_of(lo)..=layout.page_of(hi.saturating_sub(1)))
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            let gone: Vec<i32> = self.pages[&id]
                .pos
                .iter()
                .copied()
                .filter(|&p| p >= lo && p < hi)
                .collect();
            if !gone.is_empty() {
                let mut sink = RecallRows::default();
                self.take(layout, id, &gone, &mut sink);
            }
        }
    }

    /// Drop the lowest-scoring pages (ties: the oldest) until at most `max_cells` remain.
    pub fn enforce_cap(&mut self, max_cells: usize) {
        while self.n_cells > max_cells {
            let worst = self
                .pages
                .iter()
                .min_by(|a, b| a.1.score.total_cmp(&b.1.score).then(a.0.cmp(b.0)))
                .map(|(&id, _)| id);
            let Some(id) = worst else { break };
            let page = self.pages.remove(&id).expect("listed above");
            self.n_cells -= page.pos.len();
            self.bytes -= page.bytes();
            self.dropped += page.pos.len() as u64;
        }
    }

    pub fn save(&self, w: &mut Writer) {
        w.u64(self.pages.len() as u64);
        w.u64(self.dropped);
        for (&id, p) in &self.pages {
            w.i32(id);
            w.i32s(&p.pos);
            w.f32s(&p.centre);
            w.f32s(&p.radius);
            w.f32s(&[p.score]);
            w.u64(0); // format v3's slot for the step a pass last touched the page; unused
            for rows in p.k.iter().chain(&p.v) {
                w.u64(rows.len() as u64);
                w.buf.extend_from_slice(rows);
            }
        }
    }

    /// Read an archive saved by `save` for the same layout. `min_max`: a state of version 2,
    /// whose page boxes were saved as minimum and maximum.
    pub fn load(layout: &Layout, r: &mut Reader, min_max: bool) -> ReadResult<Self> {
        let mut a = SeqArchive::default();
        let n_pages = r.u64()? as usize;
        a.dropped = r.u64()?;
        for _ in 0..n_pages {
            let id = r.i32()?;
            let pos = r.i32s()?;
            let (mut centre, mut radius) = (r.f32s()?, r.f32s()?);
            let score = r.f32s()?.first().copied().unwrap_or(f32::MIN);
            let _touched = r.u64()?; // unused (see `save`)
            if centre.len() != layout.sum_len()
                || radius.len() != layout.sum_len()
                || pos.is_empty()
            {
                return Err("archive page does not match this context's layers".into());
            }
            let mut k = Vec::new();
            let mut v = Vec::new();
            for (side, which) in [(&mut k, 0), (&mut v, 1)] {
                for l in &layout.layers {
                    let len = r.u64()? as usize;
                    let row = if which == 0 {
                        l.k_stored()
                    } else {
                        l.v_stored()
                    };
                    if len != row * pos.len() {
                        return Err("archive rows do not match this context's layers".into());
                    }
                    side.push(r.take(len)?.to_vec());
                }
            }
            if min_max {
                for (c, r) in centre.iter_mut().zip(&mut radius) {
                    let (lo, hi) = (*c, *r);
                    (*c, *r) = (0.0, f32::NEG_INFINITY);
                    widen_box(c, r, lo, hi);
                }
            }
            let page = Page {
                pos,
                k,
                v,
                centre,
                radius,
                score,
            };
            a.n_cells += page.pos.len();
            a.bytes += page.bytes();
            a.pages.insert(id, page);
        }
        Ok(a)
    }
}

/// The stored form of one raw row.
/// One row as the archive stores it: the cache's bytes, or re-quantised (into `sc.row`).
fn store_row<'a>(
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

fn push_f32(store: GgmlType, dim: usize, row: &[u8], f: &mut Vec<f32>, out: &mut Vec<u8>) {
    f.resize(dim, 0.0);
    dequantize_row(store, row, f);
    for x in f.iter() {
        out.extend_from_slice(&x.to_le_bytes());
    }
}

/// Put `row` at row index `at` of `rows` (rows of `size` bytes), over the row there when
/// `replace`, else shifting the rows after it (pages fill mostly in order: usually an append).
fn splice_row(rows: &mut Vec<u8>, at: usize, size: usize, replace: bool, row: &[u8]) {
    let start = at * size;
    if !replace {
        let old_len = rows.len();
        rows.resize(old_len + size, 0);
        rows.copy_within(start..old_len, start + size);
    }
    rows[start..start + size].copy_from_slice(row);
}

fn remove_row(rows: &mut Vec<u8>, at: usize, size: usize) {
    let end = rows.len();
    rows.copy_within((at + 1) * size..end, at * size);
    rows.truncate(end - size);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(ty: ArchiveType) -> Layout {
        Layout::new(
            vec![
                LayerFormat::new(0, (GgmlType::F32, 64), (GgmlType::F32, 32), ty),
                LayerFormat::new(1, (GgmlType::F16, 32), (GgmlType::F16, 32), ty),
            ],
            4,
        )
    }

    fn val(pos: i32, li: usize, j: usize) -> f32 {
        ((pos as f32) * 0.7 + (li * 13 + j) as f32 * 0.31).sin()
    }

    /// Raw rows of `pos` for the layout (F32 layer 0, F16 layer 1).
    fn raw(l: &Layout, pos: &[i32]) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        let mut k = Vec::new();
        let mut v = Vec::new();
        for (li, f) in l.layers.iter().enumerate() {
            let enc = |dim: usize, ty: GgmlType, off: usize| {
                let mut out = Vec::new();
                for &p in pos {
                    for j in 0..dim {
                        let x = val(p, li, j + off);
                        match ty {
                            GgmlType::F32 => out.extend_from_slice(&x.to_le_bytes()),
                            _ => out
                                .extend_from_slice(&half::f16::from_f32(x).to_bits().to_le_bytes()),
                        }
                    }
                }
                out
            };
            k.push(enc(f.k_dim, f.k_type, 0));
            v.push(enc(f.v_dim, f.v_type, 1000));
        }
        (k, v)
    }

    fn fill(l: &Layout, pos: &[i32]) -> SeqArchive {
        let (k, v) = raw(l, pos);
        let scores: Vec<f32> = pos.iter().map(|&p| p as f32).collect();
        let mut a = SeqArchive::default();
        a.insert(
            l,
            &RawRows {
                pos,
                scores: &scores,
                k: &k,
                v: &v,
            },
            &mut ArchiveScratch::default(),
        );
        a
    }

    #[test]
    fn bound_never_underestimates_an_exact_score() {
        let l = layout(ArchiveType::Same);
        let pos: Vec<i32> = (10..30).collect();
        let a = fill(&l, &pos);
        let mut k = vec![0.0; 64];
        for q_seed in 0..20 {
            let q: Vec<f32> = (0..64)
                .map(|j| ((q_seed * 7 + j) as f32 * 1.3).cos())
                .collect();
            for (&id, page) in a.pages() {
                let (c, r) = page.summary(&l, 0);
                let bound: f32 = q
                    .iter()
                    .zip(c.iter().zip(r))
                    .map(|(&x, (&c, &r))| x * c + x.abs() * r)
                    .sum();
                for idx in 0..page.pos.len() {
                    a.k_f32(&l, id, idx, 0, &mut k);
                    let exact: f32 = q.iter().zip(&k).map(|(a, b)| a * b).sum();
                    assert!(
                        bound >= exact - 1e-4,
                        "page {id}: bound {bound} < exact {exact}"
                    );
                }
            }
        }
    }

    #[test]
    fn same_type_round_trip_is_exact_and_counts_cells() {
        let l = layout(ArchiveType::Same);
        let pos = [3, 5, 6, 9];
        let (k, v) = raw(&l, &pos);
        let mut a = fill(&l, &pos);
        assert_eq!(a.n_cells(), 4);
        assert!(a.bytes() > 0);
        assert!(a.contains(&l, 5) && !a.contains(&l, 4));
        // pages of 4 positions: 3 -> page 0; 5, 6 -> page 1; 9 -> page 2
        let mut out = RecallRows::default();
        a.take(&l, 1, &[5, 6], &mut out);
        assert_eq!(a.n_cells(), 2);
        let mut got: Vec<(i32, Vec<u8>)> = out
            .pos
            .iter()
            .enumerate()
            .map(|(i, &p)| (p, out.k[1][i * 64..(i + 1) * 64].to_vec()))
            .collect();
        got.sort();
        assert_eq!(got[0].1, k[1][64..128].to_vec());
        assert_eq!(got[1].1, k[1][128..192].to_vec());
        let vi = out.pos.iter().position(|&p| p == 6).unwrap();
        assert_eq!(out.v[0][vi * 128..(vi + 1) * 128], v[0][2 * 128..3 * 128]);
        assert!(a.page(1).is_none(), "an emptied page is dropped");
    }

    #[test]
    fn quantised_round_trip_is_close() {
        for ty in [ArchiveType::Q8_0, ArchiveType::Q4_0] {
            let l = layout(ty);
            assert!(!l.layers[0].exact());
            let pos = [8, 9];
            let a0 = fill(&l, &pos);
            let mut a = a0.clone();
            let mut out = RecallRows::default();
            a.take(&l, 2, &[8, 9], &mut out);
            let tol = if ty == ArchiveType::Q8_0 { 0.01 } else { 0.15 };
            for (i, &p) in out.pos.iter().enumerate() {
                for j in 0..64 {
                    let b = &out.k[0][(i * 64 + j) * 4..(i * 64 + j + 1) * 4];
                    let x = f32::from_le_bytes(b.try_into().unwrap());
                    assert!(
                        (x - val(p, 0, j)).abs() < tol,
                        "{ty:?} {p} {j}: {x} vs {}",
                        val(p, 0, j)
                    );
                }
            }
            // q8_0/q4_0 store less than f32 and f16 rows
            assert!(a0.bytes() < fill(&layout(ArchiveType::Same), &pos).bytes());
        }
    }

    #[test]
    fn cap_drops_lowest_pages_and_range_removal_forgets() {
        let l = layout(ArchiveType::Same);
        let pos: Vec<i32> = (0..16).collect();
        let mut a = fill(&l, &pos);
        a.enforce_cap(9);
        // pages score by their best position: pages 0 and 1 (scores 3, 7) go first
        assert_eq!(a.n_cells(), 8);
        assert_eq!(a.dropped, 8);
        assert!(!a.contains(&l, 7) && a.contains(&l, 8));
        a.remove_range(&l, 10, 13);
        assert_eq!(a.n_cells(), 5);
        assert!(!a.contains(&l, 11) && a.contains(&l, 13));
    }

    #[test]
    fn save_load_round_trip() {
        let l = layout(ArchiveType::Q8_0);
        let a = fill(&l, &[1, 2, 7, 40]);
        let mut w = Writer::default();
        a.save(&mut w);
        let b = SeqArchive::load(&l, &mut Reader::new(&w.buf), false).unwrap();
        assert_eq!(
            (b.n_cells(), b.bytes(), b.dropped),
            (a.n_cells(), a.bytes(), a.dropped)
        );
        let mut w2 = Writer::default();
        b.save(&mut w2);
        assert_eq!(w.buf, w2.buf);
        assert!(
            SeqArchive::load(&layout(ArchiveType::Same), &mut Reader::new(&w.buf), false).is_err()
        );
    }

    #[test]
    fn rows_splice_and_remove_in_place() {
        let mut rows = Vec::new();
        splice_row(&mut rows, 0, 2, false, &[5, 5]);
        splice_row(&mut rows, 0, 2, false, &[1, 1]); // before
        splice_row(&mut rows, 1, 2, false, &[3, 3]); // between
        splice_row(&mut rows, 3, 2, false, &[7, 7]); // append
        assert_eq!(rows, [1, 1, 3, 3, 5, 5, 7, 7]);
        splice_row(&mut rows, 2, 2, true, &[6, 6]); // replace
        assert_eq!(rows, [1, 1, 3, 3, 6, 6, 7, 7]);
        remove_row(&mut rows, 1, 2);
        assert_eq!(rows, [1, 1, 6, 6, 7, 7]);
        remove_row(&mut rows, 2, 2);
        assert_eq!(rows, [1, 1, 6, 6]);
    }

    #[test]
    fn version_2_boxes_load_as_centre_and_radius() {
        let l = layout(ArchiveType::Same);
        let a = fill(&l, &[1, 2, 3, 7, 40]);
        // a version 2 state held each page's box as (min, max)
        let mut old = a.clone();
        for p in old.pages.values_mut() {
            for (c, r) in p.centre.iter_mut().zip(&mut p.radius) {
                (*c, *r) = (*c - *r, *c + *r);
            }
        }
        let mut w = Writer::default();
        old.save(&mut w);
        let b = SeqArchive::load(&l, &mut Reader::new(&w.buf), true).unwrap();
        let mut k = vec![0.0; 64];
        for (&id, page) in b.pages() {
            let (c, r) = page.summary(&l, 0);
            for idx in 0..page.pos.len() {
                b.k_f32(&l, id, idx, 0, &mut k);
                for j in 0..64 {
                    assert!(
                        (k[j] - c[j]).abs() <= r[j],
                        "page {id} key {idx} dim {j} outside"
                    );
                }
            }
            // and not a vacuous box: as wide as the original, to rounding
            let (c0, r0) = a.page(id).unwrap().summary(&l, 0);
            for j in 0..64 {
                assert!((c[j] - c0[j]).abs() < 1e-5 && (r[j] - r0[j]).abs() < 1e-5);
            }
        }
    }
}
