//! Exports of the header's hooks section: what the host calls around each decode call and when
//! it removes or copies positions.

#![allow(clippy::missing_safety_doc)] // the safety contract is the C header's

use crate::engine::EngineError;
use crate::ffi::boundary::{slice_arg, with_context, OnPanic};
use crate::ffi::context::beaconkv_context;
use crate::ffi::last_error::LastError;
use crate::ffi::types::{BEACONKV_ERR_HOST, BEACONKV_OK};

/// The status of a hook's result; a failure's message becomes the last error.
fn hook_status(last_error: &LastError, result: Result<(), EngineError>) -> i32 {
    match result {
        Ok(()) => BEACONKV_OK,
        Err(e @ EngineError::Host(_)) => {
            last_error.set(&e.to_string());
            BEACONKV_ERR_HOST
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_before_batch(
    ctx: *mut beaconkv_context,
    n_seq: i32,
    seq_ids: *const i32,
    n_new: *const i32,
    n_outputs: *const i32,
    n_tokens: i32,
    pos: *const i32,
    seq_id: *const i32,
    token: *const i32,
) -> i32 {
    with_context(
        ctx,
        "beaconkv_before_batch",
        OnPanic::Retry,
        |inner, err| {
            let ids = slice_arg(seq_ids, n_seq)?;
            let news = slice_arg(n_new, n_seq)?;
            let outs = slice_arg(n_outputs, n_seq).ok().filter(|o| !o.is_empty());
            // token ids are optional (a batch of embeddings has none)
            if !token.is_null() {
                let (p, s, t) = (
                    slice_arg(pos, n_tokens)?,
                    slice_arg(seq_id, n_tokens)?,
                    slice_arg(token, n_tokens)?,
                );
                inner.engine.record_tokens(p, s, t);
            }
            let result = inner.engine.before_batch(&mut inner.host, ids, news, outs);
            Ok(hook_status(err, result))
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_after_ubatch(
    ctx: *mut beaconkv_context,
    n_tokens: i32,
    pos: *const i32,
    seq_id: *const i32,
    q_row: *const i32,
) -> i32 {
    // Not retried after a panic: positions may already be counted, and in fallback mode
    // nothing more would be done with them.
    with_context(
        ctx,
        "beaconkv_after_ubatch",
        OnPanic::Return,
        |inner, err| {
            let (p, s, q) = (
                slice_arg(pos, n_tokens)?,
                slice_arg(seq_id, n_tokens)?,
                slice_arg(q_row, n_tokens)?,
            );
            if p.is_empty() {
                return Ok(BEACONKV_OK);
            }
            let result = inner.engine.after_ubatch(&mut inner.host, p, s, q);
            Ok(hook_status(err, result))
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_after_decode(ctx: *mut beaconkv_context) -> i32 {
    with_context(
        ctx,
        "beaconkv_after_decode",
        OnPanic::Retry,
        |inner, err| {
            let result = inner.engine.after_decode(&mut inner.host);
            Ok(hook_status(err, result))
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_seq_removed(
    ctx: *mut beaconkv_context,
    seq: i32,
    p0: i32,
    p1: i32,
) {
    with_context(ctx, "beaconkv_seq_removed", OnPanic::Retry, |inner, _| {
        inner.settled_engine().seq_removed(seq, p0, p1);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_seq_copied(
    ctx: *mut beaconkv_context,
    seq_src: i32,
    seq_dst: i32,
    p0: i32,
    p1: i32,
) {
    with_context(ctx, "beaconkv_seq_copied", OnPanic::Retry, |inner, _| {
        inner.settled_engine().seq_copied(seq_src, seq_dst, p0, p1);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_seq_reuse_point(
    ctx: *const beaconkv_context,
    seq: i32,
    n_past: i32,
) -> i32 {
    with_context(
        ctx,
        "beaconkv_seq_reuse_point",
        OnPanic::Return,
        |inner, _| Ok(inner.engine.reuse_point(seq, n_past)),
    )
}
