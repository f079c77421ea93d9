//! The compression pass: list the sequence's cells, score them (with recall candidates when an
//! archive is on), select what to keep, archive and evict the rest, place recalled cells back.

use std::time::Instant;

use super::archive_pass::ArchScratch;
use super::fallback::{first, Scoring};
use super::seq::Phase;
use super::{Engine, EngineError};
use crate::config::{Prefix, PromptMode, Reduce};
use crate::host::{Host, LOG_WARN};
use crate::scoring::reduce::{reduce, span_pool, ReduceScratch};
use crate::scoring::select::{select_evictions, SelectScratch};
use crate::scoring::{self, ExtraKeys, ScoreRows, Scorer};

/// What the policy's scorer scores in a pass: cells `range.0..range.1` of the listed ones (the
/// others get +inf: selection keeps them anyway), and `prune_evict` (see `ScoreCtx`).
#[derive(Clone, Copy)]
struct PolicyScope {
    range: (usize, usize),
    prune_evict: Option<usize>,
}

/// Buffers reused by every compression pass, so the hot path does not allocate.
#[derive(Default)]
pub(super) struct Scratch {
    pub(super) pos: Vec<i32>,
    pub(super) cells: Vec<u32>,
    pub(super) rows: ScoreRows,
    pub(super) scores: Vec<f32>,
    pub(super) reduce: ReduceScratch,
    pub(super) select: SelectScratch,
    pub(super) evict_cells: Vec<u32>,
    /// Sequence ids of an `after_decode` sweep (the passes it runs).
    pub(super) ids: Vec<i32>,
    /// Archive and recall buffers.
    pub(super) arch: ArchScratch,
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
        self.compress_pass(host, seq, target, false)
    }

    /// A compression pass; with an archive, archived pages whose bounds are best compete with
    /// the cells for the `target` places (evicted cells are archived, winning archived cells
    /// recalled). `swap`: a pass at the current size that only exchanges cells for archived
    /// ones.
    pub(super) fn compress_pass(
        &mut self,
        host: &mut dyn Host,
        seq: i32,
        target: usize,
        swap: bool,
    ) -> Result<usize, EngineError> {
        let t0 = Instant::now();
        let reads0 = host.transfers();
        let room = if self.params.recall_match > 0 && self.params.archive > 0 {
            2 * self.params.budget + 64
        } else {
            0
        };
        // tokens recorded until the next pass must not allocate on the per-token path
        self.seq_entry(seq).trail.reserve(room);
        let mut stream = 0u32;
        let n = loop {
            let sc = &mut self.scratch;
            let total = host.seq_cells(seq, &mut sc.pos, &mut sc.cells, &mut stream);
            if total < 0 {
                let msg = format!("seq_cells({seq}) returned {total}");
                return Err(self.host_error(host, msg));
            }
            let total = total as usize;
            if total <= sc.cells.len() {
                break total;
            }
            // Grow with headroom so the steady state never reallocates.
            sc.pos.resize(total + total / 4 + 16, 0);
            sc.cells.resize(total + total / 4 + 16, 0);
        };
        // the sequence's own policy when the host set one (`limits.rs`)
        let policy = self.limits(seq).policy;
        let archiving = self.archive.is_some() && self.scoring_for(policy) == Scoring::Policy;
        let has_archived = archiving && !self.seqs[&seq].archive.is_empty();
        if n == 0 || (n <= target && !(swap && has_archived)) {
            return Ok(n);
        }
        let prefix = self.effective_prefix(seq, host);
        let mut result = Ok(());
        let mut m = 0;
        let mut waited = std::time::Duration::ZERO;
        if self.scoring_for(policy) == Scoring::Policy {
            if policy.uses_queries() {
                // K of the last decode call may still be in flight on an asynchronous backend;
                // the wait is decode time, not the plugin's
                let sync_start = Instant::now();
                host.synchronize();
                waited = sync_start.elapsed();
            }
            if has_archived && self.candidates_wanted(seq, swap) {
                m = self.pick_candidates(seq, stream, n);
            }
            // Cells selection always keeps need no score when nothing else reads one: the
            // largest scores, unpooled, no archive (it ranks every row it keeps), and no other
            // cell's score reading their keys.
            // The same conditions let the scorer stop scoring a cell once it cannot be among
            // the `n - target` lowest (only which cells are lowest is read).
            let only_order = m == 0
                && !self.params.policy.scores_against_other_keys()
                && self.archive.is_none()
                && self.params.reduce == Reduce::Max
                && self.params.span <= 1
                && !self.params.score_prob;
            let range = if only_order {
                let end = n.saturating_sub(self.params.window.max(1));
                (prefix.min(end), end)
            } else {
                (0, n)
            };
            let prune_evict = only_order.then(|| n.saturating_sub(target));
            if let Err(e) = self.score_cells(
                host,
                seq,
                stream,
                n,
                m,
                Some(PolicyScope { range, prune_evict }),
            ) {
                self.enter_fallback(host, &format!("beaconkv: host callback failed: {}", e.0));
                result = Err(EngineError::Host(e.0));
                m = 0;
            }
        }
        if self.scoring_for(policy) == Scoring::Positions {
            self.score_cells(host, seq, stream, n, 0, None)
                .expect("position scoring reads nothing from the host");
        }
        let archiving = archiving && self.scoring_for(policy) == Scoring::Policy;
        self.select(seq, n, m, prefix, target, archiving);
        let t1 = Instant::now();
        if archiving && !self.scratch.evict_cells.is_empty() {
            if let Err(e) = self.archive_evicted(host, seq, stream) {
                self.stop_archive(host, &e);
            }
        }
        let t2 = Instant::now();
        if !self.scratch.evict_cells.is_empty() {
            let rc = host.seq_evict(seq, &self.scratch.evict_cells);
            if rc < 0 {
                return Err(self.host_error(host, format!("seq_evict({seq}) returned {rc}")));
            }
        }
        let t3 = Instant::now();
        let recalled = if archiving && m > 0 {
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
        if archiving {
            self.enforce_archive_cap(seq);
        }
        let t4 = Instant::now();
        let reads1 = host.transfers();
        let evicted = self.scratch.evict_cells.len();
        let bytes = self.layers.kv_bytes_per_cell;
        let state = self.seq_entry(seq);
        let st = &mut state.stats;
        st.evicted += evicted as u64;
        st.compress_events += 1;
        st.kv_bytes_saved += evicted as u64 * bytes;
        st.cells_in_use = n - evicted + recalled;
        st.recalled += recalled as u64;
        st.ms_score += (t1 - t0).saturating_sub(waited).as_secs_f64() * 1e3;
        st.ms_recall += ((t2 - t1) + (t4 - t3)).as_secs_f64() * 1e3;
        st.ms_evict += (t3 - t2).as_secs_f64() * 1e3;
        st.reads_pass += reads1.0.saturating_sub(reads0.0);
        st.bytes_pass += reads1.1.saturating_sub(reads0.1);
        result.map(|()| n - evicted + recalled)
    }

    /// One score per listed cell (`scratch.pos/cells[..n]`), then per recall candidate
    /// (`m` of them, see `archive_pass.rs`), into `scratch.scores[..n + m]`, by the policy's scorer
    /// (the sequence's own, see `limits.rs`) for the cells of `policy` (see [`PolicyScope`]) or, with `None` (and `m == 0`), by the
    /// position-only fallback for all of them.
    fn score_cells(
        &mut self,
        host: &mut dyn Host,
        seq: i32,
        stream: u32,
        n: usize,
        m: usize,
        policy: Option<PolicyScope>,
    ) -> Result<(), scoring::ScoreError> {
        let own_policy = self.limits(seq).policy;
        let sc = &mut self.scratch;
        let params = &self.params;
        let state = self
            .seqs
            .get(&seq)
            .expect("compress created the sequence's state");
        let (pos, cells) = (&sc.pos[..n], &sc.cells[..n]);
        let by_position = policy.is_none();
        let (lo, hi) = policy.map_or((0, n), |p| p.range);
        let prune_evict = policy.and_then(|p| p.prune_evict);
        let ctx = state
            .score_ctx(&self.layers.descs, stream, pos, params.seed)
            .with_cells(&cells[lo..hi], &pos[lo..hi])
            .with_prob(params.score_prob)
            .with_extra((m > 0).then_some(ExtraKeys {
                n: m,
                k: &sc.arch.cand_k,
            }))
            .with_prune_evict(prune_evict);
        let k = hi - lo;
        sc.rows.reset(k + m);
        sc.scores.resize(n + m, 0.0);
        if by_position {
            self.scorers.positions.score(&ctx, host, &mut sc.rows)?;
            sc.scores[..n].copy_from_slice(sc.rows.row(0));
            return Ok(());
        }
        self.scorers
            .of(own_policy)
            .score(&ctx, host, &mut sc.rows)?;
        reduce(
            &sc.rows,
            params.reduce,
            &mut sc.scores[..k + m],
            &mut sc.reduce,
        );
        if k < n {
            // [scored cells | candidates] -> [+inf | scored cells | +inf | candidates]
            sc.scores.copy_within(k..k + m, n);
            sc.scores.copy_within(0..k, lo);
            sc.scores[..lo].fill(f32::INFINITY);
            sc.scores[hi..n].fill(f32::INFINITY);
        }
        Ok(())
    }

    /// Protected prefix of a sequence. `prefix=N` protects the first N cells; `prefix=prompt`
    /// the prompt (the positions seen so far while it streams in), at most `prefix_max` cells.
    /// Either way it is capped so that everything selection protects (prefix, window, and the
    /// newest cell even when `window` is 0) fits in `budget_min`.
    pub(super) fn effective_prefix(&mut self, seq: i32, host: &mut dyn Host) -> usize {
        // validate() guarantees min >= window + 1 (for a sequence's own settings too), so this
        // does not underflow.
        let limits = self.limits(seq);
        let cap = limits.min - self.params.window.max(1);
        let Some(state) = self.seqs.get(&seq) else {
            return 0;
        };
        let wanted = match self.params.prefix {
            // the kept prompt is protected whole, whatever the prefix setting
            _ if self.params.prompt_mode == PromptMode::Keep => limits.prompt_cells,
            Prefix::First(n) => n,
            Prefix::Prompt => {
                let prompt = match state.phase {
                    Phase::Decode => state.prompt_len,
                    Phase::Prompt => (state.stats.pos_max + 1).max(0) as usize,
                };
                prompt.min(limits.prefix_max)
            }
        };
        if wanted > cap && first(&mut self.warned.prefix_cap) {
            host.log(
                LOG_WARN,
                &format!(
                    "beaconkv: protected prefix of {wanted} cells capped to {cap} (min - window)"
                ),
            );
        }
        wanted.min(cap)
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
        let sc = &mut self.scratch;
        let params = &self.params;
        let state = self.seqs.get_mut(&seq).expect("compress created the state");
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
                    state.marks.evicted([sc.pos[k]]);
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
            match self.scorers.policy.query_scorer().and_then(|q| q.raw_max()) {
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
}
