//! `LayerDesc`: a host's layer description, validated into what the engine can score.

use super::RawLayer;
use crate::config::ReadPath;
use crate::ggml::rope::Rope;
use crate::ggml::types::GgmlType;

/// A borrowed host pointer. The host guarantees it stays valid while its cache lives, and the
/// engine only dereferences it inside hooks, under the context lock.
#[derive(Clone, Copy, Debug)]
pub struct HostPtr(pub *const u8);

// SAFETY: the pointer is only read, inside hooks serialised by the context mutex.
unsafe impl Send for HostPtr {}
unsafe impl Sync for HostPtr {}

/// A layer the engine can score: a validated `RawLayer`.
#[derive(Clone, Debug)]
pub struct LayerDesc {
    /// Index for `get_layer` / `read_rows`.
    pub host_index: i32,
    pub head_dim: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub k_type: GgmlType,
    pub k_data: HostPtr,
    pub k_nb1: usize,
    pub k_nb2: usize,
    /// K rows are read through `k_data`; otherwise through `Host::read_rows`.
    pub k_direct: bool,
    /// A pass scores K on the host's backend (`Host::score_keys`) instead of reading its rows.
    pub k_backend: bool,
    pub q_data: HostPtr,
    pub q_nb1: usize,
    /// Query rows are read through `q_data`; otherwise through `Host::read_rows`.
    pub q_direct: bool,
    /// Rows of the host's query store when it is a ring (see the header's `q_rows`); 0: rows
    /// restart at 0 in every ubatch.
    pub q_rows: usize,
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

    /// Validate a host description; `Err` says why the layer cannot be scored. `read` says
    /// where K is read and scored (see [`ReadPath`]); `has_read_rows` and `has_score_keys` what
    /// the host offers.
    pub fn from_raw(
        host_index: i32,
        raw: &RawLayer,
        read: ReadPath,
        has_read_rows: bool,
        has_score_keys: bool,
    ) -> Result<Self, String> {
        let force_copy = read == ReadPath::Copy;
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
        let in_place = raw.k_on_host && !raw.k_data.is_null();
        let k_direct = read == ReadPath::Auto && in_place;
        let k_backend = has_score_keys
            && match read {
                ReadPath::Auto => !in_place,
                ReadPath::Backend => true,
                ReadPath::Copy => false,
            };
        if read == ReadPath::Backend && !has_score_keys {
            return Err("read=backend, but the host cannot score K on its backend".into());
        }
        if !k_direct && !k_backend && !has_read_rows {
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
            head_dim,
            n_head: raw.n_head as usize,
            n_head_kv: raw.n_head_kv as usize,
            k_type,
            k_data: HostPtr(raw.k_data as *const u8),
            k_nb1: raw.k_nb1,
            k_nb2: raw.k_nb2,
            k_direct,
            k_backend,
            q_data: HostPtr(raw.q_data as *const u8),
            q_nb1: raw.q_nb1,
            q_direct,
            q_rows: raw.q_rows.max(0) as usize,
            rope,
            rope_id: host_index.max(0) as usize,
            hadamard_n,
            v_type: GgmlType::from_id(raw.v_type)
                .filter(|t| raw.v_dim > 0 && (raw.v_dim as usize).is_multiple_of(t.block_size())),
            v_dim: raw.v_dim.max(0) as usize,
        })
    }
}
