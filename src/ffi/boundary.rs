//! The panic/NULL boundary every export runs its body in.
//!
//! - Pointer arguments become references through [`Arg`] (`p.arg()?`) and slices through
//!   [`slice_arg`]; a NULL where the header requires a pointer ends the call with the return
//!   type's [`FailValue::NULL_ARG`].
//! - The body runs inside `catch_unwind`; a caught panic ends the call with the return type's
//!   [`FailValue::PANICKED`], so a panic never unwinds into C.
//! - [`with_context`] also takes the context lock inside `catch_unwind` and, on a panic, records
//!   the message as the last error and switches the context to position-only eviction (the hooks
//!   that make room then run once more that way, so the batch still fits).

use std::ffi::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};

use super::context::{beaconkv_context, Inner};
use super::last_error::LastError;
use super::params::C_DEFAULTS;
use super::types::{beaconkv_params, BEACONKV_ERR_NULL, BEACONKV_ERR_PANIC};

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

/// A count or length as the header's `int32_t` (saturating at `i32::MAX`).
pub fn clamp_len(n: usize) -> i32 {
    n.min(i32::MAX as usize) as i32
}

/// Copy `msg` into a C buffer, NUL-terminated and truncated (NULL or empty buffer: nothing).
///
/// # Safety
/// A non-NULL `buf` must be writable for `len` bytes.
pub unsafe fn write_c_str(buf: *mut c_char, len: usize, msg: &str) {
    if buf.is_null() || len == 0 {
        return;
    }
    let n = msg.len().min(len - 1);
    std::ptr::copy_nonoverlapping(msg.as_ptr() as *const c_char, buf, n);
    *buf.add(n) = 0;
}

/// Pre-fill a caller's error buffer with the message a caught panic leaves there: an export
/// that reports through `err` calls this first and overwrites the text on every path it returns
/// by afterwards, so the text stays only when its body panicked.
///
/// # Safety
/// As [`write_c_str`].
pub unsafe fn preset_panic_message(err: *mut c_char, len: usize, call: &str) {
    write_c_str(err, len, &format!("beaconkv: internal panic in {call}"));
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
pub enum OnPanic {
    /// Return the failure value.
    Return,
    /// Run the body once more (in fallback mode), then return the failure value: the hooks
    /// that make room or track the host's sequences must still do so.
    Retry,
}

/// Run the body of an export on a context: NULL context or arguments, the context lock, the
/// panic boundary, and on a panic the last error and the switch to position-only eviction.
///
/// # Safety
/// A non-NULL `ctx` must come from `beaconkv_context_new` and not be freed yet.
pub unsafe fn with_context<R: FailValue>(
    ctx: *const beaconkv_context,
    call: &str,
    on_panic: OnPanic,
    mut body: impl FnMut(&mut Inner, &LastError) -> Result<R, NullArg>,
) -> R {
    let mut run = || {
        catch_unwind(AssertUnwindSafe(|| {
            let ctx = ctx.arg()?;
            let mut inner = ctx.inner.lock();
            inner.take_injected_panic();
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
