//! The host's layers as the engine scores them: which can be read, their shapes (which the query
//! stores follow), and their K+V bytes per cell.

use super::fallback::first;
use super::Engine;
use crate::config::Policy;
use crate::host::{Host, LayerDesc, RawLayer, LOG_WARN};
use crate::queries::{LayerQueries, QueryConfig, SeqQueries};

/// The layers of one context.
pub(super) struct LayerSet {
    /// Layers the scorer can read; query stores are aligned with this list.
    pub(super) descs: Vec<LayerDesc>,
    /// `n_layers()` at the last description (-1: never described).
    described_n: i32,
    /// K+V bytes of one cell over all layers, for statistics.
    pub(super) kv_bytes_per_cell: u64,
    /// (n_head, head_dim) of each scored layer, which the query stores are shaped by.
    shapes: Vec<(usize, usize)>,
    /// Layers were described again after the host built its first graph.
    finalised: bool,
    /// Rows of the host's query-store ring, the smallest over the scored layers (0: no ring).
    pub(super) q_ring: usize,
}

impl Default for LayerSet {
    fn default() -> Self {
        LayerSet {
            descs: Vec::new(),
            described_n: -1,
            kv_bytes_per_cell: 0,
            shapes: Vec::new(),
            finalised: false,
            q_ring: 0,
        }
    }
}

impl Engine {
    /// Describe the host's layers (again) when their number changed or `force` is set.
    /// Unusable layers are skipped with a warning; query stores are rebuilt.
    pub fn refresh_layers(&mut self, host: &mut dyn Host, force: bool) {
        let n = host.n_layers();
        if !force && n == self.layers.described_n {
            return;
        }
        self.layers.described_n = n;
        self.layers.descs.clear();
        self.layers.kv_bytes_per_cell = 0;
        let has_read_rows = host.has_read_rows();
        let has_score_keys = host.has_score_keys();
        for i in 0..n.max(0) {
            let mut raw = RawLayer::default();
            if host.get_layer(i, &mut raw) < 0 {
                host.log(
                    LOG_WARN,
                    &format!("beaconkv: get_layer({i}) failed; layer skipped"),
                );
                continue;
            }
            self.layers.kv_bytes_per_cell += raw.kv_bytes_per_cell;
            if !self.params.policy.uses_queries() {
                continue;
            }
            match LayerDesc::from_raw(
                i,
                &raw,
                self.params.read_path,
                has_read_rows,
                has_score_keys,
            ) {
                Ok(mut desc) => {
                    if let Some(same) = self.layers.descs.iter().find(|l| l.rope == desc.rope) {
                        desc.rope_id = same.rope_id;
                    }
                    self.layers.descs.push(desc)
                }
                Err(why) => {
                    if self.warned.layers.insert(i) {
                        host.log(
                            LOG_WARN,
                            &format!("beaconkv: layer {i} (il {}) skipped: {why}", raw.il),
                        );
                    }
                }
            }
        }
        if self.params.policy.uses_queries()
            && self.layers.descs.is_empty()
            && n > 0
            && first(&mut self.warned.no_layers)
        {
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
        let shapes: Vec<(usize, usize)> = self
            .layers
            .descs
            .iter()
            .map(|l| (l.n_head, l.head_dim))
            .collect();
        self.layers.q_ring = self
            .layers
            .descs
            .iter()
            .map(|l| l.q_rows)
            .min()
            .unwrap_or(0);
        if shapes != self.layers.shapes {
            // rows not read yet belong to stores that are rebuilt
            self.capture.pending.clear();
            self.layers.shapes = shapes;
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
    pub(super) fn describe_final_layers(&mut self, host: &mut dyn Host) {
        if !self.layers.finalised {
            self.layers.finalised = true;
            self.refresh_layers(host, true);
        }
    }

    /// Where the scored layers' K is read: `"in place"` (host memory), `"backend"` (scored on
    /// the host's backend), `"copy"` (rows copied through `read_rows`), with the layer count of
    /// each, e.g. `"backend (30 layers)"`; `"none"` when no layer is scored.
    pub fn scoring_path(&self) -> String {
        let d = &self.layers.descs;
        let count = |f: fn(&LayerDesc) -> bool| d.iter().filter(|l| f(l)).count();
        let parts = [
            ("in place", count(|l| l.k_direct)),
            ("backend", count(|l| !l.k_direct && l.k_backend)),
            ("copy", count(|l| !l.k_direct && !l.k_backend)),
        ];
        let named: Vec<String> = parts
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(name, n)| format!("{name} ({n} layer{})", if *n == 1 { "" } else { "s" }))
            .collect();
        if named.is_empty() {
            "none".into()
        } else {
            named.join(", ")
        }
    }

    fn query_config(&self) -> QueryConfig {
        QueryConfig {
            n_beacons: self.params.n_beacons,
            n_recent: self.params.n_recent,
            fps: self.params.policy == Policy::Beacon,
            ring: self.params.policy.uses_ring(),
        }
    }

    pub(super) fn new_queries(&self) -> SeqQueries {
        let cfg = self.query_config();
        let layers = if self.params.policy.uses_queries() {
            self.layers
                .descs
                .iter()
                .map(|l| LayerQueries::new(&cfg, l.n_head, l.head_dim))
                .collect()
        } else {
            Vec::new()
        };
        SeqQueries { layers }
    }
}
