//! The C ABI of `include/beaconkv.h`.
//!
//! Every export goes through one boundary: [`boundary`] for the functions without a context,
//! [`with_context`] (built on the same pieces) for those with one.
//! - Pointer arguments become references through [`Arg`] (and slices through [`slice_arg`]);
//!   a NULL where the header requires a pointer ends the call with the return type's
//!   [`FailValue::NULL_ARG`].
//! - The body runs inside `catch_unwind`; a caught panic ends the call with the return type's
//!   [`FailValue::PANICKED`], so a panic never unwinds into C.
//! - With a context, the boundary takes the context lock inside `catch_unwind` and, on a panic,
//!   records the message as the last error and switches the context to position-only eviction
//!   (the hooks that make room then run once more that way, so the batch still fits).
//!   `beaconkv_last_error*` do not take the context lock, so a host log callback may call them.

#![allow(non_camel_case_types)]
#![allow(clippy::missing_safety_doc)] // the safety contract is the C header's

use std::ffi::{c_char, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU8, Ordering};

use parking_lot::Mutex;

use crate::config::{flag_for_key, ConfigError, Params, Policy};

mod params;
use crate::engine::{Engine, EngineError};
use crate::ggml::types::{self as ggml_types, GgmlType};
use crate::host::{Host, RawLayer};
use crate::sizing::{kv_bytes_per_token, max_slack, physical_cells, ModelDesc};
pub use params::C_DEFAULTS;

pub const BEACONKV_OK: i32 = 0;
pub const BEACONKV_ERR_NULL: i32 = -1;
pub const BEACONKV_ERR_INVALID: i32 = -2;
pub const BEACONKV_ERR_HOST: i32 = -3;
pub const BEACONKV_ERR_PANIC: i32 = -4;
pub const BEACONKV_ERR_DISABLED: i32 = -5;
pub const BEACONKV_ERR_NO_ROOM: i32 = -6;

/// `beaconkv_params`.
#[repr(C)]
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
    pub read_copy: i32,
    pub score: i32,
    pub prefix_max: i32,
    pub archive: i32,
    pub archive_type: i32,
    pub page: i32,
    pub recall_every: i32,
    pub recall_margin: f32,
    pub recall_match: i32,
}

/// `beaconkv_layer`.
pub type beaconkv_layer = RawLayer;

/// `beaconkv_host`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct beaconkv_host {
    pub user: *mut c_void,
    pub n_layers: Option<unsafe extern "C" fn(*mut c_void) -> i32>,
    pub get_layer: Option<unsafe extern "C" fn(*mut c_void, i32, *mut beaconkv_layer) -> i32>,
    pub seq_cells:
        Option<unsafe extern "C" fn(*mut c_void, i32, *mut i32, *mut u32, i32, *mut u32) -> i32>,
    pub seq_evict: Option<unsafe extern "C" fn(*mut c_void, i32, *const u32, i32) -> i32>,
    pub synchronize: Option<unsafe extern "C" fn(*mut c_void)>,
    pub read_rows:
        Option<unsafe extern "C" fn(*mut c_void, i32, i32, u32, *const u32, i32, *mut f32) -> i32>,
    pub log: Option<unsafe extern "C" fn(*mut c_void, i32, *const c_char)>,
    pub read_kv: Option<
        unsafe extern "C" fn(
            *mut c_void,
            i32,
            u32,
            *const u32,
            i32,
            *mut c_void,
            *mut c_void,
        ) -> i32,
    >,
    pub write_kv: Option<
        unsafe extern "C" fn(
            *mut c_void,
            i32,
            u32,
            *const u32,
            i32,
            i32,
            *const c_void,
            *const c_void,
        ) -> i32,
    >,
    pub seq_place: Option<unsafe extern "C" fn(*mut c_void, i32, *const i32, i32, *mut u32) -> i32>,
}

/// `beaconkv_stats`.
#[repr(C)]
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
}

/// `beaconkv_model_desc`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct beaconkv_model_desc {
    pub n_layer: i32,
    pub n_head_kv: i32,
    pub head_dim_k: i32,
    pub head_dim_v: i32,
    pub type_k: i32,
    pub type_v: i32,
}

// ---- the boundary --------------------------------------------------------------------------

/// What an export returns when a required pointer is NULL, and when a panic was caught.
pub trait FailValue: Sized {
    const NULL_ARG: Self;
    const PANICKED: Self;
}

impl FailValue for i32 {
    const NULL_ARG: Self = BEACONKV_ERR_NULL;
    const PANICKED: Self = BEACONKV_ERR_PANIC;
}

impl FailValue for i64 {
    const NULL_ARG: Self = BEACONKV_ERR_NULL as i64;
    const PANICKED: Self = BEACONKV_ERR_PANIC as i64;
}

/// Sizes and counts: 0 says "nothing".
macro_rules! zero_on_failure {
    ($($t:ty),+) => {
        $( impl FailValue for $t {
            const NULL_ARG: Self = 0;
            const PANICKED: Self = 0;
        } )+
    };
}
zero_on_failure!(u32, u64, usize);

impl FailValue for bool {
    const NULL_ARG: Self = false;
    const PANICKED: Self = false;
}

impl FailValue for () {
    const NULL_ARG: Self = ();
    const PANICKED: Self = ();
}

/// Strings: the empty string (static storage), never NULL.
impl FailValue for *const c_char {
    const NULL_ARG: Self = c"".as_ptr();
    const PANICKED: Self = c"".as_ptr();
}

impl FailValue for *mut beaconkv_context {
    const NULL_ARG: Self = std::ptr::null_mut();
    const PANICKED: Self = std::ptr::null_mut();
}

impl FailValue for beaconkv_params {
    const NULL_ARG: Self = C_DEFAULTS;
    const PANICKED: Self = C_DEFAULTS;
}

/// A required pointer argument was NULL.
pub struct NullArg;

/// Turns a pointer argument into a reference: `p.arg()?` inside a boundary body, where NULL
/// ends the call with [`FailValue::NULL_ARG`].
pub trait Arg<'a> {
    type Ref;
    /// # Safety
    /// A non-NULL pointer must be valid for the returned reference's use during the call.
    unsafe fn arg(self) -> Result<Self::Ref, NullArg>;
}

impl<'a, T: 'a> Arg<'a> for *const T {
    type Ref = &'a T;
    unsafe fn arg(self) -> Result<&'a T, NullArg> {
        self.as_ref().ok_or(NullArg)
    }
}

impl<'a, T: 'a> Arg<'a> for *mut T {
    type Ref = &'a mut T;
    unsafe fn arg(self) -> Result<&'a mut T, NullArg> {
        self.as_mut().ok_or(NullArg)
    }
}

/// `n` elements at `p`; `n <= 0` is the empty slice whatever `p` is.
///
/// # Safety
/// For `n > 0`, `p` must point to `n` readable elements.
pub unsafe fn slice_arg<'a, T>(p: *const T, n: i32) -> Result<&'a [T], NullArg> {
    if n <= 0 {
        Ok(&[])
    } else if p.is_null() {
        Err(NullArg)
    } else {
        Ok(std::slice::from_raw_parts(p, n as usize))
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Run the body of an export that has no context: NULL arguments and panics become the return
/// type's failure values.
pub fn boundary<R: FailValue>(body: impl FnOnce() -> Result<R, NullArg>) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(r)) => r,
        Ok(Err(NullArg)) => R::NULL_ARG,
        Err(_) => R::PANICKED,
    }
}

/// What a context export does after a caught panic, once the context fell back to
/// position-only eviction.
#[derive(Clone, Copy, PartialEq, Eq)]
enum OnPanic {
    /// Return the failure value.
    Return,
    /// Run the body once more (in fallback mode), then return the failure value: the hooks
    /// that make room or track the host's sequences must still do so.
    Retry,
}

/// Run the body of an export on a context: NULL context or arguments, the context lock, the
/// panic boundary, and on a panic the last error and the switch to position-only eviction.
unsafe fn with_context<R: FailValue>(
    ctx: *const beaconkv_context,
    call: &str,
    on_panic: OnPanic,
    mut body: impl FnMut(&mut Inner, &LastError) -> Result<R, NullArg>,
) -> R {
    let mut run = || {
        catch_unwind(AssertUnwindSafe(|| {
            let ctx = ctx.arg()?;
            let mut inner = ctx.inner.lock();
            if std::mem::take(&mut inner.panic_next) {
                panic!("injected panic (test hook)");
            }
            body(&mut inner, &ctx.last_error)
        }))
    };
    let payload = match run() {
        Ok(Ok(r)) => return r,
        Ok(Err(NullArg)) => return R::NULL_ARG,
        Err(payload) => payload,
    };
    // The body only runs once the context pointer was checked.
    let Some(ctx) = ctx.as_ref() else {
        return R::PANICKED;
    };
    let msg = format!(
        "beaconkv: internal panic in {call}: {}",
        panic_message(&*payload)
    );
    ctx.last_error.set(&msg);
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let mut inner = ctx.inner.lock();
        let Inner { engine, host, .. } = &mut *inner;
        engine.enter_fallback(host, &msg);
    }));
    if on_panic == OnPanic::Retry {
        let _ = run();
    }
    R::PANICKED
}

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

/// Copy `msg` into a C buffer, NUL-terminated and truncated (NULL or empty buffer: nothing).
unsafe fn write_c_str(buf: *mut c_char, len: usize, msg: &str) {
    if buf.is_null() || len == 0 {
        return;
    }
    let n = msg.len().min(len - 1);
    std::ptr::copy_nonoverlapping(msg.as_ptr() as *const c_char, buf, n);
    *buf.add(n) = 0;
}

// ---- the context ---------------------------------------------------------------------------

/// The C host callbacks as a `Host`.
struct CHost(beaconkv_host);

// SAFETY: the header makes `user` the host's business; callbacks only run inside hooks, which the
// context mutex serialises.
unsafe impl Send for CHost {}

fn clamp_len(n: usize) -> i32 {
    n.min(i32::MAX as usize) as i32
}

impl Host for CHost {
    fn n_layers(&mut self) -> i32 {
        self.0.n_layers.map_or(0, |f| unsafe { f(self.0.user) })
    }

    fn get_layer(&mut self, i: i32, out: &mut RawLayer) -> i32 {
        self.0
            .get_layer
            .map_or(-1, |f| unsafe { f(self.0.user, i, out) })
    }

    fn seq_cells(&mut self, seq: i32, pos: &mut [i32], cells: &mut [u32], stream: &mut u32) -> i32 {
        let cap = clamp_len(pos.len().min(cells.len()));
        // cap == 0 is the count-only query: no arrays.
        let (pos, cells) = if cap == 0 {
            (std::ptr::null_mut(), std::ptr::null_mut())
        } else {
            (pos.as_mut_ptr(), cells.as_mut_ptr())
        };
        self.0.seq_cells.map_or(-1, |f| unsafe {
            f(self.0.user, seq, pos, cells, cap, stream)
        })
    }

    fn seq_evict(&mut self, seq: i32, cells: &[u32]) -> i32 {
        self.0.seq_evict.map_or(-1, |f| unsafe {
            f(self.0.user, seq, cells.as_ptr(), clamp_len(cells.len()))
        })
    }

    fn synchronize(&mut self) {
        if let Some(f) = self.0.synchronize {
            unsafe { f(self.0.user) }
        }
    }

    fn has_read_rows(&self) -> bool {
        self.0.read_rows.is_some()
    }

    fn read_rows(
        &mut self,
        layer: i32,
        what: i32,
        stream: u32,
        rows: &[u32],
        out: &mut [f32],
    ) -> i32 {
        self.0.read_rows.map_or(-1, |f| unsafe {
            f(
                self.0.user,
                layer,
                what,
                stream,
                rows.as_ptr(),
                clamp_len(rows.len()),
                out.as_mut_ptr(),
            )
        })
    }

    fn log(&mut self, level: i32, msg: &str) {
        if let Some(f) = self.0.log {
            let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
            unsafe { f(self.0.user, level, c.as_ptr()) }
        }
    }

    fn has_archive(&self) -> bool {
        self.0.read_kv.is_some() && self.0.write_kv.is_some() && self.0.seq_place.is_some()
    }

    fn read_kv(
        &mut self,
        layer: i32,
        stream: u32,
        cells: &[u32],
        k: &mut [u8],
        v: &mut [u8],
    ) -> i32 {
        self.0.read_kv.map_or(-1, |f| unsafe {
            f(
                self.0.user,
                layer,
                stream,
                cells.as_ptr(),
                clamp_len(cells.len()),
                k.as_mut_ptr() as *mut c_void,
                v.as_mut_ptr() as *mut c_void,
            )
        })
    }

    fn write_kv(
        &mut self,
        layer: i32,
        stream: u32,
        cells: &[u32],
        format: i32,
        k: &[u8],
        v: &[u8],
    ) -> i32 {
        self.0.write_kv.map_or(-1, |f| unsafe {
            f(
                self.0.user,
                layer,
                stream,
                cells.as_ptr(),
                clamp_len(cells.len()),
                format,
                k.as_ptr() as *const c_void,
                v.as_ptr() as *const c_void,
            )
        })
    }

    fn seq_place(&mut self, seq: i32, pos: &[i32], cells: &mut [u32]) -> i32 {
        self.0.seq_place.map_or(-1, |f| unsafe {
            f(
                self.0.user,
                seq,
                pos.as_ptr(),
                clamp_len(pos.len().min(cells.len())),
                cells.as_mut_ptr(),
            )
        })
    }
}

struct Inner {
    engine: Engine,
    host: CHost,
    /// Test hook: make the next call on the context panic (see `debug_panic_next_call`).
    panic_next: bool,
}

/// Bytes of the last-error buffer, NUL included; longer messages are truncated.
pub const LAST_ERROR_CAP: usize = 1024;

/// The context's last error: a NUL-terminated buffer allocated with the context and freed with
/// it, so the pointer `beaconkv_last_error` returns stays valid for the context's lifetime.
/// Writers and copiers hold `lock`; the bytes are atomics so that a reader of the raw pointer
/// races with a writer at worst over the text, never over memory.
pub struct LastError {
    lock: Mutex<()>,
    bytes: Box<[AtomicU8]>,
}

impl LastError {
    fn new() -> Self {
        LastError {
            lock: Mutex::new(()),
            bytes: (0..LAST_ERROR_CAP).map(|_| AtomicU8::new(0)).collect(),
        }
    }

    /// Replace the message (NUL bytes become spaces; truncated at a character boundary).
    fn set(&self, msg: &str) {
        let _guard = self.lock.lock();
        let mut n = msg.len().min(LAST_ERROR_CAP - 1);
        while !msg.is_char_boundary(n) {
            n -= 1;
        }
        for (dst, &b) in self.bytes.iter().zip(&msg.as_bytes()[..n]) {
            dst.store(if b == 0 { b' ' } else { b }, Ordering::Relaxed);
        }
        self.bytes[n].store(0, Ordering::Release);
    }

    /// Copy the message into `buf` (`cap` bytes, NUL-terminated, truncated); returns its full
    /// length.
    unsafe fn copy_to(&self, buf: *mut c_char, cap: usize) -> usize {
        let _guard = self.lock.lock();
        let len = self
            .bytes
            .iter()
            .position(|b| b.load(Ordering::Acquire) == 0)
            .unwrap_or(LAST_ERROR_CAP - 1);
        if !buf.is_null() && cap > 0 {
            let n = len.min(cap - 1);
            for (i, b) in self.bytes[..n].iter().enumerate() {
                *buf.add(i) = b.load(Ordering::Relaxed) as c_char;
            }
            *buf.add(n) = 0;
        }
        len
    }

    fn as_ptr(&self) -> *const c_char {
        // AtomicU8 has the size, alignment and bit validity of u8.
        self.bytes.as_ptr() as *const c_char
    }
}

/// Opaque `beaconkv_context`.
pub struct beaconkv_context {
    inner: Mutex<Inner>,
    last_error: LastError,
}

/// Make the next call on `ctx` (any function taking the context) panic inside the boundary,
/// to exercise it from tests. Not exported.
#[doc(hidden)]
pub unsafe fn debug_panic_next_call(ctx: *mut beaconkv_context) {
    if let Some(ctx) = ctx.as_ref() {
        ctx.inner.lock().panic_next = true;
    }
}

/// Pre-fill a caller's error buffer with the message a caught panic leaves there.
unsafe fn preset_panic_message(err: *mut c_char, len: usize, call: &str) {
    write_c_str(err, len, &format!("beaconkv: internal panic in {call}"));
}

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

// ---- configuration -------------------------------------------------------------------------

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
        let s: &'static CStr = match Policy::from_id(policy) {
            Some(Policy::None) => c"none",
            Some(Policy::Beacon) => c"beacon",
            Some(Policy::Recent) => c"recent",
            Some(Policy::Streaming) => c"streaming",
            Some(Policy::Random) => c"random",
            None => c"unknown",
        };
        Ok(s.as_ptr())
    })
}

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

// ---- context -------------------------------------------------------------------------------

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
        Ok(Box::into_raw(Box::new(beaconkv_context {
            inner: Mutex::new(Inner {
                engine,
                host,
                panic_next: false,
            }),
            last_error: LastError::new(),
        })))
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

// ---- the plugin table ----------------------------------------------------------------------

/// The hooks as one table of C callbacks whose first argument is the context (`ud`), in the
/// layout of llama.cpp's `llama_kv_plugin`: a host hands it over as it is.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct beaconkv_plugin {
    pub ud: *mut c_void,
    pub q_capacity: i32,
    pub before_batch: Option<
        unsafe extern "C" fn(
            *mut c_void,
            i32,
            *const i32,
            *const i32,
            *const i32,
            i32,
            *const i32,
            *const i32,
            *const i32,
        ) -> i32,
    >,
    pub after_ubatch:
        Option<unsafe extern "C" fn(*mut c_void, i32, *const i32, *const i32, *const i32) -> i32>,
    pub after_decode: Option<unsafe extern "C" fn(*mut c_void) -> i32>,
    pub seq_removed: Option<unsafe extern "C" fn(*mut c_void, i32, i32, i32)>,
    pub seq_copied: Option<unsafe extern "C" fn(*mut c_void, i32, i32, i32, i32)>,
    pub state_get: Option<unsafe extern "C" fn(*mut c_void, i32, *mut u8, usize) -> i64>,
    pub state_set: Option<unsafe extern "C" fn(*mut c_void, i32, *const u8, usize) -> i32>,
    pub free: Option<unsafe extern "C" fn(*mut c_void)>,
}

// Each entry forwards to the export of the same name, which holds the boundary.
unsafe extern "C" fn plugin_before_batch(
    ud: *mut c_void,
    n_seq: i32,
    seq_ids: *const i32,
    n_new: *const i32,
    n_outputs: *const i32,
    n_tokens: i32,
    pos: *const i32,
    seq_id: *const i32,
    token: *const i32,
) -> i32 {
    beaconkv_before_batch(
        ud.cast(),
        n_seq,
        seq_ids,
        n_new,
        n_outputs,
        n_tokens,
        pos,
        seq_id,
        token,
    )
}

unsafe extern "C" fn plugin_after_ubatch(
    ud: *mut c_void,
    n_tokens: i32,
    pos: *const i32,
    seq_id: *const i32,
    q_row: *const i32,
) -> i32 {
    beaconkv_after_ubatch(ud.cast(), n_tokens, pos, seq_id, q_row)
}

unsafe extern "C" fn plugin_after_decode(ud: *mut c_void) -> i32 {
    beaconkv_after_decode(ud.cast())
}

unsafe extern "C" fn plugin_seq_removed(ud: *mut c_void, seq: i32, p0: i32, p1: i32) {
    beaconkv_seq_removed(ud.cast(), seq, p0, p1)
}

unsafe extern "C" fn plugin_seq_copied(ud: *mut c_void, src: i32, dst: i32, p0: i32, p1: i32) {
    beaconkv_seq_copied(ud.cast(), src, dst, p0, p1)
}

unsafe extern "C" fn plugin_state_get(ud: *mut c_void, seq: i32, dst: *mut u8, size: usize) -> i64 {
    if dst.is_null() {
        beaconkv_seq_state_size(ud.cast(), seq) as i64
    } else {
        beaconkv_seq_state_get(ud.cast(), seq, dst, size)
    }
}

unsafe extern "C" fn plugin_state_set(
    ud: *mut c_void,
    seq: i32,
    src: *const u8,
    size: usize,
) -> i32 {
    if size == 0 {
        // nothing saved: the sequence starts afresh
        beaconkv_seq_removed(ud.cast(), seq, -1, -1);
        BEACONKV_OK
    } else {
        beaconkv_seq_state_set(ud.cast(), seq, src, size)
    }
}

unsafe extern "C" fn plugin_free(ud: *mut c_void) {
    beaconkv_context_free(ud.cast())
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_context_plugin(
    ctx: *mut beaconkv_context,
    out: *mut beaconkv_plugin,
) -> i32 {
    with_context(
        ctx,
        "beaconkv_context_plugin",
        OnPanic::Return,
        |inner, _| {
            *out.arg()? = beaconkv_plugin {
                ud: ctx.cast(),
                q_capacity: inner.engine.params().q_capacity as i32,
                before_batch: Some(plugin_before_batch),
                after_ubatch: Some(plugin_after_ubatch),
                after_decode: Some(plugin_after_decode),
                seq_removed: Some(plugin_seq_removed),
                seq_copied: Some(plugin_seq_copied),
                state_get: Some(plugin_state_get),
                state_set: Some(plugin_state_set),
                free: Some(plugin_free),
            };
            Ok(BEACONKV_OK)
        },
    )
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

// ---- hooks ---------------------------------------------------------------------------------

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
        inner.engine.seq_removed(seq, p0, p1);
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
        inner.engine.seq_copied(seq_src, seq_dst, p0, p1);
        Ok(())
    })
}

// ---- sequence state ------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn beaconkv_seq_state_size(ctx: *const beaconkv_context, seq: i32) -> usize {
    with_context(
        ctx,
        "beaconkv_seq_state_size",
        OnPanic::Return,
        |inner, _| Ok(inner.engine.save_seq(seq).map_or(0, |v| v.len())),
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
            let Some(data) = inner.engine.save_seq(seq) else {
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

// ---- observation ---------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn beaconkv_get_stats(
    ctx: *const beaconkv_context,
    seq: i32,
    out: *mut beaconkv_stats,
) -> i32 {
    with_context(ctx, "beaconkv_get_stats", OnPanic::Return, |inner, _| {
        let out = out.arg()?;
        let s = inner.engine.stats(seq);
        *out = beaconkv_stats {
            seq,
            cells_in_use: clamp_len(s.cells_in_use),
            cells_peak: clamp_len(s.cells_peak),
            prefix_len: clamp_len(s.prefix_len),
            pos_max: s.pos_max,
            n_tokens: s.n_tokens,
            evicted: s.evicted,
            compress_events: s.compress_events,
            kv_bytes_saved: s.kv_bytes_saved,
            ms_capture: s.ms_capture,
            ms_score: s.ms_score,
            ms_evict: s.ms_evict,
            disabled: (!inner.engine.is_enabled()) as i32,
            fallback: inner.engine.in_fallback() as i32,
            archived: s.archived,
            recalled: s.recalled,
            archive_dropped: s.archive_dropped,
            archive_bytes: s.archive_bytes,
            ms_recall: s.ms_recall,
        };
        Ok(BEACONKV_OK)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_error_truncates_at_a_character_boundary() {
        let e = LastError::new();
        let long = "é".repeat(LAST_ERROR_CAP); // two bytes each
        e.set(&long);
        let mut buf = vec![0 as c_char; 2 * LAST_ERROR_CAP];
        let n = unsafe { e.copy_to(buf.as_mut_ptr(), buf.len()) };
        assert_eq!(
            n,
            LAST_ERROR_CAP - 2,
            "1022 bytes: the last whole character"
        );
        let text = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_str().unwrap();
        assert_eq!(text.len(), n);
        e.set("a\0b");
        let text = unsafe { CStr::from_ptr(e.as_ptr()) }.to_str().unwrap();
        assert_eq!(text, "a b");
    }
}
