//! Paired tests shared by the benches.

/// Two-sided exact McNemar test: the probability, under no difference, of a split of the
/// `b + c` discordant pairs at least as uneven as `b` against `c` (twice the smaller binomial
/// tail at 1/2, at most 1).
pub fn mcnemar_exact(b: u64, c: u64) -> f64 {
    let n = b + c;
    if n == 0 {
        return 1.0;
    }
    let k = b.min(c);
    let mut ln_term = -(n as f64) * std::f64::consts::LN_2;
    let mut tail = 0.0;
    for i in 0..=k {
        tail += ln_term.exp();
        ln_term += ((n - i) as f64).ln() - ((i + 1) as f64).ln();
    }
    (2.0 * tail).min(1.0)
}
