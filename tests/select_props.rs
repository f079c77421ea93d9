//! Property tests of the shared selection.

use beaconkv::testing::scoring::{protected_count, select_evictions, SelectScratch};
use proptest::prelude::*;

fn case() -> impl Strategy<Value = (Vec<f32>, usize, usize, usize)> {
    (0usize..200).prop_flat_map(|n| {
        (
            prop::collection::vec(prop_oneof![-5.0f32..5.0, Just(0.0f32), Just(1.0f32)], n),
            0usize..40,
            0usize..40,
            0usize..220,
        )
    })
}

proptest! {
    #[test]
    fn selection_invariants((scores, prefix, window, target) in case()) {
        let n = scores.len();
        // Positions strictly increasing with gaps, like a sequence after earlier evictions.
        let pos: Vec<i32> = (0..n as i32).map(|i| i * 3 + 5).collect();
        let mut evict = Vec::new();
        let mut scratch = SelectScratch::default();
        select_evictions(&pos, &scores, prefix, window, target, &mut scratch, &mut evict);

        let kept = n - evict.len();
        let expected = if n <= target { n } else { n.min(target.max(protected_count(n, prefix, window))) };
        prop_assert_eq!(kept, expected);
        // Only existing cells, ascending, no duplicates.
        prop_assert!(evict.iter().all(|&i| i < n));
        prop_assert!(evict.windows(2).all(|w| w[0] < w[1]));
        // Prefix, window and the newest cell survive.
        for &i in &evict {
            prop_assert!(i >= prefix, "evicted prefix cell {}", i);
            prop_assert!(i + window.max(1) < n, "evicted window cell {}", i);
        }
        // Every kept middle cell scores at least as high as every evicted one.
        let kept_min = (prefix..n.saturating_sub(window.max(1)))
            .filter(|i| !evict.contains(i))
            .map(|i| scores[i])
            .fold(f32::INFINITY, f32::min);
        for &i in &evict {
            prop_assert!(scores[i] <= kept_min);
        }
        // Deterministic.
        let mut again = Vec::new();
        select_evictions(&pos, &scores, prefix, window, target, &mut scratch, &mut again);
        prop_assert_eq!(evict, again);
    }

    #[test]
    fn ties_prefer_newer_cells(n in 10usize..100, target in 2usize..10) {
        let pos: Vec<i32> = (0..n as i32).collect();
        let scores = vec![1.0f32; n];
        let mut evict = Vec::new();
        select_evictions(&pos, &scores, 0, 1, target, &mut SelectScratch::default(), &mut evict);
        // With equal scores the oldest cells go first.
        let expected: Vec<usize> = (0..n - target).collect();
        prop_assert_eq!(evict, expected);
    }
}
