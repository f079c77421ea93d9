//! BeaconKV: KV-cache compression for llama.cpp, driven by beacon queries.
//!
//! Pure-Rust core (no llama.cpp needed to test it) plus a C ABI (`include/beaconkv.h`) that a
//! patched llama.cpp calls from its decode loop. See README.md and docs/. The C ABI (`ffi`) is the
//! only public interface; `testing` exists for the project's own tests.

mod archive;
mod codec;
mod config;
mod engine;
pub mod ffi;
mod ggml;
mod host;
mod kernels;
mod persist;
mod queries;
mod scoring;
mod sizing;
mod stats;

#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod testing;
