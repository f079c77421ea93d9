//! The byte layout of one sequence's state (see the module doc of `persist`), written and read
//! field by field in one fixed order.

use super::{MAGIC, VERSION};
use crate::archive::tokens::TokenTrail;
use crate::archive::{Layout, SeqArchive, SeqRecall};
use crate::codec::{Reader, Writer};
use crate::queries::SeqQueries;
use crate::stats::SeqStats;

/// The saved parts of one sequence, borrowed for `save_seq`.
pub struct SeqParts<'a> {
    /// The decode phase has started (else the prompt is still streaming in).
    pub decode: bool,
    pub prompt_len: usize,
    pub stats: &'a SeqStats,
    pub queries: &'a SeqQueries,
    pub archive: &'a SeqArchive,
    pub trail: &'a TokenTrail,
    pub recall: &'a SeqRecall,
}

/// The parts of one sequence read back by `load_seq`; statistics the state does not hold start
/// from `SeqStats::new()`.
pub struct SavedSeq {
    pub decode: bool,
    pub prompt_len: usize,
    pub stats: SeqStats,
    pub queries: SeqQueries,
    pub archive: SeqArchive,
    pub trail: TokenTrail,
    pub recall: SeqRecall,
}

/// The state bytes of one sequence, in the current `VERSION`.
pub fn save_seq(parts: &SeqParts) -> Vec<u8> {
    let mut w = Writer::default();
    w.buf.extend_from_slice(MAGIC);
    w.u32(VERSION);
    w.u32(parts.decode as u32);
    w.u64(parts.prompt_len as u64);
    let st = parts.stats;
    for v in [st.cells_in_use, st.cells_peak, st.prefix_len] {
        w.u64(v as u64);
    }
    w.i32(st.pos_max);
    for v in [
        st.n_tokens,
        st.evicted,
        st.compress_events,
        st.kv_bytes_saved,
    ] {
        w.u64(v);
    }
    for v in [st.ms_capture, st.ms_score, st.ms_evict] {
        w.f64(v);
    }
    w.u64(parts.queries.layers.len() as u64);
    for l in &parts.queries.layers {
        l.save(&mut w);
    }
    // the archive, length-prefixed so that a context without one can skip it
    let mut a = Writer::default();
    parts.archive.save(&mut a);
    w.u64(a.buf.len() as u64);
    w.buf.extend_from_slice(&a.buf);
    parts.trail.save(&mut w);
    // version 5: the recall bookkeeping and the counters kept beside it
    parts.recall.save(&mut w);
    w.u64(st.recalled);
    w.f64(st.ms_recall);
    w.buf
}

/// Read a state saved by `save_seq` (any version from 1 to `VERSION`) into `queries`, the empty
/// query stores of this context (their layer count must match the state's). The archive is read
/// only with this context's `archive` layout (else skipped). Errors leave nothing half-read
/// behind: the caller gets either every part or the reason.
pub fn load_seq(
    data: &[u8],
    queries: SeqQueries,
    archive: Option<&Layout>,
) -> Result<SavedSeq, String> {
    let mut r = Reader::new(data);
    if r.take(4)? != MAGIC {
        return Err("not a BeaconKV sequence state (bad magic)".into());
    }
    let version = r.u32()?;
    if !(1..=VERSION).contains(&version) {
        return Err(format!("state version {version} is not {VERSION}"));
    }
    let mut saved = SavedSeq {
        decode: r.u32()? == 1,
        prompt_len: r.u64()? as usize,
        stats: SeqStats::new(),
        queries,
        archive: SeqArchive::default(),
        trail: TokenTrail::default(),
        recall: SeqRecall::default(),
    };
    let st = &mut saved.stats;
    st.cells_in_use = r.u64()? as usize;
    st.cells_peak = r.u64()? as usize;
    st.prefix_len = r.u64()? as usize;
    st.pos_max = r.i32()?;
    st.n_tokens = r.u64()?;
    st.evicted = r.u64()?;
    st.compress_events = r.u64()?;
    st.kv_bytes_saved = r.u64()?;
    st.ms_capture = r.f64()?;
    st.ms_score = r.f64()?;
    st.ms_evict = r.f64()?;
    let n_layers = r.u64()? as usize;
    if n_layers != saved.queries.layers.len() {
        return Err(format!(
            "state has {n_layers} layers, this context scores {}",
            saved.queries.layers.len()
        ));
    }
    for l in &mut saved.queries.layers {
        l.load(&mut r)?;
    }
    if version >= 2 {
        let len = r.u64()? as usize;
        let blob = r.take(len)?;
        if let Some(layout) = archive {
            let min_max = version == 2;
            saved.archive = SeqArchive::load(layout, &mut Reader::new(blob), min_max)?;
        }
    }
    if version >= 4 {
        saved.trail = TokenTrail::load(&mut r)?;
    }
    if version >= 5 {
        saved.recall = SeqRecall::load(&mut r)?;
        saved.stats.recalled = r.u64()?;
        saved.stats.ms_recall = r.f64()?;
    }
    r.finish()?;
    Ok(saved)
}
