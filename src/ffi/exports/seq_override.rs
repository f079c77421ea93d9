//! Exports of the header's per-sequence section: check, set and read a sequence's own budget and
//! policy (`config::Params::for_sequence` holds the rules).

#![allow(clippy::missing_safety_doc)] // the safety contract is the C header's

use std::ffi::c_char;

use crate::config::{ConfigError, Params, Policy};
use crate::ffi::boundary::{
    boundary, preset_panic_message, with_context, write_c_str, Arg, OnPanic,
};
use crate::ffi::context::beaconkv_context;
use crate::ffi::types::{beaconkv_params, BEACONKV_ERR_INVALID, BEACONKV_OK};

/// The settings a sequence of `ctx` runs with for the C arguments: budget 0 and policy -1 mean
/// the context's, n_ctx_seq 0 unknown.
fn for_sequence(
    ctx: &Params,
    budget: i32,
    policy: i32,
    n_ctx_seq: u32,
) -> Result<Params, ConfigError> {
    let policy = match policy {
        -1 => None,
        id => Some(Policy::from_id(id).ok_or_else(|| {
            ConfigError::new(
                "policy",
                format!("{id} is not a policy id (0..=4, -1 = the context's policy)"),
            )
        })?),
    };
    let n_ctx = (n_ctx_seq > 0).then_some(n_ctx_seq as usize);
    if budget < 0 {
        ctx.for_sequence(None, policy, n_ctx)?;
        let (lo, hi) = ctx.seq_budget_range(policy.unwrap_or(ctx.policy));
        return Err(ConfigError::new(
            "budget",
            format!("{budget} is negative; allowed range {lo}..={hi} (0 = the context's budget)"),
        ));
    }
    ctx.for_sequence((budget > 0).then_some(budget as usize), policy, n_ctx)
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_seq_override_check(
    params: *const beaconkv_params,
    budget: i32,
    policy: i32,
    n_ctx_seq: u32,
    err: *mut c_char,
    err_len: usize,
) -> i32 {
    boundary(|| {
        let params = params.arg()?;
        preset_panic_message(err, err_len, "beaconkv_seq_override_check");
        let result = params
            .to_params()
            .and_then(|ctx| for_sequence(&ctx, budget, policy, n_ctx_seq).map(|_| ()));
        Ok(match result {
            Ok(()) => {
                write_c_str(err, err_len, "");
                BEACONKV_OK
            }
            Err(e) => {
                write_c_str(err, err_len, &e.to_string());
                BEACONKV_ERR_INVALID
            }
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_seq_override(
    ctx: *mut beaconkv_context,
    seq: i32,
    budget: i32,
    policy: i32,
    n_ctx_seq: u32,
) -> i32 {
    with_context(
        ctx,
        "beaconkv_seq_override",
        OnPanic::Return,
        |inner, err| {
            let result = if seq < 0 {
                Err(ConfigError::new("seq", format!("{seq} is negative")))
            } else {
                let engine = &mut inner.engine;
                for_sequence(engine.params(), budget, policy, n_ctx_seq)
                    .map(|own| engine.set_seq_params(seq, own))
            };
            Ok(match result {
                Ok(()) => BEACONKV_OK,
                Err(e) => {
                    err.set(&format!("beaconkv_seq_override: {e}"));
                    BEACONKV_ERR_INVALID
                }
            })
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_seq_params(
    ctx: *const beaconkv_context,
    seq: i32,
    out: *mut beaconkv_params,
) -> i32 {
    with_context(ctx, "beaconkv_seq_params", OnPanic::Return, |inner, _| {
        *out.arg()? = beaconkv_params::from_params(&inner.engine.seq_params(seq));
        Ok(BEACONKV_OK)
    })
}
