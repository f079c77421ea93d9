//! Saving and restoring one sequence's plugin state in a versioned byte format.
//!
//! The state holds the phase, prompt length, statistics, every layer's query store (beacons
//! included), the archive, the token ids and the recall bookkeeping, so that a sequence saved with llama.cpp's state
//! API and loaded into a fresh context continues exactly as the uninterrupted one.
//!
//! Format (little endian): magic `BKVS`, version, then fields in a fixed order (`seq_state.rs`).
//! Loading checks the magic, the version and that the layer shapes match the context's; nothing
//! is changed on error. Values are encoded by `crate::codec`, which the archive and the query
//! stores use for their own parts.

mod seq_state;

pub use seq_state::{load_seq, save_seq, SavedSeq, SeqParts};

pub const MAGIC: &[u8; 4] = b"BKVS";
/// 1: no archive; 2: archive page boxes as min/max; 3: as centre/radius (2 still loads);
/// 4: the token ids by position follow the archive (3 loads with none); 5: the recall
/// bookkeeping and the recall counters follow (4 loads with none: its first recall check runs a
/// swap pass).
pub const VERSION: u32 = 5;
