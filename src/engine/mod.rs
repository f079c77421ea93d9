//! The compression context behind the C ABI: decode hooks, compression passes, archive recall.
//!
//! The engine owns no memory of the host; every method takes the host as `&mut dyn Host`, so it
//! runs the same over the C callbacks (`ffi/`) and over fake hosts in tests.
//!
//! Failure never stops eviction: the host sized its cache for the budget, so a context that
//! stopped evicting would overflow it. When the configured policy cannot score (a panic, a
//! failed K or query read, no layer it can read), compression passes score by position only
//! (the `streaming` scorer: prefix + newest cells, no K and no query read) and the engine says
//! so once through the host log (`fallback.rs`).
//!
//! Hot path: a decode step that does not compress asks the host for cell counts only and
//! allocates nothing once the context is warm (every buffer lives in the pass's `Scratch` or in
//! the query stores and only grows); `tests/alloc_free.rs` checks this with a counting
//! allocator.
//!
//! Files: `hooks.rs` (the hooks) calls `capture.rs` (query capture) and `pass.rs` (a
//! compression pass: list, score, reduce, select, evict); `archiving/` is the archive's side,
//! switched on by `archive > 0`: its stage of a pass (candidates before selection, archiving and
//! placing back after it) and recall between passes. `seq.rs` holds per-sequence state,
//! `layers.rs` the layer descriptions, `limits.rs` a sequence's own budget, policy and protected
//! prefix, `reuse.rs` exact prompt reuse, `fallback.rs` who scores and the once-only warnings.

mod archiving;
mod capture;
mod fallback;
mod hooks;
mod layers;
mod limits;
mod pass;
mod reuse;
mod seq;

use std::collections::BTreeMap;

use crate::archive::Layout;
use crate::config::Params;
use crate::host::Host;
use crate::persist;
use crate::stats::SeqStats;

use capture::CaptureScratch;
use fallback::{Scorers, Warnings};
use layers::LayerSet;
use pass::Scratch;
use seq::SeqState;

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

/// One compression context (one llama.cpp context).
pub struct Engine {
    params: Params,
    /// The policy's scorer and its position-only fallback.
    scorers: Scorers,
    layers: LayerSet,
    seqs: BTreeMap<i32, SeqState>,
    warned: Warnings,
    scratch: Scratch,
    capture: CaptureScratch,
    /// Row formats of the archive; `None` while it is off (params, host or layers).
    archive: Option<Layout>,
}

impl Engine {
    /// `params` must be valid (`Params::validate`).
    pub fn new(params: Params, host: &mut dyn Host) -> Self {
        let mut engine = Engine {
            scorers: Scorers::new(params.policy),
            params,
            layers: LayerSet::default(),
            seqs: BTreeMap::new(),
            warned: Warnings::default(),
            scratch: Scratch::default(),
            capture: CaptureScratch::default(),
            archive: None,
        };
        engine.refresh_layers(host, false);
        engine
    }

    pub fn params(&self) -> &Params {
        &self.params
    }

    #[cfg(any(test, feature = "testing"))]
    pub fn layers(&self) -> &[crate::host::LayerDesc] {
        &self.layers.descs
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
    #[cfg(any(test, feature = "testing"))]
    pub fn seq_ids(&self) -> Vec<i32> {
        self.seqs.keys().copied().collect()
    }

    /// The plugin state of `seq` (format: `persist/`); None for a sequence the engine does not
    /// know.
    pub fn save_seq(&self, seq: i32) -> Option<Vec<u8>> {
        let state = self.seqs.get(&seq)?;
        Some(persist::save_seq(&state.parts()))
    }

    /// Replace the plugin state of `seq` with a saved one (a budget and policy the host set for
    /// it stay); nothing changes on error.
    pub fn load_seq(&mut self, seq: i32, data: &[u8]) -> Result<(), String> {
        let saved = persist::load_seq(data, self.new_queries(), self.archive.as_ref())?;
        // the host's budget and policy for the sequence are no part of its history
        let own = self.seqs.get(&seq).and_then(|s| s.own.clone());
        let mut state = SeqState::restored(saved);
        state.own = own;
        self.seqs.insert(seq, state);
        Ok(())
    }
}
