//! The ggml tensor types a K cache may use, with their block layout.
//!
//! PLACEHOLDER written by the engine branch so it compiles; replaced at merge.

/// K cache element types the plugin can read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)] // ggml's own spelling
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

impl GgmlType {
    pub fn from_id(id: i32) -> Option<Self> {
        Some(match id {
            0 => Self::F32,
            1 => Self::F16,
            2 => Self::Q4_0,
            3 => Self::Q4_1,
            6 => Self::Q5_0,
            7 => Self::Q5_1,
            8 => Self::Q8_0,
            20 => Self::IQ4_NL,
            30 => Self::BF16,
            _ => return None,
        })
    }

    pub fn id(self) -> i32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q5_0 => 6,
            Self::Q5_1 => 7,
            Self::Q8_0 => 8,
            Self::IQ4_NL => 20,
            Self::BF16 => 30,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::BF16 => "bf16",
            Self::Q8_0 => "q8_0",
            Self::Q4_0 => "q4_0",
            Self::Q4_1 => "q4_1",
            Self::Q5_0 => "q5_0",
            Self::Q5_1 => "q5_1",
            Self::IQ4_NL => "iq4_nl",
        }
    }

    /// Values per block.
    pub fn block_size(self) -> usize {
        match self {
            Self::F32 | Self::F16 | Self::BF16 => 1,
            _ => 32,
        }
    }

    /// Bytes per block.
    pub fn type_size(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::BF16 => 2,
            Self::Q8_0 => 34,
            Self::Q4_0 | Self::IQ4_NL => 18,
            Self::Q4_1 => 20,
            Self::Q5_0 => 22,
            Self::Q5_1 => 24,
        }
    }

    /// Bytes of a row of `n` values (`n` a multiple of the block size).
    pub fn row_size(self, n: usize) -> usize {
        n / self.block_size() * self.type_size()
    }
}

/// Row size by ggml type id; `None` for types the plugin does not know.
pub fn row_size(id: i32, n: usize) -> Option<usize> {
    GgmlType::from_id(id).map(|t| t.row_size(n))
}
