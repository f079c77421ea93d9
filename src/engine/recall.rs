//! The engine's side of the archive (`archive.rs`): selection over cells and recall
//! candidates, archiving evicted cells, placing recalled ones back, and the targeted recall that
//! runs between compression passes.
//!
//! A pass with an archive: the pages whose key summaries give the newest queries the highest
//! bound become candidates (up to `budget / 4` cells); their keys are scored exactly with the
//! cells', and shared selection keeps the best `target` of both. Cells that lose are archived,
//! then evicted; candidates that win are placed back at their own positions.
//!
//! Between passes, every `recall_every` steps, a check fills the holes of a passage being
//! re-read. With the tokens' ids (`tokens.rs`) it runs only while the newest `recall_match`
//! tokens repeat an earlier occurrence, and the archived positions among the `page` positions
//! after that occurrence come back in place of the weakest cells the last pass kept; a pass in
//! the decode phase lets archived pages compete only after such a check, so text that repeats
//! nothing runs exactly as eviction alone. Without token ids (or `recall_match=0`) the reading
//! position is the kept cell the newest queries attend most, when it beats the weakest kept
//! cell by `recall_margin`; when it does not (nothing of the passage was kept), the archived
//! pages with the best bounds under the same queries get exact logits, and those that beat the
//! threshold come back. After a multi-token batch in the decode phase (a new user turn) a swap
//! pass runs instead (a pass at the current size). Cells recalled are kept by the next pass.

use std::ops::RangeInclusive;
use std::time::Instant;

use super::{Engine, EngineError, Phase, Scoring};
use crate::archive::{ArchiveScratch, LayerFormat, Layout, RawRows, RecallProbe, RecallRows};
use crate::host::{Host, LOG_WARN};
use crate::scoring::reduce::span_pool;
use crate::scoring::select::select_evictions;
use crate::scoring::{ExtraKeys, ScoreCtx, ScoreError, ScoreRows};

/// Per-sequence recall state.
#[derive(Clone, Debug, Default)]
pub struct SeqRecall {
    /// The middle cells the last pass kept, weakest first: (raw score = max logit, position).
    /// A page whose keys beat the weakest under the newest query is recalled in their place.
    /// Empty until a pass ran (or after a restore).
    pub victims: Vec<(f32, i32)>,
    /// Decode steps since the last recall check.
    pub since_check: usize,
    /// The last batch brought several tokens in the decode phase (a new user turn).
    pub after_batch: bool,
    /// Positions recalled by the last pass: the next pass keeps them.
    pub held: Vec<i32>,
    /// A check since the last pass found the text repeating an earlier passage (recall by
    /// tokens): the next pass lets archived pages compete.
    pub repeat_seen: bool,
    /// The first and last positions of the batch about to be placed, when its token ids are
    /// known (set by `record_tokens`, taken by `before_batch`).
    pub batch_span: Option<(i32, i32)>,
    /// The first position of the last batch when it brought several tokens and asked for no
    /// output: a chunk of a prompt or turn whose end is still to come.
    pub chunk_start: Option<i32>,
}

/// Buffers of archive work, reused between passes.
#[derive(Default)]
pub struct ArchScratch {
    /// Recall candidates: position, page, index in the page; keys per scored layer.
    cand_pos: Vec<i32>,
    cand_page: Vec<i32>,
    pub cand_k: Vec<Vec<f32>>,
    /// A check's score rows (page bounds, exact logits or the cells' logits) and their column
    /// maxima.
    score_rows: ScoreRows,
    col_max: Vec<f32>,
    /// Archived pages best bound first (page, bound), and the pages a step works on.
    ranked: Vec<(i32, f32)>,
    /// Every archived page, in the order `rank_pages` bounds them.
    all_pages: Vec<i32>,
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
    /// A check's winning pages with the logit that won them (page, logit).
    winners: Vec<(i32, f32)>,
    /// The positions taken out of one page.
    take_pos: Vec<i32>,
    k: Vec<Vec<u8>>,
    v: Vec<Vec<u8>>,
    rows: RecallRows,
    place: Vec<u32>,
    archive: ArchiveScratch,
}

/// Archived pages a check confirms with exact logits when the cache holds nothing the newest
/// queries want.
const TARGET_PAGES: usize = 8;
/// Pages after a page found that way that come with it.
const READ_AHEAD: i32 = 1;
/// The last positions of a batch whose phrases a batch check looks up (a question's words
/// sit at the end of a user turn, before the chat template's few tokens).
const BATCH_TAIL: i32 = 32;

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
            ..
        } = self;
        let (Some(layout), Some(state)) = (archive.as_ref(), seqs.get_mut(&seq)) else {
            return 0;
        };
        let sc = &mut scratch.arch;
        let (pos, cells) = (&scratch.pos[..n], &scratch.cells[..n]);
        let m_pos = (pos[n - 1] + 1).max(state.stats.pos_max + 1);
        let ctx = ScoreCtx::new(stream, layers, &state.queries, m_pos, params.seed)
            .with_cells(cells, pos)
            .with_prob(params.score_prob);
        let Some(probe) = scorer.query_scorer() else {
            return 0;
        };
        if !rank_pages(probe, &ctx, layout, &state.archive, sc) {
            return 0;
        }
        let limit = (params.budget / 4).max(layout.page);
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
            scorer,
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
        // victims for the per-step recall: the kept middle with its raw max logit (under
        // score=prob the rows hold log probabilities: the scorer kept the raw maxima)
        state.recall.victims.clear();
        let raw_known = if params.score_prob {
            match scorer.query_scorer().and_then(|q| q.raw_max()) {
                Some(raw) if raw.len() == total => {
                    a.raw_max.clear();
                    a.raw_max.extend_from_slice(raw);
                    true
                }
                _ => false,
            }
        } else if sc.rows.n_rows() > 0 && sc.rows.n_cols() == total {
            sc.rows.max_into(&mut a.raw_max);
            true
        } else {
            false
        };
        if raw_known {
            let end = total.saturating_sub(params.window.max(1));
            let mut e = 0;
            for ci in prefix.min(end)..end {
                while e < a.evict_comb.len() && a.evict_comb[e] < ci {
                    e += 1;
                }
                if e >= a.evict_comb.len() || a.evict_comb[e] != ci {
                    state
                        .recall
                        .victims
                        .push((a.raw_max[a.order[ci]], a.comb_pos[ci]));
                }
            }
            state
                .recall
                .victims
                .sort_unstable_by(|x, y| x.0.total_cmp(&y.0));
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

    /// Between compression passes (no pass ran this step): a swap pass after a multi-token
    /// batch in the decode phase, and every `recall_every` steps a targeted recall. Returns the
    /// cells the sequence holds afterwards.
    pub(super) fn recall_step(
        &mut self,
        host: &mut dyn Host,
        seq: i32,
        count: usize,
    ) -> Result<usize, EngineError> {
        if self.archive.is_none() || self.scoring() != Scoring::Policy {
            return Ok(count);
        }
        let every = self.params.recall_every;
        let Some(state) = self.seqs.get_mut(&seq) else {
            return Ok(count);
        };
        if state.archive.is_empty() || state.phase != Phase::Decode || state.verifying {
            return Ok(count);
        }
        if std::mem::take(&mut state.recall.after_batch) {
            return self.compress_pass(host, seq, count, true);
        }
        if every == 0 {
            return Ok(count);
        }
        state.recall.since_check += 1;
        if state.recall.since_check < every {
            return Ok(count);
        }
        state.recall.since_check = 0;
        // with token ids, recall only while the text repeats an earlier passage, from the
        // position after its earlier occurrence (`tokens.rs`); without, where the queries read
        let n_match = self.params.recall_match;
        let now = state.stats.pos_max;
        let page = self.params.page as i32;
        let read_at = if n_match > 0 && state.trail.knows(now, n_match) {
            let Some(q) = state.trail.earlier_match(now, n_match) else {
                return Ok(count);
            };
            state.recall.repeat_seen = true;
            Some(q + 1..=q + page)
        } else {
            None
        };
        if state.recall.victims.is_empty() {
            // no pass has ranked the cells since a restore: one swap pass does
            return self.compress_pass(host, seq, count, true);
        }
        self.recall_at(host, seq, read_at);
        self.cell_count(host, seq)
    }

    /// A targeted recall (`targeted_recall`) with its time and count in the statistics; a
    /// failed host callback turns the archive off.
    fn recall_at(&mut self, host: &mut dyn Host, seq: i32, read_at: Option<RangeInclusive<i32>>) {
        let t0 = Instant::now();
        let recalled = self.targeted_recall(host, seq, read_at);
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        let state = self.seq_entry(seq);
        state.stats.ms_recall += ms;
        match recalled {
            // (the cells that made room are counted as evicted where they left)
            Ok(k) => state.stats.recalled += k as u64,
            Err(e) => self.stop_archive(host, &e),
        }
    }

    /// Before the end of a prompt or user turn is computed (positions `first..=last` of `seq`,
    /// see `quote_span`): when one of the last `BATCH_TAIL` tokens ends a phrase of
    /// `recall_match / 2` tokens (rounded up) that occurred exactly once before `first`, the
    /// archived positions of that phrase and of the `page` positions after it come back in place
    /// of the weakest cells the last pass kept, so that the question is read with the passage it
    /// quotes (the phrase's own tokens too: on the passkey test, 4 of 5 answers are found with
    /// them, 3 of 5 without). The phrase nearest the end with something archived after it wins.
    /// A decode step's check needs `recall_match` tokens: it runs every few steps of running
    /// text, where short phrases recur by chance; a turn's end is checked once, and a phrase
    /// that occurred only once points at one passage.
    pub(super) fn batch_recall(
        &mut self,
        host: &mut dyn Host,
        seq: i32,
        (first, last): (i32, i32),
    ) {
        let n_match = self.params.recall_match.div_ceil(2);
        if n_match == 0 || self.scoring() != Scoring::Policy {
            return;
        }
        let (Some(layout), Some(state)) = (self.archive.as_ref(), self.seqs.get(&seq)) else {
            return;
        };
        if state.archive.is_empty() || state.recall.victims.is_empty() {
            return;
        }
        // (positions come from the host: no arithmetic that could overflow on them)
        let tail = last.saturating_sub(BATCH_TAIL - 1).max(first)..=last;
        let read_at = tail.rev().find_map(|p| {
            let q = state.trail.unique_earlier(p, n_match, first)?;
            let holes = q + 1 - n_match as i32..=q + layout.page as i32;
            let any = archived_in(&holes, layout, &state.archive).next().is_some();
            any.then_some(holes)
        });
        if read_at.is_some() {
            self.recall_at(host, seq, read_at);
        }
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

    /// The per-step recall: the archived positions in `read_at` (found by the tokens), else in
    /// the `page` positions after the kept cell the newest queries attend most (`holes_in`),
    /// or failing that the archive's best pages (`archive_winners`), take the places of the
    /// weakest kept cells of the last pass (which are archived) that they beat by
    /// `recall_margin` (positions found by the tokens beat any). Returns the cells recalled.
    fn targeted_recall(
        &mut self,
        host: &mut dyn Host,
        seq: i32,
        read_at: Option<RangeInclusive<i32>>,
    ) -> Result<usize, String> {
        let Engine {
            scratch,
            scorer,
            layers,
            params,
            seqs,
            archive,
            ..
        } = self;
        let (Some(layout), Some(state)) = (archive.as_ref(), seqs.get_mut(&seq)) else {
            return Ok(0);
        };
        let margin = params.recall_margin();
        let threshold = state.recall.victims[0].0 + margin;
        let sc = &mut scratch.arch;
        let mut stream = 0u32;
        let n = host.seq_cells(seq, &mut scratch.pos, &mut scratch.cells, &mut stream);
        if n < 0 || n as usize > scratch.cells.len() {
            return Ok(0); // listing failed or grew past the buffers: the next pass recalls
        }
        let n = n as usize;
        let (pos, cells) = (&scratch.pos[..n], &scratch.cells[..n]);
        let m_pos = state.stats.pos_max + 1;
        let ctx = ScoreCtx::new(stream, layers, &state.queries, m_pos, params.seed);
        // 1. where the sequence reads from now: the holes after it, or when nothing the cache
        // holds beats the threshold, the archived pages whose keys do
        let mut probe = scorer.query_scorer();
        let read = match (read_at, probe.as_deref_mut()) {
            (Some(holes), _) => Some((holes, f32::INFINITY)),
            (None, None) => None,
            (None, Some(probe)) => {
                reading_position(probe, host, &ctx, (pos, cells), params.window, sc)
                    .map_err(|e| e.0)?
                    .map(|(s, logit)| (s + 1..=s + layout.page as i32, logit))
            }
        };
        match (read, probe) {
            (Some((holes, logit)), _) if logit > threshold => {
                holes_in(holes, logit, layout, &state.archive, sc)
            }
            (_, Some(probe)) => archive_winners(probe, &ctx, threshold, layout, &state.archive, sc),
            (_, None) => {
                sc.recall.clear();
                sc.winners.clear();
            }
        }
        if sc.recall.is_empty() {
            return Ok(0);
        }
        // 2. the weakest kept cells of the last pass make room (still held, not recalled since)
        let won = |id: i32| score_of(&sc.winners, id);
        scratch.evict_cells.clear();
        sc.ev_pos.clear();
        sc.ev_scores.clear();
        let held = &state.recall.held;
        let mut examined = 0;
        for &(score, p) in &state.recall.victims {
            let want = sc.recall.get(sc.ev_pos.len());
            if want.is_none_or(|w| score + margin >= won(w.0)) {
                break;
            }
            examined += 1;
            if held.binary_search(&p).is_ok() {
                continue;
            }
            if let Ok(i) = pos.binary_search(&p) {
                scratch.evict_cells.push(cells[i]);
                sc.ev_pos.push(p);
                sc.ev_scores.push(score);
            }
        }
        // the victims examined leave the list (made room, or already gone), held ones stay
        let mut vi = 0;
        state.recall.victims.retain(|v| {
            vi += 1;
            vi > examined || held.binary_search(&v.1).is_ok()
        });
        sc.recall.truncate(sc.ev_pos.len());
        if sc.recall.is_empty() {
            return Ok(0);
        }
        // 3. archive and evict those cells, place the pages
        self.archive_evicted(host, seq, stream)?;
        let rc = host.seq_evict(seq, &self.scratch.evict_cells);
        if rc < 0 {
            return Err(format!("seq_evict({seq}) returned {rc}"));
        }
        let evicted = self.scratch.evict_cells.len() as u64;
        self.seq_entry(seq).stats.evicted += evicted;
        let k = self.recall_selected(host, seq, stream)?;
        self.enforce_archive_cap(seq);
        // the recalled cells are kept cells now (held through the next pass)
        let state = self.seqs.get_mut(&seq).expect("checked above");
        if k > 0 {
            let sc = &self.scratch.arch;
            let recalled = sc
                .recall
                .iter()
                .map(|&(id, p)| (score_of(&sc.winners, id), p));
            state.recall.held.extend(recalled.clone().map(|r| r.1));
            state.recall.held.sort_unstable();
            state.recall.victims.extend(recalled);
            state
                .recall
                .victims
                .sort_unstable_by(|x, y| x.0.total_cmp(&y.0));
        }
        Ok(k)
    }
}

/// The kept cell outside the window that the newest queries attend most: (position, logit).
/// `None` when there is no such cell or the scorer reads no queries.
fn reading_position(
    probe: &mut dyn RecallProbe,
    host: &mut dyn Host,
    ctx: &ScoreCtx,
    (pos, cells): (&[i32], &[u32]),
    window: usize,
    sc: &mut ArchScratch,
) -> Result<Option<(i32, f32)>, ScoreError> {
    let end = pos.len().saturating_sub(window.max(1));
    if end == 0 {
        return Ok(None);
    }
    let ctx = ctx.with_cells(&cells[..end], &pos[..end]);
    if !probe.cell_rows(&ctx, host, &mut sc.score_rows)? || sc.score_rows.n_rows() == 0 {
        return Ok(None);
    }
    sc.score_rows.max_into(&mut sc.col_max);
    let top = sc
        .col_max
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1));
    Ok(top.map(|(i, &logit)| (pos[i], logit)))
}

/// The archived positions among `holes`, as (page, position), in page order.
fn archived_in<'a>(
    holes: &'a RangeInclusive<i32>,
    layout: &Layout,
    archive: &'a crate::archive::SeqArchive,
) -> impl Iterator<Item = (i32, i32)> + 'a {
    (layout.page_of(*holes.start())..=layout.page_of(*holes.end())).flat_map(move |id| {
        let pos = archive.page(id).map_or(&[][..], |page| &page.pos[..]);
        pos.iter()
            .filter(|p| holes.contains(p))
            .map(move |&p| (id, p))
    })
}

/// Where a passage is being re-read, token-level eviction has left holes in it, and a hole's
/// page would only win a check after the token that needed it: the archived positions in
/// `holes` (the `page` positions after the reading position, with the quoted phrase before
/// them for a batch check), into `sc.recall` as (page, position), their pages with `logit`
/// into `sc.winners`.
fn holes_in(
    holes: RangeInclusive<i32>,
    logit: f32,
    layout: &Layout,
    archive: &crate::archive::SeqArchive,
    sc: &mut ArchScratch,
) {
    let (recall, winners) = (&mut sc.recall, &mut sc.winners);
    recall.clear();
    winners.clear();
    for (id, p) in archived_in(&holes, layout, archive) {
        if winners.last().is_none_or(|w| w.0 != id) {
            winners.push((id, logit));
        }
        recall.push((id, p));
    }
}

/// When nothing the cache holds beats `threshold` (a passage returns of which no cell was kept):
/// the `TARGET_PAGES` archived pages with the best bounds get exact logits, and those with a key
/// above `threshold` win, each with the page after it (text is re-read in order). Their positions
/// go into `sc.recall` as (page, position), (page, its best logit) into `sc.winners` in page order.
fn archive_winners(
    probe: &mut dyn RecallProbe,
    ctx: &ScoreCtx,
    threshold: f32,
    layout: &Layout,
    archive: &crate::archive::SeqArchive,
    sc: &mut ArchScratch,
) {
    sc.recall.clear();
    sc.winners.clear();
    if !rank_pages(probe, ctx, layout, archive, sc) {
        return;
    }
    let mut best = std::mem::take(&mut sc.page_ids);
    best.clear();
    best.extend(
        sc.ranked
            .iter()
            .take_while(|r| r.1 > threshold)
            .take(TARGET_PAGES)
            .map(|r| r.0),
    );
    if !best.is_empty() {
        load_candidates(layout, archive, &best, sc);
        let extra = ExtraKeys {
            n: sc.cand_pos.len(),
            k: &sc.cand_k,
        };
        let ctx = ctx.with_extra(Some(extra));
        probe.key_rows(&ctx, &mut sc.score_rows);
        sc.score_rows.max_into(&mut sc.raw_max);
    }
    for &id in &best {
        let logit = (0..sc.cand_pos.len())
            .filter(|&c| sc.cand_page[c] == id)
            .fold(f32::NEG_INFINITY, |b, c| b.max(sc.raw_max[c]));
        if logit <= threshold {
            continue;
        }
        for id in id..=id + READ_AHEAD {
            if archive.page(id).is_some() && !sc.winners.iter().any(|w| w.0 == id) {
                sc.winners.push((id, logit));
            }
        }
    }
    sc.page_ids = best;
    sc.winners.sort_by_key(|w| w.0);
    for &(id, _) in &sc.winners {
        let page = archive.page(id).expect("archived");
        sc.recall.extend(page.pos.iter().map(|&p| (id, p)));
    }
}

/// The logit that won page `id` in a check (none: below any kept cell).
fn score_of(winners: &[(i32, f32)], id: i32) -> f32 {
    winners.iter().find(|w| w.0 == id).map_or(f32::MIN, |w| w.1)
}

/// The archived pages, best bound first under the scorer's positioned queries, into
/// `sc.ranked` as (page, bound). False when the scorer has no page bounds.
fn rank_pages(
    probe: &mut dyn RecallProbe,
    ctx: &ScoreCtx,
    layout: &Layout,
    archive: &crate::archive::SeqArchive,
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
fn load_candidates(
    layout: &Layout,
    archive: &crate::archive::SeqArchive,
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
