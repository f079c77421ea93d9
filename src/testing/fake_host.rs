//! The fake cache owner shared by the integration tests, the micro-benchmark and the C-ABI fuzzer:
//! a cell table like llama.cpp's (a
//! position and a set of sequences per cell), f16 K and an F32 query store per layer, failure
//! injection per callback, call counters, and the `beaconkv_host` C table over the same state.
//!
//! It checks the plugin's side of the seam as it goes: `seq_evict` only accepts cells the last
//! listing of that sequence returned (each once), and `seq_cells` answers `cap == 0` with the
//! count alone, without listing or sorting, as `beaconkv.h` asks of a host. Once warm it does not
//! allocate (listing reuses one buffer), so `tests/alloc_free.rs` can count the plugin's
//! allocations through it.
use std::ffi::{c_char, c_void, CStr};

use crate::ffi::{beaconkv_host, beaconkv_layer};
use crate::host::{Host, RawLayer};
use half::f16;

pub struct FakeLayer {
    pub raw: RawLayer,
    /// `[cell][kv head * head_dim]`, f16.
    pub k: Vec<f16>,
    /// `[row][head * head_dim]`, f32.
    pub q: Vec<f32>,
    /// `[cell][kv head * head_dim]`, f16 (only the archive callbacks read and write V).
    pub v: Vec<f16>,
    /// Not host memory: K and queries only through `read_rows` (data pointers NULL).
    pub remote: bool,
}

/// Upcoming failures of each callback: `n` fails the next `n` calls; `u32::MAX` every call.
#[derive(Clone, Copy, Debug, Default)]
pub struct Failures {
    pub seq_cells: u32,
    pub seq_evict: u32,
    pub read_rows: u32,
    pub get_layer: u32,
    pub read_kv: u32,
    pub write_kv: u32,
    pub score_keys: u32,
}

/// Counts down one failure; true when this call fails.
fn take(n: &mut u32) -> bool {
    if *n == 0 {
        return false;
    }
    if *n != u32::MAX {
        *n -= 1;
    }
    true
}

pub struct FakeHost {
    pub layers: Vec<FakeLayer>,
    /// What `n_layers` reports (a host may describe fewer layers than it has).
    pub n_layers_shown: usize,
    pub cell_pos: Vec<i32>,
    /// Bit s: sequence s (< 64) holds the cell; 0 = free.
    pub cell_seqs: Vec<u64>,
    /// Bit s: the cell was in the last listing of sequence s (what may be evicted next).
    pub listed: Vec<u64>,
    /// Serve every layer through `read_rows` (the device-buffer path) instead of pointers.
    pub via_read_rows: bool,
    /// Offer `read_rows` at all (the C table's pointer is NULL when false).
    pub has_read_rows: bool,
    /// Offer `score_keys` (scoring where K lives); off by default.
    pub has_score_keys: bool,
    /// `score_keys` with probabilities returns -inf where f32 cannot hold the largest
    /// probability (below ln of its smallest subnormal), as a ggml backend's `log` of it does.
    pub f32_underflow: bool,
    /// `score_keys` calls, and the layers they scored in all.
    pub score_calls: usize,
    pub score_layers: usize,
    /// Rows and bytes `read_rows` and `score_keys` handed out (`transfers`).
    pub transfer_calls: u64,
    pub transfer_bytes: u64,
    pub fail: Failures,
    /// A callback returned a failure (tests reset it).
    pub failed: bool,
    /// Accept evictions without freeing cells (benchmarks repeat the same pass).
    pub dry_evict: bool,
    pub logs: Vec<String>,
    pub evict_calls: usize,
    /// `seq_cells` calls asking for the count only, and calls listing cells.
    pub count_calls: usize,
    pub list_calls: usize,
    /// `read_rows` calls for K (what = 0) and for queries (what = 1).
    pub k_reads: usize,
    pub q_reads: usize,
    pub syncs: usize,
    /// Offer the archive's callbacks (read_kv, write_kv, seq_place).
    pub has_archive: bool,
    /// Cells placed by `seq_place` and rows written by `write_kv`.
    pub placed: usize,
    pub kv_writes: usize,
    /// Listing buffer, reused.
    sorted: Vec<(i32, u32)>,
}

/// Deterministic pseudo-random values in [-1, 1).
pub struct Lcg(pub u64);

impl Lcg {
    // An infinite stream read one value at a time; as an `Iterator` every call would need `unwrap`.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

impl FakeHost {
    /// `n_layers` layers of the given shape, `n_cells` free cells, `q_rows` query rows.
    pub fn new(
        n_layers: usize,
        n_head: usize,
        n_head_kv: usize,
        head_dim: usize,
        n_cells: usize,
        q_rows: usize,
    ) -> Self {
        let layers = (0..n_layers)
            .map(|il| FakeLayer {
                raw: RawLayer {
                    il: il as i32,
                    head_dim: head_dim as i32,
                    n_head: n_head as i32,
                    n_head_kv: n_head_kv as i32,
                    k_type: 1,
                    k_nb1: n_head_kv * head_dim * 2,
                    k_nb2: n_cells * n_head_kv * head_dim * 2,
                    k_on_host: true,
                    q_nb1: n_head * head_dim * 4,
                    q_on_host: true,
                    kv_bytes_per_cell: (2 * n_head_kv * head_dim * 2) as u64,
                    v_type: 1,
                    v_dim: (n_head_kv * head_dim) as i32,
                    ..RawLayer::default()
                },
                v: vec![f16::ZERO; n_cells * n_head_kv * head_dim],
                k: vec![f16::ZERO; n_cells * n_head_kv * head_dim],
                q: vec![0.0; q_rows * n_head * head_dim],
                remote: false,
            })
            .collect();
        FakeHost {
            layers,
            n_layers_shown: n_layers,
            cell_pos: vec![0; n_cells],
            cell_seqs: vec![0; n_cells],
            listed: vec![0; n_cells],
            via_read_rows: false,
            has_read_rows: true,
            has_score_keys: false,
            f32_underflow: false,
            score_calls: 0,
            score_layers: 0,
            transfer_calls: 0,
            transfer_bytes: 0,
            fail: Failures::default(),
            failed: false,
            dry_evict: false,
            logs: Vec::new(),
            evict_calls: 0,
            count_calls: 0,
            list_calls: 0,
            k_reads: 0,
            q_reads: 0,
            syncs: 0,
            has_archive: true,
            placed: 0,
            kv_writes: 0,
            sorted: Vec::with_capacity(n_cells),
        }
    }

    /// Give every layer NEOX RoPE over its whole head (the common case of real models).
    pub fn with_rope(mut self) -> Self {
        for l in &mut self.layers {
            l.raw.rope_n_dims = l.raw.head_dim;
            l.raw.rope_mode = 2;
            l.raw.rope_n_ctx_orig = 4096;
        }
        self
    }

    fn bit(seq: i32) -> u64 {
        assert!(
            (0..64).contains(&seq),
            "fake host: sequence {seq} out of range"
        );
        1 << seq
    }

    /// Positions held by `seq`, sorted.
    pub fn positions(&self, seq: i32) -> Vec<i32> {
        let b = Self::bit(seq);
        let mut p: Vec<i32> = (0..self.cell_seqs.len())
            .filter(|&c| self.cell_seqs[c] & b != 0)
            .map(|c| self.cell_pos[c])
            .collect();
        p.sort_unstable();
        p
    }

    /// Cells `seq` holds.
    pub fn count(&self, seq: i32) -> usize {
        let b = Self::bit(seq);
        self.cell_seqs.iter().filter(|&&m| m & b != 0).count()
    }

    /// Take a free cell for (`seq`, `pos`); None when the cache is full.
    pub fn try_place(&mut self, seq: i32, pos: i32) -> Option<usize> {
        let c = self.cell_seqs.iter().position(|&m| m == 0)?;
        self.cell_seqs[c] = Self::bit(seq);
        self.cell_pos[c] = pos;
        Some(c)
    }

    /// Take a free cell for (`seq`, `pos`); panics when the cache is full.
    pub fn place(&mut self, seq: i32, pos: i32) -> usize {
        self.try_place(seq, pos).expect("fake host: cache full")
    }

    /// The host side of `llama_memory_seq_rm`: positions `[p0, p1)` (negative: open) of `seq`
    /// (`seq < 0`: every sequence).
    pub fn remove(&mut self, seq: i32, p0: i32, p1: i32) {
        let lo = p0.max(0);
        let hi = if p1 < 0 { i32::MAX } else { p1 };
        let mask = if seq < 0 { u64::MAX } else { Self::bit(seq) };
        for (m, &p) in self.cell_seqs.iter_mut().zip(&self.cell_pos) {
            if p >= lo && p < hi {
                *m &= !mask;
            }
        }
    }

    /// The host side of `llama_memory_seq_cp`: cells of `src` in `[p0, p1)` are shared with
    /// `dst`. Returns whether any cell was copied.
    pub fn copy(&mut self, src: i32, dst: i32, p0: i32, p1: i32) -> bool {
        let lo = p0.max(0);
        let hi = if p1 < 0 { i32::MAX } else { p1 };
        let (s, d) = (Self::bit(src), Self::bit(dst));
        let mut copied = false;
        for (m, &p) in self.cell_seqs.iter_mut().zip(&self.cell_pos) {
            if *m & s != 0 && p >= lo && p < hi {
                *m |= d;
                copied = true;
            }
        }
        copied
    }

    /// K row of `cell` in layer `l` (all kv heads).
    pub fn k_row_mut(&mut self, l: usize, cell: usize) -> &mut [f16] {
        let w = (self.layers[l].raw.n_head_kv * self.layers[l].raw.head_dim) as usize;
        &mut self.layers[l].k[cell * w..(cell + 1) * w]
    }

    /// Query row `row` of layer `l` (all heads).
    pub fn q_row_mut(&mut self, l: usize, row: usize) -> &mut [f32] {
        let w = (self.layers[l].raw.n_head * self.layers[l].raw.head_dim) as usize;
        &mut self.layers[l].q[row * w..(row + 1) * w]
    }

    /// The `beaconkv_host` table over this host (`user` points to it: it must not move while
    /// a context holds the table).
    pub fn c_host(&mut self) -> beaconkv_host {
        beaconkv_host {
            user: self as *mut FakeHost as *mut c_void,
            n_layers: Some(c_n_layers),
            get_layer: Some(c_get_layer),
            seq_cells: Some(c_seq_cells),
            seq_evict: Some(c_seq_evict),
            synchronize: Some(c_synchronize),
            read_rows: self.has_read_rows.then_some(c_read_rows as _),
            log: Some(c_log),
            read_kv: self.has_archive.then_some(c_read_kv as _),
            write_kv: self.has_archive.then_some(c_write_kv as _),
            seq_place: self.has_archive.then_some(c_seq_place as _),
            score_keys: self.has_score_keys.then_some(c_score_keys as _),
            transfers: Some(c_transfers),
        }
    }
}

impl Host for FakeHost {
    fn n_layers(&mut self) -> i32 {
        self.n_layers_shown as i32
    }

    fn get_layer(&mut self, i: i32, out: &mut RawLayer) -> i32 {
        if i < 0 || i as usize >= self.layers.len() || take(&mut self.fail.get_layer) {
            return -1;
        }
        let l = &self.layers[i as usize];
        *out = l.raw;
        if l.remote {
            out.k_on_host = false;
            out.q_on_host = false;
        } else {
            out.k_data = l.k.as_ptr().cast();
            out.q_data = l.q.as_ptr().cast();
            if self.via_read_rows {
                out.k_on_host = false;
                out.q_on_host = false;
            }
        }
        0
    }

    fn seq_cells(&mut self, seq: i32, pos: &mut [i32], cells: &mut [u32], stream: &mut u32) -> i32 {
        if take(&mut self.fail.seq_cells) {
            self.failed = true;
            return -1;
        }
        *stream = 0;
        if !(0..64).contains(&seq) {
            return 0;
        }
        let b = 1u64 << seq;
        let cap = pos.len().min(cells.len());
        if cap == 0 {
            self.count_calls += 1;
            return self.cell_seqs.iter().filter(|&&m| m & b != 0).count() as i32;
        }
        self.list_calls += 1;
        self.sorted.clear();
        for (c, (&m, &p)) in self.cell_seqs.iter().zip(&self.cell_pos).enumerate() {
            if m & b != 0 {
                self.sorted.push((p, c as u32));
            }
        }
        self.sorted.sort_unstable();
        self.listed.iter_mut().for_each(|l| *l &= !b);
        for (i, &(p, c)) in self.sorted.iter().take(cap).enumerate() {
            pos[i] = p;
            cells[i] = c;
            self.listed[c as usize] |= b;
        }
        self.sorted.len() as i32
    }

    fn seq_evict(&mut self, seq: i32, cells: &[u32]) -> i32 {
        self.evict_calls += 1;
        if take(&mut self.fail.seq_evict) {
            self.failed = true;
            return -1;
        }
        let b = Self::bit(seq);
        if self.dry_evict {
            return cells.len() as i32;
        }
        for &c in cells {
            let c = c as usize;
            assert!(
                c < self.cell_seqs.len() && self.cell_seqs[c] & b != 0,
                "seq_evict({seq}): cell {c} is not held by the sequence"
            );
            assert!(
                self.listed[c] & b != 0,
                "seq_evict({seq}): cell {c} was not in the last listing (or given twice)"
            );
            self.cell_seqs[c] &= !b;
            self.listed[c] &= !b;
        }
        self.listed.iter_mut().for_each(|l| *l &= !b);
        cells.len() as i32
    }

    fn synchronize(&mut self) {
        self.syncs += 1;
    }

    fn has_read_rows(&self) -> bool {
        self.has_read_rows
    }

    fn read_rows(
        &mut self,
        layer: i32,
        what: i32,
        stream: u32,
        rows: &[u32],
        out: &mut [f32],
    ) -> i32 {
        if take(&mut self.fail.read_rows) {
            self.failed = true;
            return -1;
        }
        assert_eq!(stream, 0, "read_rows: the fake host has one stream");
        let l = &self.layers[layer as usize];
        let width = if what == 0 {
            self.k_reads += 1;
            (l.raw.n_head_kv * l.raw.head_dim) as usize
        } else {
            self.q_reads += 1;
            (l.raw.n_head * l.raw.head_dim) as usize
        };
        assert!(
            out.len() >= rows.len() * width,
            "read_rows: output too short"
        );
        // a device host makes one read per row
        self.transfer_calls += rows.len() as u64;
        self.transfer_bytes += (rows.len() * width * 4) as u64;
        for (i, &r) in rows.iter().enumerate() {
            let dst = &mut out[i * width..(i + 1) * width];
            let r = r as usize;
            if what == 0 {
                for (d, s) in dst.iter_mut().zip(&l.k[r * width..(r + 1) * width]) {
                    *d = s.to_f32();
                }
            } else {
                dst.copy_from_slice(&l.q[r * width..(r + 1) * width]);
            }
        }
        0
    }

    fn has_score_keys(&self) -> bool {
        self.has_score_keys
    }

    /// The reference computation, in f64: per layer, kv head and cell, the largest logit (or
    /// log probability over `cells`) over the group's queries.
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
        if !self.has_score_keys || take(&mut self.fail.score_keys) {
            self.failed = true;
            return -1;
        }
        assert_eq!(stream, 0, "score_keys: the fake host has one stream");
        self.score_calls += 1;
        self.score_layers += layers.len();
        let (mut q_at, mut o_at) = (0, 0);
        for (&li, &nq) in layers.iter().zip(n_query) {
            let l = &self.layers[li as usize];
            let (d, n_kv) = (l.raw.head_dim as usize, l.raw.n_head_kv as usize);
            let nq = nq as usize;
            for g in 0..n_kv {
                let qs = &queries[q_at + g * nq * d..q_at + (g + 1) * nq * d];
                let logits: Vec<Vec<f64>> = qs
                    .chunks_exact(d)
                    .map(|q| {
                        cells
                            .iter()
                            .map(|&c| {
                                let k = &l.k[(c as usize * n_kv + g) * d..][..d];
                                q.iter().zip(k).map(|(a, b)| *a as f64 * b.to_f64()).sum()
                            })
                            .collect()
                    })
                    .collect();
                for (ci, o) in out[o_at + g * cells.len()..o_at + (g + 1) * cells.len()]
                    .iter_mut()
                    .enumerate()
                {
                    let best = logits
                        .iter()
                        .map(|row| {
                            let lse = if prob {
                                let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                                m + row.iter().map(|v| (v - m).exp()).sum::<f64>().ln()
                            } else {
                                0.0
                            };
                            row[ci] - lse
                        })
                        .fold(f64::NEG_INFINITY, f64::max);
                    // f32 holds nothing below its smallest subnormal
                    *o = if prob && self.f32_underflow && best < f64::from(f32::from_bits(1)).ln() {
                        f32::NEG_INFINITY
                    } else {
                        best as f32
                    };
                }
            }
            q_at += n_kv * nq * d;
            o_at += n_kv * cells.len();
        }
        self.transfer_calls += layers.len() as u64;
        self.transfer_bytes += (o_at * 4) as u64;
        layers.len() as i32
    }

    fn transfers(&mut self) -> (u64, u64) {
        (self.transfer_calls, self.transfer_bytes)
    }

    fn log(&mut self, _level: i32, msg: &str) {
        self.logs.push(msg.to_string());
    }

    fn has_archive(&self) -> bool {
        self.has_archive
    }

    fn read_kv(
        &mut self,
        layer: i32,
        stream: u32,
        cells: &[u32],
        k: &mut [u8],
        v: &mut [u8],
    ) -> i32 {
        if take(&mut self.fail.read_kv) {
            self.failed = true;
            return -1;
        }
        assert_eq!(stream, 0, "read_kv: the fake host has one stream");
        let l = &self.layers[layer as usize];
        let w = (l.raw.n_head_kv * l.raw.head_dim) as usize;
        assert!(
            k.len() >= cells.len() * w * 2 && v.len() >= cells.len() * w * 2,
            "read_kv: short output"
        );
        for (i, &c) in cells.iter().enumerate() {
            let c = c as usize;
            for j in 0..w {
                k[(i * w + j) * 2..(i * w + j + 1) * 2]
                    .copy_from_slice(&l.k[c * w + j].to_bits().to_le_bytes());
                v[(i * w + j) * 2..(i * w + j + 1) * 2]
                    .copy_from_slice(&l.v[c * w + j].to_bits().to_le_bytes());
            }
        }
        cells.len() as i32
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
        if take(&mut self.fail.write_kv) {
            self.failed = true;
            return -1;
        }
        assert_eq!(stream, 0, "write_kv: the fake host has one stream");
        let l = &mut self.layers[layer as usize];
        let w = (l.raw.n_head_kv * l.raw.head_dim) as usize;
        let size = if format == 0 { 2 } else { 4 };
        assert!(
            k.len() >= cells.len() * w * size && v.len() >= cells.len() * w * size,
            "write_kv: short input"
        );
        let get = |b: &[u8], i: usize| -> f16 {
            if format == 0 {
                f16::from_bits(u16::from_le_bytes([b[i * 2], b[i * 2 + 1]]))
            } else {
                f16::from_f32(f32::from_le_bytes(b[i * 4..i * 4 + 4].try_into().unwrap()))
            }
        };
        for (i, &c) in cells.iter().enumerate() {
            let c = c as usize;
            assert!(self.cell_seqs[c] != 0, "write_kv: cell {c} is not in use");
            for j in 0..w {
                l.k[c * w + j] = get(k, i * w + j);
                l.v[c * w + j] = get(v, i * w + j);
            }
        }
        self.kv_writes += 1;
        cells.len() as i32
    }

    fn seq_place(&mut self, seq: i32, pos: &[i32], cells: &mut [u32]) -> i32 {
        let free = self.cell_seqs.iter().filter(|&&m| m == 0).count();
        if free < pos.len() {
            return -1;
        }
        for (i, &p) in pos.iter().enumerate() {
            assert!(
                !self.positions(seq).contains(&p),
                "seq_place: position {p} is already held by sequence {seq}"
            );
            cells[i] = self.place(seq, p) as u32;
        }
        self.placed += pos.len();
        pos.len() as i32
    }
}

// The C table: each callback forwards to the `Host` implementation above, checking the
// pointers the header promises.

unsafe fn host_of<'a>(user: *mut c_void) -> &'a mut FakeHost {
    assert!(!user.is_null(), "callback without user pointer");
    &mut *(user as *mut FakeHost)
}

unsafe extern "C" fn c_n_layers(user: *mut c_void) -> i32 {
    host_of(user).n_layers()
}

unsafe extern "C" fn c_get_layer(user: *mut c_void, i: i32, out: *mut beaconkv_layer) -> i32 {
    assert!(!out.is_null(), "get_layer: NULL out");
    host_of(user).get_layer(i, &mut *out)
}

unsafe extern "C" fn c_seq_cells(
    user: *mut c_void,
    seq: i32,
    pos: *mut i32,
    cells: *mut u32,
    cap: i32,
    stream: *mut u32,
) -> i32 {
    assert!(cap >= 0, "seq_cells: cap {cap}");
    let mut s = 0;
    let n = if cap == 0 {
        assert!(
            pos.is_null() && cells.is_null(),
            "seq_cells: a count-only query comes with NULL arrays"
        );
        host_of(user).seq_cells(seq, &mut [], &mut [], &mut s)
    } else {
        assert!(
            !pos.is_null() && !cells.is_null(),
            "seq_cells: NULL arrays with cap {cap}"
        );
        let pos = std::slice::from_raw_parts_mut(pos, cap as usize);
        let cells = std::slice::from_raw_parts_mut(cells, cap as usize);
        host_of(user).seq_cells(seq, pos, cells, &mut s)
    };
    if !stream.is_null() {
        *stream = s;
    }
    n
}

unsafe extern "C" fn c_seq_evict(user: *mut c_void, seq: i32, cells: *const u32, n: i32) -> i32 {
    assert!(n >= 0, "seq_evict: n = {n}");
    let cells = if n == 0 {
        &[][..]
    } else {
        assert!(!cells.is_null(), "seq_evict: NULL cells");
        std::slice::from_raw_parts(cells, n as usize)
    };
    host_of(user).seq_evict(seq, cells)
}

unsafe extern "C" fn c_synchronize(user: *mut c_void) {
    host_of(user).synchronize()
}

unsafe extern "C" fn c_read_rows(
    user: *mut c_void,
    layer: i32,
    what: i32,
    stream: u32,
    rows: *const u32,
    n: i32,
    out: *mut f32,
) -> i32 {
    let h = host_of(user);
    assert!(
        layer >= 0 && (layer as usize) < h.layers.len(),
        "read_rows: layer {layer}"
    );
    assert!(what == 0 || what == 1, "read_rows: what = {what}");
    assert!(n >= 0, "read_rows: n = {n}");
    if n == 0 {
        return 0;
    }
    assert!(!rows.is_null() && !out.is_null(), "read_rows: NULL arrays");
    let raw = &h.layers[layer as usize].raw;
    let width = if what == 0 {
        raw.n_head_kv * raw.head_dim
    } else {
        raw.n_head * raw.head_dim
    } as usize;
    let rows = std::slice::from_raw_parts(rows, n as usize);
    let out = std::slice::from_raw_parts_mut(out, rows.len() * width);
    h.read_rows(layer, what, stream, rows, out)
}

#[allow(clippy::too_many_arguments)] // the C callback's signature
unsafe extern "C" fn c_score_keys(
    user: *mut c_void,
    stream: u32,
    cells: *const u32,
    n_cells: i32,
    n_layers: i32,
    layers: *const i32,
    n_query: *const i32,
    queries: *const f32,
    mode: i32,
    out: *mut f32,
) -> i32 {
    let h = host_of(user);
    assert!(n_cells > 0 && n_layers > 0, "score_keys: empty call");
    assert!(mode == 0 || mode == 1, "score_keys: mode = {mode}");
    let layers = std::slice::from_raw_parts(layers, n_layers as usize);
    let n_query = std::slice::from_raw_parts(n_query, n_layers as usize);
    let (mut q_len, mut out_len) = (0, 0);
    for (&l, &nq) in layers.iter().zip(n_query) {
        let raw = &h.layers[l as usize].raw;
        q_len += (raw.n_head_kv * nq * raw.head_dim) as usize;
        out_len += (raw.n_head_kv * n_cells) as usize;
    }
    let cells = std::slice::from_raw_parts(cells, n_cells as usize);
    let queries = std::slice::from_raw_parts(queries, q_len);
    let out = std::slice::from_raw_parts_mut(out, out_len);
    h.score_keys(stream, cells, layers, n_query, queries, mode == 1, out)
}

unsafe extern "C" fn c_transfers(user: *mut c_void, n_reads: *mut u64, bytes: *mut u64) {
    let (n, b) = host_of(user).transfers();
    *n_reads = n;
    *bytes = b;
}

unsafe extern "C" fn c_log(user: *mut c_void, level: i32, msg: *const c_char) {
    assert!(!msg.is_null(), "log: NULL message");
    assert!((1..=3).contains(&level), "log level {level}");
    let msg = CStr::from_ptr(msg).to_string_lossy().into_owned();
    host_of(user).log(level, &msg)
}

unsafe extern "C" fn c_read_kv(
    user: *mut c_void,
    layer: i32,
    stream: u32,
    cells: *const u32,
    n: i32,
    k: *mut c_void,
    v: *mut c_void,
) -> i32 {
    assert!(
        !cells.is_null() && !k.is_null() && !v.is_null() && n > 0,
        "read_kv: bad arguments"
    );
    let h = host_of(user);
    let w =
        (h.layers[layer as usize].raw.n_head_kv * h.layers[layer as usize].raw.head_dim) as usize;
    let n = n as usize;
    h.read_kv(
        layer,
        stream,
        std::slice::from_raw_parts(cells, n),
        std::slice::from_raw_parts_mut(k as *mut u8, n * w * 2),
        std::slice::from_raw_parts_mut(v as *mut u8, n * w * 2),
    )
}

unsafe extern "C" fn c_write_kv(
    user: *mut c_void,
    layer: i32,
    stream: u32,
    cells: *const u32,
    n: i32,
    format: i32,
    k: *const c_void,
    v: *const c_void,
) -> i32 {
    assert!(
        !cells.is_null() && !k.is_null() && !v.is_null() && n > 0,
        "write_kv: bad arguments"
    );
    assert!(format == 0 || format == 1, "write_kv: format {format}");
    let h = host_of(user);
    let w =
        (h.layers[layer as usize].raw.n_head_kv * h.layers[layer as usize].raw.head_dim) as usize;
    let (n, size) = (n as usize, if format == 0 { 2 } else { 4 });
    h.write_kv(
        layer,
        stream,
        std::slice::from_raw_parts(cells, n),
        format,
        std::slice::from_raw_parts(k as *const u8, n * w * size),
        std::slice::from_raw_parts(v as *const u8, n * w * size),
    )
}

unsafe extern "C" fn c_seq_place(
    user: *mut c_void,
    seq: i32,
    pos: *const i32,
    n: i32,
    cells: *mut u32,
) -> i32 {
    assert!(
        !pos.is_null() && !cells.is_null() && n > 0,
        "seq_place: bad arguments"
    );
    let n = n as usize;
    host_of(user).seq_place(
        seq,
        std::slice::from_raw_parts(pos, n),
        std::slice::from_raw_parts_mut(cells, n),
    )
}
