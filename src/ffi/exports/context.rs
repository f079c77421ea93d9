//! Exports of the header's context section: create, free, effective params, layer refresh.

#![allow(clippy::missing_safety_doc)] // the safety contract is the C header's

use std::ffi::c_char;

use crate::config::Policy;
use crate::engine::Engine;
use crate::ffi::boundary::{
    boundary, preset_panic_message, with_context, write_c_str, Arg, OnPanic,
};
use crate::ffi::context::{beaconkv_context, Inner};
use crate::ffi::host_adapter::CHost;
use crate::ffi::types::{beaconkv_host, beaconkv_params, BEACONKV_OK};
use crate::host::Host;

#[no_mangle]
pub unsafe extern "C" fn beaconkv_context_new(
    params: *const beaconkv_params,
    host: *const beaconkv_host,
    err: *mut c_char,
    err_len: usize,
) -> *mut beaconkv_context {
    boundary(|| {
        preset_panic_message(err, err_len, "beaconkv_context_new");
        let (Some(params), Some(host)) = (params.as_ref(), host.as_ref()) else {
            write_c_str(err, err_len, "beaconkv: params and host must not be NULL");
            return Ok(std::ptr::null_mut());
        };
        let p = match params.to_params() {
            Ok(p) => p,
            Err(e) => {
                write_c_str(err, err_len, &e.to_string());
                return Ok(std::ptr::null_mut());
            }
        };
        if host.seq_cells.is_none() || host.seq_evict.is_none() {
            write_c_str(
                err,
                err_len,
                "beaconkv: host->seq_cells and host->seq_evict are required",
            );
            return Ok(std::ptr::null_mut());
        }
        let mut host = CHost(*host);
        let engine = Engine::new(p, &mut host);
        write_c_str(err, err_len, "");
        Ok(Box::into_raw(Box::new(beaconkv_context::new(engine, host))))
    })
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_context_free(ctx: *mut beaconkv_context) {
    boundary(|| {
        if !ctx.is_null() {
            let mut ctx = Box::from_raw(ctx);
            // one info line for every tool that frees its context: what compression did
            let Inner { engine, host, .. } = ctx.inner.get_mut();
            if engine.params().policy != Policy::None {
                let t = engine.stats(-1);
                host.log(
                    1,
                    &format!(
                        "kv compression summary: cells peak {} over all sequences, {} cells evicted in {} passes{}, plugin {:.1} ms{}",
                        t.cells_peak,
                        t.evicted,
                        t.compress_events,
                        if engine.params().archive > 0 {
                            format!(", {} recalled from the archive ({} archived, {:.1} MiB)", t.recalled, t.archived, t.archive_bytes as f64 / 1048576.0)
                        } else {
                            String::new()
                        },
                        t.ms_capture + t.ms_score + t.ms_evict + t.ms_recall,
                        if engine.in_fallback() { " (position-only fallback after an error)" } else { "" }
                    ),
                );
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_context_params(
    ctx: *const beaconkv_context,
    out: *mut beaconkv_params,
) -> i32 {
    with_context(
        ctx,
        "beaconkv_context_params",
        OnPanic::Return,
        |inner, _| {
            *out.arg()? = beaconkv_params::from_params(inner.engine.params());
            Ok(BEACONKV_OK)
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_refresh_layers(ctx: *mut beaconkv_context) -> i32 {
    with_context(
        ctx,
        "beaconkv_refresh_layers",
        OnPanic::Return,
        |inner, _| {
            inner.engine.refresh_layers(&mut inner.host, true);
            Ok(BEACONKV_OK)
        },
    )
}
