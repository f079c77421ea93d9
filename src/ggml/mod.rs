//! ggml's formats re-implemented: type sizes, dequantisers, quantisers, RoPE and the Hadamard rotation.

pub mod dequant;
pub mod hadamard;
pub mod quant;
pub mod rope;
pub mod types;
