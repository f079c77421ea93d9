//! The token ids of a sequence by position, to tell when the text repeats a passage it has
//! seen before and where that passage lies.
//!
//! Recall between compression passes is for a passage being re-read. The queries cannot tell
//! re-reading from ordinary text (on both, the kept cell they attend most beats the weakest kept
//! cell at nearly every check: docs/design.md), and every recall re-routes the passes after it,
//! so recalling on ordinary text moves agreement by chance. The tokens can tell: when the newest
//! `n` tokens occurred earlier in the sequence, the tokens that followed that earlier
//! occurrence are the ones the next steps read again.

use crate::codec::{Reader, Writer};

/// A position whose token is not known (never seen, removed, or a batch of embeddings).
const UNKNOWN: i32 = i32::MIN;
/// Positions further than this past the known ones are not recorded: a host that jumps ahead
/// must not make the trail allocate gigabytes (a sequence advances a ubatch at a time).
const MAX_JUMP: usize = 1 << 16;

/// Token ids by position for one sequence.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenTrail {
    ids: Vec<i32>,
}

impl TokenTrail {
    /// Token `token` sits at position `pos` (negative positions are ignored).
    pub fn record(&mut self, pos: i32, token: i32) {
        let Ok(p) = usize::try_from(pos) else {
            return;
        };
        if p >= self.ids.len() + MAX_JUMP {
            return;
        }
        if p >= self.ids.len() {
            self.ids.resize(p + 1, UNKNOWN);
        }
        self.ids[p] = token;
    }

    /// Make room for `extra` more positions past the known ones, so that recording them does
    /// not allocate (the engine calls this at compression passes, off the per-token path).
    pub fn reserve(&mut self, extra: usize) {
        self.ids.reserve(extra);
    }

    /// Positions `[lo, hi)` were removed from the sequence.
    pub fn remove_range(&mut self, lo: i32, hi: i32) {
        let lo = lo.max(0) as usize;
        if lo >= self.ids.len() {
            return;
        }
        if hi == i32::MAX || hi as usize >= self.ids.len() {
            self.ids.truncate(lo);
        } else if (hi as usize) > lo {
            self.ids[lo..hi as usize].fill(UNKNOWN);
        }
    }

    /// Whether the `n` tokens up to and including `pos` are known.
    pub fn knows(&self, pos: i32, n: usize) -> bool {
        self.window(pos, n).is_some()
    }

    /// The latest position `q < pos` whose `n` tokens up to and including it equal those up to
    /// `pos`: where the text now being read was read before. `None` when there is none or the
    /// tokens up to `pos` are not known.
    pub fn earlier_match(&self, pos: i32, n: usize) -> Option<i32> {
        let now = self.window(pos, n)?;
        let last = *now.last().expect("n >= 1");
        let t = pos as usize;
        (n - 1..t)
            .rev()
            .find(|&q| self.ids[q] == last && self.ids[q + 1 - n..=q] == *now)
            .map(|q| q as i32)
    }

    /// The one position `q < before` whose `n` tokens up to and including it equal those up to
    /// `pos`; `None` when there is none, or more than one (a phrase the text keeps using, such as
    /// a chat template, points at no passage in particular), or the tokens are not known.
    pub fn unique_earlier(&self, pos: i32, n: usize, before: i32) -> Option<i32> {
        let now = self.window(pos, n)?;
        let last = *now.last().expect("n >= 1");
        let end = (before.min(pos).max(0) as usize).min(self.ids.len());
        let mut found = None;
        for q in (n - 1)..end {
            if self.ids[q] == last && self.ids[q + 1 - n..=q] == *now {
                if found.is_some() {
                    return None;
                }
                found = Some(q as i32);
            }
        }
        found
    }

    fn window(&self, pos: i32, n: usize) -> Option<&[i32]> {
        let t = usize::try_from(pos).ok()?;
        if n == 0 || t >= self.ids.len() || t + 1 < n {
            return None;
        }
        let w = &self.ids[t + 1 - n..=t];
        (!w.contains(&UNKNOWN)).then_some(w)
    }

    /// Host memory the ids take (counted with the archive's).
    pub fn bytes(&self) -> usize {
        self.ids.capacity() * std::mem::size_of::<i32>()
    }

    pub fn save(&self, w: &mut Writer) {
        w.i32s(&self.ids);
    }

    pub fn load(r: &mut Reader) -> Result<Self, String> {
        Ok(TokenTrail { ids: r.i32s()? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trail(ids: &[i32]) -> TokenTrail {
        let mut t = TokenTrail::default();
        for (p, &id) in ids.iter().enumerate() {
            t.record(p as i32, id);
        }
        t
    }

    #[test]
    fn a_unique_earlier_occurrence_is_found_a_repeated_one_is_not() {
        //            0  1  2  3  4  5  6  7  8  9 10 11 12
        let t = trail(&[5, 1, 2, 6, 3, 4, 6, 3, 4, 9, 1, 2, 3]);
        assert_eq!(
            t.unique_earlier(11, 2, 10),
            Some(2),
            "1,2 occurred once before 10"
        );
        assert_eq!(t.unique_earlier(11, 2, 2), None, "not before position 2");
        assert_eq!(t.unique_earlier(8, 2, 8), Some(5));
        assert_eq!(
            t.unique_earlier(8, 2, 9),
            Some(5),
            "the occurrence at pos itself is not earlier"
        );
        assert_eq!(t.unique_earlier(12, 1, 12), None, "3 occurred twice before");
        assert_eq!(
            t.unique_earlier(12, 3, 12),
            None,
            "1,2,3 never occurred before"
        );
        assert_eq!(t.unique_earlier(12, 0, 12), None);
        assert_eq!(t.unique_earlier(40, 2, 40), None, "unknown position");
    }

    #[test]
    fn finds_the_latest_earlier_occurrence() {
        //            0  1  2  3  4  5  6  7  8  9 10 11
        let t = trail(&[1, 2, 3, 9, 1, 2, 3, 8, 7, 1, 2, 3]);
        assert_eq!(t.earlier_match(11, 3), Some(6));
        assert_eq!(t.earlier_match(6, 3), Some(2));
        assert_eq!(t.earlier_match(2, 3), None);
        assert_eq!(
            t.earlier_match(11, 4),
            None,
            "7,1,2,3 never occurred before"
        );
        assert_eq!(t.earlier_match(8, 1), None);
        assert_eq!(t.earlier_match(11, 0), None);
        assert_eq!(t.earlier_match(12, 1), None, "past the known positions");
    }

    #[test]
    fn removed_positions_never_match() {
        let mut t = trail(&[5, 6, 7, 5, 6, 7]);
        assert_eq!(t.earlier_match(5, 3), Some(2));
        t.remove_range(1, 2);
        assert_eq!(t.earlier_match(5, 3), None);
        assert!(!t.knows(2, 3));
        assert!(t.knows(5, 3));
        t.remove_range(4, i32::MAX);
        assert!(!t.knows(5, 1));
        t.record(4, 6);
        t.record(5, 7);
        assert!(t.knows(5, 3));
    }

    #[test]
    fn a_position_far_ahead_is_not_recorded() {
        let mut t = trail(&[1, 2]);
        t.record(i32::MAX, 3);
        t.record(-1, 3);
        assert_eq!(t, trail(&[1, 2]));
        t.record(1000, 3);
        assert!(t.knows(1000, 1) && !t.knows(999, 1));
    }

    #[test]
    fn survives_a_save_and_load() {
        let t = trail(&[3, 1, 4, 1, 5]);
        let mut w = Writer::default();
        t.save(&mut w);
        let back = TokenTrail::load(&mut Reader::new(&w.buf)).unwrap();
        assert_eq!(back, t);
    }
}
