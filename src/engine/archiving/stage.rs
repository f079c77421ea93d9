//! The archive's stage of a compression pass (`engine/pass.rs`): before selection, recall
//! candidates scored with the cells; one selection over both; after it, the cells that lost are
//! archived and the candidates that won are placed back at their own positions.

use std::time::{Duration, Instant};

use super::rows::{load_candidates, rank_pages};
use super::ArchScratch;
use crate::engine::fallback::Scoring;
use crate::engine::seq::Phase;
use crate::engine::Engine;
use crate::host::Host;
use crate::scoring::reduce::span_pool;
use crate::scoring::select::select_evictions;

/// The archive's part in one pass: opened while an archive is on and the sequence's cells are
/// scored by its policy.
pub(in crate::engine) struct ArchiveStage {
    /// Something is archived: pages may compete for the kept places.
    has_archived: bool,
    /// A pass at the current size that only exchanges cells for archived ones (a new user
    /// turn), with something archived to exchange.
    pub(in crate::engine) swap: bool,
    /// Recall candidates the pass scores after its cells (`ArchScratch::candidate_keys`).
    pub(in crate::engine) candidates: usize,
    /// Time of the archive's work after selection (the statistics' recall time).
    pub(in crate::engine) time: Duration,
}

impl Engine {
    /// The archive's stage of a pass over `seq` (`swap`: see [`ArchiveStage`]); `None` without
    /// an archive or while passes score by position. Either way the sequence's token ids get
    /// room until the next pass, so that recording them never allocates on the per-token path.
    pub(in crate::engine) fn archive_stage(
        &mut self,
        seq: i32,
        swap: bool,
    ) -> Option<ArchiveStage> {
        let room = if self.params.recall_match > 0 && self.params.archive > 0 {
            2 * self.params.budget + 64
        } else {
            0
        };
        let policy = self.limits(seq).policy;
        let on = self.archive.is_some() && self.scoring_for(policy) == Scoring::Policy;
        let state = self.seq_entry(seq);
        state.trail.reserve(room);
        let has_archived = on && !state.archive.is_empty();
        on.then_some(ArchiveStage {
            has_archived,
            swap: swap && has_archived,
            candidates: 0,
            time: Duration::ZERO,
        })
    }

    /// Before scoring the `n` listed cells: when archived pages compete in this pass
    /// (`candidates_wanted`), those with the best bounds under the newest queries become the
    /// stage's candidates, up to a quarter of the sequence's own budget in cells.
    pub(in crate::engine) fn pick_candidates(
        &mut self,
        seq: i32,
        stream: u32,
        n: usize,
        stage: &mut ArchiveStage,
    ) {
        if !stage.has_archived || !self.candidates_wanted(seq, stage.swap) {
            return;
        }
        let budget = self.limits(seq).own_budget;
        let params = &self.params;
        let (Some(layout), Some(state)) = (self.archive.as_ref(), self.seqs.get_mut(&seq)) else {
            return;
        };
        let sc = &mut self.scratch.arch;
        let (pos, cells) = (&self.scratch.pos[..n], &self.scratch.cells[..n]);
        state.archive.forget_held(layout, pos);
        let ctx = state
            .score_ctx(&self.layers.descs, stream, pos, params.seed)
            .with_cells(cells, pos)
            .with_prob(params.score_prob);
        let Some(probe) = self.scorers.policy.query_scorer() else {
            return;
        };
        rank_pages(probe, &ctx, layout, &state.archive, sc);
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
        stage.candidates = sc.cand_pos.len();
    }

    /// Whether a pass over `seq` lets archived pages compete for the kept places: always when
    /// recall reads the queries alone; by tokens, in the prompt phase (a document being read),
    /// at a swap pass (a new user turn) and when a check since the last pass found the text
    /// repeating, so that ordinary generation runs exactly as eviction alone does. Consumes
    /// that check's mark: one pass per repeat seen.
    fn candidates_wanted(&mut self, seq: i32, swap: bool) -> bool {
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

    /// Selection over the `n` listed cells and the stage's candidates (scored in
    /// `scratch.scores`, cells first) in one position order, with the cells the last pass
    /// recalled held: the cells that lose go to `scratch.evict_cells` (and to the archive after
    /// it), the candidates that win to the recall list. The kept middle becomes the recall's
    /// victims; the recalled positions are held by the next pass.
    pub(in crate::engine) fn select_with_candidates(
        &mut self,
        seq: i32,
        n: usize,
        stage: &ArchiveStage,
        prefix: usize,
        target: usize,
    ) {
        let (sc, params) = (&mut self.scratch, &self.params);
        let state = self.seqs.get_mut(&seq).expect("the pass created the state");
        let (a, held) = (&mut sc.arch, &state.recall.held);
        a.merge(&sc.pos[..n], &sc.scores, stage.candidates, held);
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
        a.split(&sc.cells[..n], &mut sc.evict_cells);
        state.marks.evicted(a.ev_pos.iter().copied());
        // the per-step recall replaces the weakest kept cells: their raw maxima are the logits
        // archived keys must beat
        state.recall.victims.clear();
        if sc.rows.raw_max_into(&mut a.raw_max) {
            a.kept_middle(prefix, params.window, &mut state.recall.victims);
        }
        state.recall.held.clear();
        state.recall.held.extend(a.recall.iter().map(|&(_, p)| p));
        state.recall.held.sort_unstable();
    }

    /// After selection, before the eviction: the rows of the cells selection drops go to the
    /// archive while the cells still hold them. A failing host callback turns the archive off.
    pub(in crate::engine) fn archive_dropped(
        &mut self,
        host: &mut dyn Host,
        seq: i32,
        stream: u32,
        stage: &mut ArchiveStage,
    ) {
        let t0 = Instant::now();
        if !self.scratch.evict_cells.is_empty() {
            if let Err(e) = self.archive_evicted(host, seq, stream) {
                self.stop_archive(host, &e);
            }
        }
        stage.time += t0.elapsed();
    }

    /// After the eviction: the candidates selection kept are placed back, then the archive's
    /// cap applies (after the recall, so that a page coming back is never the one dropped).
    /// Returns the cells recalled. A failing host callback turns the archive off.
    pub(in crate::engine) fn recall_kept(
        &mut self,
        host: &mut dyn Host,
        seq: i32,
        stream: u32,
        stage: &mut ArchiveStage,
    ) -> usize {
        let t0 = Instant::now();
        let recalled = if stage.candidates > 0 {
            match self.recall_selected(host, seq, stream) {
                Ok(k) => k,
                Err(e) => {
                    self.stop_archive(host, &e);
                    0
                }
            }
        } else {
            0
        };
        self.enforce_archive_cap(seq);
        stage.time += t0.elapsed();
        recalled
    }
}

/// The combined selection of a pass with candidates (`select_with_candidates`).
impl ArchScratch {
    /// The listed cells (`pos`, `scores[..n]`) and the first `m` candidates (`scores[n..]`) in
    /// one position order (both lists are sorted; a cell goes first on a tie) into `order`,
    /// `comb_pos` and `comb_scores`; positions in `held` score `+inf`.
    fn merge(&mut self, pos: &[i32], scores: &[f32], m: usize, held: &[i32]) {
        let (n, cand_pos) = (pos.len(), &self.cand_pos[..m]);
        self.order.clear();
        let (mut i, mut j) = (0, 0);
        while i < n || j < m {
            if j == m || (i < n && pos[i] <= cand_pos[j]) {
                self.order.push(i);
                i += 1;
            } else {
                self.order.push(n + j);
                j += 1;
            }
        }
        let pos_of = |k: usize| if k < n { pos[k] } else { cand_pos[k - n] };
        self.comb_pos.clear();
        self.comb_pos.extend(self.order.iter().map(|&k| pos_of(k)));
        self.comb_scores.clear();
        self.comb_scores
            .extend(self.order.iter().map(|&k| scores[k]));
        for (s, p) in self.comb_scores.iter_mut().zip(&self.comb_pos) {
            if held.binary_search(p).is_ok() {
                *s = f32::INFINITY;
            }
        }
    }

    /// After selection (`evict_comb`): the listed `cells` that lose into `evict`, their
    /// positions and scores into `ev_pos` / `ev_scores` for the archive; the candidates that win
    /// into `recall` as (page, position).
    fn split(&mut self, cells: &[u32], evict: &mut Vec<u32>) {
        let n = cells.len();
        evict.clear();
        self.ev_pos.clear();
        self.ev_scores.clear();
        self.recall.clear();
        let mut e = 0;
        for (ci, &k) in self.order.iter().enumerate() {
            let evicted = e < self.evict_comb.len() && self.evict_comb[e] == ci;
            if evicted {
                e += 1;
            }
            match (k < n, evicted) {
                (true, true) => {
                    evict.push(cells[k]);
                    self.ev_pos.push(self.comb_pos[ci]);
                    self.ev_scores.push(self.comb_scores[ci]);
                }
                (false, false) => self.recall.push((self.cand_page[k - n], self.comb_pos[ci])),
                _ => {}
            }
        }
    }

    /// The middle cells selection kept (outside `prefix` and the window) with their raw maxima
    /// (`raw_max`, in cell and candidate order), weakest first, into `victims`.
    fn kept_middle(&self, prefix: usize, window: usize, victims: &mut Vec<(f32, i32)>) {
        let end = self.order.len().saturating_sub(window.max(1));
        let mut e = 0;
        for ci in prefix.min(end)..end {
            while e < self.evict_comb.len() && self.evict_comb[e] < ci {
                e += 1;
            }
            if e >= self.evict_comb.len() || self.evict_comb[e] != ci {
                victims.push((self.raw_max[self.order[ci]], self.comb_pos[ci]));
            }
        }
        victims.sort_unstable_by(|x, y| x.0.total_cmp(&y.0));
    }
}
