//! The context state behind the C ABI: per-sequence query stores and statistics, the decode
//! hooks, and compression passes (cells -> scores -> selection -> eviction).
//!
//! The engine owns no memory of the host; every method takes the host as `&mut dyn Host`, so it
//! runs the same over the C callbacks (`ffi.rs`) and over fake hosts in tests.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::config::{Params, Policy, Prefix};
use crate::host::{Host, LayerDesc, RawLayer, LOG_WARN};
use crate::queries::{LayerQueries, QueryConfig, SeqQueries};
use crate::reduce::{reduce, span_pool, ReduceScratch};
use crate::scorer::{self, ScoreCtx, ScoreRows, Scorer};
use crate::select::{select_evictions, SelectScratch};
use crate::state::{Reader, Writer};
use crate::stats::SeqStats;

/// Why a hook failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EngineError {
    /// A host callback reported failure; compression is now disabled.
    Host(String),
    /// Compression was disabled earlier (error, panic, or no usable layer).
    Disabled,
}

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EngineError::Host(m) => write!(f, "beaconkv: host callback failed: {m}"),
            EngineError::Disabled => write!(f, "beaconkv: compression is disabled"),
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
    /// Prompt length, fixed when the decode phase starts.
    prompt_len: usize,
    queries: SeqQueries,
    stats: SeqStats,
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
    evict_idx: Vec<usize>,
    evict_cells: Vec<u32>,
    /// Query rows of one layer for a ubatch, when read through `Host::read_rows`.
    q_rows: Vec<f32>,
    q_row_ids: Vec<u32>,
    q_token: Vec<f32>,
}

/// One compression context (one llama.cpp context).
pub struct Engine {
    params: Params,
    scorer: Box<dyn Scorer>,
    /// Layers the scorer can read; query stores are aligned with this list.
    layers: Vec<LayerDesc>,
    /// `n_layers()` at the last description (-1: never described).
    described_n: i32,
    /// K+V bytes of one cell over all layers, for statistics.
    kv_bytes_per_cell: u64,
    enabled: bool,
    seqs: BTreeMap<i32, SeqState>,
    warned_prefix_cap: bool,
    warned_no_layers: bool,
    /// Layers already reported as unusable (each is reported once).
    warned_layers: std::collections::BTreeSet<i32>,
    /// Layers were described again after the host built its first graph.
    layers_final: bool,
    /// (n_head, head_dim) of each scored layer, which the query stores are shaped by.
    layer_shapes: Vec<(usize, usize)>,
    scratch: Scratch,
}

impl Engine {
    /// `params` must be valid (`Params::validate`).
    pub fn new(params: Params, host: &mut dyn Host) -> Self {
        let mut engine = Engine {
            scorer: scorer::for_policy(params.policy),
            params,
            layers: Vec::new(),
            described_n: -1,
            kv_bytes_per_cell: 0,
            enabled: true,
            seqs: BTreeMap::new(),
            warned_prefix_cap: false,
            warned_no_layers: false,
            warned_layers: Default::default(),
            layers_final: false,
            layer_shapes: Vec::new(),
            scratch: Scratch::default(),
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

    /// Whether compression may run (not disabled by an error, a panic or a lack of layers).
    pub fn is_enabled(&self) -> bool {
        self.enabled && (!self.params.policy.uses_queries() || !self.layers.is_empty())
    }

    /// Whether an error or a panic switched compression off (for good).
    pub fn failed(&self) -> bool {
        !self.enabled
    }

    /// Stop compressing for good (after a panic or a host error); hooks then only track stats.
    pub fn disable(&mut self) {
        self.enabled = false;
    }

    /// Statistics of `seq`, or totals for `seq < 0`; unknown sequences report zeros.
    pub fn stats(&self, seq: i32) -> SeqStats {
        if seq < 0 {
            SeqStats::total(self.seqs.values().map(|s| &s.stats))
        } else {
            self.seqs
                .get(&seq)
                .map(|s| s.stats.clone())
                .unwrap_or_default()
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
                Ok(desc) => self.layers.push(desc),
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
                    "beaconkv: no layer can be scored; policy {} disabled, the cache runs uncompressed",
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

    /// Whether a compression pass can run now.
    fn can_compress(&self) -> bool {
        self.enabled
            && self.params.policy != Policy::None
            && (!self.params.policy.uses_queries() || !self.layers.is_empty())
    }

    fn seq_entry(&mut self, seq: i32) -> &mut SeqState {
        if !self.seqs.contains_key(&seq) {
            let state = SeqState {
                phase: Phase::Prompt,
                prompt_len: 0,
                queries: self.new_queries(),
                stats: SeqStats::new(),
            };
            self.seqs.insert(seq, state);
        }
        self.seqs.get_mut(&seq).expect("inserted above")
    }

    /// Protected prefix of a sequence, capped so that everything selection protects (prefix,
    /// window, and the newest cell even when `window` is 0) fits in `budget_min`.
    fn effective_prefix(&mut self, seq: i32, host: &mut dyn Host) -> usize {
        // validate() guarantees min >= window + 1, so this does not underflow.
        let cap = self.params.effective_min() - self.params.window.max(1);
        let state = &self.seqs[&seq];
        let wanted = match self.params.prefix {
            Prefix::First(n) => n,
            Prefix::Prompt if state.phase == Phase::Decode => state.prompt_len,
            Prefix::Prompt => (state.stats.pos_max + 1).max(0) as usize,
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

    /// Cell count of `seq` from the host.
    fn cell_count(host: &mut dyn Host, seq: i32) -> Result<usize, EngineError> {
        let mut stream = 0;
        let n = host.seq_cells(seq, &mut [], &mut [], &mut stream);
        if n < 0 {
            return Err(EngineError::Host(format!("seq_cells({seq}) returned {n}")));
        }
        Ok(n as usize)
    }

    fn fail(&mut self, host: &mut dyn Host, err: EngineError) -> EngineError {
        if let EngineError::Host(msg) = &err {
            self.enabled = false;
            host.log(
                crate::host::LOG_ERROR,
                &format!("beaconkv: {msg}; compression disabled"),
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
    pub fn before_batch(
        &mut self,
        host: &mut dyn Host,
        seq_ids: &[i32],
        n_new: &[i32],
        n_outputs: Option<&[i32]>,
    ) -> Result<(), EngineError> {
        self.describe_final_layers(host);
        self.refresh_layers(host, false);
        for (i, (&seq, &n)) in seq_ids.iter().zip(n_new).enumerate() {
            let generating = n == 1 || n_outputs.is_some_and(|o| o.get(i).is_some_and(|&k| k > 1));
            let state = self.seq_entry(seq);
            if state.phase == Phase::Prompt && generating {
                state.phase = Phase::Decode;
                state.prompt_len = (state.stats.pos_max + 1).max(0) as usize;
            }
            if !self.can_compress() {
                continue;
            }
            let n = n.max(0) as usize;
            let count = Self::cell_count(host, seq).map_err(|e| self.fail(host, e))?;
            if count + n > self.params.budget {
                let target = self
                    .params
                    .effective_min()
                    .min(self.params.budget.saturating_sub(n));
                self.compress(host, seq, target)
                    .map_err(|e| self.fail(host, e))?;
            }
        }
        let prefix_len: Vec<(i32, usize)> = seq_ids
            .iter()
            .map(|&s| (s, self.effective_prefix(s, host)))
            .collect();
        for (s, p) in prefix_len {
            self.seq_entry(s).stats.prefix_len = p;
        }
        Ok(())
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
        let capture = self.enabled
            && self.params.policy.uses_queries()
            && !self.layers.is_empty()
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
                    let err = EngineError::Host(format!(
                        "read_rows(layer {}, queries) returned {rc}",
                        layer.host_index
                    ));
                    return Err(self.fail(host, err));
                }
            }
            let mut fetched = 0;
            for ((&p, &s), &r) in pos.iter().zip(seq_id).zip(q_row) {
                if r < 0 {
                    continue;
                }
                scratch.q_token.resize(width, 0.0);
                if layer.q_direct {
                    // SAFETY: the host promises row r of the query store holds width f32 values.
                    let src = unsafe {
                        std::slice::from_raw_parts(
                            layer.q_data.0.add(r as usize * layer.q_nb1) as *const f32,
                            width,
                        )
                    };
                    scratch.q_token.copy_from_slice(src);
                } else {
                    scratch
                        .q_token
                        .copy_from_slice(&scratch.q_rows[fetched * width..(fetched + 1) * width]);
                    fetched += 1;
                }
                if let Some(rope) = &layer.rope {
                    for head in scratch.q_token.chunks_exact_mut(layer.head_dim) {
                        rope.unrotate(head, p);
                    }
                }
                if let Some(state) = seqs.get_mut(&s) {
                    state.queries.layers[li].push(&scratch.q_token, p);
                }
            }
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

    /// Hook: end of a decode call. Sequences above budget are compressed to `budget_min`.
    pub fn after_decode(&mut self, host: &mut dyn Host) -> Result<(), EngineError> {
        let ids = self.seq_ids();
        for seq in ids {
            let mut count = Self::cell_count(host, seq).map_err(|e| self.fail(host, e))?;
            if self.can_compress() && count > self.params.budget {
                self.compress(host, seq, self.params.effective_min())
                    .map_err(|e| self.fail(host, e))?;
                count = Self::cell_count(host, seq).map_err(|e| self.fail(host, e))?;
            }
            let st = &mut self.seq_entry(seq).stats;
            st.cells_in_use = count;
            st.cells_peak = st.cells_peak.max(count);
        }
        Ok(())
    }

    /// One compression pass of `seq` down to `target` cells (never below prefix + window).
    pub fn compress(
        &mut self,
        host: &mut dyn Host,
        seq: i32,
        target: usize,
    ) -> Result<(), EngineError> {
        let t0 = Instant::now();
        if self.params.policy.uses_queries() {
            // K of the last decode call may still be in flight on an asynchronous backend.
            host.synchronize();
        }
        let mut stream = 0u32;
        let n = loop {
            let sc = &mut self.scratch;
            let total = host.seq_cells(seq, &mut sc.pos, &mut sc.cells, &mut stream);
            if total < 0 {
                return Err(EngineError::Host(format!(
                    "seq_cells({seq}) returned {total}"
                )));
            }
            let total = total as usize;
            if total <= sc.cells.len() {
                break total;
            }
            // Grow with headroom so the steady state never reallocates.
            sc.pos.resize(total + total / 4 + 16, 0);
            sc.cells.resize(total + total / 4 + 16, 0);
        };
        if n <= target {
            return Ok(());
        }
        let prefix = self.effective_prefix(seq, host);
        let window = self.params.window;
        let state = self.seqs.get(&seq).expect("compress on a known sequence");
        let Engine {
            scratch: sc,
            scorer,
            layers,
            params,
            ..
        } = self;
        let (pos, cells) = (&sc.pos[..n], &sc.cells[..n]);
        let m_pos = (pos[n - 1] + 1).max(state.stats.pos_max + 1);
        let ctx = ScoreCtx {
            seq,
            stream,
            cells,
            pos,
            m_pos,
            layers,
            queries: &state.queries,
            seed: params.seed,
            prob: params.score_prob,
        };
        sc.rows.reset(n);
        scorer
            .score(&ctx, host, &mut sc.rows)
            .map_err(|e| EngineError::Host(e.0))?;
        sc.scores.resize(n, 0.0);
        reduce(&sc.rows, params.reduce, &mut sc.scores[..n], &mut sc.reduce);
        span_pool(&mut sc.scores[..n], params.span, &mut sc.reduce);
        select_evictions(
            pos,
            &sc.scores[..n],
            prefix,
            window,
            target,
            &mut sc.select,
            &mut sc.evict_idx,
        );
        sc.evict_cells.clear();
        sc.evict_cells
            .extend(sc.evict_idx.iter().map(|&i| cells[i]));
        let t1 = Instant::now();
        if !sc.evict_cells.is_empty() {
            let rc = host.seq_evict(seq, &sc.evict_cells);
            if rc < 0 {
                return Err(EngineError::Host(format!("seq_evict({seq}) returned {rc}")));
            }
        }
        let t2 = Instant::now();
        let evicted = self.scratch.evict_cells.len();
        let bytes = self.kv_bytes_per_cell;
        let st = &mut self.seqs.get_mut(&seq).expect("known").stats;
        st.evicted += evicted as u64;
        st.compress_events += 1;
        st.kv_bytes_saved += evicted as u64 * bytes;
        st.cells_in_use = n - evicted;
        st.ms_score += (t1 - t0).as_secs_f64() * 1e3;
        st.ms_evict += (t2 - t1).as_secs_f64() * 1e3;
        Ok(())
    }

    /// The host removed positions `[p0, p1)` of `seq` (`seq < 0`: all sequences).
    pub fn seq_removed(&mut self, seq: i32, p0: i32, p1: i32) {
        let whole = p0 <= 0 && p1 < 0;
        let ids: Vec<i32> = if seq < 0 { self.seq_ids() } else { vec![seq] };
        for id in ids {
            if whole {
                self.seqs.remove(&id);
            } else if let Some(state) = self.seqs.get_mut(&id) {
                let lo = p0.max(0);
                let hi = if p1 < 0 { i32::MAX } else { p1 };
                state.queries.remove_positions(lo, hi);
                if hi == i32::MAX {
                    state.stats.pos_max = state.stats.pos_max.min(lo - 1);
                }
            }
        }
    }

    /// The host copied `seq_src` into `seq_dst` (fork): the destination inherits the state.
    /// The plugin state of `seq` (see `state.rs`); None for a sequence the engine does not know.
    pub fn save_seq(&self, seq: i32) -> Option<Vec<u8>> {
        let state = self.seqs.get(&seq)?;
        let mut w = Writer::default();
        w.buf.extend_from_slice(crate::state::MAGIC);
        w.u32(crate::state::VERSION);
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
        Some(w.buf)
    }

    /// Replace the plugin state of `seq` with a saved one; nothing changes on error.
    pub fn load_seq(&mut self, seq: i32, data: &[u8]) -> Result<(), String> {
        let mut r = Reader::new(data);
        if r.take(4)? != crate::state::MAGIC {
            return Err("not a BeaconKV sequence state (bad magic)".into());
        }
        let version = r.u32()?;
        if version != crate::state::VERSION {
            return Err(format!(
                "state version {version} is not {}",
                crate::state::VERSION
            ));
        }
        let mut state = SeqState {
            phase: if r.u32()? == 1 {
                Phase::Decode
            } else {
                Phase::Prompt
            },
            prompt_len: r.u64()? as usize,
            queries: self.new_queries(),
            stats: SeqStats::new(),
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
        r.finish()?;
        self.seqs.insert(seq, state);
        Ok(())
    }

    pub fn seq_copied(&mut self, seq_src: i32, seq_dst: i32) {
        if seq_src == seq_dst {
            return;
        }
        if let Some(state) = self.seqs.get(&seq_src).cloned() {
            self.seqs.insert(seq_dst, state);
        }
    }
}
