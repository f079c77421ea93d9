//! Exact prompt reuse: a host that keeps a sequence's first positions and computes the rest again
//! (llama-server's prompt cache) gets the state a fresh sequence would have there.
//!
//! The query stores are a function of every query pushed so far (continual FPS, the ring of
//! recent queries), so removing the positions after the reused prefix does not give them back
//! the queries of the prefix that later ones displaced. While the prompt streams in, the stores
//! are copied whenever a ubatch ends on the grid (every `GRID` positions, doubled to keep at
//! most `MAX_MARKS` copies); [`Engine::reuse_point`] tells the host the last such mark at or
//! before the position it would keep, and removing the positions from a mark on puts the
//! copied stores back. Marks are valid only below the lowest position ever evicted: a fresh
//! sequence still holds those cells.
//!
//! A new turn after generated text (the reused prefix ends past the prompt) keeps the
//! compressed history: computing the generation again would cost what compression saved. Marks
//! are not part of a saved state: a restored sequence reuses its prompt from the start.

use super::seq::{Phase, SeqState};
use super::Engine;
use crate::queries::SeqQueries;

/// Positions between two marks at first.
pub const GRID: i32 = 256;
/// Marks kept per sequence; one more doubles the grid and keeps every other mark. Each mark is
/// a copy of the query stores (2.2 MB for SmolLM2-135M with the default 16 + 16 queries), so
/// few: a reuse computes at most one grid step again.
pub const MAX_MARKS: usize = 4;

/// The query stores at grid positions of the prompt, and the lowest position evicted so far.
#[derive(Clone, Debug)]
pub struct PromptMarks {
    grid: i32,
    /// (position, the stores holding exactly the queries of positions `< position`), ascending.
    marks: Vec<(i32, SeqQueries)>,
    /// The lowest position any pass evicted (`i32::MAX`: none).
    pub first_evicted: i32,
}

impl Default for PromptMarks {
    fn default() -> Self {
        PromptMarks {
            grid: GRID,
            marks: Vec::new(),
            first_evicted: i32::MAX,
        }
    }
}

impl PromptMarks {
    /// A ubatch ended with the stores holding the queries of positions `< end`: copy them when
    /// `end` is on the grid and below every eviction.
    pub fn after_ubatch(&mut self, end: i32, queries: &SeqQueries) {
        if end <= 0 || end % self.grid != 0 || end > self.first_evicted {
            return;
        }
        if self.marks.last().is_some_and(|m| m.0 >= end) {
            return;
        }
        self.marks.push((end, queries.clone()));
        if self.marks.len() > MAX_MARKS {
            self.grid *= 2;
            let grid = self.grid;
            self.marks.retain(|m| m.0 % grid == 0);
        }
    }

    /// Positions `p` were evicted.
    pub fn evicted(&mut self, p: impl IntoIterator<Item = i32>) {
        if let Some(lowest) = p.into_iter().min() {
            self.first_evicted = self.first_evicted.min(lowest);
        }
    }

    /// The last mark at or before `limit` (0 when none).
    pub fn last_at_or_before(&self, limit: i32) -> i32 {
        let limit = limit.min(self.first_evicted);
        self.marks
            .iter()
            .rev()
            .map(|m| m.0)
            .find(|&p| p <= limit)
            .unwrap_or(0)
    }

    /// The stores copied at `pos`, if a mark is there.
    pub fn at(&self, pos: i32) -> Option<&SeqQueries> {
        self.marks.iter().find(|m| m.0 == pos).map(|m| &m.1)
    }

    /// Forget the marks after `pos`.
    pub fn truncate(&mut self, pos: i32) {
        self.marks.retain(|m| m.0 <= pos);
    }
}

impl SeqState {
    /// Whether keeping positions `< n_past` and computing the rest again continues exactly as a
    /// fresh sequence: the prompt phase with nothing evicted below `n_past`, for a policy that
    /// keeps no queries; the stores must also be at a mark (`uses_queries`).
    fn exact_at(&self, n_past: i32, uses_queries: bool) -> bool {
        if n_past > self.marks.first_evicted {
            return false;
        }
        let in_prompt = self.phase == Phase::Prompt && n_past > self.stats.pos_max;
        !uses_queries || in_prompt || self.marks.at(n_past).is_some()
    }

    /// The host removes positions from `lo` on, within the prompt and below every eviction: at a
    /// mark (or for a policy without queries), the state becomes that of a fresh sequence that
    /// has seen positions `< lo`. Returns whether it did.
    pub(super) fn roll_back(&mut self, lo: i32, uses_queries: bool) -> bool {
        if lo <= 0 || lo > self.marks.first_evicted || lo > self.prompt_end() {
            return false;
        }
        if uses_queries {
            let Some(queries) = self.marks.at(lo).cloned() else {
                return false;
            };
            self.queries = queries;
        }
        self.marks.truncate(lo);
        self.phase = Phase::Prompt;
        self.prompt_len = 0;
        self.verifying = false;
        self.recall = Default::default();
        true
    }

    /// The end of the prompt: its length once the decode phase started, else what was seen.
    fn prompt_end(&self) -> i32 {
        match self.phase {
            Phase::Decode => self.prompt_len as i32,
            Phase::Prompt => self.stats.pos_max + 1,
        }
    }
}

impl Engine {
    /// How many of the first `n_past` positions of `seq` a host should keep before computing the
    /// rest of a new prompt again so that `seq` continues as a fresh sequence would: `n_past`
    /// itself when that is already exact or when the kept part reaches past the prompt into
    /// generated text (a new turn keeps its compressed history), else the last prompt mark at or
    /// before it (0: compute everything again).
    pub fn reuse_point(&self, seq: i32, n_past: i32) -> i32 {
        let n_past = n_past.max(0);
        let Some(state) = self.seqs.get(&seq) else {
            return n_past;
        };
        let uses_queries = self.params.policy.uses_queries();
        if state.phase == Phase::Decode && n_past > state.prompt_len as i32 {
            return n_past;
        }
        if state.exact_at(n_past, uses_queries) {
            return n_past;
        }
        if !uses_queries {
            return n_past.min(state.marks.first_evicted);
        }
        state.marks.last_at_or_before(n_past)
    }
}
