//! Rows of scores over the cells of one pass, and the column maximum every fold of them needs.
//! A leaf: scorers write rows, `reduce` and the archive read them, and it depends on neither.

/// Rows of scores, each `n_cols` (= cells) long, stored contiguously and reused between passes.
#[derive(Debug, Default)]
pub struct ScoreRows {
    n_cols: usize,
    n_rows: usize,
    data: Vec<f32>,
}

impl ScoreRows {
    /// Drop all rows and set the row length.
    pub fn reset(&mut self, n_cols: usize) {
        self.n_cols = n_cols;
        self.n_rows = 0;
    }

    /// Append `k` zeroed rows and return them as one slice of `k * n_cols`.
    pub fn add_rows(&mut self, k: usize) -> &mut [f32] {
        let start = self.n_rows * self.n_cols;
        let end = start + k * self.n_cols;
        if self.data.len() < end {
            self.data.resize(end, 0.0);
        }
        self.n_rows += k;
        let rows = &mut self.data[start..end];
        rows.fill(0.0);
        rows
    }

    pub fn n_rows(&self) -> usize {
        self.n_rows
    }

    pub fn n_cols(&self) -> usize {
        self.n_cols
    }

    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.n_cols..(i + 1) * self.n_cols]
    }

    /// `out[c]` = the largest value of column c over the rows (`-inf` without rows); `out` is
    /// resized to `n_cols`.
    pub fn max_into(&self, out: &mut Vec<f32>) {
        out.clear();
        out.resize(self.n_cols, f32::NEG_INFINITY);
        fold_column_max(&self.data[..self.n_rows * self.n_cols], out);
    }
}

/// `out[c] = max(out[c], rows[r][c])` over the rows of `rows` (rows of `out.len()` values laid
/// end to end), in row order.
pub fn fold_column_max(rows: &[f32], out: &mut [f32]) {
    if out.is_empty() {
        return;
    }
    for row in rows.chunks_exact(out.len()) {
        out.iter_mut().zip(row).for_each(|(m, &v)| *m = m.max(v));
    }
}
