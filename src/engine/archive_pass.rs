//! The engine's side of the archive (`archive/`) within a pass: turning it on and off, choosing
//! recall candidates, archiving evicted cells, placing recalled ones back, and the archive's cap.
//!
//! A pass with an archive: the pages whose key summaries give the newest queries the highest
//! bound become candidates (up to `budget / 4` cells); their keys are scored exactly with the
//! cells', and shared selection keeps the best `target` of both. Cells that lose are archived,
//! then evicted; candidates that win are placed back at their own positions.

use super::fallback::first;
use super::seq::Phase;
use super::Engine;
use crate::archive::{
    ArchiveScratch, LayerFormat, Layout, RawRows, RecallProbe, RecallRows, SeqArchive,
};
use crate::host::{Host, LOG_WARN};
use crate::scoring::{ScoreCtx, ScoreRows};

/// Buffers of archive work, reused between passes.
#[derive(Default)]
pub(super) struct ArchScratch {
    /// Recall candidates: position, page, index in the page; keys per scored layer.
    pub(super) cand_pos: Vec<i32>,
    pub(super) cand_page: Vec<i32>,
    pub(super) cand_k: Vec<Vec<f32>>,
    /// A check's score rows (page bounds, exact logits or the cells' logits) and their column
    /// maxima.
    pub(super) score_rows: ScoreRows,
    pub(super) col_max: Vec<f32>,
    /// Archived pages best bound first (page, bound), and the pages a step works on.
    pub(super) ranked: Vec<(i32, f32)>,
    /// Every archived page, in the order `rank_pages` bounds them.
    pub(super) all_pages: Vec<i32>,
    pub(super) page_ids: Vec<i32>,
    /// Cells and candidates in position order (indices into `0..n + m`).
    pub(super) order: Vec<usize>,
    pub(super) comb_pos: Vec<i32>,
    pub(super) comb_scores: Vec<f32>,
    pub(super) raw_max: Vec<f32>,
    pub(super) evict_comb: Vec<usize>,
    /// Evicted cells (position, score) to archive, and candidates (page, position) to recall.
    pub(super) ev_pos: Vec<i32>,
    pub(super) ev_scores: Vec<f32>,
    pub(super) recall: Vec<(i32, i32)>,
    /// A check's winning pages with the logit that won them (page, logit).
    pub(super) winners: Vec<(i32, f32)>,
    /// The positions taken out of one page.
    pub(super) take_pos: Vec<i32>,
    pub(super) k: Vec<Vec<u8>>,
    pub(super) v: Vec<Vec<u8>>,
    pub(super) rows: RecallRows,
    pub(super) place: Vec<u32>,
    pub(super) archive: ArchiveScratch,
}

impl Engine {
    /// Turn the archive on when the params ask for it, the host has its callbacks and every
    /// evictable layer can be scored (a layer the engine cannot read could not be restored).
    pub(super) fn setup_archive(&mut self, host: &mut dyn Host, n_host_layers: i32) {
        let old = self.archive.take();
        if self.params.archive == 0 || n_host_layers <= 0 {
            return;
        }
        let why = if !host.has_archive() {
            Some("the host has no read_kv/write_kv/seq_place".to_string())
        } else if self.layers.descs.len() != n_host_layers as usize {
            Some(format!(
                "{} of {n_host_layers} layers can be scored",
                self.layers.descs.len()
            ))
        } else {
            self.layers
                .descs
                .iter()
                .find(|l| l.v_type.is_none())
                .map(|l| format!("layer {} has no V type the archive reads", l.host_index))
        };
        if let Some(why) = why {
            if first(&mut self.warned.archive) {
                host.log(LOG_WARN, &format!("beaconkv: archive off: {why}"));
            }
            return;
        }
        let ty = self.params.archive_type;
        let formats = self
            .layers
            .descs
            .iter()
            .map(|l| {
                LayerFormat::new(
                    l.host_index,
                    (l.k_type, l.n_head_kv * l.head_dim),
                    (l.v_type.expect("checked above"), l.v_dim),
                    ty,
                )
            })
            .collect();
        let layout = Layout::new(formats, self.params.page);
        if old.as_ref() != Some(&layout) {
            for s in self.seqs.values_mut() {
                s.archive = Default::default();
            }
        }
        self.archive = Some(layout);
    }

    /// The archive failed (a host callback): stop using it for the rest of the context.
    pub(super) fn stop_archive(&mut self, host: &mut dyn Host, why: &str) {
        if self.archive.take().is_some() {
            host.log(
                LOG_WARN,
                &format!("beaconkv: archive off for the rest of this context: {why}"),
            );
        }
    }

    /// Choose recall candidates for a pass over `n` cells: the archived pages with the best
    /// bounds under the recent queries, up to `budget / 4` cells. Fills the scratch's
    /// candidates (keys dequantised per layer) and returns their number.
    pub(super) fn pick_candidates(&mut self, seq: i32, stream: u32, n: usize) -> usize {
        // a quarter of the budget the sequence runs with (its own, e.g. one request's)
        let budget = self.limits(seq).own_budget;
        let params = &self.params;
        let (Some(layout), Some(state)) = (self.archive.as_ref(), self.seqs.get_mut(&seq)) else {
            return 0;
        };
        let sc = &mut self.scratch.arch;
        let (pos, cells) = (&self.scratch.pos[..n], &self.scratch.cells[..n]);
        state.archive.forget_held(layout, pos);
        let ctx = state
            .score_ctx(&self.layers.descs, stream, pos, params.seed)
            .with_cells(cells, pos)
            .with_prob(params.score_prob);
        let Some(probe) = self.scorers.policy.query_scorer() else {
            return 0;
        };
        if !rank_pages(probe, &ctx, layout, &state.archive, sc) {
            return 0;
        }
        let limit = (budget / 4).max(layout.page);
        let mut n_cand = 0;
        let mut chosen = std::mem::take(&mut sc.page_ids);
        chosen.clear();
        for &(id, _) in &sc.ranked {
            let len = state.archive.page(id).map_or(0, |p| p.pos.len());
            if n_cand + len > limit && n_cand > 0 {
                break;
            }
            n_cand += len;
            chosen.push(id);
        }
        load_candidates(layout, &state.archive, &chosen, sc);
        sc.page_ids = chosen;
        sc.cand_pos.len()
    }

    /// Whether a pass over `seq` lets archived pages compete for the kept places: always when
    /// recall reads the queries alone; by tokens, in the prompt phase (a document being read),
    /// at a swap pass (a new user turn) and when a check since the last pass found the text
    /// repeating, so that ordinary generation runs exactly as eviction alone does. Consumes
    /// that check's mark: one pass per repeat seen.
    pub(super) fn candidates_wanted(&mut self, seq: i32, swap: bool) -> bool {
        let n_match = self.params.recall_match;
        let Some(state) = self.seqs.get_mut(&seq) else {
            return false;
        };
        let repeat_seen = std::mem::take(&mut state.recall.repeat_seen);
        n_match == 0
            || !state.trail.knows(state.stats.pos_max, n_match)
            || swap
            || state.phase == Phase::Prompt
            || repeat_seen
    }

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
/// `sc.ranked` as (page, bound). False when the scorer has no page bounds.
pub(super) fn rank_pages(
    probe: &mut dyn RecallProbe,
    ctx: &ScoreCtx,
    layout: &Layout,
    archive: &SeqArchive,
    sc: &mut ArchScratch,
) -> bool {
    let ids = &mut sc.all_pages;
    ids.clear();
    ids.extend(archive.pages().map(|(&id, _)| id));
    let page = |p: usize| archive.page(ids[p]).expect("listed above");
    let summary = |p: usize, li: usize| page(p).summary(layout, li);
    if !probe.page_bounds(ctx, ids.len(), &summary, &mut sc.score_rows) {
        return false;
    }
    sc.score_rows.max_into(&mut sc.col_max);
    sc.ranked.clear();
    sc.ranked
        .extend(ids.iter().zip(&sc.col_max).map(|(&id, &b)| (id, b)));
    sc.ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    true
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
