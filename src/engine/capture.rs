//! Query capture: after a ubatch, the queries of every scored layer are read (straight from
//! the host's tensor or through `read_rows`), un-rotated to pre-RoPE and pushed into each
//! sequence's query store.

use std::time::Instant;

use super::fallback::Scoring;
use super::{Engine, EngineError};
use crate::ggml::rope::RotationMemo;
use crate::host::Host;
use crate::queries::QueryScratch;

/// Buffers of a capture, reused so that a warm context does not allocate.
#[derive(Default)]
pub(super) struct CaptureScratch {
    /// Query rows of one layer for a ubatch, when read through `Host::read_rows`.
    q_rows: Vec<f32>,
    q_row_ids: Vec<u32>,
    queries: QueryScratch,
    /// RoPE rotations of the positions one capture un-rotates.
    rotations: RotationMemo,
}

impl Engine {
    /// The capture half of `after_ubatch` (positions are recorded): reads the queries of the
    /// rows `q_row` (negative: none) into the sequences' stores. A failed read puts the context
    /// in fallback and is returned.
    pub(super) fn capture_queries(
        &mut self,
        host: &mut dyn Host,
        pos: &[i32],
        seq_id: &[i32],
        q_row: &[i32],
        t0: Instant,
    ) -> Result<(), EngineError> {
        let capture = self.scoring() == Scoring::Policy
            && self.params.policy.uses_queries()
            && q_row.iter().any(|&r| r >= 0);
        if !capture {
            return Ok(());
        }
        // the wait for the ubatch's graph is decode time, not the plugin's
        let sync_start = Instant::now();
        host.synchronize();
        let waited = sync_start.elapsed();
        let reads0 = host.transfers();
        let (seqs, scratch) = (&mut self.seqs, &mut self.capture);
        let mut failed_read = None;
        scratch.rotations.clear();
        for (li, layer) in self.layers.descs.iter().enumerate() {
            let width = layer.n_head * layer.head_dim;
            if !layer.q_direct {
                scratch.q_row_ids.clear();
                scratch
                    .q_row_ids
                    .extend(q_row.iter().filter(|&&r| r >= 0).map(|&r| r as u32));
                scratch.q_rows.resize(scratch.q_row_ids.len() * width, 0.0);
                let rc = host.read_rows(
                    layer.host_index,
                    1,
                    0,
                    &scratch.q_row_ids,
                    &mut scratch.q_rows,
                );
                if rc < 0 {
                    failed_read = Some((layer.host_index, rc));
                    break;
                }
            }
            let mut fetched = 0;
            for ((&p, &s), &r) in pos.iter().zip(seq_id).zip(q_row) {
                if r < 0 {
                    continue;
                }
                let q: &[f32] = if layer.q_direct {
                    // SAFETY: the host promises row r of the query store holds width f32 values.
                    unsafe {
                        std::slice::from_raw_parts(
                            layer.q_data.0.add(r as usize * layer.q_nb1) as *const f32,
                            width,
                        )
                    }
                } else {
                    fetched += 1;
                    &scratch.q_rows[(fetched - 1) * width..fetched * width]
                };
                let Some(state) = seqs.get_mut(&s) else {
                    continue;
                };
                let store = &mut state.queries.layers[li];
                match &layer.rope {
                    Some(rope) => {
                        let inverse = scratch.rotations.get_inverse(layer.rope_id, rope, p);
                        store.push_with(q, p, &mut scratch.queries, |head| {
                            rope.unrotate_with(head, inverse)
                        });
                    }
                    None => store.push(q, p, &mut scratch.queries),
                }
            }
        }
        if let Some((layer, rc)) = failed_read {
            let msg = format!("read_rows(layer {layer}, queries) returned {rc}");
            self.enter_fallback(host, &format!("beaconkv: host callback failed: {msg}"));
            return Err(EngineError::Host(msg));
        }
        // Reads are whole calls: all of them go to the ubatch's first sequence.
        let reads1 = host.transfers();
        if let Some(state) = seq_id.first().and_then(|s| self.seqs.get_mut(s)) {
            state.stats.reads_capture += reads1.0.saturating_sub(reads0.0);
            state.stats.bytes_capture += reads1.1.saturating_sub(reads0.1);
        }
        // Attribute the capture time to sequences by their share of the tokens.
        let ms = t0.elapsed().saturating_sub(waited).as_secs_f64() * 1e3 / pos.len().max(1) as f64;
        for &s in seq_id {
            if let Some(state) = self.seqs.get_mut(&s) {
                state.stats.ms_capture += ms;
            }
        }
        Ok(())
    }
}
