//! Spec-string parser: `Params::parse`, `Params::apply_spec` and the C entry
//! `beaconkv_params_parse` on arbitrary input.
//!
//! Invariants: no panic; on success the params validate and `to_spec()` parses back to the same
//! params; on error the params are unchanged and the message is non-empty, starts with
//! "beaconkv: <key>:" and either names a known key or says what is wrong; the C entry agrees with
//! the Rust parser and never writes past `err_len` (NUL-terminated, truncated). A spec that parses
//! has items that pass the per-flag check (`Params::check_items`), and `beaconkv_spec_check`
//! agrees with the parser, its message leading with the flag of the key the parser names.
#![no_main]

use std::ffi::{c_char, CString};

use beaconkv::ffi::*;
use beaconkv::testing::config::{flag_for_key, ConfigError, Params, KEYS};
use libfuzzer_sys::fuzz_target;

fn check_error(e: &ConfigError, spec: &str) {
    let shown = e.to_string();
    assert!(!e.message.is_empty(), "empty message for {spec:?}");
    assert!(
        shown.starts_with(&format!("beaconkv: {}: ", e.key)),
        "{shown:?} does not lead with the key"
    );
    let known_key = KEYS.contains(&e.key.as_str()) || e.key == "spec";
    let says_what = ["unknown key", "empty key", "not valid UTF-8"]
        .iter()
        .any(|w| e.message.contains(w));
    assert!(
        known_key || says_what,
        "{shown:?} names no key and says nothing useful ({spec:?})"
    );
    assert!(
        !e.key.trim().is_empty(),
        "{shown:?}: empty key name ({spec:?})"
    );
}

fn check_rust(spec: &str, base: &Params) -> Result<Params, ConfigError> {
    let parsed = Params::parse(spec);
    match &parsed {
        Ok(p) => {
            p.validate().expect("parsed params validate");
            let again = Params::parse(&p.to_spec()).expect("canonical spec parses");
            assert_eq!(&again, p, "round trip of {spec:?} via {:?}", p.to_spec());
        }
        Err(e) => check_error(e, spec),
    }
    let mut q = base.clone();
    match q.apply_spec(spec) {
        Ok(()) => {
            q.validate().expect("applied params validate");
            assert_eq!(Params::parse(&q.to_spec()).as_ref(), Ok(&q));
        }
        Err(e) => {
            check_error(&e, spec);
            assert_eq!(&q, base, "failed apply_spec changed the params");
        }
    }
    q.apply_spec("").expect("empty spec on valid params");
    parsed
}

/// Call the C entry with an err buffer of `err_len` bytes (NULL when `null_err`), guarded by
/// canaries on both sides.
fn check_c(
    spec: &CString,
    base: beaconkv_params,
    err_len: usize,
    null_err: bool,
) -> (i32, beaconkv_params, Vec<u8>) {
    const CANARY: u8 = 0xA5;
    let mut buf = vec![CANARY; err_len + 16];
    let mut p = base;
    let err_ptr = if null_err {
        std::ptr::null_mut()
    } else {
        buf[8..].as_mut_ptr() as *mut c_char
    };
    let rc = unsafe { beaconkv_params_parse(spec.as_ptr(), &mut p, err_ptr, err_len) };
    assert!(
        rc == BEACONKV_OK || rc == BEACONKV_ERR_INVALID,
        "status {rc}"
    );
    assert!(buf[..8].iter().all(|&b| b == CANARY), "wrote before err");
    assert!(
        buf[8 + err_len..].iter().all(|&b| b == CANARY),
        "wrote past err_len {err_len}"
    );
    let mut msg = Vec::new();
    if !null_err && err_len > 0 {
        let area = &buf[8..8 + err_len];
        let nul = area.iter().position(|&b| b == 0).expect("NUL-terminated");
        msg = area[..nul].to_vec();
    }
    if rc != BEACONKV_OK {
        assert_eq!(p, base, "params changed on error");
    }
    (rc, p, msg)
}

fuzz_target!(|data: &[u8]| {
    let (selector, body) = data.split_first().unwrap_or((&0, &[]));
    let lossy = String::from_utf8_lossy(body);
    let spec: &str = &lossy;

    // A non-default starting point (valid), chosen by the first byte.
    let bases = [
        "",
        "streaming,budget=64,window=8,prefix=4",
        "recent,budget=300,min=250,recent=4,span=3",
        "random,budget=2,window=0,min=2,seed=18446744073709551615",
    ];
    let base = Params::parse(bases[*selector as usize % bases.len()]).unwrap();
    let parsed = check_rust(spec, &base);

    // Per-flag checks are weaker than the whole-spec parse: what parses passes them.
    let items = Params::check_items(spec);
    if parsed.is_ok() {
        items
            .as_ref()
            .expect("a parsing spec passes the per-item check");
    }
    if let Err(e) = &items {
        check_error(e, spec);
    }

    // C entry: C sees the bytes up to the first NUL, raw (invalid UTF-8 included).
    let raw = body.split(|&b| b == 0).next().unwrap_or(&[]);
    let cspec = CString::new(raw).unwrap();
    let c_base = beaconkv_params::from_params(&Params::default());
    let (rc, p, msg) = check_c(&cspec, c_base, 256, false);
    let rust = std::str::from_utf8(raw)
        .map_err(|_| ())
        .and_then(|s| Params::parse(s).map_err(|e| check_error(&e, s)));
    match (&rust, rc) {
        (Ok(r), BEACONKV_OK) => {
            assert_eq!(p, beaconkv_params::from_params(r));
            assert!(msg.is_empty());
            assert_eq!(p.to_params().as_ref(), Ok(r), "C params convert back");
            let mut out = [0 as c_char; 512];
            let need = unsafe { beaconkv_params_format(&p, out.as_mut_ptr(), out.len()) };
            assert!(need > 0 && (need as usize) < out.len());
        }
        (Err(()), BEACONKV_ERR_INVALID) => {
            assert!(msg.starts_with(b"beaconkv: "), "C message {msg:?}");
        }
        _ => panic!("C entry says {rc}, Rust parser says {rust:?}"),
    }
    if raw == body {
        assert_eq!(parsed.is_ok(), rc == BEACONKV_OK);
    }
    // The whole-spec check agrees, and leads with the flag of the offending key.
    let mut err = [0 as c_char; 512];
    let rc_spec = unsafe { beaconkv_spec_check(cspec.as_ptr(), err.as_mut_ptr(), err.len()) };
    assert_eq!(rc_spec, rc, "spec_check and params_parse disagree");
    if let Err(()) = &rust {
        let msg = unsafe { std::ffi::CStr::from_ptr(err.as_ptr()) }.to_bytes();
        let key = std::str::from_utf8(raw)
            .ok()
            .and_then(|s| Params::parse(s).err())
            .map_or("spec".to_string(), |e| e.key);
        // The buffer may cut the message (a long key), even inside the lead.
        let lead = format!("{}: beaconkv: ", flag_for_key(&key));
        let n = lead.len().min(msg.len());
        assert!(!msg.is_empty(), "spec_check gave no message");
        assert_eq!(
            &msg[..n],
            &lead.as_bytes()[..n],
            "spec_check message {:?}",
            String::from_utf8_lossy(msg)
        );
    }
    // Tiny and absent error buffers: same status, never written past the end.
    for (len, null) in [
        (0, false),
        (0, true),
        (1, false),
        (2, false),
        (7, false),
        (64, true),
    ] {
        let (rc2, p2, m2) = check_c(&cspec, c_base, len, null);
        assert_eq!((rc2, p2), (rc, p));
        if !null && len > 0 {
            assert!(m2.len() < len);
            assert!(msg.starts_with(&m2) || m2.is_empty() || rc == BEACONKV_OK);
        }
    }
});
