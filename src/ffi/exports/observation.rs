//! Exports of the header's observation section: statistics, whether the policy runs, the last
//! error.

#![allow(clippy::missing_safety_doc)] // the safety contract is the C header's

use std::ffi::c_char;

use crate::ffi::boundary::{boundary, clamp_len, with_context, write_c_str, Arg, OnPanic};
use crate::ffi::context::beaconkv_context;
use crate::ffi::types::{beaconkv_stats, BEACONKV_OK};

#[no_mangle]
pub unsafe extern "C" fn beaconkv_get_stats(
    ctx: *const beaconkv_context,
    seq: i32,
    out: *mut beaconkv_stats,
) -> i32 {
    with_context(ctx, "beaconkv_get_stats", OnPanic::Return, |inner, _| {
        let out = out.arg()?;
        let engine = &inner.engine;
        *out = engine
            .stats(seq)
            .to_c(seq, engine.is_enabled(), engine.in_fallback());
        Ok(BEACONKV_OK)
    })
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_scoring_path(
    ctx: *const beaconkv_context,
    buf: *mut c_char,
    len: usize,
) -> i32 {
    with_context(ctx, "beaconkv_scoring_path", OnPanic::Return, |inner, _| {
        let s = inner.engine.scoring_path();
        write_c_str(buf, len, &s);
        Ok(clamp_len(s.len()))
    })
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_is_enabled(ctx: *const beaconkv_context) -> bool {
    with_context(ctx, "beaconkv_is_enabled", OnPanic::Return, |inner, _| {
        Ok(inner.engine.is_enabled())
    })
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_last_error(ctx: *const beaconkv_context) -> *const c_char {
    boundary(|| Ok(ctx.arg()?.last_error.as_ptr()))
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_last_error_copy(
    ctx: *const beaconkv_context,
    buf: *mut c_char,
    cap: usize,
) -> i32 {
    boundary(|| Ok(clamp_len(ctx.arg()?.last_error.copy_to(buf, cap))))
}
