//! BeaconKV: KV-cache compression for llama.cpp, driven by beacon queries.
//!
//! Pure-Rust core (no llama.cpp needed to test it) plus a C ABI (`include/beaconkv.h`) that a
//! patched llama.cpp calls from its decode loop. See README.md and docs/.

pub mod archive;
mod codec;
pub mod config;
pub mod engine;
pub mod ffi;
pub mod ggml;
pub mod host;
pub mod kernels;
pub mod persist;
pub mod queries;
pub mod scoring;
pub mod sizing;
pub mod stats;
