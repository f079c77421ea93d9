//! Recall between compression passes: the targeted recall that fills the holes of a passage
//! being re-read, and the swap pass after a new user turn.
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

use super::rows::{load_candidates, rank_pages};
use super::ArchScratch;
use crate::archive::{Layout, RecallProbe, SeqArchive, SeqRecall};
use crate::engine::fallback::Scoring;
use crate::engine::reuse::PromptMarks;
use crate::engine::seq::Phase;
use crate::engine::{Engine, EngineError};
use crate::host::Host;
use crate::scoring::{ExtraKeys, ScoreCtx, ScoreError};

/// Archived pages a check confirms with exact logits when the cache holds nothing the newest
/// queries want.
const TARGET_PAGES: usize = 8;
/// Pages after a page found that way that come with it.
const READ_AHEAD: i32 = 1;

impl Engine {
    /// Between compression passes (no pass ran this step): a swap pass after a multi-token
    /// batch in the decode phase, and every `recall_every` steps a targeted recall. Returns the
    /// cells the sequence holds afterwards.
    pub(in crate::engine) fn recall_step(
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
    pub(super) fn recall_at(
        &mut self,
        host: &mut dyn Host,
        seq: i32,
        read_at: Option<RangeInclusive<i32>>,
    ) {
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
        let (scratch, params) = (&mut self.scratch, &self.params);
        let (Some(layout), Some(state)) = (self.archive.as_ref(), self.seqs.get_mut(&seq)) else {
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
        state.archive.forget_held(layout, pos);
        // between passes the scoring position follows the largest position seen only
        let ctx = state.score_ctx(&self.layers.descs, stream, &[], params.seed);
        // 1. where the sequence reads from now: the holes after it, or when nothing the cache
        // holds beats the threshold, the archived pages whose keys do
        let mut probe = self.scorers.policy.query_scorer();
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
        let (pos, cells) = (&scratch.pos[..n], &scratch.cells[..n]);
        make_room(
            &mut state.recall,
            &mut state.marks,
            (pos, cells),
            margin,
            &mut scratch.evict_cells,
            sc,
        );
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
        if k > 0 {
            let state = self.seqs.get_mut(&seq).expect("checked above");
            hold_recalled(&mut state.recall, &self.scratch.arch);
        }
        Ok(k)
    }
}

/// The weakest kept cells of the last pass (`recall.victims`, weakest first) that the recall
/// candidates `sc.recall` beat by `margin` make room for them: their cells go to `evict`, their
/// positions and scores to `sc.ev_pos` / `sc.ev_scores`, and `sc.recall` is cut to as many
/// candidates as made room. Victims still held (recalled since) stay; the examined others leave.
fn make_room(
    recall: &mut SeqRecall,
    marks: &mut PromptMarks,
    (pos, cells): (&[i32], &[u32]),
    margin: f32,
    evict: &mut Vec<u32>,
    sc: &mut ArchScratch,
) {
    let won = |winners: &[(i32, f32)], id: i32| score_of(winners, id);
    evict.clear();
    sc.ev_pos.clear();
    sc.ev_scores.clear();
    let held = &recall.held;
    let mut examined = 0;
    for &(score, p) in &recall.victims {
        let want = sc.recall.get(sc.ev_pos.len());
        if want.is_none_or(|w| score + margin >= won(&sc.winners, w.0)) {
            break;
        }
        examined += 1;
        if held.binary_search(&p).is_ok() {
            continue;
        }
        if let Ok(i) = pos.binary_search(&p) {
            // a position listed twice (two cells there after a host's seq_cp) makes room once
            if evict.contains(&cells[i]) {
                continue;
            }
            evict.push(cells[i]);
            marks.evicted([p]);
            sc.ev_pos.push(p);
            sc.ev_scores.push(score);
        }
    }
    // the victims examined leave the list (made room, or already gone), held ones stay
    let mut vi = 0;
    recall.victims.retain(|v| {
        vi += 1;
        vi > examined || held.binary_search(&v.1).is_ok()
    });
    sc.recall.truncate(sc.ev_pos.len());
}

/// The recalled candidates of `sc.recall` are kept cells from now on: held through the next
/// pass, and victims (by the score that won them) of the next recall.
fn hold_recalled(recall: &mut SeqRecall, sc: &ArchScratch) {
    let recalled = sc
        .recall
        .iter()
        .map(|&(id, p)| (score_of(&sc.winners, id), p));
    recall.held.extend(recalled.clone().map(|r| r.1));
    recall.held.sort_unstable();
    recall.victims.extend(recalled);
    recall.victims.sort_unstable_by(|x, y| x.0.total_cmp(&y.0));
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
    probe.cell_rows(&ctx, host, &mut sc.score_rows)?;
    if sc.score_rows.n_rows() == 0 {
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
pub(super) fn archived_in<'a>(
    holes: &'a RangeInclusive<i32>,
    layout: &Layout,
    archive: &'a SeqArchive,
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
    archive: &SeqArchive,
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
    archive: &SeqArchive,
    sc: &mut ArchScratch,
) {
    sc.recall.clear();
    sc.winners.clear();
    rank_pages(probe, ctx, layout, archive, sc);
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
