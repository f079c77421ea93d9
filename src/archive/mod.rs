//! The archive: evicted K and V rows kept in host memory so they can be placed back.
//!
//! A second tier behind the KV cells: when a compression pass evicts cells, their K and V rows
//! of every layer are copied here first (host memory, per sequence, keyed by
//! position), so that they can be placed back when the text returns to them (see `tokens.rs`).
//!
//! Rows are grouped in pages of `page` consecutive positions. Each page keeps, per layer, the box
//! its (dequantised) keys lie in, element-wise, as centre c and radius r: for any query q,
//! `q·c + |q|·r` (= `sum_j max(q_j*min_j, q_j*max_j)`) bounds `q·k` of every key of the page
//! from above, so a pass can rank pages without reading them and confirm only the best with
//! exact scores. Centre and radius rather than min and max: the bound is then one dot product
//! of `[q, |q|]` with `[c, r]` (`kernels::max_dot_lanes`, eight pages at a time).
//! Removing positions from a page leaves its box as it is: a bound over a superset is still one.
//!
//! Element types: `same` stores the cache's own bytes (a recall is exact); `q8_0`/`q4_0`
//! quantise on the way in (a layer whose row is not whole blocks, or whose cache type is already
//! as small, keeps the cache's bytes).

mod layout;
pub mod probe;
mod recall_state;
mod rows;
mod store;
pub mod tokens;

pub use layout::{LayerFormat, Layout};
pub use probe::RecallProbe;
pub use recall_state::SeqRecall;
pub use rows::{ArchiveScratch, RawRows, RecallRows};
pub use store::SeqArchive;
