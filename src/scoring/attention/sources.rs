//! Which captured queries each policy scores with, and the few the archive's recall reads.

use crate::queries::LayerQueries;

/// Calls `each(pre_rope_query, scoring_position)` for every query of head `h` that a policy
/// scores with (`m_pos` is the sequence's scoring position).
pub type QuerySource = fn(&LayerQueries, usize, i32, &mut dyn FnMut(&[f32], i32));

/// Positioned queries the archive's recall reads: the newest few, so that a check costs little
/// whatever `recent` is.
pub const RECALL_QUERIES: usize = 4;

/// The `RECALL_QUERIES` newest queries that carry a position (the ring, else the FPS buffer's
/// recent slots), each at its own position.
pub fn positioned_queries(
    l: &LayerQueries,
    h: usize,
    _m_pos: i32,
    each: &mut dyn FnMut(&[f32], i32),
) {
    let (ring, ring_pos) = l.ring(h);
    let (qs, pos) = if ring_pos.is_empty() {
        l.recent(h)
    } else {
        (ring, ring_pos)
    };
    // the k largest positions (n <= recent, k small: a selection pass per pick is enough)
    let mut last = i32::MAX;
    for _ in 0..RECALL_QUERIES.min(pos.len()) {
        let Some(i) = (0..pos.len())
            .filter(|&i| pos[i] < last)
            .max_by_key(|&i| pos[i])
        else {
            break;
        };
        last = pos[i];
        let d = l.head_dim();
        each(&qs[i * d..(i + 1) * d], pos[i]);
    }
}

/// `beacon`: the beacons at the scoring position, then the recent queries at their own.
pub fn beacon_queries(l: &LayerQueries, h: usize, m_pos: i32, each: &mut dyn FnMut(&[f32], i32)) {
    let d = l.head_dim();
    for q in l.beacons(h).chunks_exact(d) {
        each(q, m_pos);
    }
    let (qs, pos) = l.recent(h);
    for (q, &p) in qs.chunks_exact(d).zip(pos) {
        each(q, p);
    }
}

/// `recent`: the ring of the last queries, each at its own position.
pub fn recent_queries(l: &LayerQueries, h: usize, _m_pos: i32, each: &mut dyn FnMut(&[f32], i32)) {
    let (qs, pos) = l.ring(h);
    for (q, &p) in qs.chunks_exact(l.head_dim()).zip(pos) {
        each(q, p);
    }
}

/// How many queries `source` gives each head of a layer.
pub fn queries_per_head(lq: &LayerQueries, m_pos: i32, source: QuerySource) -> usize {
    let mut n = 0;
    source(lq, 0, m_pos, &mut |_, _| n += 1);
    n
}
