//! Query capture: after a ubatch, the rows its tokens' queries were captured into are noted; they
//! are read (straight from the host's tensor or through `read_rows`), un-rotated to pre-RoPE and
//! pushed into each sequence's query store when something needs them.
//!
//! A host whose query store is a ring (`q_rows`, see the header) keeps a row's query until the
//! ring wraps, so on the decode path the rows of many ubatches are read together: once before a
//! compression pass or when the next ubatch could overwrite a pending row, instead of one read
//! per token (a round trip per token where the store is on a GPU or a remote backend). Rows are
//! processed in capture order, so the stores and the beacons they pick are the same as with a
//! read per ubatch. Everything that reads or changes a sequence's queries flushes first
//! (`flush_queries`): compression passes here, and the C exports that remove, copy, save or
//! restore a sequence.

use std::time::Instant;

use super::fallback::Scoring;
use super::seq::Phase;
use super::{Engine, EngineError};
use crate::ggml::rope::RotationMemo;
use crate::host::Host;
use crate::queries::QueryScratch;

/// Buffers of a capture, reused so that a warm context does not allocate.
#[derive(Default)]
pub(super) struct CaptureScratch {
    /// Query rows of one layer for the rows being read, when read through `Host::read_rows`.
    q_rows: Vec<f32>,
    q_row_ids: Vec<u32>,
    queries: QueryScratch,
    /// RoPE rotations of the positions one flush un-rotates.
    rotations: RotationMemo,
    /// Captured rows not read yet, in capture order.
    pub(super) pending: Vec<PendingRow>,
}

/// A token whose query waits in the host's store.
#[derive(Clone, Copy)]
pub(super) struct PendingRow {
    pos: i32,
    seq: i32,
    /// Its row in the host's query store.
    row: u32,
}

impl Engine {
    /// The capture half of `after_ubatch` (positions are recorded): notes the rows `q_row`
    /// (negative: none) and reads them now unless they may wait (see the module). A failed read
    /// puts the context in fallback and is returned.
    pub(super) fn capture_queries(
        &mut self,
        host: &mut dyn Host,
        pos: &[i32],
        seq_id: &[i32],
        q_row: &[i32],
    ) -> Result<(), EngineError> {
        let capture = self.scoring() == Scoring::Policy && self.params.policy.uses_queries();
        if !capture {
            self.capture.pending.clear();
            return Ok(());
        }
        let captured = pos.iter().zip(seq_id).zip(q_row);
        self.capture
            .pending
            .extend(
                captured
                    .filter(|(_, &r)| r >= 0)
                    .map(|((&pos, &seq), &r)| PendingRow {
                        pos,
                        seq,
                        row: r as u32,
                    }),
            );
        if self.pending_may_wait(seq_id) {
            return Ok(());
        }
        self.flush_queries(host)
    }

    /// The pending rows may stay unread after this ubatch: the host's store is a ring with room
    /// for a whole next ubatch beyond them, no sequence of the ubatch is reading its prompt
    /// (prompt marks snapshot the stores after each prompt ubatch) and no archive is on (its
    /// recall checks read the newest queries between passes).
    fn pending_may_wait(&self, seq_id: &[i32]) -> bool {
        let ring = self.layers.q_ring;
        let q_capacity = self.params.q_capacity;
        let in_prompt = seq_id
            .iter()
            .any(|s| self.seqs.get(s).is_some_and(|st| st.phase == Phase::Prompt));
        ring >= 2 * q_capacity
            && self.capture.pending.len() + q_capacity <= ring
            && !in_prompt
            && self.archive.is_none()
    }

    /// Reads every pending query row into its sequence's store, in capture order: one host read
    /// per layer group and contiguous run of rows (a ring wraps into two runs). A failed read
    /// puts the context in fallback and is returned.
    pub fn flush_queries(&mut self, host: &mut dyn Host) -> Result<(), EngineError> {
        if self.capture.pending.is_empty() {
            return Ok(());
        }
        let t0 = Instant::now();
        // the wait for the ubatch's graph is decode time, not the plugin's
        host.synchronize();
        let waited = t0.elapsed();
        let reads0 = host.transfers();
        let pending = std::mem::take(&mut self.capture.pending);
        let mut failed_read = None;
        self.capture.rotations.clear();
        // contiguous runs of rows: layers are the inner loop, so a host that reads a group of
        // layers at once (llama.cpp's query store) reads each run once
        let mut start = 0;
        while start < pending.len() && failed_read.is_none() {
            let mut end = start + 1;
            while end < pending.len() && pending[end].row == pending[end - 1].row + 1 {
                end += 1;
            }
            failed_read = self.push_rows(host, &pending[start..end]);
            start = end;
        }
        if let Some((layer, rc)) = failed_read {
            let msg = format!("read_rows(layer {layer}, queries) returned {rc}");
            self.enter_fallback(host, &format!("beaconkv: host callback failed: {msg}"));
            return Err(EngineError::Host(msg));
        }
        // Reads are whole calls: all of them go to the first pending row's sequence.
        let reads1 = host.transfers();
        if let Some(state) = self.seqs.get_mut(&pending[0].seq) {
            state.stats.reads_capture += reads1.0.saturating_sub(reads0.0);
            state.stats.bytes_capture += reads1.1.saturating_sub(reads0.1);
        }
        // Attribute the time to sequences by their share of the rows.
        let ms = t0.elapsed().saturating_sub(waited).as_secs_f64() * 1e3 / pending.len() as f64;
        for r in &pending {
            if let Some(state) = self.seqs.get_mut(&r.seq) {
                state.stats.ms_capture += ms;
            }
        }
        // keep the buffer's capacity for the next rows
        self.capture.pending = pending;
        self.capture.pending.clear();
        Ok(())
    }

    /// Pushes the queries of consecutive store rows `run` into their sequences' stores, every
    /// layer; `Some((layer, rc))` when a read fails.
    fn push_rows(&mut self, host: &mut dyn Host, run: &[PendingRow]) -> Option<(i32, i32)> {
        let (seqs, scratch) = (&mut self.seqs, &mut self.capture);
        for (li, layer) in self.layers.descs.iter().enumerate() {
            let width = layer.n_head * layer.head_dim;
            if !layer.q_direct {
                scratch.q_row_ids.clear();
                scratch.q_row_ids.extend(run.iter().map(|r| r.row));
                scratch.q_rows.resize(run.len() * width, 0.0);
                let rc = host.read_rows(
                    layer.host_index,
                    1,
                    0,
                    &scratch.q_row_ids,
                    &mut scratch.q_rows,
                );
                if rc < 0 {
                    return Some((layer.host_index, rc));
                }
            }
            for (i, &PendingRow { pos, seq, row }) in run.iter().enumerate() {
                let q: &[f32] = if layer.q_direct {
                    // SAFETY: the host promises row r of the query store holds width f32 values.
                    unsafe {
                        std::slice::from_raw_parts(
                            layer.q_data.0.add(row as usize * layer.q_nb1) as *const f32,
                            width,
                        )
                    }
                } else {
                    &scratch.q_rows[i * width..(i + 1) * width]
                };
                let Some(state) = seqs.get_mut(&seq) else {
                    continue;
                };
                let store = &mut state.queries.layers[li];
                match &layer.rope {
                    Some(rope) => {
                        let inverse = scratch.rotations.get_inverse(layer.rope_id, rope, pos);
                        store.push_with(q, pos, &mut scratch.queries, |head| {
                            rope.unrotate_with(head, inverse)
                        });
                    }
                    None => store.push(q, pos, &mut scratch.queries),
                }
            }
        }
        None
    }
}
