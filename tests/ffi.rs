//! The C ABI called from Rust: the panic boundary, host errors, and parameter conversion.

use std::ffi::{c_char, c_void, CStr};

use beaconkv::ffi::*;

unsafe extern "C" fn n_layers(_: *mut c_void) -> i32 {
    0
}

/// One sequence (0) holding cells 0..N at positions 0..N, where N is `*user`.
unsafe extern "C" fn seq_cells(
    user: *mut c_void,
    seq: i32,
    pos: *mut i32,
    cells: *mut u32,
    cap: i32,
    _s: *mut u32,
) -> i32 {
    let n = if seq == 0 { *(user as *const i32) } else { 0 };
    for i in 0..n.min(cap) {
        *pos.add(i as usize) = i;
        *cells.add(i as usize) = i as u32;
    }
    n
}

unsafe extern "C" fn evict_fails(_: *mut c_void, _: i32, _: *const u32, _: i32) -> i32 {
    -1
}

fn host(user: &mut i32) -> beaconkv_host {
    beaconkv_host {
        user: user as *mut i32 as *mut c_void,
        n_layers: Some(n_layers),
        get_layer: None,
        seq_cells: Some(seq_cells),
        seq_evict: Some(evict_fails),
        synchronize: None,
        read_rows: None,
        log: None,
    }
}

fn params(spec: &str) -> beaconkv_params {
    let mut p = beaconkv_params_default();
    let spec = std::ffi::CString::new(spec).unwrap();
    assert_eq!(
        unsafe { beaconkv_params_parse(spec.as_ptr(), &mut p, std::ptr::null_mut(), 0) },
        BEACONKV_OK
    );
    p
}

fn last_error(ctx: *const beaconkv_context) -> String {
    unsafe { CStr::from_ptr(beaconkv_last_error(ctx)) }
        .to_string_lossy()
        .into_owned()
}

#[test]
fn panic_in_a_hook_disables_compression() {
    let mut cells = 0;
    let (p, h) = (params("streaming,budget=128"), host(&mut cells));
    unsafe {
        let ctx = beaconkv_context_new(&p, &h, std::ptr::null_mut(), 0);
        assert!(!ctx.is_null());
        assert!(beaconkv_is_enabled(ctx));
        debug_panic_next_hook(ctx);
        assert_eq!(beaconkv_after_decode(ctx), BEACONKV_ERR_PANIC);
        assert!(!beaconkv_is_enabled(ctx));
        assert!(last_error(ctx).contains("panic"), "{}", last_error(ctx));
        assert_eq!(beaconkv_after_decode(ctx), BEACONKV_ERR_DISABLED);
        let mut st = beaconkv_stats::default();
        assert_eq!(beaconkv_get_stats(ctx, -1, &mut st), BEACONKV_OK);
        assert_eq!(st.disabled, 1);
        beaconkv_context_free(ctx);
    }
}

#[test]
fn failing_evict_reports_host_error() {
    let mut cells = 200;
    let (p, h) = (params("random,budget=128"), host(&mut cells));
    unsafe {
        let ctx = beaconkv_context_new(&p, &h, std::ptr::null_mut(), 0);
        let (seq, n) = (0, 1);
        assert_eq!(
            beaconkv_before_batch(ctx, 1, &seq, &n, std::ptr::null()),
            BEACONKV_ERR_HOST
        );
        assert!(last_error(ctx).contains("seq_evict"), "{}", last_error(ctx));
        assert!(!beaconkv_is_enabled(ctx));
        beaconkv_context_free(ctx);
    }
}

#[test]
fn c_params_round_trip_and_reject_bad_fields() {
    let p = params("recent,budget=300,min=260,prefix=12,reduce=zmean,span=5,seed=9");
    let mut buf = [0 as c_char; 256];
    let n = unsafe { beaconkv_params_format(&p, buf.as_mut_ptr(), buf.len()) };
    let text = unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(n as usize, text.len());
    assert_eq!(params(&text), p);

    let mut err = [0 as c_char; 256];
    for (field, key) in [
        ("policy", "policy"),
        ("window", "window"),
        ("prefix", "prefix"),
        ("span", "span"),
    ] {
        let mut bad = beaconkv_params_default();
        match field {
            "policy" => bad.policy = 17,
            "window" => bad.window = -3,
            "prefix" => bad.prefix = -2,
            _ => bad.span = 4,
        }
        let rc = unsafe { beaconkv_params_validate(&bad, err.as_mut_ptr(), err.len()) };
        assert_eq!(rc, BEACONKV_ERR_INVALID);
        let msg = unsafe { CStr::from_ptr(err.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        assert!(msg.contains(key), "{field}: {msg}");
    }
}
