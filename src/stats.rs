//! Per-sequence counters (`beaconkv_stats`) and their totals.

/// Counters of one sequence.
#[derive(Clone, Debug, PartialEq)]
pub struct SeqStats {
    pub cells_in_use: usize,
    pub cells_peak: usize,
    pub prefix_len: usize,
    pub pos_max: i32,
    pub n_tokens: u64,
    pub evicted: u64,
    pub compress_events: u64,
    pub kv_bytes_saved: u64,
    pub ms_capture: f64,
    pub ms_score: f64,
    pub ms_evict: f64,
    /// The archive: cells held now, recalled in total, dropped for good, bytes held now.
    pub archived: u64,
    pub recalled: u64,
    pub archive_dropped: u64,
    pub archive_bytes: u64,
    pub ms_recall: f64,
}

impl Default for SeqStats {
    /// A sequence that has seen nothing: no position yet (`pos_max == -1`).
    fn default() -> Self {
        SeqStats {
            cells_in_use: 0,
            cells_peak: 0,
            prefix_len: 0,
            pos_max: -1,
            n_tokens: 0,
            evicted: 0,
            compress_events: 0,
            kv_bytes_saved: 0,
            ms_capture: 0.0,
            ms_score: 0.0,
            ms_evict: 0.0,
            archived: 0,
            recalled: 0,
            archive_dropped: 0,
            archive_bytes: 0,
            ms_recall: 0.0,
        }
    }
}

impl SeqStats {
    pub fn new() -> Self {
        Self::default()
    }

    /// Totals over sequences: sums, except `pos_max` (largest).
    pub fn total<'a>(all: impl IntoIterator<Item = &'a SeqStats>) -> SeqStats {
        all.into_iter().fold(SeqStats::new(), |mut t, s| {
            t.cells_in_use += s.cells_in_use;
            t.cells_peak += s.cells_peak;
            t.prefix_len += s.prefix_len;
            t.pos_max = t.pos_max.max(s.pos_max);
            t.n_tokens += s.n_tokens;
            t.evicted += s.evicted;
            t.compress_events += s.compress_events;
            t.kv_bytes_saved += s.kv_bytes_saved;
            t.ms_capture += s.ms_capture;
            t.ms_score += s.ms_score;
            t.ms_evict += s.ms_evict;
            t.archived += s.archived;
            t.recalled += s.recalled;
            t.archive_dropped += s.archive_dropped;
            t.archive_bytes += s.archive_bytes;
            t.ms_recall += s.ms_recall;
            t
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_sum_and_take_max_position() {
        let a = SeqStats {
            evicted: 3,
            pos_max: 10,
            cells_in_use: 5,
            ..SeqStats::new()
        };
        let b = SeqStats {
            evicted: 4,
            pos_max: 7,
            cells_in_use: 6,
            ..SeqStats::new()
        };
        let t = SeqStats::total([&a, &b]);
        assert_eq!((t.evicted, t.pos_max, t.cells_in_use), (7, 10, 11));
        assert_eq!(SeqStats::total([]).pos_max, -1);
    }
}
