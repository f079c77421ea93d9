//! A fake cache owner implementing `beaconkv::host::Host` in Rust, shared by the integration
//! tests and the micro-benchmark: f16 K per layer, an f32 query store per layer, a cell table.
#![allow(dead_code)]

use beaconkv::host::{Host, RawLayer};
use half::f16;

pub struct FakeLayer {
    pub raw: RawLayer,
    /// `[cell][kv head * head_dim]`, f16.
    pub k: Vec<f16>,
    /// `[row][head * head_dim]`, f32.
    pub q: Vec<f32>,
}

pub struct FakeHost {
    pub layers: Vec<FakeLayer>,
    pub cell_pos: Vec<i32>,
    /// Owning sequence per cell, -1 = free.
    pub cell_seq: Vec<i32>,
    /// Serve K and queries through `read_rows` (device-buffer path) instead of pointers.
    pub via_read_rows: bool,
    pub fail_evict: bool,
    /// Accept evictions without freeing cells (benchmarks repeat the same pass).
    pub dry_evict: bool,
    pub logs: Vec<String>,
    pub evict_calls: usize,
}

/// Deterministic pseudo-random values in [-1, 1).
pub struct Lcg(pub u64);

impl Lcg {
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
                    ..RawLayer::default()
                },
                k: vec![f16::ZERO; n_cells * n_head_kv * head_dim],
                q: vec![0.0; q_rows * n_head * head_dim],
            })
            .collect();
        FakeHost {
            layers,
            cell_pos: vec![0; n_cells],
            cell_seq: vec![-1; n_cells],
            via_read_rows: false,
            fail_evict: false,
            dry_evict: false,
            logs: Vec::new(),
            evict_calls: 0,
        }
    }

    /// Positions held by `seq`, sorted.
    pub fn positions(&self, seq: i32) -> Vec<i32> {
        let mut p: Vec<i32> = (0..self.cell_seq.len())
            .filter(|&c| self.cell_seq[c] == seq)
            .map(|c| self.cell_pos[c])
            .collect();
        p.sort_unstable();
        p
    }

    /// Take a free cell for (`seq`, `pos`); returns its index.
    pub fn place(&mut self, seq: i32, pos: i32) -> usize {
        let c = self
            .cell_seq
            .iter()
            .position(|&s| s == -1)
            .expect("cache full");
        self.cell_seq[c] = seq;
        self.cell_pos[c] = pos;
        c
    }
}

impl Host for FakeHost {
    fn n_layers(&mut self) -> i32 {
        self.layers.len() as i32
    }

    fn get_layer(&mut self, i: i32, out: &mut RawLayer) -> i32 {
        let l = &self.layers[i as usize];
        *out = l.raw;
        out.k_data = l.k.as_ptr().cast();
        out.q_data = l.q.as_ptr().cast();
        if self.via_read_rows {
            out.k_on_host = false;
            out.q_on_host = false;
        }
        0
    }

    fn seq_cells(&mut self, seq: i32, pos: &mut [i32], cells: &mut [u32], stream: &mut u32) -> i32 {
        let mut mine: Vec<(i32, u32)> = (0..self.cell_seq.len())
            .filter(|&c| self.cell_seq[c] == seq)
            .map(|c| (self.cell_pos[c], c as u32))
            .collect();
        mine.sort_unstable();
        for (i, (p, c)) in mine.iter().take(pos.len().min(cells.len())).enumerate() {
            pos[i] = *p;
            cells[i] = *c;
        }
        *stream = 0;
        mine.len() as i32
    }

    fn seq_evict(&mut self, seq: i32, cells: &[u32]) -> i32 {
        self.evict_calls += 1;
        if self.fail_evict {
            return -1;
        }
        if self.dry_evict {
            return cells.len() as i32;
        }
        for &c in cells {
            assert_eq!(
                self.cell_seq[c as usize], seq,
                "evicting a cell the sequence does not hold"
            );
            self.cell_seq[c as usize] = -1;
        }
        cells.len() as i32
    }

    fn synchronize(&mut self) {}

    fn has_read_rows(&self) -> bool {
        self.via_read_rows
    }

    fn read_rows(
        &mut self,
        layer: i32,
        what: i32,
        _stream: u32,
        rows: &[u32],
        out: &mut [f32],
    ) -> i32 {
        let l = &self.layers[layer as usize];
        let width = if what == 0 {
            (l.raw.n_head_kv * l.raw.head_dim) as usize
        } else {
            (l.raw.n_head * l.raw.head_dim) as usize
        };
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

    fn log(&mut self, _level: i32, msg: &str) {
        self.logs.push(msg.to_string());
    }
}
