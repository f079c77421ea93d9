//! `beaconkv_context_plugin`: the hooks as one table of callbacks taking the context as `void *`
//! (the layout of llama.cpp's `llama_kv_plugin`).

#![allow(clippy::missing_safety_doc)] // the safety contract is the C header's

use std::ffi::c_void;

use super::context::beaconkv_context_free;
use super::hooks::{
    beaconkv_after_decode, beaconkv_after_ubatch, beaconkv_before_batch, beaconkv_seq_copied,
    beaconkv_seq_removed,
};
use super::state::{beaconkv_seq_state_get, beaconkv_seq_state_set, beaconkv_seq_state_size};
use crate::ffi::boundary::{with_context, Arg, OnPanic};
use crate::ffi::context::beaconkv_context;
use crate::ffi::types::{beaconkv_plugin, BEACONKV_OK};

/// Table entries that forward to the export named after `=>` with `ud` as its context; the
/// export holds the boundary.
macro_rules! forward {
    ($( $entry:ident => $export:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)?; )*) => {
        $(
            pub(super) unsafe extern "C" fn $entry(ud: *mut c_void, $($arg: $ty),*) $(-> $ret)? {
                $export(ud.cast(), $($arg),*)
            }
        )*
    };
}

mod entry {
    use super::*;

    forward! {
        before_batch => beaconkv_before_batch(n_seq: i32, seq_ids: *const i32,
            n_new: *const i32, n_outputs: *const i32, n_tokens: i32, pos: *const i32,
            seq_id: *const i32, token: *const i32) -> i32;
        after_ubatch => beaconkv_after_ubatch(n_tokens: i32, pos: *const i32,
            seq_id: *const i32, q_row: *const i32) -> i32;
        after_decode => beaconkv_after_decode() -> i32;
        seq_removed => beaconkv_seq_removed(seq: i32, p0: i32, p1: i32);
        seq_copied => beaconkv_seq_copied(src: i32, dst: i32, p0: i32, p1: i32);
        free => beaconkv_context_free();
    }

    /// NULL `dst`: the size `beaconkv_seq_state_size` gives; else `beaconkv_seq_state_get`.
    pub(super) unsafe extern "C" fn state_get(
        ud: *mut c_void,
        seq: i32,
        dst: *mut u8,
        size: usize,
    ) -> i64 {
        if dst.is_null() {
            beaconkv_seq_state_size(ud.cast(), seq) as i64
        } else {
            beaconkv_seq_state_get(ud.cast(), seq, dst, size)
        }
    }

    /// Size 0: nothing was saved, the sequence starts afresh; else `beaconkv_seq_state_set`.
    pub(super) unsafe extern "C" fn state_set(
        ud: *mut c_void,
        seq: i32,
        src: *const u8,
        size: usize,
    ) -> i32 {
        if size == 0 {
            beaconkv_seq_removed(ud.cast(), seq, -1, -1);
            BEACONKV_OK
        } else {
            beaconkv_seq_state_set(ud.cast(), seq, src, size)
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_context_plugin(
    ctx: *mut beaconkv_context,
    out: *mut beaconkv_plugin,
) -> i32 {
    with_context(
        ctx,
        "beaconkv_context_plugin",
        OnPanic::Return,
        |inner, _| {
            *out.arg()? = beaconkv_plugin {
                ud: ctx.cast(),
                q_capacity: inner.engine.params().q_capacity as i32,
                before_batch: Some(entry::before_batch),
                after_ubatch: Some(entry::after_ubatch),
                after_decode: Some(entry::after_decode),
                seq_removed: Some(entry::seq_removed),
                seq_copied: Some(entry::seq_copied),
                state_get: Some(entry::state_get),
                state_set: Some(entry::state_set),
                free: Some(entry::free),
            };
            Ok(BEACONKV_OK)
        },
    )
}
