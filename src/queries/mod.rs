//! Per-sequence store of pre-RoPE attention queries, per layer and query head.
//!
//! Two views are kept, each only when its policy needs it:
//! - the *continual FPS buffer* of the reference implementation: `n_beacons + n_recent` slots;
//!   every new query is appended with its position and, when the buffer is full, farthest point sampling over the
//!   whole buffer keeps `n_beacons` of them as beacons and empties the recent slots. Prompt queries
//!   stream in the same way, so the first beacons come from the prompt. Beacons carry no position:
//!   they are rotated to the scoring position. Recent slots keep theirs.
//! - a *ring* of the last `n_recent` queries with positions, for the `recent` policy.
//!
//! Storage is one flat `Vec<f32>` per layer laid out `[head][slot][dim]`, so scoring reads each
//! head's queries contiguously.

pub mod fps;

use crate::codec::{ReadResult, Reader, Writer};
use crate::queries::fps::{farthest_point_sampling_in, FpsScratch};

/// Buffers of a beacon refresh, shared by every store of a context (one refresh runs at a
/// time) so that a warm store never allocates.
#[derive(Clone, Debug, Default)]
pub struct QueryScratch {
    fps: FpsScratch,
    /// Which slots of one head FPS chose.
    chosen: Vec<bool>,
}

/// Which views a store maintains and how large they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueryConfig {
    pub n_beacons: usize,
    pub n_recent: usize,
    /// Maintain the continual FPS buffer (policy beacon).
    pub fps: bool,
    /// Maintain the ring of the last `n_recent` queries (policy recent).
    pub ring: bool,
}

/// Queries of one layer of one sequence.
#[derive(Clone, Debug)]
pub struct LayerQueries {
    n_head: usize,
    head_dim: usize,
    n_beacons_target: usize,
    /// Slots of the FPS buffer. With `n_recent == 0` one slot is added, so new queries can still
    /// enter and compete for a beacon place.
    cap: usize,
    /// Filled slots; slots `0..n_beacons` are beacons, `n_beacons..count` recent queries.
    count: usize,
    n_beacons: usize,
    buf: Vec<f32>,
    pos: Vec<i32>,
    ring_cap: usize,
    ring_len: usize,
    ring_next: usize,
    ring_buf: Vec<f32>,
    ring_pos: Vec<i32>,
}

impl LayerQueries {
    pub fn new(cfg: &QueryConfig, n_head: usize, head_dim: usize) -> Self {
        let cap = if cfg.fps {
            cfg.n_beacons + cfg.n_recent.max(1)
        } else {
            0
        };
        let ring_cap = if cfg.ring { cfg.n_recent } else { 0 };
        LayerQueries {
            n_head,
            head_dim,
            n_beacons_target: cfg.n_beacons,
            cap,
            count: 0,
            n_beacons: 0,
            buf: vec![0.0; n_head * cap * head_dim],
            pos: vec![0; cap],
            ring_cap,
            ring_len: 0,
            ring_next: 0,
            ring_buf: vec![0.0; n_head * ring_cap * head_dim],
            ring_pos: vec![0; ring_cap],
        }
    }

    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    /// Append the pre-RoPE query of one token (`n_head * head_dim` values) at position `pos`.
    pub fn push(&mut self, q: &[f32], pos: i32, scratch: &mut QueryScratch) {
        self.push_with(q, pos, scratch, |_| {});
    }

    /// [`LayerQueries::push`] of a query that `prepare` turns into the pre-RoPE one, head by
    /// head, in place in the store (the capture un-rotates there: no staging copy).
    pub fn push_with(
        &mut self,
        q: &[f32],
        pos: i32,
        scratch: &mut QueryScratch,
        mut prepare: impl FnMut(&mut [f32]),
    ) {
        let d = self.head_dim;
        debug_assert_eq!(q.len(), self.n_head * d);
        if self.cap > 0 {
            if self.count == self.cap {
                self.refresh_beacons(scratch);
            }
            let slot = self.count;
            for h in 0..self.n_head {
                let dst = &mut self.buf[(h * self.cap + slot) * d..][..d];
                dst.copy_from_slice(&q[h * d..(h + 1) * d]);
                prepare(dst);
            }
            self.pos[slot] = pos;
            self.count += 1;
        }
        if self.ring_cap > 0 {
            let slot = self.ring_next;
            for h in 0..self.n_head {
                let dst = &mut self.ring_buf[(h * self.ring_cap + slot) * d..][..d];
                dst.copy_from_slice(&q[h * d..(h + 1) * d]);
                prepare(dst);
            }
            self.ring_pos[slot] = pos;
            self.ring_next = (slot + 1) % self.ring_cap;
            self.ring_len = (self.ring_len + 1).min(self.ring_cap);
        }
    }

    /// Continual FPS: keep `n_beacons` representative queries of each head, empty the recent slots.
    pub fn refresh_beacons(&mut self, scratch: &mut QueryScratch) {
        let d = self.head_dim;
        let keep = self.n_beacons_target.min(self.count);
        for h in 0..self.n_head {
            let base = h * self.cap * d;
            let head = &mut self.buf[base..base + self.count * d];
            let chosen = farthest_point_sampling_in(head, self.count, d, keep, &mut scratch.fps);
            // Chosen rows already in the first `keep` slots stay; the others move into the
            // slots of those not chosen. Few rows move (the buffer is cold memory by now, as
            // the forward pass streams the weights through the cache), and the beacons' order
            // does not matter: scores take their max.
            let mark = &mut scratch.chosen;
            mark.clear();
            mark.resize(self.count, false);
            chosen.iter().for_each(|&c| mark[c] = true);
            let mut free = (0..keep).filter(|&s| !mark[s]);
            for &src in chosen.iter().filter(|&&c| c >= keep) {
                let dst = free
                    .next()
                    .expect("as many free slots as chosen rows outside them");
                head.copy_within(src * d..(src + 1) * d, dst * d);
            }
        }
        self.count = keep;
        self.n_beacons = keep;
    }

    /// Beacon queries of query head `h`, `n * head_dim` values (pre-RoPE, positionless).
    pub fn beacons(&self, h: usize) -> &[f32] {
        let base = h * self.cap * self.head_dim;
        &self.buf[base..base + self.n_beacons * self.head_dim]
    }

    /// Recent queries of the FPS buffer of head `h` and their positions.
    pub fn recent(&self, h: usize) -> (&[f32], &[i32]) {
        let d = self.head_dim;
        let base = h * self.cap * d;
        (
            &self.buf[base + self.n_beacons * d..base + self.count * d],
            &self.pos[self.n_beacons..self.count],
        )
    }

    /// The last `n_recent` queries of head `h` (ring order) and their positions.
    pub fn ring(&self, h: usize) -> (&[f32], &[i32]) {
        let d = self.head_dim;
        let base = h * self.ring_cap * d;
        (
            &self.ring_buf[base..base + self.ring_len * d],
            &self.ring_pos[..self.ring_len],
        )
    }

    /// Forget positioned queries with `p0 <= pos < p1` (the host removed those tokens).
    pub fn remove_positions(&mut self, p0: i32, p1: i32) {
        let d = self.head_dim;
        let gone = |p: i32| p >= p0 && p < p1;
        // FPS buffer: compact the recent slots, same order in every head.
        let mut w = self.n_beacons;
        for r in self.n_beacons..self.count {
            if gone(self.pos[r]) {
                continue;
            }
            if w != r {
                self.pos[w] = self.pos[r];
                for h in 0..self.n_head {
                    let base = h * self.cap * d;
                    self.buf
                        .copy_within(base + r * d..base + (r + 1) * d, base + w * d);
                }
            }
            w += 1;
        }
        self.count = w;
        // Ring: rotate oldest-first into slot 0, then compact the same way (in place).
        if self.ring_len > 0 {
            let cap = self.ring_cap;
            let start = (self.ring_next + cap - self.ring_len) % cap;
            self.ring_pos.rotate_left(start);
            for h in 0..self.n_head {
                self.ring_buf[h * cap * d..(h + 1) * cap * d].rotate_left(start * d);
            }
            let mut w = 0;
            for r in 0..self.ring_len {
                if gone(self.ring_pos[r]) {
                    continue;
                }
                if w != r {
                    self.ring_pos[w] = self.ring_pos[r];
                    for h in 0..self.n_head {
                        let base = h * cap * d;
                        self.ring_buf
                            .copy_within(base + r * d..base + (r + 1) * d, base + w * d);
                    }
                }
                w += 1;
            }
            self.ring_len = w;
            self.ring_next = w % cap;
        }
    }
}

/// Queries of one sequence: one `LayerQueries` per scored layer of the engine.
#[derive(Clone, Debug, Default)]
pub struct SeqQueries {
    pub layers: Vec<LayerQueries>,
}

impl LayerQueries {
    /// Append this store to a saved state (shape first, then the contents).
    pub fn save(&self, w: &mut Writer) {
        for v in [self.n_head, self.head_dim, self.cap, self.ring_cap] {
            w.u64(v as u64);
        }
        for v in [self.count, self.n_beacons, self.ring_len, self.ring_next] {
            w.u64(v as u64);
        }
        w.f32s(&self.buf);
        w.i32s(&self.pos);
        w.f32s(&self.ring_buf);
        w.i32s(&self.ring_pos);
    }

    /// Read a store saved by [`LayerQueries::save`] into this one, whose shape must match.
    pub fn load(&mut self, r: &mut Reader) -> ReadResult<()> {
        let shape = [self.n_head, self.head_dim, self.cap, self.ring_cap];
        for (i, want) in shape.into_iter().enumerate() {
            let got = r.u64()? as usize;
            if got != want {
                return Err(format!(
                    "query store shape differs (field {i}: {got} saved, {want} here)"
                ));
            }
        }
        let (count, n_beacons) = (r.u64()? as usize, r.u64()? as usize);
        let (ring_len, ring_next) = (r.u64()? as usize, r.u64()? as usize);
        if count > self.cap
            || n_beacons > count
            || ring_len > self.ring_cap
            || ring_next > self.ring_cap
        {
            return Err("query store counters out of range".into());
        }
        r.f32s_into(&mut self.buf)?;
        r.i32s_into(&mut self.pos)?;
        r.f32s_into(&mut self.ring_buf)?;
        r.i32s_into(&mut self.ring_pos)?;
        (self.count, self.n_beacons, self.ring_len, self.ring_next) =
            (count, n_beacons, ring_len, ring_next);
        Ok(())
    }
}

impl SeqQueries {
    pub fn remove_positions(&mut self, p0: i32, p1: i32) {
        for l in &mut self.layers {
            l.remove_positions(p0, p1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(nb: usize, nr: usize) -> QueryConfig {
        QueryConfig {
            n_beacons: nb,
            n_recent: nr,
            fps: true,
            ring: true,
        }
    }

    fn q(v: f32, n_head: usize, d: usize) -> Vec<f32> {
        (0..n_head * d).map(|i| v + i as f32 * 0.01).collect()
    }

    #[test]
    fn prompt_fills_then_fps_keeps_beacons() {
        let mut l = LayerQueries::new(&cfg(2, 3), 2, 4);
        for p in 0..5 {
            l.push(&q(p as f32, 2, 4), p, &mut QueryScratch::default());
        }
        assert_eq!(l.beacons(0).len(), 0);
        assert_eq!(l.recent(1).1, &[0, 1, 2, 3, 4]);
        l.push(&q(5.0, 2, 4), 5, &mut QueryScratch::default()); // full: FPS keeps 2 beacons, then appends
        assert_eq!(l.beacons(0).len(), 2 * 4);
        assert_eq!(l.recent(0).1, &[5]);
        assert_eq!(l.ring(0).1.len(), 3);
    }

    #[test]
    fn refresh_keeps_exactly_the_rows_fps_chooses() {
        let (n_head, d) = (3, 8);
        let mut l = LayerQueries::new(&cfg(4, 6), n_head, d);
        let mut scratch = QueryScratch::default();
        let mut rows: Vec<Vec<f32>> = Vec::new();
        let mut s = 17u32;
        for p in 0..10 {
            let row: Vec<f32> = (0..n_head * d)
                .map(|_| {
                    s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    (s >> 8) as f32 / (1 << 24) as f32 - 0.5
                })
                .collect();
            l.push(&row, p, &mut scratch);
            rows.push(row);
        }
        l.refresh_beacons(&mut scratch);
        for h in 0..n_head {
            let head: Vec<f32> = rows
                .iter()
                .flat_map(|r| r[h * d..(h + 1) * d].to_vec())
                .collect();
            let mut want: Vec<Vec<f32>> =
                crate::queries::fps::farthest_point_sampling(&head, 10, d, 4)
                    .iter()
                    .map(|&i| head[i * d..(i + 1) * d].to_vec())
                    .collect();
            let mut got: Vec<Vec<f32>> = l.beacons(h).chunks(d).map(|c| c.to_vec()).collect();
            want.sort_by(|a, b| a.partial_cmp(b).unwrap());
            got.sort_by(|a, b| a.partial_cmp(b).unwrap());
            assert_eq!(got, want, "head {h}");
        }
    }

    #[test]
    fn zero_recent_still_admits_new_queries() {
        let mut l = LayerQueries::new(&cfg(2, 0), 1, 2);
        for p in 0..10 {
            l.push(&[p as f32, 1.0], p, &mut QueryScratch::default());
        }
        assert!(l.beacons(0).len() + l.recent(0).0.len() <= 3 * 2);
        assert_eq!(l.recent(0).1.last(), Some(&9));
    }

    #[test]
    fn remove_positions_drops_recent_and_ring_entries() {
        let mut l = LayerQueries::new(&cfg(4, 4), 1, 2);
        let mut scratch = QueryScratch::default();
        for p in 0..6 {
            l.push(&[p as f32, 1.0], p, &mut scratch);
        }
        l.remove_positions(3, i32::MAX);
        assert_eq!(l.recent(0).1, &[0, 1, 2]);
        assert_eq!(l.recent(0).0, &[0.0, 1.0, 1.0, 1.0, 2.0, 1.0]);
        let (rq, rp) = l.ring(0);
        assert_eq!(rp, &[2]);
        assert_eq!(rq, &[2.0, 1.0]);
        l.push(&[9.0, 1.0], 9, &mut scratch);
        assert_eq!(l.ring(0).1, &[2, 9]);
    }

    #[test]
    fn removal_from_a_wrapped_ring_keeps_oldest_first_order() {
        let mut l = LayerQueries::new(&cfg(0, 4), 2, 1);
        let mut scratch = QueryScratch::default();
        for p in 0..7 {
            l.push(&[p as f32, 10.0 + p as f32], p, &mut scratch);
        }
        assert_eq!(l.ring(1).1, &[4, 5, 6, 3], "slot order of a wrapped ring");
        l.remove_positions(4, 6);
        assert_eq!(l.ring(0), (&[3.0, 6.0][..], &[3, 6][..]));
        assert_eq!(l.ring(1).0, &[13.0, 16.0]);
        l.push(&[7.0, 17.0], 7, &mut scratch);
        l.push(&[8.0, 18.0], 8, &mut scratch);
        l.push(&[9.0, 19.0], 9, &mut scratch);
        assert_eq!(l.ring(0).1, &[9, 6, 7, 8]);
    }
}
