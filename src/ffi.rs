//! The C ABI of `include/beaconkv.h`.
//!
//! Every exported function checks its pointers (`BEACONKV_ERR_NULL` or a neutral value), runs
//! inside a panic boundary (a panic never unwinds into C; inside a hook it disables compression
//! for the context) and serialises access to the context with a mutex.

#![allow(non_camel_case_types)]
#![allow(clippy::missing_safety_doc)] // the safety contract is the C header's

use std::ffi::{c_char, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use parking_lot::Mutex;

use crate::config::{ConfigError, Params, Policy, Prefix, Reduce};
use crate::engine::{Engine, EngineError};
use crate::ggml_types::GgmlType;
use crate::host::{Host, RawLayer};
use crate::memory::{kv_bytes_per_token, ModelDesc};

pub const BEACONKV_OK: i32 = 0;
pub const BEACONKV_ERR_NULL: i32 = -1;
pub const BEACONKV_ERR_INVALID: i32 = -2;
pub const BEACONKV_ERR_HOST: i32 = -3;
pub const BEACONKV_ERR_PANIC: i32 = -4;
pub const BEACONKV_ERR_DISABLED: i32 = -5;
pub const BEACONKV_ERR_NO_ROOM: i32 = -6;
pub const BEACONKV_ERR_UNSUPPORTED: i32 = -7;

/// `beaconkv_params`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
        self.0.seq_cells.map_or(-1, |f| unsafe {
            f(
                self.0.user,
                seq,
                pos.as_mut_ptr(),
                cells.as_mut_ptr(),
                cap,
                stream,
            )
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
}

struct Inner {
    engine: Engine,
    host: CHost,
    /// Test hook: make the next hook panic (see `debug_panic_next_hook`).
    panic_next: bool,
}

/// Opaque `beaconkv_context`.
pub struct beaconkv_context {
    inner: Mutex<Inner>,
    last_error: Mutex<CString>,
}

impl beaconkv_context {
    fn set_error(&self, msg: &str) {
        *self.last_error.lock() = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    }
}

macro_rules! require {
    ($($p:expr),+) => {
        $( if $p.is_null() { return; } )+
    };
    ($($p:expr),+ => $ret:expr) => {
        $( if $p.is_null() { return $ret; } )+
    };
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
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

/// Run `f` so that a panic becomes `on_panic` instead of unwinding into C.
fn no_unwind<R>(on_panic: R, f: impl FnOnce() -> R) -> R {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(on_panic)
}

/// Run a hook body under the context lock; a panic disables compression and records why.
fn hook(ctx: &beaconkv_context, f: impl FnOnce(&mut Inner) -> Result<(), EngineError>) -> i32 {
    let mut inner = ctx.inner.lock();
    if inner.engine.failed() {
        return BEACONKV_ERR_DISABLED;
    }
    let result = catch_unwind(AssertUnwindSafe(|| {
        if std::mem::take(&mut inner.panic_next) {
            panic!("injected panic (test hook)");
        }
        f(&mut inner)
    }));
    match result {
        Ok(Ok(())) => BEACONKV_OK,
        Ok(Err(e)) => {
            ctx.set_error(&e.to_string());
            match e {
                EngineError::Host(_) => BEACONKV_ERR_HOST,
                EngineError::Disabled => BEACONKV_ERR_DISABLED,
            }
        }
        Err(payload) => {
            inner.engine.disable();
            let msg = format!(
                "beaconkv: internal panic, compression disabled: {}",
                panic_message(&*payload)
            );
            // The host log may itself misbehave; never let that escape either.
            let _ = catch_unwind(AssertUnwindSafe(|| {
                inner.host.log(crate::host::LOG_ERROR, &msg)
            }));
            ctx.set_error(&msg);
            BEACONKV_ERR_PANIC
        }
    }
}

/// Make the next hook on `ctx` panic, to exercise the panic boundary from tests. Not exported.
#[doc(hidden)]
pub unsafe fn debug_panic_next_hook(ctx: *mut beaconkv_context) {
    if let Some(ctx) = ctx.as_ref() {
        ctx.inner.lock().panic_next = true;
    }
}

impl beaconkv_params {
    /// The C form of `p`.
    pub fn from_params(p: &Params) -> Self {
        beaconkv_params {
            policy: p.policy as i32,
            budget: p.budget as i32,
            budget_min: p.budget_min as i32,
            n_beacons: p.n_beacons as i32,
            n_recent: p.n_recent as i32,
            window: p.window as i32,
            prefix: match p.prefix {
                Prefix::Prompt => -1,
                Prefix::First(n) => n as i32,
            },
            reduce: p.reduce as i32,
            span: p.span as i32,
            q_capacity: p.q_capacity as i32,
            seed: p.seed,
            read_copy: p.read_copy as i32,
            score: p.score_prob as i32,
        }
    }

    /// The Rust form, validated; errors name the field's spec key.
    pub fn to_params(&self) -> Result<Params, ConfigError> {
        let err = |key: &str, msg: String| ConfigError {
            key: key.into(),
            message: msg,
        };
        let uint = |key: &str, v: i32| {
            usize::try_from(v).map_err(|_| {
                err(
                    key,
                    format!("{v} is negative; allowed range 0..={}", i32::MAX),
                )
            })
        };
        let p = Params {
            policy: Policy::from_id(self.policy).ok_or_else(|| {
                err(
                    "policy",
                    format!("{} is not a policy id; allowed 0..=4", self.policy),
                )
            })?,
            budget: uint("budget", self.budget)?,
            budget_min: uint("min", self.budget_min)?,
            n_beacons: uint("beacons", self.n_beacons)?,
            n_recent: uint("recent", self.n_recent)?,
            window: uint("window", self.window)?,
            prefix: match self.prefix {
                -1 => Prefix::Prompt,
                n => Prefix::First(uint("prefix", n).map_err(|e| ConfigError {
                    message: format!("{} (or -1 = prompt)", e.message),
                    ..e
                })?),
            },
            reduce: Reduce::from_id(self.reduce).ok_or_else(|| {
                err(
                    "reduce",
                    format!("{} is not a reduction id; allowed 0..=2", self.reduce),
                )
            })?,
            span: uint("span", self.span)?,
            q_capacity: uint("qcap", self.q_capacity)?,
            seed: self.seed,
            read_copy: match self.read_copy {
                0 => false,
                1 => true,
                v => return Err(err("read", format!("{v} is not 0 (auto) or 1 (copy)"))),
            },
            score_prob: match self.score {
                0 => false,
                1 => true,
                v => return Err(err("score", format!("{v} is not 0 (logit) or 1 (prob)"))),
            },
        };
        p.validate()?;
        Ok(p)
    }
}

// ---- configuration -------------------------------------------------------------------------

#[no_mangle]
pub extern "C" fn beaconkv_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr() as *const c_char
}

#[no_mangle]
pub extern "C" fn beaconkv_params_default() -> beaconkv_params {
    beaconkv_params::from_params(&Params::default())
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_params_parse(
    spec: *const c_char,
    params: *mut beaconkv_params,
    err: *mut c_char,
    err_len: usize,
) -> i32 {
    require!(spec, params => BEACONKV_ERR_NULL);
    no_unwind(BEACONKV_ERR_PANIC, || {
        let result = CStr::from_ptr(spec)
            .to_str()
            .map_err(|_| ConfigError {
                key: "spec".into(),
                message: "not valid UTF-8".into(),
            })
            .and_then(|s| {
                let mut p = (*params).to_params()?;
                p.apply_spec(s)?;
                Ok(p)
            });
        let result = result.map(|p| *params = beaconkv_params::from_params(&p));
        config_status(result, err, err_len)
    })
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_params_validate(
    params: *const beaconkv_params,
    err: *mut c_char,
    err_len: usize,
) -> i32 {
    require!(params => BEACONKV_ERR_NULL);
    no_unwind(BEACONKV_ERR_PANIC, || {
        config_status((*params).to_params().map(|_| ()), err, err_len)
    })
}

/// Status of a configuration check; the message (or "") goes to the caller's `err` buffer.
unsafe fn config_status(result: Result<(), ConfigError>, err: *mut c_char, err_len: usize) -> i32 {
    match result {
        Ok(()) => {
            write_c_str(err, err_len, "");
            BEACONKV_OK
        }
        Err(e) => {
            write_c_str(err, err_len, &e.to_string());
            BEACONKV_ERR_INVALID
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_params_format(
    params: *const beaconkv_params,
    buf: *mut c_char,
    len: usize,
) -> i32 {
    require!(params => BEACONKV_ERR_NULL);
    no_unwind(BEACONKV_ERR_PANIC, || match (*params).to_params() {
        Ok(p) => {
            let s = p.to_spec();
            write_c_str(buf, len, &s);
            clamp_len(s.len())
        }
        Err(_) => BEACONKV_ERR_INVALID,
    })
}

#[no_mangle]
pub extern "C" fn beaconkv_policy_name(policy: i32) -> *const c_char {
    let s: &'static [u8] = match Policy::from_id(policy) {
        Some(Policy::None) => b"none\0",
        Some(Policy::Beacon) => b"beacon\0",
        Some(Policy::Recent) => b"recent\0",
        Some(Policy::Streaming) => b"streaming\0",
        Some(Policy::Random) => b"random\0",
        None => b"unknown\0",
    };
    s.as_ptr() as *const c_char
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_kv_bytes_per_token(desc: *const beaconkv_model_desc) -> u64 {
    require!(desc => 0);
    no_unwind(0, || {
        let d = &*desc;
        let dims = [d.n_layer, d.n_head_kv, d.head_dim_k, d.head_dim_v];
        let (Some(tk), Some(tv)) = (GgmlType::from_id(d.type_k), GgmlType::from_id(d.type_v))
        else {
            return 0;
        };
        if dims.iter().any(|&v| v < 0)
            || !(d.head_dim_k as usize).is_multiple_of(tk.block_size())
            || !(d.head_dim_v as usize).is_multiple_of(tv.block_size())
        {
            return 0;
        }
        kv_bytes_per_token(&ModelDesc {
            n_layer: d.n_layer as usize,
            n_head_kv: d.n_head_kv as usize,
            head_dim_k: d.head_dim_k as usize,
            head_dim_v: d.head_dim_v as usize,
            type_k: tk,
            type_v: tv,
        })
    })
}

#[no_mangle]
pub extern "C" fn beaconkv_row_size(ty: i32, n: i64) -> u64 {
    no_unwind(0, || match (GgmlType::from_id(ty), usize::try_from(n)) {
        (Some(t), Ok(n)) if n % t.block_size() == 0 => t.row_size(n) as u64,
        _ => 0,
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
    if params.is_null() || host.is_null() {
        write_c_str(err, err_len, "beaconkv: params and host must not be NULL");
        return std::ptr::null_mut();
    }
    no_unwind(std::ptr::null_mut(), || {
        let p = match (*params).to_params() {
            Ok(p) => p,
            Err(e) => {
                write_c_str(err, err_len, &e.to_string());
                return std::ptr::null_mut();
            }
        };
        let h = *host;
        if h.seq_cells.is_none() || h.seq_evict.is_none() {
            write_c_str(
                err,
                err_len,
                "beaconkv: host->seq_cells and host->seq_evict are required",
            );
            return std::ptr::null_mut();
        }
        let mut host = CHost(h);
        let engine = Engine::new(p, &mut host);
        write_c_str(err, err_len, "");
        Box::into_raw(Box::new(beaconkv_context {
            inner: Mutex::new(Inner {
                engine,
                host,
                panic_next: false,
            }),
            last_error: Mutex::new(CString::default()),
        }))
    })
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_context_free(ctx: *mut beaconkv_context) {
    if !ctx.is_null() {
        no_unwind((), || drop(Box::from_raw(ctx)));
    }
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_context_params(
    ctx: *const beaconkv_context,
    out: *mut beaconkv_params,
) -> i32 {
    require!(ctx, out => BEACONKV_ERR_NULL);
    no_unwind(BEACONKV_ERR_PANIC, || {
        *out = beaconkv_params::from_params((*ctx).inner.lock().engine.params());
        BEACONKV_OK
    })
}

/// Added to the header: re-read the host's layer descriptions (after the host reallocated its
/// cache or query store). Query state is reset.
#[no_mangle]
pub unsafe extern "C" fn beaconkv_refresh_layers(ctx: *mut beaconkv_context) -> i32 {
    require!(ctx => BEACONKV_ERR_NULL);
    let ctx = &*ctx;
    hook(ctx, |inner| {
        inner.engine.refresh_layers(&mut inner.host, true);
        Ok(())
    })
}

// ---- hooks ---------------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn beaconkv_before_batch(
    ctx: *mut beaconkv_context,
    n_seq: i32,
    seq_ids: *const i32,
    n_new: *const i32,
    n_outputs: *const i32,
) -> i32 {
    require!(ctx => BEACONKV_ERR_NULL);
    if n_seq > 0 {
        require!(seq_ids, n_new => BEACONKV_ERR_NULL);
    }
    let ctx = &*ctx;
    hook(ctx, |inner| {
        let n = n_seq.max(0) as usize;
        let (ids, news) = if n == 0 {
            (&[][..], &[][..])
        } else {
            (
                std::slice::from_raw_parts(seq_ids, n),
                std::slice::from_raw_parts(n_new, n),
            )
        };
        let outs =
            (n > 0 && !n_outputs.is_null()).then(|| std::slice::from_raw_parts(n_outputs, n));
        inner.engine.before_batch(&mut inner.host, ids, news, outs)
    })
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_after_ubatch(
    ctx: *mut beaconkv_context,
    n_tokens: i32,
    pos: *const i32,
    seq_id: *const i32,
    q_row: *const i32,
) -> i32 {
    require!(ctx => BEACONKV_ERR_NULL);
    if n_tokens > 0 {
        require!(pos, seq_id, q_row => BEACONKV_ERR_NULL);
    }
    let ctx = &*ctx;
    hook(ctx, |inner| {
        let n = n_tokens.max(0) as usize;
        if n == 0 {
            return Ok(());
        }
        let (p, s, q) = (
            std::slice::from_raw_parts(pos, n),
            std::slice::from_raw_parts(seq_id, n),
            std::slice::from_raw_parts(q_row, n),
        );
        inner.engine.after_ubatch(&mut inner.host, p, s, q)
    })
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_after_decode(ctx: *mut beaconkv_context) -> i32 {
    require!(ctx => BEACONKV_ERR_NULL);
    let ctx = &*ctx;
    hook(ctx, |inner| inner.engine.after_decode(&mut inner.host))
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_seq_removed(
    ctx: *mut beaconkv_context,
    seq: i32,
    p0: i32,
    p1: i32,
) {
    require!(ctx);
    hook(&*ctx, |inner| {
        inner.engine.seq_removed(seq, p0, p1);
        Ok(())
    });
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_seq_copied(
    ctx: *mut beaconkv_context,
    seq_src: i32,
    seq_dst: i32,
    _p0: i32,
    _p1: i32,
) {
    require!(ctx);
    hook(&*ctx, |inner| {
        inner.engine.seq_copied(seq_src, seq_dst);
        Ok(())
    });
}

// ---- observation ---------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn beaconkv_get_stats(
    ctx: *const beaconkv_context,
    seq: i32,
    out: *mut beaconkv_stats,
) -> i32 {
    require!(ctx, out => BEACONKV_ERR_NULL);
    no_unwind(BEACONKV_ERR_PANIC, || {
        let inner = (*ctx).inner.lock();
        let s = inner.engine.stats(seq);
        let i32_of = |v: usize| clamp_len(v);
        *out = beaconkv_stats {
            seq,
            cells_in_use: i32_of(s.cells_in_use),
            cells_peak: i32_of(s.cells_peak),
            prefix_len: i32_of(s.prefix_len),
            pos_max: s.pos_max,
            n_tokens: s.n_tokens,
            evicted: s.evicted,
            compress_events: s.compress_events,
            kv_bytes_saved: s.kv_bytes_saved,
            ms_capture: s.ms_capture,
            ms_score: s.ms_score,
            ms_evict: s.ms_evict,
            disabled: (!inner.engine.is_enabled()) as i32,
        };
        BEACONKV_OK
    })
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_is_enabled(ctx: *const beaconkv_context) -> bool {
    require!(ctx => false);
    no_unwind(false, || (*ctx).inner.lock().engine.is_enabled())
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_last_error(ctx: *const beaconkv_context) -> *const c_char {
    require!(ctx => c"".as_ptr());
    no_unwind(c"".as_ptr(), || (*ctx).last_error.lock().as_ptr())
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_seq_state_size(ctx: *const beaconkv_context, seq: i32) -> usize {
    require!(ctx => 0);
    no_unwind(0, || {
        let inner = (*ctx).inner.lock();
        inner.engine.save_seq(seq).map_or(0, |v| v.len())
    })
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_seq_state_get(
    ctx: *const beaconkv_context,
    seq: i32,
    buf: *mut u8,
    len: usize,
) -> i64 {
    require!(ctx, buf => BEACONKV_ERR_NULL as i64);
    no_unwind(BEACONKV_ERR_PANIC as i64, || {
        let inner = (*ctx).inner.lock();
        let Some(data) = inner.engine.save_seq(seq) else {
            (*ctx).set_error(&format!("beaconkv_seq_state_get: unknown sequence {seq}"));
            return BEACONKV_ERR_INVALID as i64;
        };
        if data.len() > len {
            (*ctx).set_error(&format!(
                "beaconkv_seq_state_get: buffer of {len} bytes, {} needed",
                data.len()
            ));
            return BEACONKV_ERR_INVALID as i64;
        }
        std::ptr::copy_nonoverlapping(data.as_ptr(), buf, data.len());
        data.len() as i64
    })
}

#[no_mangle]
pub unsafe extern "C" fn beaconkv_seq_state_set(
    ctx: *mut beaconkv_context,
    seq: i32,
    buf: *const u8,
    len: usize,
) -> i32 {
    require!(ctx, buf => BEACONKV_ERR_NULL);
    no_unwind(BEACONKV_ERR_PANIC, || {
        let data = std::slice::from_raw_parts(buf, len);
        let result = (*ctx).inner.lock().engine.load_seq(seq, data);
        match result {
            Ok(()) => BEACONKV_OK,
            Err(e) => {
                (*ctx).set_error(&format!("beaconkv_seq_state_set: {e}"));
                BEACONKV_ERR_INVALID
            }
        }
    })
}
