//! Golden test: `fps::farthest_point_sampling` against indices produced by
//! tests/gen_fps_golden.py, a line-by-line numpy port of the reference implementation's `_farthest_point_sampling`
//! (f32, first-index argmin). The fixture only holds cases whose answer does not depend on
//! f32 summation order, so equality here is exact.

use beaconkv::testing::queries::farthest_point_sampling;
use serde_json::Value;

const FIXTURE: &str = include_str!("fixtures/fps_golden.json");

fn usize_at(case: &Value, key: &str) -> usize {
    case[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} missing")) as usize
}

fn indices(case: &Value, key: &str) -> Vec<usize> {
    case[key]
        .as_array()
        .expect(key)
        .iter()
        .map(|v| v.as_u64().unwrap() as usize)
        .collect()
}

/// Points are stored as f32 bit patterns so no decimal round trip can move them.
fn points(case: &Value) -> Vec<f32> {
    let bits = case["points_f32_bits"].as_array().expect("points_f32_bits");
    bits.iter()
        .map(|b| f32::from_bits(b.as_u64().unwrap() as u32))
        .collect()
}

fn cases() -> Vec<Value> {
    let root: Value = serde_json::from_str(FIXTURE).expect("fixture is JSON");
    root["cases"].as_array().expect("cases").clone()
}

#[test]
fn matches_seed_port_exactly() {
    let cases = cases();
    assert!(cases.len() >= 12, "fixture lost cases: {}", cases.len());
    for case in &cases {
        let (n, dim, k) = (
            usize_at(case, "n"),
            usize_at(case, "dim"),
            usize_at(case, "k"),
        );
        let pts = points(case);
        assert_eq!(pts.len(), n * dim);
        let got = farthest_point_sampling(&pts, n, dim, k);
        assert_eq!(got, indices(case, "expected"), "case {}", case["name"]);
    }
}

#[test]
fn fixture_covers_the_edge_cases() {
    let names: Vec<String> = cases()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_owned())
        .collect();
    for want in [
        "n_below_k",
        "n_equals_k",
        "duplicates_and_tied_outlier",
        "clustered_6x",
        "zero_row_exact_ties",
    ] {
        assert!(names.iter().any(|n| n == want), "missing case {want}");
    }
}

/// Scaling rows or permuting nothing but magnitudes must not change a cosine sampler.
#[test]
fn invariant_to_row_scale() {
    for case in cases() {
        let (n, dim, k) = (
            usize_at(&case, "n"),
            usize_at(&case, "dim"),
            usize_at(&case, "k"),
        );
        let scaled: Vec<f32> = points(&case)
            .chunks(dim)
            .enumerate()
            .flat_map(|(i, r)| r.iter().map(move |v| v * [0.5f32, 2.0, 4.0, 0.25][i % 4]))
            .collect();
        // power-of-two scales keep the normalised rows bit-identical
        assert_eq!(
            farthest_point_sampling(&scaled, n, dim, k),
            indices(&case, "expected")
        );
    }
}
