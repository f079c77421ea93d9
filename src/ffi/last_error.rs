//! `LastError`: the context's last-error text, readable through a stable pointer.

use std::ffi::c_char;
use std::sync::atomic::{AtomicU8, Ordering};

use parking_lot::Mutex;

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
    pub(super) fn new() -> Self {
        LastError {
            lock: Mutex::new(()),
            bytes: (0..LAST_ERROR_CAP).map(|_| AtomicU8::new(0)).collect(),
        }
    }

    /// Replace the message (NUL bytes become spaces; truncated at a character boundary).
    pub(super) fn set(&self, msg: &str) {
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
    pub(super) unsafe fn copy_to(&self, buf: *mut c_char, cap: usize) -> usize {
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

    pub(super) fn as_ptr(&self) -> *const c_char {
        // AtomicU8 has the size, alignment and bit validity of u8.
        self.bytes.as_ptr() as *const c_char
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

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
