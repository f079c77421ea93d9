//! BeaconKV: KV-cache compression for llama.cpp, driven by beacon queries.
//!
//! Pure-Rust core (no llama.cpp needed to test it) plus a C ABI (`include/beaconkv.h`) that a
//! patched llama.cpp calls from its decode loop. See README.md and docs/.

pub mod archive;
pub mod config;
pub mod engine;
pub mod ffi;
pub mod fps;
pub mod ggml_types;
pub mod hadamard;
pub mod host;
pub mod kread;
pub mod memory;
pub mod quant;
pub mod queries;
pub mod reduce;
pub mod rope;
pub mod scorer;
pub mod select;
pub mod simd;
pub mod state;
pub mod stats;
pub mod tokens;
