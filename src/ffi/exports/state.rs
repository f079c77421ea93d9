//! Exports of the header's sequence-state section: save and restore one sequence's plugin state.

#![allow(clippy::missing_safety_doc)] // the safety contract is the C header's

use crate::ffi::boundary::{with_context, Arg, OnPanic};
use crate::ffi::context::{beaconkv_context, Inner};
use crate::ffi::types::{BEACONKV_ERR_INVALID, BEACONKV_OK};

#[no_mangle]
pub unsafe extern "C" fn beaconkv_seq_state_size(ctx: *const beaconkv_context, seq: i32) -> usize {
    with_context(
        ctx,
        "beaconkv_seq_state_size",
        OnPanic::Return,
        |inner, _| Ok(inner.settled_engine().save_seq(seq).map_or(0, |v| v.len())),
    )
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_seq_state_get(
    ctx: *const beaconkv_context,
    seq: i32,
    buf: *mut u8,
    len: usize,
) -> i64 {
    with_context(
        ctx,
        "beaconkv_seq_state_get",
        OnPanic::Return,
        |inner, err| {
            let buf = buf.arg()? as *mut u8;
            let Some(data) = inner.settled_engine().save_seq(seq) else {
                err.set(&format!("beaconkv_seq_state_get: unknown sequence {seq}"));
                return Ok(BEACONKV_ERR_INVALID as i64);
            };
            if data.len() > len {
                err.set(&format!(
                    "beaconkv_seq_state_get: buffer of {len} bytes, {} needed",
                    data.len()
                ));
                return Ok(BEACONKV_ERR_INVALID as i64);
            }
            std::ptr::copy_nonoverlapping(data.as_ptr(), buf, data.len());
            Ok(data.len() as i64)
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_seq_state_set(
    ctx: *mut beaconkv_context,
    seq: i32,
    buf: *const u8,
    len: usize,
) -> i32 {
    with_context(
        ctx,
        "beaconkv_seq_state_set",
        OnPanic::Return,
        |inner, err| {
            let data = std::slice::from_raw_parts(buf.arg()?, len);
            // a context that has not decoded yet (a fresh server restoring a slot) may not have
            // seen its layers: the blob's shapes are checked against them
            inner.settled_engine();
            let Inner { engine, host, .. } = inner;
            engine.refresh_layers(host, false);
            Ok(match engine.load_seq(seq, data) {
                Ok(()) => BEACONKV_OK,
                Err(e) => {
                    err.set(&format!("beaconkv_seq_state_set: {e}"));
                    BEACONKV_ERR_INVALID
                }
            })
        },
    )
}
