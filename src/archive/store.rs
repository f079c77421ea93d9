//! The archive of one sequence: pages of evicted rows keyed by position, each with the box its
//! keys lie in, and the page format saved in a sequence's state.

use std::collections::BTreeMap;

use super::layout::Layout;
use super::rows::{
    push_f32, remove_row, splice_row, store_row, ArchiveScratch, RawRows, RecallRows,
};
use crate::codec::{ReadResult, Reader, Writer};
use crate::ggml::dequant::dequantize_row;

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
        if hi <= lo {
            return; // empty: a reversed page range would panic below
        }
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

    /// Forget the archived positions among `held`, the positions the sequence's cells have now
    /// (a host copy, `seq_cp`, can give a sequence cells at positions it had archived): recalling
    /// one would place a second cell at a position the sequence holds. Returns how many.
    pub fn forget_held(&mut self, layout: &Layout, held: &[i32]) -> usize {
        if self.n_cells == 0 {
            return 0;
        }
        let stale: Vec<i32> = held
            .iter()
            .copied()
            .filter(|&p| self.contains(layout, p))
            .collect();
        for &p in &stale {
            self.remove_range(layout, p, p + 1);
        }
        stale.len()
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

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
