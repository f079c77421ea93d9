//! The host side of the seam: what the engine needs from the program that owns the KV cache.
//!
//! `RawLayer` is `beaconkv_layer`; `Host` is the Rust view of `beaconkv_host`, implemented over
//! the C function pointers in `ffi/host_adapter.rs` and by fake hosts in tests; `layer.rs`
//! validates a `RawLayer` into the `LayerDesc` the engine scores.

mod layer;

pub use layer::LayerDesc;

/// `beaconkv_layer`: one attention layer as the host describes it (declared in `ffi/types.rs`,
/// the ABI's one copy of the struct).
pub use crate::ffi::types::beaconkv_layer as RawLayer;

impl Default for RawLayer {
    fn default() -> Self {
        RawLayer {
            il: 0,
            head_dim: 0,
            n_head: 0,
            n_head_kv: 0,
            k_data: std::ptr::null(),
            k_type: -1,
            k_nb1: 0,
            k_nb2: 0,
            k_on_host: false,
            q_data: std::ptr::null(),
            q_nb1: 0,
            q_on_host: false,
            q_rows: 0,
            rope_n_dims: 0,
            rope_mode: 0,
            rope_n_ctx_orig: 0,
            freq_base: 10000.0,
            freq_scale: 1.0,
            ext_factor: 0.0,
            attn_factor: 1.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
            freq_factors: std::ptr::null(),
            hadamard_n: 0,
            kv_bytes_per_cell: 0,
            v_type: -1,
            v_dim: 0,
        }
    }
}

/// Log levels of `beaconkv_host::log`.
pub const LOG_WARN: i32 = 2;
pub const LOG_ERROR: i32 = 3;

/// What the engine asks of the cache owner. Status-returning methods follow the C convention:
/// `>= 0` success, `< 0` failure.
pub trait Host {
    fn n_layers(&mut self) -> i32;
    fn get_layer(&mut self, i: i32, out: &mut RawLayer) -> i32;
    /// Cells of `seq` sorted by position; fills `min(len, count)` entries, returns the count.
    /// Empty `pos`/`cells` ask for the count only, which a host answers without listing or
    /// sorting (the C form passes `cap == 0`): the engine counts on every decode step and lists
    /// only when it compresses.
    fn seq_cells(&mut self, seq: i32, pos: &mut [i32], cells: &mut [u32], stream: &mut u32) -> i32;
    fn seq_evict(&mut self, seq: i32, cells: &[u32]) -> i32;
    fn synchronize(&mut self);
    /// Whether `read_rows` is available (buffers that are not host memory need it).
    fn has_read_rows(&self) -> bool;
    /// `what` 0: dequantised K rows of cells; 1: query rows. See the header.
    fn read_rows(
        &mut self,
        layer: i32,
        what: i32,
        stream: u32,
        rows: &[u32],
        out: &mut [f32],
    ) -> i32;
    fn log(&mut self, level: i32, msg: &str);

    /// Whether the archive's callbacks (`read_kv`, `write_kv`, `seq_place`) are available.
    fn has_archive(&self) -> bool {
        false
    }
    /// The cache's own bytes of `cells` in layer `layer`: K rows into `k`, V rows into `v`.
    fn read_kv(
        &mut self,
        _layer: i32,
        _stream: u32,
        _cells: &[u32],
        _k: &mut [u8],
        _v: &mut [u8],
    ) -> i32 {
        -1
    }
    /// Write rows into `cells`; `format` 0: the cache's bytes, 1: F32 rows.
    fn write_kv(
        &mut self,
        _layer: i32,
        _stream: u32,
        _cells: &[u32],
        _format: i32,
        _k: &[u8],
        _v: &[u8],
    ) -> i32 {
        -1
    }
    /// Give `pos.len()` free cells the positions `pos` for `seq` (all or nothing).
    fn seq_place(&mut self, _seq: i32, _pos: &[i32], _cells: &mut [u32]) -> i32 {
        -1
    }

    /// Whether `score_keys` is available: the host scores cells where K lives.
    fn has_score_keys(&self) -> bool {
        false
    }
    /// Scores of `cells` on the backend that holds K, for every layer of `layers` (host
    /// indices) at once: `queries` holds, layer after layer, `[n_head_kv][n_query[i]][head_dim]`
    /// prepared queries; `out` gets, layer after layer, `[n_head_kv][cells]` scores: the largest
    /// logit over the group's queries (`prob` false) or log probability over the cells (true).
    #[allow(clippy::too_many_arguments)] // the C callback's arguments
    fn score_keys(
        &mut self,
        _stream: u32,
        _cells: &[u32],
        _layers: &[i32],
        _n_query: &[i32],
        _queries: &[f32],
        _prob: bool,
        _out: &mut [f32],
    ) -> i32 {
        -1
    }
    /// Reads from device or remote buffers the host made for the plugin so far: (calls, bytes).
    fn transfers(&mut self) -> (u64, u64) {
        (0, 0)
    }
}
