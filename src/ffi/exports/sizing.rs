//! Exports of the header's sizing section: what the host allocates (physical cells, ubatch
//! limit) and what a token or a row costs.

#![allow(clippy::missing_safety_doc)] // the safety contract is the C header's

use crate::config::Policy;
use crate::ffi::boundary::{boundary, clamp_len, Arg};
use crate::ffi::types::{beaconkv_model_desc, beaconkv_params, BEACONKV_ERR_INVALID};
use crate::ggml::types::{self as ggml_types, GgmlType};
use crate::sizing::{kv_bytes_per_token, max_slack, physical_cells, ModelDesc};

#[no_mangle]
pub unsafe extern "C" fn beaconkv_kv_bytes_per_token(desc: *const beaconkv_model_desc) -> u64 {
    boundary(|| {
        let d = desc.arg()?;
        let dims = [d.n_layer, d.n_head_kv, d.head_dim_k, d.head_dim_v];
        let (Some(tk), Some(tv)) = (GgmlType::from_id(d.type_k), GgmlType::from_id(d.type_v))
        else {
            return Ok(0);
        };
        if dims.iter().any(|&v| v < 0)
            || !(d.head_dim_k as usize).is_multiple_of(tk.block_size())
            || !(d.head_dim_v as usize).is_multiple_of(tv.block_size())
        {
            return Ok(0);
        }
        Ok(kv_bytes_per_token(&ModelDesc {
            n_layer: d.n_layer as usize,
            n_head_kv: d.n_head_kv as usize,
            head_dim_k: d.head_dim_k as usize,
            head_dim_v: d.head_dim_v as usize,
            type_k: tk,
            type_v: tv,
        }))
    })
}

#[no_mangle]
pub extern "C" fn beaconkv_row_size(ty: i32, n: i64) -> u64 {
    boundary(|| {
        let n = usize::try_from(n).ok();
        Ok(n.and_then(|n| ggml_types::row_size(ty, n)).unwrap_or(0) as u64)
    })
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_max_ubatch(params: *const beaconkv_params) -> i32 {
    boundary(|| {
        Ok(match params.arg()?.to_params() {
            Ok(p) if p.policy == Policy::None => 0,
            Ok(p) => clamp_len(max_slack(p.budget)),
            Err(_) => BEACONKV_ERR_INVALID,
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_prompt_room(params: *const beaconkv_params) -> i32 {
    boundary(|| {
        Ok(match params.arg()?.to_params() {
            Ok(p) => clamp_len(p.prompt_room()),
            Err(_) => BEACONKV_ERR_INVALID,
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_physical_cells(
    params: *const beaconkv_params,
    n_seq: i32,
    n_ubatch: i32,
    unified: bool,
    n_ctx_logical: u32,
    kv_cells_override: i32,
) -> u32 {
    boundary(|| {
        let Ok(p) = params.arg()?.to_params() else {
            return Ok(0);
        };
        let cells = physical_cells(
            &p,
            n_seq.max(1) as usize,
            n_ubatch.max(1) as usize,
            unified,
            n_ctx_logical as u64,
            kv_cells_override.max(0) as usize,
        );
        Ok(cells.min(u32::MAX as u64) as u32)
    })
}
