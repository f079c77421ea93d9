//! The ggml tensor types a llama.cpp KV cache may hold, with their block geometry.
//!
//! Ids and sizes mirror `ggml/include/ggml.h` and `ggml/src/ggml-common.h` of llama.cpp 11434,
//! so a type id read from a live `ggml_tensor` maps straight onto a dequantiser here.

/// ggml type ids and block facts for: F32=0, F16=1, Q4_0=2, Q4_1=3, Q5_0=6, Q5_1=7, Q8_0=8,
/// IQ4_NL=20, BF16=30 (the cache types `llama-context` accepts for K and V).
/// Variant names follow ggml's spelling (`IQ4_NL`) so they grep across both code bases.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GgmlType {
    F32,
    F16,
    BF16,
    Q8_0,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    IQ4_NL,
}

/// Values per block of every quantised type supported here (QK4_0 = QK5_1 = QK8_0 = QK4_NL = 32).
const QK: usize = 32;

impl GgmlType {
    /// All supported types, for tests and table-driven code.
    pub const ALL: [GgmlType; 9] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::IQ4_NL,
    ];

    /// Map a `ggml_type` value to a supported type; `None` for anything we cannot dequantise.
    pub fn from_id(id: i32) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.id() == id)
    }

    /// The `ggml_type` enum value.
    pub fn id(self) -> i32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::Q4_0 => 2,
            GgmlType::Q4_1 => 3,
            GgmlType::Q5_0 => 6,
            GgmlType::Q5_1 => 7,
            GgmlType::Q8_0 => 8,
            GgmlType::IQ4_NL => 20,
            GgmlType::BF16 => 30,
        }
    }

    /// ggml's type name (`ggml_type_name`), used in logs and stats.
    pub fn name(self) -> &'static str {
        match self {
            GgmlType::F32 => "f32",
            GgmlType::F16 => "f16",
            GgmlType::BF16 => "bf16",
            GgmlType::Q8_0 => "q8_0",
            GgmlType::Q4_0 => "q4_0",
            GgmlType::Q4_1 => "q4_1",
            GgmlType::Q5_0 => "q5_0",
            GgmlType::Q5_1 => "q5_1",
            GgmlType::IQ4_NL => "iq4_nl",
        }
    }

    /// Values per block (`ggml_blck_size`): 1 for float types, 32 for the quantised ones.
    pub fn block_size(self) -> usize {
        match self {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => 1,
            _ => QK,
        }
    }

    /// Bytes per block (`ggml_type_size`), from the `block_*` structs in ggml-common.h.
    pub fn type_size(self) -> usize {
        match self {
            GgmlType::F32 => 4,
            GgmlType::F16 | GgmlType::BF16 => 2,
            GgmlType::Q8_0 => 2 + QK,         // d + qs[32]
            GgmlType::Q4_0 => 2 + QK / 2,     // d + nibbles
            GgmlType::Q4_1 => 4 + QK / 2,     // d, m + nibbles
            GgmlType::Q5_0 => 2 + 4 + QK / 2, // d + qh[4] + nibbles
            GgmlType::Q5_1 => 4 + 4 + QK / 2, // d, m + qh[4] + nibbles
            GgmlType::IQ4_NL => 2 + QK / 2,   // d + nibble indices into kvalues
        }
    }

    /// Bytes for `n` values (`ggml_row_size`). `n` must be a multiple of the block size;
    /// callers with untrusted sizes use the free function [`row_size`], which checks.
    pub fn row_size(self, n: usize) -> usize {
        debug_assert!(
            n.is_multiple_of(self.block_size()),
            "{n} not a multiple of the block size"
        );
        self.type_size() * n / self.block_size()
    }
}

/// Row size for any supported id, `None` if the id is unknown or `n` is not a whole number of
/// blocks (ggml would assert; the plugin must refuse instead of crashing the host).
pub fn row_size(id: i32, n: usize) -> Option<usize> {
    let ty = GgmlType::from_id(id)?;
    n.is_multiple_of(ty.block_size()).then(|| ty.row_size(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_match_ggml() {
        let expect = [
            (GgmlType::F32, 0),
            (GgmlType::F16, 1),
            (GgmlType::Q4_0, 2),
            (GgmlType::Q4_1, 3),
            (GgmlType::Q5_0, 6),
            (GgmlType::Q5_1, 7),
            (GgmlType::Q8_0, 8),
            (GgmlType::IQ4_NL, 20),
            (GgmlType::BF16, 30),
        ];
        for (ty, id) in expect {
            assert_eq!(ty.id(), id);
            assert_eq!(GgmlType::from_id(id), Some(ty));
        }
        for bad in [-1, 4, 5, 9, 10, 19, 21, 29, 31, 39, 1000] {
            assert_eq!(GgmlType::from_id(bad), None, "id {bad}");
        }
    }

    #[test]
    fn type_sizes_match_ggml_blocks() {
        let expect = [
            (GgmlType::F32, 1, 4),
            (GgmlType::F16, 1, 2),
            (GgmlType::BF16, 1, 2),
            (GgmlType::Q8_0, 32, 34),
            (GgmlType::Q4_0, 32, 18),
            (GgmlType::Q4_1, 32, 20),
            (GgmlType::Q5_0, 32, 22),
            (GgmlType::Q5_1, 32, 24),
            (GgmlType::IQ4_NL, 32, 18),
        ];
        for (ty, blck, size) in expect {
            assert_eq!(
                (ty.block_size(), ty.type_size()),
                (blck, size),
                "{}",
                ty.name()
            );
        }
    }

    #[test]
    fn row_sizes_match_ggml_row_size() {
        assert_eq!(GgmlType::Q8_0.row_size(64), 68);
        assert_eq!(GgmlType::Q4_0.row_size(64), 36);
        assert_eq!(GgmlType::Q4_1.row_size(64), 40);
        assert_eq!(GgmlType::Q5_0.row_size(64), 44);
        assert_eq!(GgmlType::Q5_1.row_size(64), 48);
        assert_eq!(GgmlType::IQ4_NL.row_size(64), 36);
        assert_eq!(GgmlType::F16.row_size(64), 128);
        assert_eq!(GgmlType::BF16.row_size(128), 256);
        assert_eq!(GgmlType::F32.row_size(64), 256);
        assert_eq!(row_size(8, 128), Some(136));
        assert_eq!(row_size(1, 7), Some(14));
        assert_eq!(
            row_size(8, 48),
            None,
            "48 is not a whole number of q8_0 blocks"
        );
        assert_eq!(row_size(12, 256), None, "q4_K is not supported");
    }

    #[test]
    fn names_are_ggml_names() {
        let names: Vec<_> = GgmlType::ALL.iter().map(|t| t.name()).collect();
        assert_eq!(
            names,
            ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl"]
        );
    }
}
