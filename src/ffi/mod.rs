//! The C ABI of `include/beaconkv.h`: its types, the panic/NULL boundary, and the exports.
//!
//! - `types.rs`: the only Rust copy of every struct and constant of the header;
//! - `boundary.rs`: the one boundary every export's body runs in (NULL arguments and panics
//!   become the return type's failure values; on a context, a panic also records the last error
//!   and moves the context to position-only eviction);
//! - `context.rs`: the opaque context; `host_adapter.rs`: the host's callbacks as `Host`;
//!   `last_error.rs`: the last-error buffer (`beaconkv_last_error*` do not take the context
//!   lock, so a host log callback may call them);
//! - `params.rs`: `beaconkv_params` ↔ `Params`, from the key table of `config`;
//! - `exports/`: the functions, one file per section of the header.

mod boundary;
mod context;
mod exports;
mod host_adapter;
mod last_error;
mod params;
pub mod types;

pub use context::beaconkv_context;
#[cfg(any(test, feature = "testing"))]
pub use context::debug_panic_next_call;
pub use exports::{
    config::*, context::*, hooks::*, observation::*, plugin::*, seq_override::*, sizing::*,
    state::*,
};
pub use last_error::LAST_ERROR_CAP;
pub use params::C_DEFAULTS;
pub use types::*;
