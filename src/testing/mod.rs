//! Test support, compiled only with the `testing` feature: the fake host and the internal types
//! the integration tests, the micro-benchmark and the fuzzer drive directly. Not a stable API.

pub mod fake_host;

/// Settings: the key table, the parsed form and the named settings.
pub mod config {
    pub use crate::config::{
        flag_for_key, ArchiveType, ConfigError, Hundredths, Params, Policy, PromptMode, ReadPath,
        Reduce, KEYS, KEY_FLAGS,
    };
}

/// The engine behind a context, driven through the `Host` trait.
pub mod engine {
    pub use crate::engine::{Engine, EngineError};
}

/// The host seam: the trait the engine calls and the layer descriptions.
pub mod host {
    pub use crate::host::{Host, LayerDesc, RawLayer};
}

/// Query stores and furthest-point sampling.
pub mod queries {
    pub use crate::queries::fps::farthest_point_sampling;
    pub use crate::queries::{LayerQueries, QueryConfig, QueryScratch, SeqQueries};
}

/// Scorers, selection and the archive's recall probe.
pub mod scoring {
    pub use crate::archive::RecallProbe;
    pub use crate::scoring::select::{protected_count, select_evictions, SelectScratch};
    pub use crate::scoring::{ExtraKeys, QueryScorer, RkvScorer, ScoreCtx, ScoreRows, Scorer};
}

/// ggml formats re-implemented in Rust.
pub mod ggml {
    pub use crate::ggml::dequant::dequantize_row;
    pub use crate::ggml::hadamard::hadamard_inplace;
    pub use crate::ggml::rope::{Rope, RopeMode};
    pub use crate::ggml::types::GgmlType;
}
