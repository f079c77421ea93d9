//! The opaque `beaconkv_context`: the engine and the host adapter behind one lock, and the
//! last-error buffer beside it (readable without the lock).

#![allow(non_camel_case_types)]

use parking_lot::Mutex;

use super::host_adapter::CHost;
use super::last_error::LastError;
use crate::engine::Engine;

/// Opaque `beaconkv_context`.
pub struct beaconkv_context {
    pub(super) inner: Mutex<Inner>,
    pub(super) last_error: LastError,
}

/// What the context lock guards.
pub struct Inner {
    pub(super) engine: Engine,
    pub(super) host: CHost,
    /// Test hook: make the next call on the context panic (see `debug_panic_next_call`).
    #[cfg(any(test, feature = "testing"))]
    panic_next: bool,
}

impl beaconkv_context {
    pub(super) fn new(engine: Engine, host: CHost) -> Self {
        beaconkv_context {
            inner: Mutex::new(Inner {
                engine,
                host,
                #[cfg(any(test, feature = "testing"))]
                panic_next: false,
            }),
            last_error: LastError::new(),
        }
    }
}

impl Inner {
    /// The engine with every captured query read into its stores, for the calls that remove,
    /// copy, save or restore a sequence's state (queries of decode steps wait in the host's
    /// store until a pass needs them: `engine/capture.rs`). A failed read has put the context
    /// in fallback, where queries are not used, so it is not an error here.
    pub(super) fn settled_engine(&mut self) -> &mut Engine {
        let _ = self.engine.flush_queries(&mut self.host);
        &mut self.engine
    }

    /// Panics once after [`debug_panic_next_call`] (a no-op in builds without the test hook).
    pub(super) fn take_injected_panic(&mut self) {
        #[cfg(any(test, feature = "testing"))]
        if std::mem::take(&mut self.panic_next) {
            panic!("injected panic (test hook)");
        }
    }
}

/// Make the next call on `ctx` (any function taking the context) panic inside the boundary,
/// to exercise it from tests. Not exported, and only built for tests (feature `testing`).
///
/// # Safety
/// A non-NULL `ctx` must come from `beaconkv_context_new` and not be freed yet.
#[doc(hidden)]
#[cfg(any(test, feature = "testing"))]
pub unsafe fn debug_panic_next_call(ctx: *mut beaconkv_context) {
    if let Some(ctx) = ctx.as_ref() {
        ctx.inner.lock().panic_next = true;
    }
}
