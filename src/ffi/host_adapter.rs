//! `CHost`: the host's C callback table as the engine's `Host` trait. A missing callback answers
//! as a failing one would (`-1`, or nothing for `synchronize`/`log`).

use std::ffi::{c_void, CString};

use super::boundary::clamp_len;
use super::types::beaconkv_host;
use crate::host::{Host, RawLayer};

/// The C host callbacks as a `Host`.
pub struct CHost(pub beaconkv_host);

// SAFETY: the header makes `user` the host's business; callbacks only run inside hooks, which the
// context mutex serialises.
unsafe impl Send for CHost {}

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

    fn has_score_keys(&self) -> bool {
        self.0.score_keys.is_some()
    }

    fn score_keys(
        &mut self,
        stream: u32,
        cells: &[u32],
        layers: &[i32],
        n_query: &[i32],
        queries: &[f32],
        prob: bool,
        out: &mut [f32],
    ) -> i32 {
        debug_assert_eq!(layers.len(), n_query.len());
        self.0.score_keys.map_or(-1, |f| unsafe {
            f(
                self.0.user,
                stream,
                cells.as_ptr(),
                clamp_len(cells.len()),
                clamp_len(layers.len()),
                layers.as_ptr(),
                n_query.as_ptr(),
                queries.as_ptr(),
                prob as i32,
                out.as_mut_ptr(),
            )
        })
    }

    fn transfers(&mut self) -> (u64, u64) {
        let (mut n, mut bytes) = (0u64, 0u64);
        if let Some(f) = self.0.transfers {
            unsafe { f(self.0.user, &mut n, &mut bytes) };
        }
        (n, bytes)
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
