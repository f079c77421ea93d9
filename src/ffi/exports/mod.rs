//! The exported functions of `include/beaconkv.h`, one file per section of the header.

pub mod config;
pub mod context;
pub mod hooks;
pub mod observation;
pub mod plugin;
pub mod seq_override;
pub mod sizing;
pub mod state;
