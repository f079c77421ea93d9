//! Random sequences of C-ABI calls, made through the exported `extern "C"` functions the way a C
//! host would, against the shared fake host of the tests (`beaconkv::testing::fake_host`: a llama.cpp-like
//! cell table, f16 K and F32 query stores, through its `extern "C"` table).
//!
//! One layer can be switched to the `read_rows` path. Host callbacks fail on demand (seq_cells /
//! seq_evict / read_rows / get_layer return -1), pointers are NULL where the header allows it and
//! where it does not, sequence ids are random (negative and huge included), and the hooks come in
//! any order.
//!
//! Invariants: no panic (libFuzzer aborts on any panic, even one the library would catch: an
//! internal panic is a bug), every status is one the header says a function returns, every
//! evicted cell was listed by the host for that sequence in the listing that preceded the
//! eviction (the fake host asserts it), `seq_cells` with `cap == 0` gets NULL arrays, after a
//! successful `after_decode` no sequence holds more than `budget` cells (in fallback mode too:
//! contexts never stop evicting), and `get_stats` answers for any sequence id.
#![no_main]

use std::ffi::{c_char, CStr, CString};

use beaconkv::ffi::*;
use beaconkv::testing::fake_host::FakeHost;
use half::f16;
use libfuzzer_sys::fuzz_target;

const N_CELLS: usize = 160;
const N_SEQ: usize = 4;
const N_LAYERS: usize = 2;
const N_HEAD: usize = 4;
const N_HEAD_KV: usize = 2;
const HEAD_DIM: usize = 8;
/// Rows of the query store; contexts get `qcap <= Q_ROWS`.
const Q_ROWS: usize = 16;

/// Every status the functions of `beaconkv.h` return.
const STATUSES: [i32; 5] = [
    BEACONKV_OK,
    BEACONKV_ERR_NULL,
    BEACONKV_ERR_INVALID,
    BEACONKV_ERR_HOST,
    BEACONKV_ERR_PANIC,
];

fn check_status(what: &str, rc: i32) -> i32 {
    assert!(STATUSES.contains(&rc), "{what}: undocumented status {rc}");
    assert_ne!(rc, BEACONKV_ERR_PANIC, "{what}: internal panic");
    rc
}

/// The fake host plus what this fuzzer adds: each sequence's next position and synthetic data.
struct World {
    host: Box<FakeHost>,
    next_pos: [i32; N_SEQ],
}

impl World {
    fn new() -> Self {
        World {
            host: Box::new(
                FakeHost::new(N_LAYERS, N_HEAD, N_HEAD_KV, HEAD_DIM, N_CELLS, Q_ROWS).with_rope(),
            ),
            next_pos: [0; N_SEQ],
        }
    }

    fn synth(layer: usize, pos: i32, i: usize) -> f32 {
        let topic = (pos / 7).rem_euclid(5) as f32;
        0.5 * (0.37 * (i + 1) as f32 * (topic + 1.0) + 0.1 * layer as f32).sin()
            + 0.05 * (0.01 * pos as f32 * (i + 1) as f32).cos()
    }

    /// Place one token of `seq`; returns its position, or None when the cache is full.
    fn place(&mut self, seq: usize) -> Option<i32> {
        let p = self.next_pos[seq];
        let c = self.host.try_place(seq as i32, p)?;
        self.next_pos[seq] += 1;
        for l in 0..N_LAYERS {
            for (i, k) in self.host.k_row_mut(l, c).iter_mut().enumerate() {
                *k = f16::from_f32(Self::synth(l, p, i));
            }
        }
        Some(p)
    }

    fn write_query(&mut self, row: usize, pos: i32) {
        for l in 0..N_LAYERS {
            for (i, q) in self.host.q_row_mut(l, row).iter_mut().enumerate() {
                *q = Self::synth(l, pos, i + 3);
            }
        }
    }

    /// The host side of llama_memory_seq_rm: `seq < 0` = every sequence.
    fn remove(&mut self, seq: i32, p0: i32, p1: i32) {
        if seq >= N_SEQ as i32 {
            return;
        }
        self.host.remove(seq, p0, p1);
        // A removed tail lets the sequence continue from there, as llama.cpp does.
        let lo = p0.max(0);
        for s in 0..N_SEQ {
            if (seq < 0 || seq as usize == s) && p1 < 0 {
                self.next_pos[s] = self.next_pos[s].min(lo);
            }
        }
    }

    /// The host side of llama_memory_seq_cp (cells are shared, not duplicated).
    fn copy(&mut self, src: i32, dst: i32, p0: i32, p1: i32) {
        let valid = |s: i32| s >= 0 && (s as usize) < N_SEQ;
        if valid(src) && valid(dst) && src != dst && self.host.copy(src, dst, p0, p1) {
            self.next_pos[dst as usize] =
                self.next_pos[dst as usize].max(self.next_pos[src as usize]);
        }
    }
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
    p.policy = (a % 7) as i32; // 6 = invalid
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
    p.read_path = (b & 1) as i32; // 1: K and queries through read_rows
    p.score = (c & 1) as i32; // 1: probability scoring
                              // the archive on half the time (refused with streaming/random/none), every element type
    if d & 2 != 0 {
        p.archive = 16 + (b / 4 % 64) as i32;
        p.archive_type = (a / 4 % 3) as i32;
        p.page = 1 + (c / 4 % 8) as i32;
        p.recall_every = (d / 4 % 3) as i32;
        p.recall_margin = (b % 4) as f32;
    }
    p
}

struct Session {
    world: World,
    ctx: *mut beaconkv_context,
    params: beaconkv_params,
}

impl Session {
    fn host_table(&mut self, null_callbacks: u8) -> beaconkv_host {
        let mut t = self.world.host.c_host();
        let keep = |bit: u8| null_callbacks & bit == 0;
        t.n_layers = t.n_layers.filter(|_| keep(1));
        t.get_layer = t.get_layer.filter(|_| keep(2));
        t.seq_cells = t.seq_cells.filter(|_| keep(4));
        t.seq_evict = t.seq_evict.filter(|_| keep(8));
        t.synchronize = t.synchronize.filter(|_| keep(16));
        t.read_rows = t.read_rows.filter(|_| keep(32));
        t.log = t.log.filter(|_| keep(64));
        // the archive's callbacks go together (a host without them runs without the archive)
        if !keep(128) {
            (t.read_kv, t.write_kv, t.seq_place) = (None, None, None);
        }
        t
    }

    fn free(&mut self) {
        unsafe { beaconkv_context_free(self.ctx) };
        self.ctx = std::ptr::null_mut();
    }

    fn new_context(&mut self, input: &mut Input) {
        self.free();
        self.world = World::new();
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
        // Tokens in batch order; ubatches of at most `ubatch` tokens.
        let mut tokens: Vec<usize> = Vec::new();
        for (&s, &n) in ids.iter().zip(&n_new) {
            tokens.extend(std::iter::repeat_n(s as usize, n as usize));
        }
        // the positions they will take, and token ids that repeat, so that recall by tokens
        // finds earlier passages (also at the end of a batch)
        let mut next = self.world.next_pos;
        let (mut b_pos, mut b_sid) = (Vec::new(), Vec::new());
        for &s in &tokens {
            b_pos.push(next[s]);
            b_sid.push(s as i32);
            next[s] += 1;
        }
        let b_tok: Vec<i32> = b_pos.iter().map(|p| p % 13).collect();
        let rc = unsafe {
            beaconkv_before_batch(
                self.ctx,
                ids.len() as i32,
                ids.as_ptr(),
                n_new.as_ptr(),
                std::ptr::null(),
                b_pos.len() as i32,
                b_pos.as_ptr(),
                b_sid.as_ptr(),
                b_tok.as_ptr(),
            )
        };
        check_status("before_batch", rc);
        if self.ctx.is_null() {
            assert_eq!(rc, BEACONKV_ERR_NULL);
        }
        let ubatch = 1 + (input.u8() as usize % Q_ROWS);
        let qcap = (self.params.q_capacity.max(1) as usize).min(Q_ROWS);
        let skip_q = input.u8();
        for chunk in tokens.chunks(ubatch) {
            let (mut pos, mut sid, mut qrow) = (Vec::new(), Vec::new(), Vec::new());
            for (i, &s) in chunk.iter().enumerate() {
                let Some(p) = self.world.place(s) else {
                    return; // cache full: the decode call fails, no after_decode
                };
                let captured = i < qcap && (skip_q >> (i % 8)) & 1 == 0;
                if captured {
                    self.world.write_query(i, p);
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

    /// After a successful after_decode every sequence is within the budget it runs with (its own
    /// from beaconkv_seq_override, or the context's), whatever failed before (a failed policy
    /// evicts by position; a failed callback is retried). A sequence set to `none` promised the
    /// plugin a logical context within the budget, which this host does not keep: not checked.
    fn check_budget(&mut self, rc: i32) {
        if self.ctx.is_null() || rc != BEACONKV_OK || self.params.policy == 0 {
            return;
        }
        for s in 0..N_SEQ {
            let mut p = beaconkv_params_default();
            let got = unsafe { beaconkv_seq_params(self.ctx, s as i32, &mut p) };
            assert_eq!(got, BEACONKV_OK, "seq_params of sequence {s}");
            if p.policy == 0 {
                // none
                continue;
            }
            let n = self.world.host.count(s as i32);
            assert!(
                n <= p.budget as usize,
                "sequence {s} holds {n} cells > budget {} after after_decode (params {:?})",
                p.budget,
                p
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
        assert!(st.fallback == 0 || st.fallback == 1);
        assert!(
            st.fallback == 0 || st.disabled == 1,
            "fallback without a disabled policy"
        );
        let rc = unsafe { beaconkv_get_stats(self.ctx, seq, std::ptr::null_mut()) };
        assert_eq!(rc, BEACONKV_ERR_NULL);
    }

    fn step(&mut self, input: &mut Input) {
        match input.u8() % 22 {
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
                // a token view of raw positions, or none
                let t_pos: Vec<i32> = (0..4).map(|_| input.i32()).collect();
                let t_p = if which & 4 == 0 {
                    t_pos.as_ptr()
                } else {
                    std::ptr::null()
                };
                let rc = check_status("before_batch", unsafe {
                    beaconkv_before_batch(
                        self.ctx,
                        n,
                        ids_p,
                        new_p,
                        std::ptr::null(),
                        n,
                        t_p,
                        ids_p,
                        t_p,
                    )
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
                self.world.remove(seq, p0, p1);
                unsafe { beaconkv_seq_removed(self.ctx, seq, p0, p1) };
            }
            10 => {
                let (src, dst, p0, p1) = (input.seq(), input.seq(), input.bound(), input.bound());
                self.world.copy(src, dst, p0, p1);
                unsafe { beaconkv_seq_copied(self.ctx, src, dst, p0, p1) };
            }
            11 => {
                let seq = input.seq();
                self.stats(seq);
            }
            12 => {
                let s = unsafe { beaconkv_last_error(self.ctx) };
                assert!(!s.is_null());
                let len = unsafe { CStr::from_ptr(s) }.to_bytes().len();
                let mut buf = [0 as c_char; 32];
                let n = unsafe { beaconkv_last_error_copy(self.ctx, buf.as_mut_ptr(), buf.len()) };
                if self.ctx.is_null() {
                    assert_eq!(n, BEACONKV_ERR_NULL);
                } else {
                    assert_eq!(n as usize, len, "copy and pointer disagree");
                }
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
                0 => self.world.host.fail.seq_cells = 1,
                1 => self.world.host.fail.seq_evict = 1,
                2 => self.world.host.fail.read_rows = 1,
                3 => self.world.host.fail.get_layer = 1,
                _ => {}
            },
            14 => {
                // The host changes its layers: count, remote layer, RoPE, Hadamard block.
                let v = input.u8();
                let host = &mut self.world.host;
                host.n_layers_shown = [2, 2, 1, 0][(v % 4) as usize];
                host.layers[1].remote = v & 4 != 0;
                let rope_mode = [2, 0, 8][(v / 8 % 3) as usize];
                host.layers
                    .iter_mut()
                    .for_each(|l| l.raw.rope_mode = rope_mode);
                host.layers[0].raw.hadamard_n = [0, 0, 4, 8, 3, 16, -2][(v / 32 % 7) as usize];
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
            17 => {
                // Prompt reuse: at most n_past, or an error status to keep n_past by.
                let (seq, n_past) = (input.seq(), input.bound());
                let rc = unsafe { beaconkv_seq_reuse_point(self.ctx, seq, n_past) };
                if self.ctx.is_null() {
                    assert_eq!(rc, BEACONKV_ERR_NULL);
                } else if n_past >= 0 {
                    assert!(
                        (0..=n_past).contains(&rc),
                        "reuse point {rc} for n_past {n_past}"
                    );
                }
            }
            18 => {
                // A sequence's own budget and policy: the check and the setter agree, and what is
                // set is what the sequence reports.
                let seq = input.seq();
                let budget = match input.u8() % 4 {
                    0 => 0,
                    1 => self.params.budget,
                    2 => (input.u8() % 64) as i32,
                    _ => input.i32(),
                };
                let policy = (input.u8() % 8) as i32 - 1;
                let n_ctx_seq = [0u32, 16, 64, u32::MAX][(input.u8() % 4) as usize];
                let rc = check_status("seq_override", unsafe {
                    beaconkv_seq_override(self.ctx, seq, budget, policy, n_ctx_seq)
                });
                let mut err = [0 as c_char; 160];
                let checked = check_status("seq_override_check", unsafe {
                    beaconkv_seq_override_check(
                        &self.params,
                        budget,
                        policy,
                        n_ctx_seq,
                        err.as_mut_ptr(),
                        err.len(),
                    )
                });
                if !self.ctx.is_null()
                    && seq >= 0
                    && (rc == BEACONKV_OK || rc == BEACONKV_ERR_INVALID)
                {
                    assert_eq!(rc, checked, "seq_override and seq_override_check disagree");
                }
                let mut p = beaconkv_params_default();
                let got = check_status("seq_params", unsafe {
                    beaconkv_seq_params(self.ctx, seq, &mut p)
                });
                if rc == BEACONKV_OK && got == BEACONKV_OK && budget > 0 {
                    assert_eq!(
                        p.budget, budget,
                        "the sequence does not run with the budget set for it"
                    );
                }
            }
            _ => {
                // Plain generation: one token for a known sequence.
                let s = (input.u8() % N_SEQ as u8) as i32;
                let one = 1;
                let p = self.world.next_pos[s as usize];
                let t = p % 13;
                check_status("before_batch", unsafe {
                    beaconkv_before_batch(self.ctx, 1, &s, &one, std::ptr::null(), 1, &p, &s, &t)
                });
                if let Some(p) = self.world.place(s as usize) {
                    self.world.write_query(0, p);
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
        world: World::new(),
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
