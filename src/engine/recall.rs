//! The engine's side of the archive (`archive.rs`): selection over cells and recall
//! candidates, archiving evicted cells, placing recalled ones back, and the cheap check that
//! decides when a swap pass is worth running between compression passes.
//!
//! A pass with an archive: the pages whose key summaries give the recent queries the highest
//! bound become candidates (up to `budget / 4` cells); their keys are scored exactly with the
//! cells', and shared selection keeps the best `target` of both. Cells that lose are archived,
//! then evicted; candidates that win are placed back at their own positions. Cells recalled by
//! one pass are kept by the next (no thrashing), and a page is not checked again for a few
//! steps after it was evicted or checked.

use super::{Engine, Phase, Scoring};
use crate::archive::{ArchiveScratch, LayerFormat, Layout, Page, RawRows, RecallRows};
use crate::host::{Host, LOG_WARN};
use crate::reduce::span_pool;
use crate::scorer::{BoundQueries, ScoreCtx};
use crate::select::select_evictions;

/// Per-sequence recall state.
#[derive(Clone, Debug)]
pub struct SeqRecall {
    /// Weakest raw score (max logit) among the middle cells the last pass kept: a page whose
    /// bound beats it under the newest query is worth a swap pass. +inf until a pass ran.
    pub threshold: f32,
    /// Decode steps since the last recall check.
    pub since_check: usize,
    /// The last batch brought several tokens in the decode phase (a new user turn).
    pub after_batch: bool,
    /// Positions recalled by the last pass: the next pass keeps them.
    pub held: Vec<i32>,
}

impl Default for SeqRecall {
    fn default() -> Self {
        SeqRecall {
            threshold: f32::INFINITY,
            since_check: 0,
            after_batch: false,
            held: Vec::new(),
        }
    }
}

/// Buffers of archive work, reused between passes.
#[derive(Default)]
pub struct ArchScratch {
    /// Recall candidates: position, page, index in the page; keys per scored layer.
    cand_pos: Vec<i32>,
    cand_page: Vec<i32>,
    pub cand_k: Vec<Vec<f32>>,
    bounds: Vec<f32>,
    page_ids: Vec<i32>,
    /// Cells and candidates in position order (indices into `0..n + m`).
    order: Vec<usize>,
    comb_pos: Vec<i32>,
    comb_scores: Vec<f32>,
    raw_max: Vec<f32>,
    evict_comb: Vec<usize>,
    /// Evicted cells (position, score) to archive, and candidates (page, position) to recall.
    ev_pos: Vec<i32>,
    ev_scores: Vec<f32>,
    recall: Vec<(i32, i32)>,
    k: Vec<Vec<u8>>,
    v: Vec<Vec<u8>>,
    rows: RecallRows,
    place: Vec<u32>,
    archive: ArchiveScratch,
}

/// Steps after which a page that was evicted or checked is checked again.
fn recheck_after(page: usize, recall_every: usize) -> u64 {
    (page.max(recall_every) * 2) as u64
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
        } else if self.layers.len() != n_host_layers as usize {
            Some(format!(
                "{} of {n_host_layers} layers can be scored",
                self.layers.len()
            ))
        } else {
            self.layers
                .iter()
                .find(|l| l.v_type.is_none())
                .map(|l| format!("layer {} has no V type the archive reads", l.host_index))
        };
        if let Some(why) = why {
            if !self.warned_archive {
                self.warned_archive = true;
                host.log(LOG_WARN, &format!("beaconkv: archive off: {why}"));
            }
            return;
        }
        let ty = self.params.archive_type;
        let formats = self
            .layers
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
        let Engine {
            scratch,
            scorer,
            layers,
            params,
            seqs,
            archive,
            step,
            ..
        } = self;
        let (Some(layout), Some(state)) = (archive.as_ref(), seqs.get_mut(&seq)) else {
            return 0;
        };
        let sc = &mut scratch.arch;
        let pages: Vec<(i32, &Page)> = state.archive.pages().map(|(&id, p)| (id, p)).collect();
        sc.bounds.resize(pages.len(), 0.0);
        let (pos, cells) = (&scratch.pos[..n], &scratch.cells[..n]);
        let ctx = ScoreCtx {
            seq,
            stream,
            cells,
            pos,
            m_pos: (pos[n - 1] + 1).max(state.stats.pos_max + 1),
            layers,
            queries: &state.queries,
            seed: params.seed,
            prob: params.score_prob,
            extra: None,
        };
        let summary = |p: usize, li: usize| pages[p].1.summary(layout, li);
        if !scorer.page_bounds(
            &ctx,
            BoundQueries::Recent,
            pages.len(),
            &summary,
            &mut sc.bounds,
        ) {
            return 0;
        }
        sc.page_ids.clear();
        sc.page_ids.extend(0..pages.len() as i32);
        let bounds = &sc.bounds;
        sc.page_ids
            .sort_unstable_by(|&a, &b| bounds[b as usize].total_cmp(&bounds[a as usize]));
        let limit = (params.budget / 4).max(layout.page);
        sc.cand_pos.clear();
        sc.cand_page.clear();
        for &p in &sc.page_ids {
            let (id, page) = pages[p as usize];
            if sc.cand_pos.len() + page.pos.len() > limit && !sc.cand_pos.is_empty() {
                break;
            }
            sc.cand_pos.extend_from_slice(&page.pos);
            sc.cand_page.extend(std::iter::repeat_n(id, page.pos.len()));
        }
        let m = sc.cand_pos.len();
        sc.cand_k.resize(layout.layers.len(), Vec::new());
        for (li, l) in layout.layers.iter().enumerate() {
            let keys = &mut sc.cand_k[li];
            keys.resize(m * l.k_dim, 0.0);
            let mut c = 0;
            while c < m {
                let id = sc.cand_page[c];
                let page = state.archive.page(id).expect("listed above");
                for idx in 0..page.pos.len() {
                    let row = &mut keys[(c + idx) * l.k_dim..(c + idx + 1) * l.k_dim];
                    state.archive.k_f32(layout, id, idx, li, row);
                }
                c += page.pos.len();
            }
        }
        drop(pages);
        for &id in &sc.cand_page {
            if let Some(page) = state.archive.page_mut(id) {
                page.checked_at = *step;
            }
        }
        m
    }

    /// Shared selection over the `n` cells and `m` candidates scored in `scratch.scores`:
    /// fills `scratch.evict_cells` (cells to evict), and with `archiving` the evicted cells'
    /// positions and scores and the candidates to recall; updates the recall threshold.
    pub(super) fn select(
        &mut self,
        seq: i32,
        n: usize,
        m: usize,
        prefix: usize,
        target: usize,
        archiving: bool,
    ) {
        let Engine {
            scratch: sc,
            params,
            seqs,
            ..
        } = self;
        let state = seqs.get_mut(&seq).expect("compress created the state");
        let a = &mut sc.arch;
        let total = n + m;
        // position order: cells are sorted, candidates are sorted: merge
        a.order.clear();
        let (mut i, mut j) = (0, 0);
        while i < n || j < m {
            if j == m || (i < n && sc.pos[i] <= a.cand_pos[j]) {
                a.order.push(i);
                i += 1;
            } else {
                a.order.push(n + j);
                j += 1;
            }
        }
        let pos_of = |k: usize| if k < n { sc.pos[k] } else { a.cand_pos[k - n] };
        a.comb_pos.clear();
        a.comb_pos.extend(a.order.iter().map(|&k| pos_of(k)));
        a.comb_scores.clear();
        a.comb_scores.extend(a.order.iter().map(|&k| sc.scores[k]));
        // cells the last pass recalled stay one more pass
        if !state.recall.held.is_empty() {
            for (s, p) in a.comb_scores.iter_mut().zip(&a.comb_pos) {
                if state.recall.held.binary_search(p).is_ok() {
                    *s = f32::INFINITY;
                }
            }
        }
        span_pool(&mut a.comb_scores, params.span, &mut sc.reduce);
        select_evictions(
            &a.comb_pos,
            &a.comb_scores,
            prefix,
            params.window,
            target,
            &mut sc.select,
            &mut a.evict_comb,
        );
        sc.evict_cells.clear();
        a.ev_pos.clear();
        a.ev_scores.clear();
        a.recall.clear();
        // which candidates survive: mark evicted combined indices
        let mut e = 0;
        for (ci, &k) in a.order.iter().enumerate() {
            let evicted = e < a.evict_comb.len() && a.evict_comb[e] == ci;
            if evicted {
                e += 1;
            }
            match (k < n, evicted) {
                (true, true) => {
                    sc.evict_cells.push(sc.cells[k]);
                    if archiving {
                        a.ev_pos.push(sc.pos[k]);
                        a.ev_scores.push(a.comb_scores[ci]);
                    }
                }
                (false, false) => a.recall.push((a.cand_page[k - n], a.cand_pos[k - n])),
                _ => {}
            }
        }
        if !archiving {
            return;
        }
        // threshold for the per-step check: weakest raw max logit of the kept middle
        state.recall.threshold = f32::INFINITY;
        if !params.score_prob && sc.rows.n_rows() > 0 && sc.rows.n_cols() == total {
            a.raw_max.clear();
            a.raw_max.extend_from_slice(sc.rows.row(0));
            for r in 1..sc.rows.n_rows() {
                for (o, &v) in a.raw_max.iter_mut().zip(sc.rows.row(r)) {
                    *o = o.max(v);
                }
            }
            let end = total.saturating_sub(params.window.max(1));
            let mut e = 0;
            let mut t = f32::INFINITY;
            for ci in 0..end {
                while e < a.evict_comb.len() && a.evict_comb[e] < ci {
                    e += 1;
                }
                let evicted = e < a.evict_comb.len() && a.evict_comb[e] == ci;
                if ci >= prefix && !evicted {
                    t = t.min(a.raw_max[a.order[ci]]);
                }
            }
            state.recall.threshold = t;
        }
        state.recall.held.clear();
        state.recall.held.extend(a.recall.iter().map(|&(_, p)| p));
        state.recall.held.sort_unstable();
    }

    /// Copy the rows of the cells about to be evicted into the sequence's archive.
    pub(super) fn archive_evicted(
        &mut self,
        host: &mut dyn Host,
        seq: i32,
        stream: u32,
    ) -> Result<(), String> {
        let Engine {
            scratch: sc,
            seqs,
            archive,
            params,
            step,
            ..
        } = self;
        let Some(layout) = archive.as_ref() else {
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
        state.archive.insert(layout, &rows, *step, &mut a.archive);
        state.archive.enforce_cap(params.archive);
        Ok(())
    }

    /// Place the selected candidates back: free cells at their positions, then every layer's
    /// rows. Returns how many were recalled (0 when the cache has no free cells for them).
    pub(super) fn recall_selected(
        &mut self,
        host: &mut dyn Host,
        seq: i32,
        stream: u32,
    ) -> Result<usize, String> {
        let Engine {
            scratch: sc,
            seqs,
            archive,
            ..
        } = self;
        let Some(layout) = archive.as_ref() else {
            return Ok(0);
        };
        let a = &mut sc.arch;
        let state = seqs.get_mut(&seq).expect("compress created the state");
        // a candidate may have been dropped by the cap while the evicted cells went in
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
            a.ev_scores.clear(); // reused as nothing else needs it now
            let take: Vec<i32> = a.recall[start..end].iter().map(|r| r.1).collect();
            state.archive.take(layout, id, &take, &mut a.rows);
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
                // the placed cells hold no valid rows: drop them again
                host.seq_evict(seq, &a.place);
                state.recall.held.clear();
                return Err(format!("write_kv(layer {}) returned {rc}", l.host_index));
            }
        }
        Ok(k)
    }

    /// Whether `seq` should run a swap pass now: after a multi-token batch in the decode phase,
    /// or every `recall_every` steps when an archived page's bound under the newest query beats
    /// the weakest kept cell.
    pub(super) fn recall_due(&mut self, _host: &mut dyn Host, seq: i32) -> bool {
        if self.archive.is_none() || self.scoring() != Scoring::Policy {
            return false;
        }
        let every = self.params.recall_every;
        let Some(state) = self.seqs.get_mut(&seq) else {
            return false;
        };
        if state.archive.is_empty() || state.phase != Phase::Decode {
            return false;
        }
        if std::mem::take(&mut state.recall.after_batch) {
            return true;
        }
        if every == 0 || self.params.score_prob {
            return false;
        }
        state.recall.since_check += 1;
        if state.recall.since_check < every {
            return false;
        }
        state.recall.since_check = 0;
        if state.recall.threshold == f32::INFINITY {
            // no pass has set it since a restore: one swap pass does
            return true;
        }
        let t0 = std::time::Instant::now();
        let hit = self.newest_query_hits(seq);
        if let Some(state) = self.seqs.get_mut(&seq) {
            state.stats.ms_recall += t0.elapsed().as_secs_f64() * 1e3;
        }
        hit
    }

    /// Some archived page not checked lately has a bound under the newest query above the
    /// threshold.
    fn newest_query_hits(&mut self, seq: i32) -> bool {
        let Engine {
            scratch,
            scorer,
            layers,
            params,
            seqs,
            archive,
            step,
            ..
        } = self;
        let (Some(layout), Some(state)) = (archive.as_ref(), seqs.get(&seq)) else {
            return false;
        };
        let wait = recheck_after(layout.page, params.recall_every);
        let pages: Vec<&Page> = state
            .archive
            .pages()
            .map(|(_, p)| p)
            .filter(|p| p.checked_at + wait <= *step)
            .collect();
        if pages.is_empty() {
            return false;
        }
        let sc = &mut scratch.arch;
        sc.bounds.resize(pages.len(), 0.0);
        let m_pos = state.stats.pos_max + 1;
        let ctx = ScoreCtx {
            seq,
            stream: 0,
            cells: &[],
            pos: &[],
            m_pos,
            layers,
            queries: &state.queries,
            seed: params.seed,
            prob: params.score_prob,
            extra: None,
        };
        let summary = |p: usize, li: usize| pages[p].summary(layout, li);
        if !scorer.page_bounds(
            &ctx,
            BoundQueries::Newest,
            pages.len(),
            &summary,
            &mut sc.bounds,
        ) {
            return false;
        }
        let t = state.recall.threshold;
        sc.bounds.iter().any(|&b| b > t)
    }
}
