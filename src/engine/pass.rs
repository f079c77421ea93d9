//! The compression pass: list the sequence's cells, score them, fold each cell's rows into one
//! score, select what stays and evict the rest. With an archive on, its stage
//! (`archiving/stage.rs`) lets archived pages compete in the same selection: candidates are
//! scored after the cells, the cells that lose are archived, the candidates that win come back.

use std::time::{Duration, Instant};

use super::archiving::ArchScratch;
use super::fallback::Scoring;
use super::{Engine, EngineError};
use crate::config::Reduce;
use crate::host::Host;
use crate::scoring::reduce::{reduce, span_pool, ReduceScratch};
use crate::scoring::select::{select_evictions, SelectScratch};
use crate::scoring::{ScoreError, ScoreRows, Scorer};

/// Buffers reused by every compression pass, so the hot path does not allocate.
#[derive(Default)]
pub(super) struct Scratch {
    /// The listed cells of the sequence and their positions, in position order.
    pub(super) pos: Vec<i32>,
    pub(super) cells: Vec<u32>,
    pub(super) rows: ScoreRows,
    /// One score per listed cell, then per recall candidate.
    pub(super) scores: Vec<f32>,
    pub(super) reduce: ReduceScratch,
    pub(super) select: SelectScratch,
    /// What selection evicts: indices into the listed cells, and the cells.
    evict_at: Vec<usize>,
    pub(super) evict_cells: Vec<u32>,
    /// Sequence ids of an `after_decode` sweep (the passes it runs).
    pub(super) ids: Vec<i32>,
    /// Archive and recall buffers.
    pub(super) arch: ArchScratch,
}

/// Where a pass's time went, for the statistics.
struct PassTimes {
    /// Listing, scoring and selection, less the wait for K.
    score: Duration,
    evict: Duration,
    /// The archive's work after selection.
    recall: Duration,
}

impl Engine {
    /// One compression pass of `seq` down to `target` cells (never below prefix + window).
    /// Returns the cells the sequence holds afterwards. When the policy's scoring fails (a K
    /// read), the context falls back to position-only eviction, the pass is completed that way
    /// and the failure is returned.
    pub fn compress(
        &mut self,
        host: &mut dyn Host,
        seq: i32,
        target: usize,
    ) -> Result<usize, EngineError> {
        // queries not read yet first; a failed read switches to position-only scoring, which
        // this pass then uses
        let flushed = self.flush_queries(host);
        let n = self.compress_pass(host, seq, target, false)?;
        flushed.map(|()| n)
    }

    /// A compression pass: list → score → reduce → select → evict, over the queries read so far
    /// (`compress` reads the pending ones; with an archive on none wait). With an archive, `swap`
    /// asks for a pass at the current size that only exchanges cells for archived ones.
    pub(super) fn compress_pass(
        &mut self,
        host: &mut dyn Host,
        seq: i32,
        target: usize,
        swap: bool,
    ) -> Result<usize, EngineError> {
        let (t0, reads0) = (Instant::now(), host.transfers());
        let (n, stream) = self.list_cells(host, seq)?;
        let mut archive = self.archive_stage(seq, swap);
        if n == 0 || (n <= target && !archive.as_ref().is_some_and(|a| a.swap)) {
            return Ok(n);
        }
        let prefix = self.effective_prefix(seq, host);
        let waited = self.wait_for_keys(host, seq);
        if let Some(stage) = &mut archive {
            self.pick_candidates(seq, stream, n, stage);
        }
        let m = archive.as_ref().map_or(0, |a| a.candidates);
        let scored = self.score(host, seq, stream, n, m, (prefix, target));
        if scored.is_err() {
            archive = None; // position-only eviction completes the pass
        }
        match &archive {
            None => self.select(seq, n, prefix, target),
            Some(stage) => self.select_with_candidates(seq, n, stage, prefix, target),
        }
        let score = t0.elapsed().saturating_sub(waited);
        if let Some(stage) = &mut archive {
            self.archive_dropped(host, seq, stream, stage);
        }
        let evict = self.evict(host, seq)?;
        let recalled = match &mut archive {
            Some(stage) => self.recall_kept(host, seq, stream, stage),
            None => 0,
        };
        let times = PassTimes {
            score,
            evict,
            recall: archive.map_or(Duration::ZERO, |a| a.time),
        };
        let held = self.count_pass(host, seq, n, recalled, times, reads0);
        scored.map(|()| held)
    }

    /// The cells of `seq` in position order into `scratch.pos/cells`, their number and the
    /// stream that holds them. A sequence the engine has not seen gets its state here.
    fn list_cells(&mut self, host: &mut dyn Host, seq: i32) -> Result<(usize, u32), EngineError> {
        self.seq_entry(seq);
        let mut stream = 0u32;
        loop {
            let sc = &mut self.scratch;
            let total = host.seq_cells(seq, &mut sc.pos, &mut sc.cells, &mut stream);
            if total < 0 {
                let msg = format!("seq_cells({seq}) returned {total}");
                return Err(self.host_error(host, msg));
            }
            let total = total as usize;
            if total <= sc.cells.len() {
                return Ok((total, stream));
            }
            // grow with headroom so the steady state never reallocates
            sc.pos.resize(total + total / 4 + 16, 0);
            sc.cells.resize(total + total / 4 + 16, 0);
        }
    }

    /// Before a policy reads K: K of the last decode call may still be in flight on an
    /// asynchronous backend. Returns the wait, which is decode time, not the plugin's.
    fn wait_for_keys(&mut self, host: &mut dyn Host, seq: i32) -> Duration {
        let policy = self.limits(seq).policy;
        if self.scoring_for(policy) != Scoring::Policy || !policy.uses_queries() {
            return Duration::ZERO;
        }
        let t0 = Instant::now();
        host.synchronize();
        t0.elapsed()
    }

    /// One score per listed cell (`scratch.pos/cells[..n]`), then per recall candidate (`m`),
    /// into `scratch.scores[..n + m]`, by the sequence's policy (its own, see `limits.rs`).
    /// When the policy fails (a K read), the context falls back to position-only eviction,
    /// which scores this pass's cells, and the failure is returned.
    fn score(
        &mut self,
        host: &mut dyn Host,
        seq: i32,
        stream: u32,
        n: usize,
        m: usize,
        (prefix, target): (usize, usize),
    ) -> Result<(), EngineError> {
        let policy = self.limits(seq).policy;
        let mut result = Ok(());
        if self.scoring_for(policy) == Scoring::Policy {
            if let Err(e) = self.score_by_policy(host, seq, stream, n, m, (prefix, target)) {
                self.enter_fallback(host, &format!("beaconkv: host callback failed: {}", e.0));
                result = Err(EngineError::Host(e.0));
            }
        }
        if self.scoring_for(policy) == Scoring::Positions {
            self.score_by_position(host, seq, stream, n);
        }
        result
    }

    /// The policy's rows over the cells and candidates, reduced to one score each.
    fn score_by_policy(
        &mut self,
        host: &mut dyn Host,
        seq: i32,
        stream: u32,
        n: usize,
        m: usize,
        (prefix, target): (usize, usize),
    ) -> Result<(), ScoreError> {
        let policy = self.limits(seq).policy;
        let p = &self.params;
        // Cells selection always keeps need no score when nothing else reads one: the largest
        // scores, unpooled, no archive (it ranks every row it keeps), and no other cell's score
        // reading their keys. The same conditions let the scorer stop scoring a cell once it
        // cannot be among the `n - target` lowest (only which cells are lowest is read).
        let only_order = m == 0
            && !p.policy.scores_against_other_keys()
            && self.archive.is_none()
            && p.reduce == Reduce::Max
            && p.span <= 1
            && !p.score_prob;
        let end = n.saturating_sub(p.window.max(1));
        let (lo, hi) = if only_order {
            (prefix.min(end), end)
        } else {
            (0, n)
        };
        let sc = &mut self.scratch;
        let state = self.seqs.get(&seq).expect("the pass created the state");
        let (pos, cells) = (&sc.pos[..n], &sc.cells[..n]);
        let ctx = state
            .score_ctx(&self.layers.descs, stream, pos, p.seed)
            .with_cells(&cells[lo..hi], &pos[lo..hi])
            .with_prob(p.score_prob)
            .with_extra(sc.arch.candidate_keys(m))
            .with_prune_evict(only_order.then(|| n.saturating_sub(target)));
        let k = hi - lo;
        sc.rows.reset(k + m);
        sc.scores.resize(n + m, 0.0);
        self.scorers.of(policy).score(&ctx, host, &mut sc.rows)?;
        reduce(&sc.rows, p.reduce, &mut sc.scores[..k + m], &mut sc.reduce);
        if k < n {
            // [scored cells | candidates] -> [+inf | scored cells | +inf | candidates]
            sc.scores.copy_within(k..k + m, n);
            sc.scores.copy_within(0..k, lo);
            sc.scores[..lo].fill(f32::INFINITY);
            sc.scores[hi..n].fill(f32::INFINITY);
        }
        Ok(())
    }

    /// One score per listed cell from its position alone (prefix + newest cells stay).
    fn score_by_position(&mut self, host: &mut dyn Host, seq: i32, stream: u32, n: usize) {
        let sc = &mut self.scratch;
        let state = self.seqs.get(&seq).expect("the pass created the state");
        let (pos, cells) = (&sc.pos[..n], &sc.cells[..n]);
        let ctx = state
            .score_ctx(&self.layers.descs, stream, pos, self.params.seed)
            .with_cells(cells, pos);
        sc.rows.reset(n);
        sc.scores.resize(n, 0.0);
        self.scorers
            .positions
            .score(&ctx, host, &mut sc.rows)
            .expect("position scoring reads nothing from the host");
        sc.scores.copy_from_slice(sc.rows.row(0));
    }

    /// Selection over the `n` listed cells by their scores: prefix, window, newest cell and
    /// the best middle cells up to `target` stay; the others go to `scratch.evict_cells`.
    fn select(&mut self, seq: i32, n: usize, prefix: usize, target: usize) {
        let sc = &mut self.scratch;
        let (pos, scores) = (&sc.pos[..n], &mut sc.scores[..n]);
        span_pool(scores, self.params.span, &mut sc.reduce);
        let (window, evict) = (self.params.window, &mut sc.evict_at);
        select_evictions(pos, scores, prefix, window, target, &mut sc.select, evict);
        sc.evict_cells.clear();
        sc.evict_cells.extend(evict.iter().map(|&i| sc.cells[i]));
        let state = self.seqs.get_mut(&seq).expect("the pass created the state");
        state.marks.evicted(evict.iter().map(|&i| pos[i]));
    }

    /// Evict `scratch.evict_cells`; returns the time it took.
    fn evict(&mut self, host: &mut dyn Host, seq: i32) -> Result<Duration, EngineError> {
        let t0 = Instant::now();
        if !self.scratch.evict_cells.is_empty() {
            let rc = host.seq_evict(seq, &self.scratch.evict_cells);
            if rc < 0 {
                return Err(self.host_error(host, format!("seq_evict({seq}) returned {rc}")));
            }
        }
        Ok(t0.elapsed())
    }

    /// The pass's statistics: cells evicted and recalled, time per step, reads from the host
    /// since `reads0`. Returns the cells the sequence holds after the pass.
    fn count_pass(
        &mut self,
        host: &mut dyn Host,
        seq: i32,
        n: usize,
        recalled: usize,
        times: PassTimes,
        reads0: (u64, u64),
    ) -> usize {
        let reads = host.transfers();
        let evicted = self.scratch.evict_cells.len();
        let bytes = self.layers.kv_bytes_per_cell;
        let st = &mut self.seq_entry(seq).stats;
        st.evicted += evicted as u64;
        st.compress_events += 1;
        st.kv_bytes_saved += evicted as u64 * bytes;
        st.cells_in_use = n - evicted + recalled;
        st.recalled += recalled as u64;
        st.ms_score += times.score.as_secs_f64() * 1e3;
        st.ms_recall += times.recall.as_secs_f64() * 1e3;
        st.ms_evict += times.evict.as_secs_f64() * 1e3;
        st.reads_pass += reads.0.saturating_sub(reads0.0);
        st.bytes_pass += reads.1.saturating_sub(reads0.1);
        st.cells_in_use
    }
}
