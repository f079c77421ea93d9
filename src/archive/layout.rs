//! Row formats of one context's archive: per layer, what the cache holds and what the archive
//! stores, and the page size.

use crate::config::ArchiveType;
use crate::ggml::types::GgmlType;

/// How one layer's rows are stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerFormat {
    /// Index for the host's read_kv / write_kv.
    pub host_index: i32,
    /// The cache's element types and values per cell.
    pub k_type: GgmlType,
    pub v_type: GgmlType,
    pub k_dim: usize,
    pub v_dim: usize,
    /// What the archive stores.
    pub k_store: GgmlType,
    pub v_store: GgmlType,
}

impl LayerFormat {
    pub fn new(
        host_index: i32,
        k: (GgmlType, usize),
        v: (GgmlType, usize),
        ty: ArchiveType,
    ) -> Self {
        let store = |cache: GgmlType, dim: usize| {
            let want = match ty {
                ArchiveType::Same => return cache,
                ArchiveType::Q8_0 => GgmlType::Q8_0,
                ArchiveType::Q4_0 => GgmlType::Q4_0,
            };
            let whole = dim.is_multiple_of(want.block_size());
            if whole && want.row_size(dim) < cache.row_size(dim) {
                want
            } else {
                cache
            }
        };
        LayerFormat {
            host_index,
            k_type: k.0,
            v_type: v.0,
            k_dim: k.1,
            v_dim: v.1,
            k_store: store(k.0, k.1),
            v_store: store(v.0, v.1),
        }
    }

    /// Bytes of one K / V row as the host reads and writes them.
    pub fn k_raw(&self) -> usize {
        self.k_type.row_size(self.k_dim)
    }
    pub fn v_raw(&self) -> usize {
        self.v_type.row_size(self.v_dim)
    }
    pub(super) fn k_stored(&self) -> usize {
        self.k_store.row_size(self.k_dim)
    }
    pub(super) fn v_stored(&self) -> usize {
        self.v_store.row_size(self.v_dim)
    }

    /// Rows go back as the cache's own bytes (else as F32 rows the host converts).
    pub fn exact(&self) -> bool {
        self.k_store == self.k_type && self.v_store == self.v_type
    }
}

/// The layers of one context's archive and its page size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub layers: Vec<LayerFormat>,
    pub page: usize,
    /// Offset of each layer's summary in a page's `centre`/`radius`.
    pub(super) sum_off: Vec<usize>,
}

impl Layout {
    pub fn new(layers: Vec<LayerFormat>, page: usize) -> Self {
        let mut sum_off = Vec::with_capacity(layers.len() + 1);
        let mut at = 0;
        for l in &layers {
            sum_off.push(at);
            at += l.k_dim;
        }
        sum_off.push(at);
        Layout {
            layers,
            page: page.max(1),
            sum_off,
        }
    }

    pub fn page_of(&self, pos: i32) -> i32 {
        pos.div_euclid(self.page as i32)
    }

    pub(super) fn sum_len(&self) -> usize {
        *self.sum_off.last().unwrap_or(&0)
    }
}
