//! Shared selection: which cells of a sequence to evict, given one score per cell.
//!
//! Cells are in position order. Kept: the first `prefix` cells, the newest `window` cells, the
//! newest cell whatever the window (llama.cpp's hybrid models roll back from it), and the
//! best-scoring middle cells up to `target`. Ties go to the newer cell.

/// Scratch reused between passes.
#[derive(Debug, Default)]
pub struct SelectScratch {
    middle: Vec<usize>,
}

/// Number of cells selection always keeps out of `n`.
pub fn protected_count(n: usize, prefix: usize, window: usize) -> usize {
    (prefix + window.max(1)).min(n)
}

/// Write to `evict` the indices (ascending) of the cells to drop so that
/// `max(target, protected_count)` cells remain (or all of them when there are no more).
pub fn select_evictions(
    pos: &[i32],
    scores: &[f32],
    prefix: usize,
    window: usize,
    target: usize,
    scratch: &mut SelectScratch,
    evict: &mut Vec<usize>,
) {
    debug_assert_eq!(pos.len(), scores.len());
    evict.clear();
    let n = pos.len();
    if n <= target || n <= protected_count(n, prefix, window) {
        return;
    }
    let middle_start = prefix;
    let middle_end = n - window.max(1);
    let keep_middle = target.saturating_sub(prefix + window.max(1));
    let middle = &mut scratch.middle;
    middle.clear();
    middle.extend(middle_start..middle_end);
    // Best first: higher score, then newer position, then higher index (total order).
    let better = |&a: &usize, &b: &usize| {
        scores[b]
            .total_cmp(&scores[a])
            .then(pos[b].cmp(&pos[a]))
            .then(b.cmp(&a))
    };
    if keep_middle < middle.len() {
        if keep_middle > 0 {
            middle.select_nth_unstable_by(keep_middle - 1, better);
        }
        evict.extend_from_slice(&middle[keep_middle..]);
        evict.sort_unstable();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(scores: &[f32], prefix: usize, window: usize, target: usize) -> Vec<usize> {
        let pos: Vec<i32> = (0..scores.len() as i32).collect();
        let mut out = Vec::new();
        select_evictions(
            &pos,
            scores,
            prefix,
            window,
            target,
            &mut SelectScratch::default(),
            &mut out,
        );
        out
    }

    #[test]
    fn keeps_prefix_window_and_top_middle() {
        let s = [0.0, 0.0, 5.0, 1.0, 4.0, 2.0, 0.0, 0.0];
        assert_eq!(run(&s, 2, 2, 6), vec![3, 5]);
    }

    #[test]
    fn ties_go_to_newer_cells() {
        assert_eq!(run(&[1.0; 6], 1, 1, 4), vec![1, 2]);
    }

    #[test]
    fn target_below_protected_keeps_only_protected() {
        assert_eq!(run(&[9.0; 6], 1, 2, 1), vec![1, 2, 3]);
    }

    #[test]
    fn newest_cell_survives_a_zero_window() {
        assert_eq!(run(&[9.0, 9.0, 9.0, 0.0], 0, 0, 1), vec![0, 1, 2]);
    }
}
