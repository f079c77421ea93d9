//! Farthest point sampling by cosine similarity (the seed's `_farthest_point_sampling`).
//!
//! PLACEHOLDER written by the engine branch so it compiles; replaced at merge.

/// Pick `k` of the `n` points (rows of `dim` floats): start at the point least similar on
/// average, then repeatedly take the point whose highest similarity to the chosen set is lowest.
pub fn farthest_point_sampling(points: &[f32], n: usize, dim: usize, k: usize) -> Vec<usize> {
    if n <= k {
        return (0..n).collect();
    }
    let unit: Vec<f32> = points[..n * dim]
        .chunks_exact(dim)
        .flat_map(|p| {
            let norm = p.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
            p.iter().map(move |v| v / norm)
        })
        .collect();
    let sim = |a: usize, b: usize| -> f32 {
        unit[a * dim..(a + 1) * dim]
            .iter()
            .zip(&unit[b * dim..(b + 1) * dim])
            .map(|(x, y)| x * y)
            .sum()
    };
    let argmin = |v: &[f32]| -> usize {
        let mut best = 0;
        for (i, &x) in v.iter().enumerate() {
            if x < v[best] {
                best = i;
            }
        }
        best
    };
    let mean: Vec<f32> = (0..n)
        .map(|a| (0..n).map(|b| sim(a, b)).sum::<f32>() / n as f32)
        .collect();
    let mut chosen = vec![argmin(&mean)];
    let mut max_sim: Vec<f32> = (0..n).map(|b| sim(chosen[0], b)).collect();
    while chosen.len() < k {
        let next = argmin(&max_sim);
        chosen.push(next);
        for (b, m) in max_sim.iter_mut().enumerate() {
            *m = m.max(sim(next, b));
        }
    }
    chosen
}
