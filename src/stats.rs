//! Per-sequence counters (`beaconkv_stats`), their totals, and their C form.
//!
//! The counters are declared once, in `seq_stats!`: it generates `SeqStats`, its zero value,
//! how totals combine each counter, and the copy into `beaconkv_stats` (whose field list the
//! compiler then holds to the same names).

use crate::ffi::types::beaconkv_stats;

/// A counter as its `beaconkv_stats` field holds it.
trait ToC<C> {
    fn to_c(self) -> C;
}

/// Cell counts are `int32_t` in C, saturating at `i32::MAX`.
impl ToC<i32> for usize {
    fn to_c(self) -> i32 {
        self.min(i32::MAX as usize) as i32
    }
}

macro_rules! same_in_c {
    ($($t:ty),*) => { $( impl ToC<$t> for $t { fn to_c(self) -> $t { self } } )* };
}
same_in_c!(i32, u64, f64);

macro_rules! seq_stats {
    ($( $(#[$doc:meta])* $field:ident: $ty:ty = $zero:expr, total $op:ident; )*) => {
        /// Counters of one sequence.
        #[derive(Clone, Debug, PartialEq)]
        pub struct SeqStats {
            $( $(#[$doc])* pub $field: $ty, )*
        }

        impl Default for SeqStats {
            /// A sequence that has seen nothing: no position yet (`pos_max == -1`).
            fn default() -> Self {
                SeqStats { $( $field: $zero, )* }
            }
        }

        impl SeqStats {
            /// Totals over sequences: sums, except `pos_max` (largest).
            pub fn total<'a>(all: impl IntoIterator<Item = &'a SeqStats>) -> SeqStats {
                all.into_iter().fold(SeqStats::new(), |mut t, s| {
                    $( seq_stats!(@$op t.$field, s.$field); )*
                    t
                })
            }

            /// The C form, for sequence `seq` (-1 = totals) of a context whose policy runs
            /// (`enabled`) or that evicts by position only in its place (`fallback`).
            pub fn to_c(&self, seq: i32, enabled: bool, fallback: bool) -> beaconkv_stats {
                beaconkv_stats {
                    seq,
                    disabled: (!enabled) as i32,
                    fallback: fallback as i32,
                    $( $field: self.$field.to_c(), )*
                }
            }
        }
    };
    (@sum $t:expr, $s:expr) => { $t += $s };
    (@max $t:expr, $s:expr) => { $t = $t.max($s) };
}

seq_stats! {
    /// Cells the sequence holds now.
    cells_in_use: usize = 0, total sum;
    /// Most cells it ever held after a decode call.
    cells_peak: usize = 0, total sum;
    /// Protected prefix in cells.
    prefix_len: usize = 0, total sum;
    /// Highest position seen (-1: none).
    pos_max: i32 = -1, total max;
    /// Tokens seen (prompt + generated).
    n_tokens: u64 = 0, total sum;
    /// Cells evicted.
    evicted: u64 = 0, total sum;
    /// Compression passes.
    compress_events: u64 = 0, total sum;
    /// Bytes of K+V the evicted cells occupied (all layers).
    kv_bytes_saved: u64 = 0, total sum;
    /// Time reading and un-rotating queries and FPS.
    ms_capture: f64 = 0.0, total sum;
    /// Time scoring and selecting.
    ms_score: f64 = 0.0, total sum;
    /// Time in the host's eviction.
    ms_evict: f64 = 0.0, total sum;
    /// Evicted cells held in the archive now.
    archived: u64 = 0, total sum;
    /// Archived cells placed back into the cache, in total.
    recalled: u64 = 0, total sum;
    /// Archived cells dropped for good.
    archive_dropped: u64 = 0, total sum;
    /// Host memory the archive takes now.
    archive_bytes: u64 = 0, total sum;
    /// Time archiving, checking and recalling.
    ms_recall: f64 = 0.0, total sum;
    /// Reads from device or remote buffers in compression passes (the host's count).
    reads_pass: u64 = 0, total sum;
    /// Bytes those reads moved to the host.
    bytes_pass: u64 = 0, total sum;
    /// Reads of captured queries, counted on the first sequence of each ubatch.
    reads_capture: u64 = 0, total sum;
    /// Bytes those reads moved to the host.
    bytes_capture: u64 = 0, total sum;
    /// Cells the sequence may hold now: its budget plus the prompt cells `prompt=keep|window`
    /// allows beyond it.
    cells_allowed: usize = 0, total sum;
}

impl SeqStats {
    pub fn new() -> Self {
        Self::default()
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

    #[test]
    fn c_form_saturates_cell_counts_and_flags_the_mode() {
        let s = SeqStats {
            cells_in_use: usize::MAX,
            evicted: 9,
            ..SeqStats::new()
        };
        let c = s.to_c(3, false, true);
        assert_eq!((c.seq, c.cells_in_use, c.evicted), (3, i32::MAX, 9));
        assert_eq!((c.disabled, c.fallback, c.pos_max), (1, 1, -1));
    }
}
