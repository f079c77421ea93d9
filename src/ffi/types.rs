//! The only Rust copy of every struct and constant of `include/beaconkv.h`, field for field.
//!
//! The structs are declared through `abi_structs!`, the callback types through `abi_fn_types!`
//! and the constants through `abi_constants!`, which also list them in [`STRUCTS`], [`FN_TYPES`]
//! and [`CONSTANTS`]. The crate's build script (`build.rs`) includes this file: it requires the
//! header's structs and fields to be these, in both directions, and compiles a C file that asserts
//! every size, alignment, offset and field type (callback signatures included) against the
//! header, so a drift fails `cargo build`. `tests/c_abi.rs` compares the constants.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_void};
use std::mem::{align_of, offset_of, size_of};

/// One field of an ABI struct as Rust lays it out.
#[derive(Clone, Copy, Debug)]
pub struct AbiField {
    pub name: &'static str,
    pub offset: usize,
    pub size: usize,
    /// The Rust type as written (`stringify!`), e.g. `Option<ReadRowsFn>`.
    pub ty: &'static str,
}

/// One ABI struct as Rust lays it out.
#[derive(Clone, Copy, Debug)]
pub struct AbiStruct {
    pub name: &'static str,
    pub size: usize,
    pub align: usize,
    pub fields: &'static [AbiField],
}

/// Declares `repr(C)` structs and lists their layouts in `STRUCTS`.
macro_rules! abi_structs {
    ($(
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* pub $field:ident: $ty:ty, )*
        }
    )*) => {
        $(
            $(#[$meta])*
            #[repr(C)]
            pub struct $name {
                $( $(#[$fmeta])* pub $field: $ty, )*
            }
        )*

        /// Every struct of the header, with its Rust layout.
        pub const STRUCTS: &[AbiStruct] = &[$(
            AbiStruct {
                name: stringify!($name),
                size: size_of::<$name>(),
                align: align_of::<$name>(),
                fields: &[$(
                    AbiField {
                        name: stringify!($field),
                        offset: offset_of!($name, $field),
                        size: size_of::<$ty>(),
                        ty: stringify!($ty),
                    },
                )*],
            },
        )*];
    };
}

/// Declares the callback type aliases and lists them in `FN_TYPES`.
macro_rules! abi_fn_types {
    ($( $(#[$meta:meta])* pub type $name:ident = $ty:ty; )*) => {
        $( $(#[$meta])* pub type $name = $ty; )*

        /// Every callback type alias with its Rust type as written (`stringify!`).
        pub const FN_TYPES: &[(&str, &str)] = &[$( (stringify!($name), stringify!($ty)), )*];
    };
}

/// Declares integer constants and lists them in `CONSTANTS`.
macro_rules! abi_constants {
    ($( $(#[$meta:meta])* $name:ident: $ty:ty = $value:expr; )*) => {
        $( $(#[$meta])* pub const $name: $ty = $value; )*

        /// The header's `#define`d and status constants with their values. The enums of settings
        /// (`BEACONKV_POLICY_*`, `BEACONKV_REDUCE_*`, `BEACONKV_ARCHIVE_*`) are the ids of
        /// `config::{Policy, Reduce, ArchiveType}`.
        pub const CONSTANTS: &[(&str, i64)] = &[$( (stringify!($name), $value as i64), )*];
    };
}

abi_constants! {
    /// Changes whenever a struct's layout or a function's meaning changes.
    BEACONKV_ABI_VERSION: i32 = 7;
    BEACONKV_OK: i32 = 0;
    /// A required pointer was NULL.
    BEACONKV_ERR_NULL: i32 = -1;
    /// Bad argument or configuration value (the message names the key).
    BEACONKV_ERR_INVALID: i32 = -2;
    /// A host callback failed.
    BEACONKV_ERR_HOST: i32 = -3;
    /// An internal panic was caught; the context is in fallback mode.
    BEACONKV_ERR_PANIC: i32 = -4;
}

abi_fn_types! {
    /// `beaconkv_host::seq_cells`.
    pub type SeqCellsFn =
        unsafe extern "C" fn(*mut c_void, i32, *mut i32, *mut u32, i32, *mut u32) -> i32;
    /// `beaconkv_host::read_rows`.
    pub type ReadRowsFn =
        unsafe extern "C" fn(*mut c_void, i32, i32, u32, *const u32, i32, *mut f32) -> i32;
    /// `beaconkv_host::read_kv`.
    pub type ReadKvFn =
        unsafe extern "C" fn(*mut c_void, i32, u32, *const u32, i32, *mut c_void, *mut c_void) -> i32;
    /// `beaconkv_host::write_kv`.
    pub type WriteKvFn = unsafe extern "C" fn(
        *mut c_void,
        i32,
        u32,
        *const u32,
        i32,
        i32,
        *const c_void,
        *const c_void,
    ) -> i32;
    /// `beaconkv_host::score_keys`.
    pub type ScoreKeysFn = unsafe extern "C" fn(
        *mut c_void,
        u32,
        *const u32,
        i32,
        i32,
        *const i32,
        *const i32,
        *const f32,
        i32,
        *mut f32,
    ) -> i32;
    /// `beaconkv_host::transfers`.
    pub type TransfersFn = unsafe extern "C" fn(*mut c_void, *mut u64, *mut u64);
    /// `beaconkv_plugin::before_batch`.
    pub type BeforeBatchFn = unsafe extern "C" fn(
        *mut c_void,
        i32,
        *const i32,
        *const i32,
        *const i32,
        i32,
        *const i32,
        *const i32,
        *const i32,
    ) -> i32;
}

abi_structs! {
    /// `beaconkv_params`: the C form of `config::Params` (see `ffi/params.rs`).
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct beaconkv_params {
        pub policy: i32,
        pub budget: i32,
        pub budget_min: i32,
        pub n_beacons: i32,
        pub n_recent: i32,
        pub window: i32,
        pub prefix: i32,
        pub reduce: i32,
        pub span: i32,
        pub q_capacity: i32,
        pub seed: u64,
        pub read_path: i32,
        pub score: i32,
        pub prefix_max: i32,
        pub prompt_mode: i32,
        pub prompt_max: i32,
        pub archive: i32,
        pub archive_type: i32,
        pub page: i32,
        pub recall_every: i32,
        pub recall_margin: f32,
        pub recall_match: i32,
    }

    /// `beaconkv_layer`: one attention layer as the host describes it (`host::RawLayer`).
    #[derive(Clone, Copy, Debug)]
    pub struct beaconkv_layer {
        pub il: i32,
        pub head_dim: i32,
        pub n_head: i32,
        pub n_head_kv: i32,
        pub k_data: *const c_void,
        pub k_type: i32,
        pub k_nb1: usize,
        pub k_nb2: usize,
        pub k_on_host: bool,
        pub q_data: *const c_void,
        pub q_nb1: usize,
        pub q_on_host: bool,
        pub q_rows: i32,
        pub rope_n_dims: i32,
        pub rope_mode: i32,
        pub rope_n_ctx_orig: i32,
        pub freq_base: f32,
        pub freq_scale: f32,
        pub ext_factor: f32,
        pub attn_factor: f32,
        pub beta_fast: f32,
        pub beta_slow: f32,
        pub freq_factors: *const f32,
        pub hadamard_n: i32,
        pub kv_bytes_per_cell: u64,
        pub v_type: i32,
        pub v_dim: i32,
    }

    /// `beaconkv_host`: the host's callbacks (a NULL entry is `None`).
    #[derive(Clone, Copy)]
    pub struct beaconkv_host {
        pub user: *mut c_void,
        pub n_layers: Option<unsafe extern "C" fn(*mut c_void) -> i32>,
        pub get_layer: Option<unsafe extern "C" fn(*mut c_void, i32, *mut beaconkv_layer) -> i32>,
        pub seq_cells: Option<SeqCellsFn>,
        pub seq_evict: Option<unsafe extern "C" fn(*mut c_void, i32, *const u32, i32) -> i32>,
        pub synchronize: Option<unsafe extern "C" fn(*mut c_void)>,
        pub read_rows: Option<ReadRowsFn>,
        pub log: Option<unsafe extern "C" fn(*mut c_void, i32, *const c_char)>,
        pub read_kv: Option<ReadKvFn>,
        pub write_kv: Option<WriteKvFn>,
        pub seq_place:
            Option<unsafe extern "C" fn(*mut c_void, i32, *const i32, i32, *mut u32) -> i32>,
        pub score_keys: Option<ScoreKeysFn>,
        pub transfers: Option<TransfersFn>,
    }

    /// `beaconkv_plugin`: the hooks as one table whose first argument is the context (`ud`), in
    /// the layout of llama.cpp's `llama_kv_plugin`, so a host hands it over as it is.
    #[derive(Clone, Copy)]
    pub struct beaconkv_plugin {
        pub ud: *mut c_void,
        pub q_capacity: i32,
        pub before_batch: Option<BeforeBatchFn>,
        pub after_ubatch: Option<
            unsafe extern "C" fn(*mut c_void, i32, *const i32, *const i32, *const i32) -> i32,
        >,
        pub after_decode: Option<unsafe extern "C" fn(*mut c_void) -> i32>,
        pub seq_removed: Option<unsafe extern "C" fn(*mut c_void, i32, i32, i32)>,
        pub seq_copied: Option<unsafe extern "C" fn(*mut c_void, i32, i32, i32, i32)>,
        pub state_get: Option<unsafe extern "C" fn(*mut c_void, i32, *mut u8, usize) -> i64>,
        pub state_set: Option<unsafe extern "C" fn(*mut c_void, i32, *const u8, usize) -> i32>,
        pub free: Option<unsafe extern "C" fn(*mut c_void)>,
    }

    /// `beaconkv_stats`: the C form of `stats::SeqStats` (filled by `SeqStats::to_c`).
    #[derive(Clone, Copy, Debug, Default, PartialEq)]
    pub struct beaconkv_stats {
        pub seq: i32,
        pub cells_in_use: i32,
        pub cells_peak: i32,
        pub prefix_len: i32,
        pub pos_max: i32,
        pub n_tokens: u64,
        pub evicted: u64,
        pub compress_events: u64,
        pub kv_bytes_saved: u64,
        pub ms_capture: f64,
        pub ms_score: f64,
        pub ms_evict: f64,
        pub disabled: i32,
        pub fallback: i32,
        pub archived: u64,
        pub recalled: u64,
        pub archive_dropped: u64,
        pub archive_bytes: u64,
        pub ms_recall: f64,
        pub reads_pass: u64,
        pub bytes_pass: u64,
        pub reads_capture: u64,
        pub bytes_capture: u64,
        pub cells_allowed: i32,
    }

    /// `beaconkv_model_desc`: a model's KV shape, for memory accounting.
    #[derive(Clone, Copy, Debug)]
    pub struct beaconkv_model_desc {
        pub n_layer: i32,
        pub n_head_kv: i32,
        pub head_dim_k: i32,
        pub head_dim_v: i32,
        pub type_k: i32,
        pub type_v: i32,
    }
}
