//! The context state behind the C ABI: per-sequence query stores and statistics, the decode
//! hooks, and compression passes (cells -> scores -> selection -> eviction).
//!
//! The engine owns no memory of the host; every method takes the host as `&mut dyn Host`, so it
//! runs the same over the C callbacks (`ffi.rs`) and over fake hosts in tests.
//!
//! Failure never stops eviction: the host sized its cache for the budget, so a context that
//! stopped evicting would overflow it. When the configured policy cannot score (a panic, a
//! failed K or query read, no layer it can read), compression passes score by position only
//! (the `streaming` scorer: prefix + newest cells, no K and no query read) and the engine says
//! so once through the host log.
//!
//! Hot path: a decode step that does not compress asks the host for cell counts only and
//! allocates nothing once the context is warm (every buffer lives in [`Scratch`] or in the
//! query stores and only grows); `tests/alloc_free.rs` checks this with a counting allocator.

mod recall;

use std::collections::BTreeMap;
use std::time::Instant;

use crate::archive::{Layout, SeqArchive};

use crate::archive::tokens::TokenTrail;
use crate::config::{Params, Policy, Prefix, Reduce};
use crate::ggml::rope::RotationMemo;
use crate::host::{Host, LayerDesc, RawLayer, LOG_ERROR, LOG_WARN};
use crate::persist::{Reader, Writer};
use crate::queries::{LayerQueries, QueryConfig, QueryScratch, SeqQueries};
use crate::scoring::reduce::{reduce, ReduceScratch};
use crate::scoring::select::SelectScratch;
use crate::scoring::{self, ExtraKeys, PolicyScorer, PositionScorer, ScoreCtx, ScoreRows, Scorer};
use crate::stats::SeqStats;

/// A host callback failed; the message names it and its return value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EngineError {
    Host(String),
}

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EngineError::Host(m) => write!(f, "beaconkv: host callback failed: {m}"),
        }
    }
}

/// Prompt until the first decode call that brings exactly one token to the sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Prompt,
    Decode,
}

#[derive(Clone, Debug)]
struct SeqState {
    phase: Phase,
    /// The last batch asked for logits of several tokens in the decode phase (speculative
    /// verification): the host may roll the rejected ones back with seq_rm, so compression waits
    /// for the next batch (compressing now could evict accepted tokens and keep rejected ones).
    verifying: bool,
    /// Prompt length, fixed when the decode phase starts.
    prompt_len: usize,
    queries: SeqQueries,
    stats: SeqStats,
    /// Evicted cells kept for recall (empty without an archive).
    archive: SeqArchive,
    /// Recall bookkeeping of the sequence.
    recall: recall::SeqRecall,
    /// Token ids by position (recorded only while the archive recalls by tokens).
    trail: TokenTrail,
}

impl SeqState {
    /// The counters, with the archive's figures read from the archive itself.
    fn stats(&self) -> SeqStats {
        SeqStats {
            archived: self.archive.n_cells() as u64,
            archive_bytes: (self.archive.bytes() + self.trail.bytes()) as u64,
            archive_dropped: self.archive.dropped,
            ..self.stats.clone()
        }
    }
}

/// How compression passes score cells now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scoring {
    /// Policy `none`: nothing is evicted.
    Off,
    /// The configured policy's scorer.
    Policy,
    /// Position only (prefix + newest cells), in place of a policy that cannot score.
    Positions,
}

/// What the policy's scorer scores in a pass: cells `range.0..range.1` of the listed ones (the
/// others get +inf: selection keeps them anyway), and `prune_evict` (see `ScoreCtx`).
#[derive(Clone, Copy)]
struct PolicyScope {
    range: (usize, usize),
    prune_evict: Option<usize>,
}

/// Buffers reused by every compression pass and capture, so the hot path does not allocate.
#[derive(Default)]
struct Scratch {
    pos: Vec<i32>,
    cells: Vec<u32>,
    rows: ScoreRows,
    scores: Vec<f32>,
    reduce: ReduceScratch,
    select: SelectScratch,
    evict_cells: Vec<u32>,
    /// Query rows of one layer for a ubatch, when read through `Host::read_rows`.
    q_rows: Vec<f32>,
    q_row_ids: Vec<u32>,
    queries: QueryScratch,
    /// RoPE rotations of the positions one capture un-rotates.
    rotations: RotationMemo,
    /// Sequence ids of an `after_decode` sweep.
    ids: Vec<i32>,
    /// Archive and recall buffers.
    arch: recall::ArchScratch,
}

/// One compression context (one llama.cpp context).
pub struct Engine {
    params: Params,
    scorer: PolicyScorer,
    /// Scores by position when the configured policy cannot.
    fallback: PositionScorer,
    /// Why the configured policy stopped for good (a panic or a failed read); `None` while it
    /// runs.
    failure: Option<String>,
    /// Layers the scorer can read; query stores are aligned with this list.
    layers: Vec<LayerDesc>,
    /// `n_layers()` at the last description (-1: never described).
    described_n: i32,
    /// K+V bytes of one cell over all layers, for statistics.
    kv_bytes_per_cell: u64,
    seqs: BTreeMap<i32, SeqState>,
    warned_prefix_cap: bool,
    warned_no_layers: bool,
    /// The first failing host callback is logged; later ones only reach the caller.
    warned_host: bool,
    /// Layers already reported as unusable (each is reported once).
    warned_layers: std::collections::BTreeSet<i32>,
    /// Layers were described again after the host built its first graph.
    layers_final: bool,
    /// (n_head, head_dim) of each scored layer, which the query stores are shaped by.
    layer_shapes: Vec<(usize, usize)>,
    scratch: Scratch,
    /// Row formats of the archive; `None` while it is off (params, host or layers).
    archive: Option<Layout>,
    warned_archive: bool,
    /// Decode calls seen (stamps archive pages).
    step: u64,
}

impl Engine {
    /// `params` must be valid (`Params::validate`).
    pub fn new(params: Params, host: &mut dyn Host) -> Self {
        let mut engine = Engine {
            scorer: scoring::for_policy(params.policy),
            fallback: PositionScorer::streaming(),
            failure: None,
            params,
            layers: Vec::new(),
            described_n: -1,
            kv_bytes_per_cell: 0,
            seqs: BTreeMap::new(),
            warned_prefix_cap: false,
            warned_no_layers: false,
            warned_host: false,
            warned_layers: Default::default(),
            layers_final: false,
            layer_shapes: Vec::new(),
            scratch: Scratch::default(),
            archive: None,
            warned_archive: false,
            step: 0,
        };
        engine.refresh_layers(host, false);
        engine
    }

    pub fn params(&self) -> &Params {
        &self.params
    }

    pub fn layers(&self) -> &[LayerDesc] {
        &self.layers
    }

    /// Whether the configured policy runs: not replaced by position-only eviction after a
    /// failure, and (for a query-driven policy) with at least one layer it can read.
    pub fn is_enabled(&self) -> bool {
        self.failure.is_none() && (!self.params.policy.uses_queries() || !self.layers.is_empty())
    }

    /// Whether compression passes evict by position only in place of the configured policy.
    pub fn in_fallback(&self) -> bool {
        self.scoring() == Scoring::Positions
    }

    /// Why the configured policy stopped for good, if it did.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    fn scoring(&self) -> Scoring {
        if self.params.policy == Policy::None {
            Scoring::Off
        } else if self.is_enabled() {
            Scoring::Policy
        } else {
            Scoring::Positions
        }
    }

    /// The configured policy cannot go on (`reason`): from now on passes evict by position
    /// only. Said once through the host log; later calls change nothing.
    pub fn enter_fallback(&mut self, host: &mut dyn Host, reason: &str) {
        if self.failure.is_some() {
            return;
        }
        self.failure = Some(reason.to_string());
        if self.params.policy != Policy::None {
            host.log(
                LOG_ERROR,
                &format!(
                    "{reason}; policy {} is replaced by position-only eviction (prefix + newest \
                     cells) for the rest of this context",
                    self.params.policy.name()
                ),
            );
        }
    }

    /// Statistics of `seq`, or totals for `seq < 0`; unknown sequences report zeros.
    pub fn stats(&self, seq: i32) -> SeqStats {
        if seq < 0 {
            let all: Vec<SeqStats> = self.seqs.values().map(SeqState::stats).collect();
            SeqStats::total(&all)
        } else {
            self.seqs.get(&seq).map(SeqState::stats).unwrap_or_default()
        }
    }

    /// Sequences the engine holds state for.
    pub fn seq_ids(&self) -> Vec<i32> {
        self.seqs.keys().copied().collect()
    }

    fn query_config(&self) -> QueryConfig {
        QueryConfig {
            n_beacons: self.params.n_beacons,
            n_recent: self.params.n_recent,
            fps: self.params.policy == Policy::Beacon,
            ring: self.params.policy == Policy::Recent,
        }
    }

    fn new_queries(&self) -> SeqQueries {
        let cfg = self.query_config();
        let layers = if self.params.policy.uses_queries() {
            self.layers
                .iter()
                .map(|l| LayerQueries::new(&cfg, l.n_head, l.head_dim))
                .collect()
        } else {
            Vec::new()
        };
        SeqQueries { layers }
    }

    /// Describe the host's layers (again) when their number changed or `force` is set.
    /// Unusable layers are skipped with a warning; query stores are rebuilt.
    pub fn refresh_layers(&mut self, host: &mut dyn Host, force: bool) {
        let n = host.n_layers();
        if !force && n == self.described_n {
            return;
        }
        self.described_n = n;
        self.layers.clear();
        self.kv_bytes_per_cell = 0;
        let has_read_rows = host.has_read_rows();
        for i in 0..n.max(0) {
            let mut raw = RawLayer::default();
            if host.get_layer(i, &mut raw) < 0 {
                host.log(
                    LOG_WARN,
                    &format!("beaconkv: get_layer({i}) failed; layer skipped"),
                );
                continue;
            }
            self.kv_bytes_per_cell += raw.kv_bytes_per_cell;
            if !self.params.policy.uses_queries() {
                continue;
            }
            match LayerDesc::from_raw(i, &raw, has_read_rows, self.params.read_copy) {
                Ok(mut desc) => {
                    if let Some(same) = self.layers.iter().find(|l| l.rope == desc.rope) {
                        desc.rope_id = same.rope_id;
                    }
                    self.layers.push(desc)
                }
                Err(why) => {
                    if self.warned_layers.insert(i) {
                        host.log(
                            LOG_WARN,
                            &format!("beaconkv: layer {i} (il {}) skipped: {why}", raw.il),
                        );
                    }
                }
            }
        }
        if self.params.policy.uses_queries()
            && self.layers.is_empty()
            && n > 0
            && !self.warned_no_layers
        {
            self.warned_no_layers = true;
            host.log(
                LOG_WARN,
                &format!(
                    "beaconkv: no layer can be scored; policy {} is replaced by position-only \
                     eviction (prefix + newest cells)",
                    self.params.policy.name()
                ),
            );
        }
        // Query stores follow the layer shapes; keep them when the shapes did not change (the
        // re-description after the first graph only adds RoPE details).
        let shapes: Vec<(usize, usize)> =
            self.layers.iter().map(|l| (l.n_head, l.head_dim)).collect();
        if shapes != self.layer_shapes {
            self.layer_shapes = shapes;
            let fresh = self.new_queries();
            for s in self.seqs.values_mut() {
                s.queries = fresh.clone();
            }
        }
        self.setup_archive(host, n);
    }

    /// The host records RoPE and Hadamard details when it builds (or reserves) its first graph,
    /// which has happened by the first hook of the first decode call: describe the layers again,
    /// once, keeping the query stores when the shapes are unchanged.
    fn describe_final_layers(&mut self, host: &mut dyn Host) {
        if !self.layers_final {
            self.layers_final = true;
            self.refresh_layers(host, true);
        }
    }

    fn seq_entry(&mut self, seq: i32) -> &mut SeqState {
        if !self.seqs.contains_key(&seq) {
            let state = SeqState {
                phase: Phase::Prompt,
                verifying: false,
                prompt_len: 0,
                queries: self.new_queries(),
                stats: SeqStats::new(),
                archive: SeqArchive::default(),
                recall: Default::default(),
                trail: TokenTrail::default(),
            };
            self.seqs.insert(seq, state);
        }
        self.seqs.get_mut(&seq).expect("inserted above")
    }

    /// Protected prefix of a sequence. `prefix=N` protects the first N cells; `prefix=prompt`
    /// the prompt (the positions seen so far while it streams in), at most `prefix_max` cells.
    /// Either way it is capped so that everything selection protects (prefix, window, and the
    /// newest cell even when `window` is 0) fits in `budget_min`.
    fn effective_prefix(&mut self, seq: i32, host: &mut dyn Host) -> usize {
        // validate() guarantees min >= window + 1, so this does not underflow.
        let cap = self.params.effective_min() - self.params.window.max(1);
        let Some(state) = self.seqs.get(&seq) else {
            return 0;
        };
        let wanted = match self.params.prefix {
            Prefix::First(n) => n,
            Prefix::Prompt => {
                let prompt = match state.phase {
                    Phase::Decode => state.prompt_len,
                    Phase::Prompt => (state.stats.pos_max + 1).max(0) as usize,
                };
                prompt.min(self.params.effective_prefix_max())
            }
        };
        if wanted > cap && !self.warned_prefix_cap {
            self.warned_prefix_cap = true;
            host.log(
                LOG_WARN,
                &format!(
                    "beaconkv: protected prefix of {wanted} cells capped to {cap} (min - window)"
                ),
            );
        }
        wanted.min(cap)
    }

    /// Cell count of `seq` from the host (a count-only query: no listing, no sorting).
    fn cell_count(&mut self, host: &mut dyn Host, seq: i32) -> Result<usize, EngineError> {
        let mut stream = 0;
        let n = host.seq_cells(seq, &mut [], &mut [], &mut stream);
        if n < 0 {
            return Err(self.host_error(host, format!("seq_cells({seq}) returned {n}")));
        }
        Ok(n as usize)
    }

    /// A failed host callback that does not stop the policy (counting, listing or evicting
    /// cells): the first is logged, every one is returned to the caller.
    fn host_error(&mut self, host: &mut dyn Host, msg: String) -> EngineError {
        let err = EngineError::Host(msg);
        if !self.warned_host {
            self.warned_host = true;
            host.log(
                LOG_ERROR,
                &format!("{err} (further host errors are only returned, not logged)"),
            );
        }
        err
    }

    /// Hook: `n_new[i]` tokens are about to be placed for `seq_ids[i]`, `n_outputs[i]` of them
    /// requesting logits (when the host knows). Makes room (best effort: never below prefix +
    /// window; the host reports a placement failure itself).
    ///
    /// The prompt phase of a sequence ends at its first generation step: a call bringing one
    /// token, or one asking for logits of more than one token (speculative verification).
    /// A failing sequence does not keep the others from being served; the first error is
    /// returned.
    pub fn before_batch(
        &mut self,
        host: &mut dyn Host,
        seq_ids: &[i32],
        n_new: &[i32],
        n_outputs: Option<&[i32]>,
    ) -> Result<(), EngineError> {
        self.describe_final_layers(host);
        self.refresh_layers(host, false);
        let mut result = Ok(());
        for (i, (&seq, &n)) in seq_ids.iter().zip(n_new).enumerate() {
            let several_logits = n_outputs.is_some_and(|o| o.get(i).is_some_and(|&k| k > 1));
            let generating = n == 1 || several_logits;
            let state = self.seq_entry(seq);
            if state.phase == Phase::Prompt && generating {
                state.phase = Phase::Decode;
                state.prompt_len = (state.stats.pos_max + 1).max(0) as usize;
            }
            state.verifying = state.phase == Phase::Decode && several_logits;
            // a new user turn (several tokens, no drafts): check the archive once it is computed
            state.recall.after_batch = state.phase == Phase::Decode && n > 1 && !several_logits;
            if self.scoring() != Scoring::Off {
                let n = n.max(0) as usize;
                let made_room = self.cell_count(host, seq).and_then(|count| {
                    if count + n <= self.params.budget {
                        return Ok(());
                    }
                    let target = self
                        .params
                        .effective_min()
                        .min(self.params.budget.saturating_sub(n));
                    self.compress(host, seq, target).map(|_| ())
                });
                if result.is_ok() {
                    result = made_room;
                }
            }
            let span = self.seq_entry(seq).recall.batch_span.take();
            if let Some(span) = self.quote_span(seq, n, n_outputs.and_then(|o| o.get(i)), span) {
                self.batch_recall(host, seq, span);
            }
            let prefix = self.effective_prefix(seq, host);
            self.seq_entry(seq).stats.prefix_len = prefix;
        }
        // (a span recorded for a sequence this call does not name is stale by the next one)
        for state in self.seqs.values_mut() {
            state.recall.batch_span = None;
        }
        result
    }

    /// The positions whose end `batch_recall` looks up before a call of `n` tokens asking for
    /// `outputs` logits, whose ids span `span`: the end of a prompt or user turn, a batch of
    /// several tokens asking for one output (or an unknown number); or a lone token after
    /// chunks that asked for none (the last token of a prompt read in chunks: llama-server's
    /// 32k + 1), with the chunk before it. Not a chunk in the middle of a prompt (no output),
    /// a generation step or a batch asking for several tokens' logits.
    fn quote_span(
        &mut self,
        seq: i32,
        n: i32,
        outputs: Option<&i32>,
        span: Option<(i32, i32)>,
    ) -> Option<(i32, i32)> {
        let recall = &mut self.seq_entry(seq).recall;
        let chunk = recall.chunk_start.take();
        let span = span?;
        if n > 1 && outputs == Some(&0) {
            recall.chunk_start = Some(span.0);
        }
        match n {
            1 => chunk.map(|first| (first, span.1)),
            _ if outputs.is_none_or(|&k| k == 1) => Some(span),
            _ => None,
        }
    }

    /// Hook (before `before_batch`): the ids of a batch's tokens at their positions, which the
    /// archive's recall reads to tell a passage being re-read (see `tokens.rs`); `before_batch`
    /// then checks the batch's end for a phrase it quotes. Kept only while an archive is on.
    pub fn record_tokens(&mut self, pos: &[i32], seq_id: &[i32], tokens: &[i32]) {
        if self.params.archive == 0 || self.params.recall_match == 0 {
            return;
        }
        for ((&p, &s), &t) in pos.iter().zip(seq_id).zip(tokens) {
            let state = self.seq_entry(s);
            state.trail.record(p, t);
            let span = state.recall.batch_span.get_or_insert((p, p));
            *span = (span.0.min(p), span.1.max(p));
        }
    }

    /// Hook: a ubatch was computed. Records positions and captures queries.
    pub fn after_ubatch(
        &mut self,
        host: &mut dyn Host,
        pos: &[i32],
        seq_id: &[i32],
        q_row: &[i32],
    ) -> Result<(), EngineError> {
        let t0 = Instant::now();
        self.describe_final_layers(host);
        for (&p, &s) in pos.iter().zip(seq_id) {
            let st = &mut self.seq_entry(s).stats;
            st.pos_max = st.pos_max.max(p);
            st.n_tokens += 1;
        }
        let capture = self.scoring() == Scoring::Policy
            && self.params.policy.uses_queries()
            && q_row.iter().any(|&r| r >= 0);
        if !capture {
            return Ok(());
        }
        host.synchronize();
        let Engine {
            layers,
            seqs,
            scratch,
            ..
        } = self;
        let mut failed_read = None;
        scratch.rotations.clear();
        for (li, layer) in layers.iter().enumerate() {
            let width = layer.n_head * layer.head_dim;
            if !layer.q_direct {
                scratch.q_row_ids.clear();
                scratch
                    .q_row_ids
                    .extend(q_row.iter().filter(|&&r| r >= 0).map(|&r| r as u32));
                scratch.q_rows.resize(scratch.q_row_ids.len() * width, 0.0);
                let rc = host.read_rows(
                    layer.host_index,
                    1,
                    0,
                    &scratch.q_row_ids,
                    &mut scratch.q_rows,
                );
                if rc < 0 {
                    failed_read = Some((layer.host_index, rc));
                    break;
                }
            }
            let mut fetched = 0;
            for ((&p, &s), &r) in pos.iter().zip(seq_id).zip(q_row) {
                if r < 0 {
                    continue;
                }
                let q: &[f32] = if layer.q_direct {
                    // SAFETY: the host promises row r of the query store holds width f32 values.
                    unsafe {
                        std::slice::from_raw_parts(
                            layer.q_data.0.add(r as usize * layer.q_nb1) as *const f32,
                            width,
                        )
                    }
                } else {
                    fetched += 1;
                    &scratch.q_rows[(fetched - 1) * width..fetched * width]
                };
                let Some(state) = seqs.get_mut(&s) else {
                    continue;
                };
                let store = &mut state.queries.layers[li];
                match &layer.rope {
                    Some(rope) => {
                        let inverse = scratch.rotations.get_inverse(layer.rope_id, rope, p);
                        store.push_with(q, p, &mut scratch.queries, |head| {
                            rope.unrotate_with(head, inverse)
                        });
                    }
                    None => store.push(q, p, &mut scratch.queries),
                }
            }
        }
        if let Some((layer, rc)) = failed_read {
            let msg = format!("read_rows(layer {layer}, queries) returned {rc}");
            self.enter_fallback(host, &format!("beaconkv: host callback failed: {msg}"));
            return Err(EngineError::Host(msg));
        }
        // Attribute the capture time to sequences by their share of the tokens.
        let ms = t0.elapsed().as_secs_f64() * 1e3 / pos.len().max(1) as f64;
        for &s in seq_id {
            if let Some(state) = self.seqs.get_mut(&s) {
                state.stats.ms_capture += ms;
            }
        }
        Ok(())
    }

    /// Hook: end of a decode call. Sequences above budget are compressed to `budget_min`;
    /// with an archive, the others may run a swap pass (see `recall.rs`); every sequence's
    /// cell count is refreshed. The first error is returned.
    pub fn after_decode(&mut self, host: &mut dyn Host) -> Result<(), EngineError> {
        self.step += 1;
        let mut ids = std::mem::take(&mut self.scratch.ids);
        ids.clear();
        ids.extend(self.seqs.keys());
        let mut result = Ok(());
        for &seq in &ids {
            let verifying = self.seq_entry(seq).verifying;
            let counted = self.cell_count(host, seq).and_then(|count| {
                if self.scoring() != Scoring::Off && count > self.params.budget && !verifying {
                    self.compress(host, seq, self.params.effective_min())
                } else if !verifying {
                    self.recall_step(host, seq, count)
                } else {
                    Ok(count)
                }
            });
            match counted {
                Ok(count) => {
                    let st = &mut self.seq_entry(seq).stats;
                    st.cells_in_use = count;
                    // drafts awaiting verification are not kept cells: the peak counts kept ones
                    if !verifying {
                        st.cells_peak = st.cells_peak.max(count);
                    }
                }
                Err(e) if result.is_ok() => result = Err(e),
                Err(_) => {}
            }
        }
        self.scratch.ids = ids;
        result
    }

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
    fn compress_pass(
        &mut self,
        host: &mut dyn Host,
        seq: i32,
        target: usize,
        swap: bool,
    ) -> Result<usize, EngineError> {
        let t0 = Instant::now();
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
        let archiving = self.archive.is_some() && self.scoring() == Scoring::Policy;
        let has_archived = archiving && !self.seqs[&seq].archive.is_empty();
        if n == 0 || (n <= target && !(swap && has_archived)) {
            return Ok(n);
        }
        let prefix = self.effective_prefix(seq, host);
        let mut result = Ok(());
        let mut m = 0;
        if self.scoring() == Scoring::Policy {
            if self.params.policy.uses_queries() {
                // K of the last decode call may still be in flight on an asynchronous backend.
                host.synchronize();
            }
            if has_archived && self.candidates_wanted(seq, swap) {
                m = self.pick_candidates(seq, stream, n);
            }
            // Cells selection always keeps need no score when nothing else reads one: the
            // largest scores, unpooled, and no archive (it ranks every row it keeps).
            // The same conditions let the scorer stop scoring a cell once it cannot be among
            // the `n - target` lowest (only which cells are lowest is read).
            let only_order = m == 0
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
        if self.scoring() == Scoring::Positions {
            self.score_cells(host, seq, stream, n, 0, None)
                .expect("position scoring reads nothing from the host");
        }
        let archiving = archiving && self.scoring() == Scoring::Policy;
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
        let evicted = self.scratch.evict_cells.len();
        let bytes = self.kv_bytes_per_cell;
        let state = self.seq_entry(seq);
        let st = &mut state.stats;
        st.evicted += evicted as u64;
        st.compress_events += 1;
        st.kv_bytes_saved += evicted as u64 * bytes;
        st.cells_in_use = n - evicted + recalled;
        st.recalled += recalled as u64;
        st.ms_score += (t1 - t0).as_secs_f64() * 1e3;
        st.ms_recall += ((t2 - t1) + (t4 - t3)).as_secs_f64() * 1e3;
        st.ms_evict += (t3 - t2).as_secs_f64() * 1e3;
        result.map(|()| n - evicted + recalled)
    }

    /// One score per listed cell (`scratch.pos/cells[..n]`), then per recall candidate
    /// (`m` of them, see `recall.rs`), into `scratch.scores[..n + m]`, by the policy's scorer
    /// for the cells of `policy` (see [`PolicyScope`]) or, with `None` (and `m == 0`), by the
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
        let Engine {
            scratch: sc,
            scorer,
            fallback,
            layers,
            params,
            seqs,
            ..
        } = self;
        let state = seqs
            .get(&seq)
            .expect("compress created the sequence's state");
        let (pos, cells) = (&sc.pos[..n], &sc.cells[..n]);
        let m_pos = (pos[n - 1] + 1).max(state.stats.pos_max + 1);
        let by_position = policy.is_none();
        let (lo, hi) = policy.map_or((0, n), |p| p.range);
        let prune_evict = policy.and_then(|p| p.prune_evict);
        let ctx = ScoreCtx::new(stream, layers, &state.queries, m_pos, params.seed)
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
            fallback.score(&ctx, host, &mut sc.rows)?;
            sc.scores[..n].copy_from_slice(sc.rows.row(0));
            return Ok(());
        }
        scorer.score(&ctx, host, &mut sc.rows)?;
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

    pub fn seq_removed(&mut self, seq: i32, p0: i32, p1: i32) {
        let lo = p0.max(0);
        let hi = if p1 < 0 { i32::MAX } else { p1 };
        if lo == 0 && hi == i32::MAX {
            if seq < 0 {
                self.seqs.clear();
            } else {
                self.seqs.remove(&seq);
            }
            return;
        }
        let layout = self.archive.as_ref();
        let trim = |state: &mut SeqState| {
            state.queries.remove_positions(lo, hi);
            if let Some(layout) = layout {
                state.archive.remove_range(layout, lo, hi);
            }
            state.recall.held.retain(|&p| p < lo || p >= hi);
            state.trail.remove_range(lo, hi);
            if hi == i32::MAX {
                state.stats.pos_max = state.stats.pos_max.min(lo - 1);
                state.prompt_len = state.prompt_len.min(lo as usize);
            }
        };
        if seq < 0 {
            self.seqs.values_mut().for_each(trim);
        } else if let Some(state) = self.seqs.get_mut(&seq) {
            trim(state);
        }
    }

    /// The host copied positions `[p0, p1)` of `seq_src` into `seq_dst` (`p0 < 0`: from 0;
    /// `p1 < 0`: to the end). A whole copy (llama-server's fork) replaces the destination's
    /// state with the source's. A range copy into a sequence the engine does not know gives it
    /// the source's state restricted to the range (beacons carry no position and are kept); a
    /// range copy into a known sequence keeps the destination's query state (two beacon sets
    /// cannot be merged) and raises its `pos_max` to the copied range.
    pub fn seq_copied(&mut self, seq_src: i32, seq_dst: i32, p0: i32, p1: i32) {
        if seq_src == seq_dst || seq_src < 0 || seq_dst < 0 {
            return;
        }
        let Some(src) = self.seqs.get(&seq_src) else {
            return;
        };
        let lo = p0.max(0);
        let hi = if p1 < 0 { i32::MAX } else { p1 };
        let whole = lo == 0 && hi == i32::MAX;
        let copied_max = src.stats.pos_max.min(hi.saturating_sub(1));
        if whole || !self.seqs.contains_key(&seq_dst) {
            let mut state = src.clone();
            if !whole {
                state.queries.remove_positions(0, lo);
                state.queries.remove_positions(hi, i32::MAX);
                if let Some(layout) = &self.archive {
                    state.archive.remove_range(layout, 0, lo);
                    state.archive.remove_range(layout, hi, i32::MAX);
                }
                state.trail.remove_range(0, lo);
                state.trail.remove_range(hi, i32::MAX);
                state.stats.pos_max = copied_max;
                state.prompt_len = state.prompt_len.min(hi as usize);
            }
            self.seqs.insert(seq_dst, state);
        } else if let Some(dst) = self.seqs.get_mut(&seq_dst) {
            dst.stats.pos_max = dst.stats.pos_max.max(copied_max);
        }
    }

    /// The plugin state of `seq` (see `state.rs`); None for a sequence the engine does not know.
    pub fn save_seq(&self, seq: i32) -> Option<Vec<u8>> {
        let state = self.seqs.get(&seq)?;
        let mut w = Writer::default();
        w.buf.extend_from_slice(crate::persist::MAGIC);
        w.u32(crate::persist::VERSION);
        w.u32(matches!(state.phase, Phase::Decode) as u32);
        w.u64(state.prompt_len as u64);
        let st = &state.stats;
        for v in [st.cells_in_use, st.cells_peak, st.prefix_len] {
            w.u64(v as u64);
        }
        w.i32(st.pos_max);
        for v in [
            st.n_tokens,
            st.evicted,
            st.compress_events,
            st.kv_bytes_saved,
        ] {
            w.u64(v);
        }
        for v in [st.ms_capture, st.ms_score, st.ms_evict] {
            w.f64(v);
        }
        w.u64(state.queries.layers.len() as u64);
        for l in &state.queries.layers {
            l.save(&mut w);
        }
        // the archive, length-prefixed so that a context without one can skip it
        let mut a = Writer::default();
        state.archive.save(&mut a);
        w.u64(a.buf.len() as u64);
        w.buf.extend_from_slice(&a.buf);
        state.trail.save(&mut w);
        Some(w.buf)
    }

    /// Replace the plugin state of `seq` with a saved one; nothing changes on error.
    pub fn load_seq(&mut self, seq: i32, data: &[u8]) -> Result<(), String> {
        let mut r = Reader::new(data);
        if r.take(4)? != crate::persist::MAGIC {
            return Err("not a BeaconKV sequence state (bad magic)".into());
        }
        let version = r.u32()?;
        if !(1..=crate::persist::VERSION).contains(&version) {
            return Err(format!(
                "state version {version} is not {}",
                crate::persist::VERSION
            ));
        }
        let mut state = SeqState {
            phase: if r.u32()? == 1 {
                Phase::Decode
            } else {
                Phase::Prompt
            },
            verifying: false,
            prompt_len: r.u64()? as usize,
            queries: self.new_queries(),
            stats: SeqStats::new(),
            archive: SeqArchive::default(),
            recall: Default::default(),
            trail: TokenTrail::default(),
        };
        let st = &mut state.stats;
        st.cells_in_use = r.u64()? as usize;
        st.cells_peak = r.u64()? as usize;
        st.prefix_len = r.u64()? as usize;
        st.pos_max = r.i32()?;
        st.n_tokens = r.u64()?;
        st.evicted = r.u64()?;
        st.compress_events = r.u64()?;
        st.kv_bytes_saved = r.u64()?;
        st.ms_capture = r.f64()?;
        st.ms_score = r.f64()?;
        st.ms_evict = r.f64()?;
        let n_layers = r.u64()? as usize;
        if n_layers != state.queries.layers.len() {
            return Err(format!(
                "state has {n_layers} layers, this context scores {}",
                state.queries.layers.len()
            ));
        }
        for l in &mut state.queries.layers {
            l.load(&mut r)?;
        }
        if version >= 2 {
            let len = r.u64()? as usize;
            let blob = r.take(len)?;
            if let Some(layout) = &self.archive {
                let min_max = version == 2;
                state.archive = SeqArchive::load(layout, &mut Reader::new(blob), min_max)?;
            }
        }
        if version >= 4 {
            state.trail = TokenTrail::load(&mut r)?;
        }
        r.finish()?;
        self.seqs.insert(seq, state);
        Ok(())
    }
}
