//! Exports of the header's configuration section: version, params defaults, parsing,
//! validation, flag and spec checks, the canonical form, policy names.

#![allow(clippy::missing_safety_doc)] // the safety contract is the C header's

use std::ffi::{c_char, CStr};

use crate::config::{flag_for_key, ConfigError, Params, Policy};
use crate::ffi::boundary::{boundary, clamp_len, preset_panic_message, write_c_str, Arg};
use crate::ffi::params::C_DEFAULTS;
use crate::ffi::types::{beaconkv_params, BEACONKV_ERR_INVALID, BEACONKV_OK};

/// Status of a configuration check; the message (prefixed by `lead` when given, or "") goes to
/// the caller's `err` buffer.
unsafe fn config_status(
    result: Result<(), ConfigError>,
    lead: impl FnOnce(&ConfigError) -> Option<String>,
    err: *mut c_char,
    err_len: usize,
) -> i32 {
    match result {
        Ok(()) => {
            write_c_str(err, err_len, "");
            BEACONKV_OK
        }
        Err(e) => {
            let msg = match lead(&e) {
                Some(flag) => format!("{flag}: {e}"),
                None => e.to_string(),
            };
            write_c_str(err, err_len, &msg);
            BEACONKV_ERR_INVALID
        }
    }
}

/// A spec string argument as UTF-8.
fn spec_str(spec: &CStr) -> Result<&str, ConfigError> {
    spec.to_str().map_err(|_| ConfigError {
        key: "spec".into(),
        message: "not valid UTF-8".into(),
    })
}

#[no_mangle]
pub extern "C" fn beaconkv_version() -> *const c_char {
    boundary(|| Ok(concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr() as *const c_char))
}

#[no_mangle]
pub extern "C" fn beaconkv_params_default() -> beaconkv_params {
    boundary(|| Ok(C_DEFAULTS))
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_params_parse(
    spec: *const c_char,
    params: *mut beaconkv_params,
    err: *mut c_char,
    err_len: usize,
) -> i32 {
    boundary(|| {
        let spec = CStr::from_ptr(spec.arg()?);
        let params = params.arg()?;
        preset_panic_message(err, err_len, "beaconkv_params_parse");
        let result = spec_str(spec).and_then(|s| {
            let mut p = params.to_params()?;
            p.apply_spec(s)?;
            Ok(p)
        });
        let result = result.map(|p| *params = beaconkv_params::from_params(&p));
        Ok(config_status(result, |_| None, err, err_len))
    })
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_params_validate(
    params: *const beaconkv_params,
    err: *mut c_char,
    err_len: usize,
) -> i32 {
    boundary(|| {
        let params = params.arg()?;
        preset_panic_message(err, err_len, "beaconkv_params_validate");
        let result = params.to_params().map(|_| ());
        Ok(config_status(result, |_| None, err, err_len))
    })
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_check_flag_value(
    flag: *const c_char,
    key_value: *const c_char,
    err: *mut c_char,
    err_len: usize,
) -> i32 {
    boundary(|| {
        let items = CStr::from_ptr(key_value.arg()?);
        preset_panic_message(err, err_len, "beaconkv_check_flag_value");
        let flag = (!flag.is_null()).then(|| CStr::from_ptr(flag).to_string_lossy().into_owned());
        let result = spec_str(items).and_then(Params::check_items);
        let lead = |e: &ConfigError| Some(flag.unwrap_or_else(|| flag_for_key(&e.key)));
        Ok(config_status(result, lead, err, err_len))
    })
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_spec_check(
    spec: *const c_char,
    err: *mut c_char,
    err_len: usize,
) -> i32 {
    boundary(|| {
        let spec = CStr::from_ptr(spec.arg()?);
        preset_panic_message(err, err_len, "beaconkv_spec_check");
        let result = spec_str(spec).and_then(|s| Params::parse(s).map(|_| ()));
        let lead = |e: &ConfigError| Some(flag_for_key(&e.key));
        Ok(config_status(result, lead, err, err_len))
    })
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_params_format(
    params: *const beaconkv_params,
    buf: *mut c_char,
    len: usize,
) -> i32 {
    boundary(|| {
        Ok(match params.arg()?.to_params() {
            Ok(p) => {
                let s = p.to_spec();
                write_c_str(buf, len, &s);
                clamp_len(s.len())
            }
            Err(_) => BEACONKV_ERR_INVALID,
        })
    })
}

#[no_mangle]
pub extern "C" fn beaconkv_policy_name(policy: i32) -> *const c_char {
    boundary(|| {
        Ok(Policy::from_id(policy)
            .map_or(c"unknown", Policy::c_name)
            .as_ptr())
    })
}
