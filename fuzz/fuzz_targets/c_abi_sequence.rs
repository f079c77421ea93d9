//! Random sequences of C-ABI calls, made through the exported `extern "C"` functions the way a C
//! host would, against a fake llama.cpp-like host with `extern "C"` callbacks.
//!
//! The host owns a cell table (a position and a set of sequences per cell), an f16 K tensor per
//! layer and an F32 query store per layer, in its own memory; one layer can be switched to the
//! `read_rows` path. Host callbacks fail on demand (seq_cells / seq_evict / read_rows / get_layer
//! return -1), pointers are NULL where the header allows it and where it does not, sequence ids
//! are random (negative and huge included), and the hooks come in any order.
//!
//! Invariants: no panic (libFuzzer aborts on any panic, even one the library would catch: an
//! internal panic is a bug), every status is one of the header's, every evicted cell was listed
//! by the host for that sequence in the listing that preceded the eviction, after a successful
//! `after_decode` no sequence holds more than `budget` cells while compression is enabled and
//! the host never failed, and `get_stats` answers for any sequence id.
#![no_main]

use std::collections::BTreeSet;
use std::ffi::{c_char, c_void, CStr, CString};

use beaconkv::ffi::*;
use half::f16;
use libfuzzer_sys::fuzz_target;

const N_CELLS: usize = 160;
const N_SEQ: usize = 4;
const N_LAYERS: usize = 2;
const N_HEAD: usize = 4;
const N_HEAD_KV: usize = 2;
const HEAD_DIM: usize = 8;
const K_ROW: usize = N_HEAD_KV * HEAD_DIM;
const Q_ROW: usize = N_HEAD * HEAD_DIM;
/// Rows of the query store; contexts get `qcap <= Q_ROWS`.
const Q_ROWS: usize = 16;

/// The statuses `beaconkv.h` documents.
const STATUSES: [i32; 8] = [
    BEACONKV_OK,
    BEACONKV_ERR_NULL,
    BEACONKV_ERR_INVALID,
    BEACONKV_ERR_HOST,
    BEACONKV_ERR_PANIC,
    BEACONKV_ERR_DISABLED,
    BEACONKV_ERR_NO_ROOM,
    BEACONKV_ERR_UNSUPPORTED,
];

fn check_status(what: &str, rc: i32) -> i32 {
    assert!(STATUSES.contains(&rc), "{what}: undocumented status {rc}");
    assert_ne!(rc, BEACONKV_ERR_PANIC, "{what}: internal panic");
    rc
}

struct FakeHost {
    /// Bit s set: sequence s holds the cell. 0 = free.
    seqs: [u8; N_CELLS],
    pos: [i32; N_CELLS],
    next_pos: [i32; N_SEQ],
    k: Vec<u16>,
    q: Vec<f32>,
    n_layers: i32,
    /// Layer 1 is read through `read_rows` (not host memory).
    layer1_remote: bool,
    /// Hadamard block size reported for layer 0 (may be nonsense).
    hadamard_n: i32,
    rope_mode: i32,
    /// The cells of the last listing of each sequence (what may be evicted next).
    listed: Vec<BTreeSet<u32>>,
    fail_seq_cells: bool,
    fail_evict: bool,
    fail_read_rows: bool,
    fail_get_layer: bool,
    /// A callback returned a failure since the context was created.
    failed: bool,
    logs: usize,
}

impl FakeHost {
    fn new() -> Box<Self> {
        Box::new(FakeHost {
            seqs: [0; N_CELLS],
            pos: [0; N_CELLS],
            next_pos: [0; N_SEQ],
            k: vec![0; N_LAYERS * N_CELLS * K_ROW],
            q: vec![0.0; N_LAYERS * Q_ROWS * Q_ROW],
            n_layers: N_LAYERS as i32,
            layer1_remote: false,
            hadamard_n: 0,
            rope_mode: 2,
            listed: vec![BTreeSet::new(); N_SEQ],
            fail_seq_cells: false,
            fail_evict: false,
            fail_read_rows: false,
            fail_get_layer: false,
            failed: false,
            logs: 0,
        })
    }

    fn reset_cells(&mut self) {
        self.seqs = [0; N_CELLS];
        self.next_pos = [0; N_SEQ];
        self.listed.iter_mut().for_each(BTreeSet::clear);
        self.failed = false;
    }

    fn count(&self, seq: usize) -> usize {
        self.seqs.iter().filter(|&&m| m & (1 << seq) != 0).count()
    }

    fn synth(layer: usize, pos: i32, i: usize) -> f32 {
        let topic = (pos / 7).rem_euclid(5) as f32;
        0.5 * (0.37 * (i + 1) as f32 * (topic + 1.0) + 0.1 * layer as f32).sin()
            + 0.05 * (0.01 * pos as f32 * (i + 1) as f32).cos()
    }

    /// Place one token of `seq`; returns its position, or None when the cache is full.
    fn place(&mut self, seq: usize) -> Option<i32> {
        let c = self.seqs.iter().position(|&m| m == 0)?;
        let p = self.next_pos[seq];
        self.next_pos[seq] += 1;
        self.seqs[c] = 1 << seq;
        self.pos[c] = p;
        for l in 0..N_LAYERS {
            for i in 0..K_ROW {
                self.k[(l * N_CELLS + c) * K_ROW + i] =
                    f16::from_f32(Self::synth(l, p, i)).to_bits();
            }
        }
        Some(p)
    }

    fn write_query(&mut self, row: usize, pos: i32) {
        for l in 0..N_LAYERS {
            for i in 0..Q_ROW {
                self.q[(l * Q_ROWS + row) * Q_ROW + i] = Self::synth(l, pos, i + 3);
            }
        }
    }

    /// The host side of llama_memory_seq_rm: `seq < 0` = every sequence.
    fn remove(&mut self, seq: i32, p0: i32, p1: i32) {
        let lo = if p0 < 0 { 0 } else { p0 };
        let hi = if p1 < 0 { i32::MAX } else { p1 };
        for c in 0..N_CELLS {
            if self.pos[c] >= lo && self.pos[c] < hi {
                if seq < 0 {
                    self.seqs[c] = 0;
                } else if (seq as usize) < N_SEQ {
                    self.seqs[c] &= !(1 << seq);
                }
            }
        }
        // A removed tail lets the sequence continue from there, as llama.cpp does.
        for s in 0..N_SEQ {
            if (seq < 0 || seq as usize == s) && p1 < 0 {
                self.next_pos[s] = self.next_pos[s].min(lo);
            }
        }
    }

    /// The host side of llama_memory_seq_cp (cells are shared, not duplicated).
    fn copy(&mut self, src: i32, dst: i32, p0: i32, p1: i32) {
        let valid = |s: i32| s >= 0 && (s as usize) < N_SEQ;
        if !valid(src) || !valid(dst) || src == dst {
            return;
        }
        let lo = if p0 < 0 { 0 } else { p0 };
        let hi = if p1 < 0 { i32::MAX } else { p1 };
        let mut copied = false;
        for c in 0..N_CELLS {
            if self.seqs[c] & (1 << src) != 0 && self.pos[c] >= lo && self.pos[c] < hi {
                self.seqs[c] |= 1 << dst;
                copied = true;
            }
        }
        if copied {
            self.next_pos[dst as usize] =
                self.next_pos[dst as usize].max(self.next_pos[src as usize]);
        }
    }
}

unsafe fn host_of<'a>(user: *mut c_void) -> &'a mut FakeHost {
    assert!(!user.is_null(), "callback without user pointer");
    &mut *(user as *mut FakeHost)
}

unsafe extern "C" fn h_n_layers(user: *mut c_void) -> i32 {
    host_of(user).n_layers
}

unsafe extern "C" fn h_get_layer(user: *mut c_void, i: i32, out: *mut beaconkv_layer) -> i32 {
    let h = host_of(user);
    assert!(!out.is_null());
    if i < 0 || i >= h.n_layers || i as usize >= N_LAYERS {
        return -1;
    }
    if std::mem::take(&mut h.fail_get_layer) {
        return -1;
    }
    let l = i as usize;
    let remote = l == 1 && h.layer1_remote;
    let o = &mut *out;
    o.il = i;
    o.head_dim = HEAD_DIM as i32;
    o.n_head = N_HEAD as i32;
    o.n_head_kv = N_HEAD_KV as i32;
    o.k_type = 1; // F16
    o.k_nb1 = K_ROW * 2;
    o.k_nb2 = N_CELLS * K_ROW * 2;
    o.k_data = if remote {
        std::ptr::null()
    } else {
        h.k[l * N_CELLS * K_ROW..].as_ptr() as *const c_void
    };
    o.k_on_host = !remote;
    o.q_data = if remote {
        std::ptr::null()
    } else {
        h.q[l * Q_ROWS * Q_ROW..].as_ptr() as *const c_void
    };
    o.q_nb1 = Q_ROW * 4;
    o.q_on_host = !remote;
    o.rope_n_dims = HEAD_DIM as i32;
    o.rope_mode = h.rope_mode;
    o.rope_n_ctx_orig = 4096;
    o.freq_base = 10000.0;
    o.freq_scale = 1.0;
    o.ext_factor = 0.0;
    o.attn_factor = 1.0;
    o.beta_fast = 32.0;
    o.beta_slow = 1.0;
    o.freq_factors = std::ptr::null();
    o.hadamard_n = if l == 0 { h.hadamard_n } else { 0 };
    o.kv_bytes_per_cell = (2 * K_ROW * 2) as u64;
    0
}

unsafe extern "C" fn h_seq_cells(
    user: *mut c_void,
    seq: i32,
    pos: *mut i32,
    cells: *mut u32,
    cap: i32,
    stream: *mut u32,
) -> i32 {
    let h = host_of(user);
    if std::mem::take(&mut h.fail_seq_cells) {
        h.failed = true;
        return -1;
    }
    if !stream.is_null() {
        *stream = 0;
    }
    if seq < 0 || seq as usize >= N_SEQ {
        return 0;
    }
    let mut list: Vec<(i32, u32)> = (0..N_CELLS)
        .filter(|&c| h.seqs[c] & (1 << seq) != 0)
        .map(|c| (h.pos[c], c as u32))
        .collect();
    list.sort();
    if cap > 0 {
        assert!(
            !pos.is_null() && !cells.is_null(),
            "seq_cells: NULL arrays with cap {cap}"
        );
        let n = list.len().min(cap as usize);
        let listed = &mut h.listed[seq as usize];
        listed.clear();
        for (i, &(p, c)) in list[..n].iter().enumerate() {
            *pos.add(i) = p;
            *cells.add(i) = c;
            listed.insert(c);
        }
    }
    list.len() as i32
}

unsafe extern "C" fn h_seq_evict(user: *mut c_void, seq: i32, cells: *const u32, n: i32) -> i32 {
    let h = host_of(user);
    if std::mem::take(&mut h.fail_evict) {
        h.failed = true;
        return -1;
    }
    assert!(n >= 0, "seq_evict: n = {n}");
    assert!(
        seq >= 0 && (seq as usize) < N_SEQ,
        "seq_evict of sequence {seq}, which holds no cell"
    );
    if n == 0 {
        return 0;
    }
    assert!(!cells.is_null(), "seq_evict: NULL cells");
    let cells = std::slice::from_raw_parts(cells, n as usize);
    let mut seen = BTreeSet::new();
    for &c in cells {
        assert!(seen.insert(c), "seq_evict({seq}): cell {c} twice");
        assert!(
            h.listed[seq as usize].contains(&c),
            "seq_evict({seq}): cell {c} was not listed for the sequence"
        );
        assert!(
            (c as usize) < N_CELLS && h.seqs[c as usize] & (1 << seq) != 0,
            "seq_evict({seq}): cell {c} not held"
        );
        h.seqs[c as usize] &= !(1 << seq);
    }
    h.listed[seq as usize].clear();
    n
}

unsafe extern "C" fn h_synchronize(user: *mut c_void) {
    let _ = host_of(user);
}

unsafe extern "C" fn h_read_rows(
    user: *mut c_void,
    layer: i32,
    what: i32,
    stream: u32,
    rows: *const u32,
    n: i32,
    out: *mut f32,
) -> i32 {
    let h = host_of(user);
    if std::mem::take(&mut h.fail_read_rows) {
        h.failed = true;
        return -1;
    }
    assert!(
        layer >= 0 && (layer as usize) < N_LAYERS,
        "read_rows layer {layer}"
    );
    assert_eq!(stream, 0);
    assert!(n >= 0);
    if n == 0 {
        return 0;
    }
    assert!(!rows.is_null() && !out.is_null());
    let rows = std::slice::from_raw_parts(rows, n as usize);
    let l = layer as usize;
    match what {
        0 => {
            let out = std::slice::from_raw_parts_mut(out, rows.len() * K_ROW);
            for (i, &c) in rows.iter().enumerate() {
                assert!((c as usize) < N_CELLS, "read_rows: cell {c}");
                for j in 0..K_ROW {
                    out[i * K_ROW + j] =
                        f16::from_bits(h.k[(l * N_CELLS + c as usize) * K_ROW + j]).to_f32();
                }
            }
        }
        1 => {
            let out = std::slice::from_raw_parts_mut(out, rows.len() * Q_ROW);
            for (i, &r) in rows.iter().enumerate() {
                assert!((r as usize) < Q_ROWS, "read_rows: query row {r}");
                let src = &h.q[(l * Q_ROWS + r as usize) * Q_ROW..][..Q_ROW];
                out[i * Q_ROW..(i + 1) * Q_ROW].copy_from_slice(src);
            }
        }
        _ => panic!("read_rows: what = {what}"),
    }
    n
}

unsafe extern "C" fn h_log(user: *mut c_void, level: i32, msg: *const c_char) {
    let h = host_of(user);
    assert!(!msg.is_null());
    assert!((2..=3).contains(&level), "log level {level}");
    let _ = CStr::from_ptr(msg).to_str().expect("log message is UTF-8");
    h.logs += 1;
}

/// Input bytes as a stream of choices (zeros once exhausted).
struct Input<'a> {
    data: &'a [u8],
    at: usize,
}

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        let v = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        v
    }
    fn done(&self) -> bool {
        self.at >= self.data.len()
    }
    fn i32(&mut self) -> i32 {
        i32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    /// Mostly a sequence the host knows, sometimes anything.
    fn seq(&mut self) -> i32 {
        match self.u8() % 10 {
            v @ 0..=5 => (v % N_SEQ as u8) as i32,
            6 => -1,
            7 => i32::MIN,
            8 => i32::MAX,
            _ => self.i32(),
        }
    }
    /// A position bound for seq_removed / seq_copied: -1 (open) or small.
    fn bound(&mut self) -> i32 {
        match self.u8() % 4 {
            0 => -1,
            1 => 0,
            2 => (self.u8() % 64) as i32,
            _ => self.i32(),
        }
    }
}

/// Params of a new context, from 4 bytes; small budgets so compression runs often.
fn params_from(input: &mut Input) -> beaconkv_params {
    let mut p = beaconkv_params_default();
    let (a, b, c, d) = (input.u8(), input.u8(), input.u8(), input.u8());
    p.policy = (a % 6) as i32; // 5 = invalid
    p.budget = 8 + (b % 48) as i32;
    p.window = (c % 8) as i32;
    p.prefix = match c / 8 % 4 {
        0 => -1,
        v => (v as i32 - 1) * 2,
    };
    p.budget_min = match d % 4 {
        0 => 0,
        1 => p.budget,
        _ => p.budget - (d / 4 % 8) as i32,
    };
    p.n_beacons = (a / 8 % 5) as i32;
    p.n_recent = (a / 40 % 4) as i32;
    p.reduce = (b / 48 % 3) as i32;
    p.span = [1, 3, 5, 2][(d / 32 % 4) as usize];
    p.q_capacity = 1 + (c / 32 % Q_ROWS as u8) as i32;
    p.seed = d as u64;
    p.read_copy = (b & 1) as i32; // 1: K and queries through read_rows
    p.score = (c & 1) as i32; // 1: probability scoring
    p
}

struct Session {
    host: Box<FakeHost>,
    ctx: *mut beaconkv_context,
    params: beaconkv_params,
}

impl Session {
    fn host_table(&mut self, null_callbacks: u8) -> beaconkv_host {
        beaconkv_host {
            user: &mut *self.host as *mut FakeHost as *mut c_void,
            n_layers: (null_callbacks & 1 == 0).then_some(h_n_layers as _),
            get_layer: (null_callbacks & 2 == 0).then_some(h_get_layer as _),
            seq_cells: (null_callbacks & 4 == 0).then_some(h_seq_cells as _),
            seq_evict: (null_callbacks & 8 == 0).then_some(h_seq_evict as _),
            synchronize: (null_callbacks & 16 == 0).then_some(h_synchronize as _),
            read_rows: (null_callbacks & 32 == 0).then_some(h_read_rows as _),
            log: (null_callbacks & 64 == 0).then_some(h_log as _),
        }
    }

    fn free(&mut self) {
        unsafe { beaconkv_context_free(self.ctx) };
        self.ctx = std::ptr::null_mut();
    }

    fn new_context(&mut self, input: &mut Input) {
        self.free();
        self.host.reset_cells();
        let params = params_from(input);
        // Mostly full host tables; sometimes without optional or required callbacks.
        let nulls = match input.u8() % 8 {
            0 => input.u8() & 0x7f,
            1 => 32, // no read_rows: the remote layer is skipped
            _ => 0,
        };
        let table = self.host_table(nulls);
        let mut err = [0 as c_char; 128];
        let ctx = unsafe { beaconkv_context_new(&params, &table, err.as_mut_ptr(), err.len()) };
        let valid = unsafe { beaconkv_params_validate(&params, std::ptr::null_mut(), 0) };
        check_status("validate", valid);
        let required = nulls & (4 | 8) == 0;
        let msg = unsafe { CStr::from_ptr(err.as_ptr()) }.to_bytes();
        if valid == BEACONKV_OK && required {
            assert!(
                !ctx.is_null(),
                "context_new failed: {}",
                String::from_utf8_lossy(msg)
            );
            assert!(msg.is_empty());
        } else {
            assert!(ctx.is_null(), "context_new accepted invalid params or host");
            assert!(!msg.is_empty(), "context_new failed without a message");
        }
        self.ctx = ctx;
        self.params = params;
        self.host.failed = false;
    }

    /// One decode call of llama.cpp: before_batch, placement and after_ubatch per ubatch,
    /// after_decode. Returns false when the host could not place the batch.
    fn decode(&mut self, input: &mut Input) {
        let n_seqs = 1 + input.u8() % 3;
        let mut ids = Vec::new();
        let mut n_new = Vec::new();
        for _ in 0..n_seqs {
            let s = input.u8() % N_SEQ as u8;
            if ids.contains(&(s as i32)) {
                continue;
            }
            ids.push(s as i32);
            n_new.push(match input.u8() % 4 {
                0 | 1 => 1,
                2 => 2 + input.u8() as i32 % 8,
                _ => 8 + input.u8() as i32 % 40,
            });
        }
        let rc = unsafe {
            beaconkv_before_batch(self.ctx, ids.len() as i32, ids.as_ptr(), n_new.as_ptr(), std::ptr::null())
        };
        check_status("before_batch", rc);
        if self.ctx.is_null() {
            assert_eq!(rc, BEACONKV_ERR_NULL);
        }
        // Tokens in batch order; ubatches of at most `ubatch` tokens.
        let mut tokens: Vec<usize> = Vec::new();
        for (&s, &n) in ids.iter().zip(&n_new) {
            tokens.extend(std::iter::repeat_n(s as usize, n as usize));
        }
        let ubatch = 1 + (input.u8() as usize % Q_ROWS);
        let qcap = (self.params.q_capacity.max(1) as usize).min(Q_ROWS);
        let skip_q = input.u8();
        for chunk in tokens.chunks(ubatch) {
            let (mut pos, mut sid, mut qrow) = (Vec::new(), Vec::new(), Vec::new());
            for (i, &s) in chunk.iter().enumerate() {
                let Some(p) = self.host.place(s) else {
                    return; // cache full: the decode call fails, no after_decode
                };
                let captured = i < qcap && (skip_q >> (i % 8)) & 1 == 0;
                if captured {
                    self.host.write_query(i, p);
                }
                pos.push(p);
                sid.push(s as i32);
                qrow.push(if captured { i as i32 } else { -1 });
            }
            let rc = unsafe {
                beaconkv_after_ubatch(
                    self.ctx,
                    pos.len() as i32,
                    pos.as_ptr(),
                    sid.as_ptr(),
                    qrow.as_ptr(),
                )
            };
            check_status("after_ubatch", rc);
        }
        let rc = check_status("after_decode", unsafe { beaconkv_after_decode(self.ctx) });
        self.check_budget(rc);
    }

    /// After a successful after_decode with compression on and a healthy host, every sequence
    /// is within its budget.
    fn check_budget(&mut self, rc: i32) {
        if self.ctx.is_null() || rc != BEACONKV_OK || self.host.failed {
            return;
        }
        let enabled = unsafe { beaconkv_is_enabled(self.ctx) };
        if !enabled || self.params.policy == 0 {
            return;
        }
        let budget = self.params.budget as usize;
        for s in 0..N_SEQ {
            let n = self.host.count(s);
            assert!(
                n <= budget,
                "sequence {s} holds {n} cells > budget {budget} after after_decode (params {:?})",
                self.params
            );
        }
    }

    fn stats(&mut self, seq: i32) {
        let mut st = beaconkv_stats::default();
        let rc = check_status("get_stats", unsafe {
            beaconkv_get_stats(self.ctx, seq, &mut st)
        });
        if self.ctx.is_null() {
            assert_eq!(rc, BEACONKV_ERR_NULL);
            return;
        }
        assert_eq!(rc, BEACONKV_OK);
        assert_eq!(st.seq, seq);
        assert!(st.cells_in_use >= 0 && st.cells_peak >= 0 && st.prefix_len >= 0);
        assert!(st.disabled == 0 || st.disabled == 1);
        let rc = unsafe { beaconkv_get_stats(self.ctx, seq, std::ptr::null_mut()) };
        assert_eq!(rc, BEACONKV_ERR_NULL);
    }

    fn step(&mut self, input: &mut Input) {
        match input.u8() % 20 {
            0 => self.new_context(input),
            1..=5 => self.decode(input),
            6 => {
                // before_batch with raw arguments (NULL arrays, negative counts, any ids).
                let n = (input.u8() % 6) as i32 - 1;
                let ids: Vec<i32> = (0..4).map(|_| input.seq()).collect();
                let news: Vec<i32> = (0..4).map(|_| (input.u8() as i8) as i32).collect();
                let which = input.u8();
                let ids_p = if which & 1 == 0 {
                    ids.as_ptr()
                } else {
                    std::ptr::null()
                };
                let new_p = if which & 2 == 0 {
                    news.as_ptr()
                } else {
                    std::ptr::null()
                };
                let n = n.min(4);
                let rc = check_status("before_batch", unsafe {
                    beaconkv_before_batch(self.ctx, n, ids_p, new_p, std::ptr::null())
                });
                if n > 0 && (ids_p.is_null() || new_p.is_null()) {
                    assert_eq!(rc, BEACONKV_ERR_NULL);
                }
            }
            7 => {
                // after_ubatch with raw arguments: any sequence and position, rows in range.
                let n = (input.u8() % 6) as i32 - 1;
                let pos: Vec<i32> = (0..4)
                    .map(|_| {
                        if input.u8() % 4 == 0 {
                            input.i32()
                        } else {
                            (input.u8() % 64) as i32
                        }
                    })
                    .collect();
                let sid: Vec<i32> = (0..4).map(|_| input.seq()).collect();
                let qcap = (self.params.q_capacity.max(1) as usize).min(Q_ROWS);
                let qrow: Vec<i32> = (0..4)
                    .map(|_| (input.u8() as usize % (qcap + 1)) as i32 - 1)
                    .collect();
                let which = input.u8();
                let ptr = |v: &Vec<i32>, bit: u8| {
                    if which & bit == 0 {
                        v.as_ptr()
                    } else {
                        std::ptr::null()
                    }
                };
                let rc = check_status("after_ubatch", unsafe {
                    beaconkv_after_ubatch(
                        self.ctx,
                        n.min(4),
                        ptr(&pos, 1),
                        ptr(&sid, 2),
                        ptr(&qrow, 4),
                    )
                });
                if n > 0 && which & 7 != 0 {
                    assert_eq!(rc, BEACONKV_ERR_NULL);
                }
            }
            8 => {
                let rc = check_status("after_decode", unsafe { beaconkv_after_decode(self.ctx) });
                self.check_budget(rc);
            }
            9 => {
                let (seq, p0, p1) = (input.seq(), input.bound(), input.bound());
                self.host.remove(seq, p0, p1);
                unsafe { beaconkv_seq_removed(self.ctx, seq, p0, p1) };
            }
            10 => {
                let (src, dst, p0, p1) = (input.seq(), input.seq(), input.bound(), input.bound());
                self.host.copy(src, dst, p0, p1);
                unsafe { beaconkv_seq_copied(self.ctx, src, dst, p0, p1) };
            }
            11 => {
                let seq = input.seq();
                self.stats(seq);
            }
            12 => {
                let s = unsafe { beaconkv_last_error(self.ctx) };
                assert!(!s.is_null());
                let _ = unsafe { CStr::from_ptr(s) }.to_bytes().len();
                let _ = unsafe { beaconkv_is_enabled(self.ctx) };
                let mut p = beaconkv_params_default();
                let rc = check_status("context_params", unsafe {
                    beaconkv_context_params(self.ctx, &mut p)
                });
                if rc == BEACONKV_OK {
                    assert_eq!(p, self.params);
                }
            }
            13 => match input.u8() % 5 {
                0 => self.host.fail_seq_cells = true,
                1 => self.host.fail_evict = true,
                2 => self.host.fail_read_rows = true,
                3 => self.host.fail_get_layer = true,
                _ => {}
            },
            14 => {
                // The host changes its layers: count, remote layer, RoPE, Hadamard block.
                let v = input.u8();
                self.host.n_layers = [2, 2, 1, 0][(v % 4) as usize];
                self.host.layer1_remote = v & 4 != 0;
                self.host.rope_mode = [2, 0, 8][(v / 8 % 3) as usize];
                self.host.hadamard_n = [0, 0, 4, 8, 3, 16, -2][(v / 32 % 7) as usize];
                if input.u8() % 2 == 0 {
                    check_status("refresh_layers", unsafe {
                        beaconkv_refresh_layers(self.ctx)
                    });
                }
            }
            15 => {
                // Free in the middle (NULL-safe afterwards), sometimes a double-checked NULL free.
                self.free();
                unsafe { beaconkv_context_free(std::ptr::null_mut()) };
            }
            16 => {
                // NULL outputs.
                check_status("context_params", unsafe {
                    beaconkv_context_params(self.ctx, std::ptr::null_mut())
                });
                let mut st = beaconkv_stats::default();
                check_status("get_stats", unsafe {
                    beaconkv_get_stats(std::ptr::null(), input.seq(), &mut st)
                });
                let e = CString::new("beacon").unwrap();
                let rc = unsafe {
                    beaconkv_params_parse(e.as_ptr(), std::ptr::null_mut(), std::ptr::null_mut(), 0)
                };
                assert_eq!(rc, BEACONKV_ERR_NULL);
            }
            _ => {
                // Plain generation: one token for a known sequence.
                let s = (input.u8() % N_SEQ as u8) as i32;
                let one = 1;
                check_status("before_batch", unsafe {
                    beaconkv_before_batch(self.ctx, 1, &s, &one, std::ptr::null())
                });
                if let Some(p) = self.host.place(s as usize) {
                    self.host.write_query(0, p);
                    let q = 0;
                    check_status("after_ubatch", unsafe {
                        beaconkv_after_ubatch(self.ctx, 1, &p, &s, &q)
                    });
                    let rc =
                        check_status("after_decode", unsafe { beaconkv_after_decode(self.ctx) });
                    self.check_budget(rc);
                }
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input { data, at: 0 };
    let mut session = Session {
        host: FakeHost::new(),
        ctx: std::ptr::null_mut(),
        params: beaconkv_params_default(),
    };
    session.new_context(&mut input);
    let mut steps = 0;
    while !input.done() && steps < 400 {
        session.step(&mut input);
        steps += 1;
    }
    for seq in [-1, 0, 1, 7, i32::MIN, i32::MAX] {
        session.stats(seq);
    }
    session.free();
});
