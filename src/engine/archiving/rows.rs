//! Rows between the cache and the archive: the evicted cells' rows into it, recalled ones back
//! into free cells at their own positions; and the archived pages ranked by their bounds and
//! loaded as candidates, for a pass (`stage.rs`) and a check between passes (`recall.rs`).

use super::ArchScratch;
use crate::archive::{Layout, RawRows, RecallProbe, SeqArchive};
use crate::engine::Engine;
use crate::host::Host;
use crate::scoring::ScoreCtx;

impl Engine {
    /// Copy the rows of the cells about to be evicted into the sequence's archive.
    pub(super) fn archive_evicted(
        &mut self,
        host: &mut dyn Host,
        seq: i32,
        stream: u32,
    ) -> Result<(), String> {
        let (sc, seqs) = (&mut self.scratch, &mut self.seqs);
        let Some(layout) = self.archive.as_ref() else {
            return Ok(());
        };
        let a = &mut sc.arch;
        let cells = &sc.evict_cells;
        a.k.resize(layout.layers.len(), Vec::new());
        a.v.resize(layout.layers.len(), Vec::new());
        for (li, l) in layout.layers.iter().enumerate() {
            a.k[li].resize(cells.len() * l.k_raw(), 0);
            a.v[li].resize(cells.len() * l.v_raw(), 0);
            let rc = host.read_kv(l.host_index, stream, cells, &mut a.k[li], &mut a.v[li]);
            if rc < 0 {
                return Err(format!("read_kv(layer {}) returned {rc}", l.host_index));
            }
        }
        let state = seqs.get_mut(&seq).expect("compress created the state");
        let rows = RawRows {
            pos: &a.ev_pos,
            scores: &a.ev_scores,
            k: &a.k,
            v: &a.v,
        };
        state.archive.insert(layout, &rows, &mut a.archive);
        Ok(())
    }

    /// Drop the lowest-value pages of `seq`'s archive beyond the `archive` cap. Called after the
    /// recall that follows an insert, so that the pages being recalled are never the ones dropped.
    pub(super) fn enforce_archive_cap(&mut self, seq: i32) {
        let cap = self.params.archive;
        if let Some(state) = self.seqs.get_mut(&seq) {
            state.archive.enforce_cap(cap);
        }
    }

    /// Place the selected candidates back: free cells at their positions, then every layer's
    /// rows. Returns how many were recalled (0 when the cache has no free cells for them).
    pub(super) fn recall_selected(
        &mut self,
        host: &mut dyn Host,
        seq: i32,
        stream: u32,
    ) -> Result<usize, String> {
        let (sc, seqs) = (&mut self.scratch, &mut self.seqs);
        let Some(layout) = self.archive.as_ref() else {
            return Ok(0);
        };
        let a = &mut sc.arch;
        let state = seqs.get_mut(&seq).expect("compress created the state");
        // only what the archive still holds can come back (the cap applies after the recall)
        a.recall.retain(|&(_, p)| state.archive.contains(layout, p));
        if a.recall.is_empty() {
            return Ok(0);
        }
        // cells first: when the cache has no free cells for them (e.g. cells shared with another
        // sequence) they simply stay archived
        a.ev_pos.clear();
        a.ev_pos.extend(a.recall.iter().map(|r| r.1));
        let k = a.ev_pos.len();
        a.place.resize(k, 0);
        if host.seq_place(seq, &a.ev_pos, &mut a.place) < 0 {
            state.recall.held.clear();
            return Ok(0);
        }
        a.rows.pos.clear();
        a.rows.k.iter_mut().for_each(Vec::clear);
        a.rows.v.iter_mut().for_each(Vec::clear);
        let mut start = 0;
        while start < a.recall.len() {
            let id = a.recall[start].0;
            let end = start + a.recall[start..].iter().take_while(|r| r.0 == id).count();
            a.take_pos.clear();
            a.take_pos.extend(a.recall[start..end].iter().map(|r| r.1));
            state.archive.take(layout, id, &a.take_pos, &mut a.rows);
            start = end;
        }
        debug_assert_eq!(a.rows.pos, a.ev_pos, "rows come out in the placed order");
        for (li, l) in layout.layers.iter().enumerate() {
            let format = if l.exact() { 0 } else { 1 };
            let rc = host.write_kv(
                l.host_index,
                stream,
                &a.place,
                format,
                &a.rows.k[li],
                &a.rows.v[li],
            );
            if rc < 0 {
                // the placed cells hold no valid rows: drop them again (listed first, as every
                // eviction is; the positions are gone for good, they left the archive above)
                let mut stream = 0u32;
                let n = host.seq_cells(seq, &mut sc.pos, &mut sc.cells, &mut stream);
                if n >= 0 && n as usize <= sc.cells.len() {
                    host.seq_evict(seq, &a.place);
                }
                state.recall.held.clear();
                return Err(format!("write_kv(layer {}) returned {rc}", l.host_index));
            }
        }
        Ok(k)
    }
}

/// The archived pages, best bound first under the scorer's positioned queries, into
/// `sc.ranked` as (page, bound).
pub(super) fn rank_pages(
    probe: &mut dyn RecallProbe,
    ctx: &ScoreCtx,
    layout: &Layout,
    archive: &SeqArchive,
    sc: &mut ArchScratch,
) {
    let ids = &mut sc.all_pages;
    ids.clear();
    ids.extend(archive.pages().map(|(&id, _)| id));
    let page = |p: usize| archive.page(ids[p]).expect("listed above");
    let summary = |p: usize, li: usize| page(p).summary(layout, li);
    probe.page_bounds(ctx, ids.len(), &summary, &mut sc.score_rows);
    sc.score_rows.max_into(&mut sc.col_max);
    sc.ranked.clear();
    sc.ranked
        .extend(ids.iter().zip(&sc.col_max).map(|(&id, &b)| (id, b)));
    sc.ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
}

/// Fill the candidates (positions, pages, dequantised keys per layer) with every archived
/// position of pages `ids`.
pub(super) fn load_candidates(
    layout: &Layout,
    archive: &SeqArchive,
    ids: &[i32],
    sc: &mut ArchScratch,
) {
    sc.cand_pos.clear();
    sc.cand_page.clear();
    for &id in ids {
        if let Some(page) = archive.page(id) {
            sc.cand_pos.extend_from_slice(&page.pos);
            sc.cand_page.extend(std::iter::repeat_n(id, page.pos.len()));
        }
    }
    let m = sc.cand_pos.len();
    sc.cand_k.resize(layout.layers.len(), Vec::new());
    for (li, l) in layout.layers.iter().enumerate() {
        let keys = &mut sc.cand_k[li];
        keys.resize(m * l.k_dim, 0.0);
        let mut c = 0;
        while c < m {
            let id = sc.cand_page[c];
            let page = archive.page(id).expect("listed above");
            for idx in 0..page.pos.len() {
                let row = &mut keys[(c + idx) * l.k_dim..(c + idx + 1) * l.k_dim];
                archive.k_f32(layout, id, idx, li, row);
            }
            c += page.pos.len();
        }
    }
}
