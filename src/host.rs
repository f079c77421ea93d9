//! The host side of the seam: what the engine needs from the program that owns the KV cache.
//!
//! `RawLayer` is `beaconkv_layer`; `Host` is the Rust view of `beaconkv_host`, implemented over
//! the C function pointers in `ffi/host_adapter.rs` and by fake hosts in tests.

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
}

/// A borrowed host pointer. The host guarantees it stays valid while its cache lives, and the
/// engine only dereferences it inside hooks, under the context lock.
#[derive(Clone, Copy, Debug)]
pub struct HostPtr(pub *const u8);

// SAFETY: the pointer is only read, inside hooks serialised by the context mutex.
unsafe impl Send for HostPtr {}
unsafe impl Sync for HostPtr {}

use crate::ggml::rope::Rope;
use crate::ggml::types::GgmlType;

/// A layer the engine can score: a validated `RawLayer`.
#[derive(Clone, Debug)]
pub struct LayerDesc {
    /// Index for `get_layer` / `read_rows`.
    pub host_index: i32,
    pub il: i32,
    pub head_dim: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub k_type: GgmlType,
    pub k_data: HostPtr,
    pub k_nb1: usize,
    pub k_nb2: usize,
    /// K rows are read through `k_data`; otherwise through `Host::read_rows`.
    pub k_direct: bool,
    pub q_data: HostPtr,
    pub q_nb1: usize,
    /// Query rows are read through `q_data`; otherwise through `Host::read_rows`.
    pub q_direct: bool,
    /// `None`: no supported RoPE, queries are scored as captured.
    pub rope: Option<Rope>,
    /// Equal for layers with equal `rope` (the engine assigns it), so they share rotations.
    pub rope_id: usize,
    pub hadamard_n: usize,
    /// V element type (`None`: unknown, the layer cannot be archived) and values per cell.
    pub v_type: Option<GgmlType>,
    pub v_dim: usize,
}

impl LayerDesc {
    /// Query heads sharing one KV head.
    pub fn group_size(&self) -> usize {
        self.n_head / self.n_head_kv
    }

    /// Validate a host description; `Err` says why the layer cannot be scored. `force_copy`
    /// reads through `read_rows` even where host memory could be read directly.
    pub fn from_raw(
        host_index: i32,
        raw: &RawLayer,
        has_read_rows: bool,
        force_copy: bool,
    ) -> Result<Self, String> {
        let dims_ok = raw.head_dim > 0 && raw.n_head > 0 && raw.n_head_kv > 0;
        if !dims_ok || raw.n_head % raw.n_head_kv != 0 {
            return Err(format!(
                "bad shape head_dim={} n_head={} n_head_kv={}",
                raw.head_dim, raw.n_head, raw.n_head_kv
            ));
        }
        let k_type = GgmlType::from_id(raw.k_type)
            .ok_or_else(|| format!("unsupported K type {}", raw.k_type))?;
        let head_dim = raw.head_dim as usize;
        if !head_dim.is_multiple_of(k_type.block_size()) {
            return Err(format!(
                "head_dim {head_dim} is not a multiple of the {} block",
                k_type.name()
            ));
        }
        let k_direct = !force_copy && raw.k_on_host && !raw.k_data.is_null();
        if !k_direct && !has_read_rows {
            return Err("K is not in host memory and the host has no read_rows".into());
        }
        let q_direct = !force_copy && raw.q_on_host && !raw.q_data.is_null();
        if !q_direct && !has_read_rows {
            return Err(
                "the query store is not in host memory and the host has no read_rows".into(),
            );
        }
        // The scorer applies the same rotation to queries: a block that is not a power of two
        // dividing head_dim cannot be what llama.cpp stored (and would trip its asserts).
        let hadamard_n = raw.hadamard_n.max(0) as usize;
        if hadamard_n > 0 && (!hadamard_n.is_power_of_two() || !head_dim.is_multiple_of(hadamard_n))
        {
            return Err(format!(
                "Hadamard block {hadamard_n} is not a power of two dividing head_dim {head_dim}"
            ));
        }
        let rope = match Rope::mode_from_ggml(raw.rope_mode) {
            Some(mode) if raw.rope_n_dims > 0 && raw.rope_n_dims as usize <= head_dim => {
                let n_dims = raw.rope_n_dims as usize;
                let freq_factors = (!raw.freq_factors.is_null()).then(|| {
                    // SAFETY: the header promises rope_n_dims/2 floats when non-NULL.
                    unsafe { std::slice::from_raw_parts(raw.freq_factors, n_dims / 2) }.to_vec()
                });
                Some(Rope {
                    n_dims,
                    mode,
                    n_ctx_orig: raw.rope_n_ctx_orig,
                    freq_base: raw.freq_base,
                    freq_scale: raw.freq_scale,
                    ext_factor: raw.ext_factor,
                    attn_factor: raw.attn_factor,
                    beta_fast: raw.beta_fast,
                    beta_slow: raw.beta_slow,
                    freq_factors,
                })
            }
            _ => None,
        };
        Ok(LayerDesc {
            host_index,
            il: raw.il,
            head_dim,
            n_head: raw.n_head as usize,
            n_head_kv: raw.n_head_kv as usize,
            k_type,
            k_data: HostPtr(raw.k_data as *const u8),
            k_nb1: raw.k_nb1,
            k_nb2: raw.k_nb2,
            k_direct,
            q_data: HostPtr(raw.q_data as *const u8),
            q_nb1: raw.q_nb1,
            q_direct,
            rope,
            rope_id: host_index.max(0) as usize,
            hadamard_n,
            v_type: GgmlType::from_id(raw.v_type)
                .filter(|t| raw.v_dim > 0 && (raw.v_dim as usize).is_multiple_of(t.block_size())),
            v_dim: raw.v_dim.max(0) as usize,
        })
    }
}
