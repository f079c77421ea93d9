//! Rows of scores over the cells of one pass, with each column's largest raw logit, and the
//! column maximum every fold of them needs. A leaf: scorers write rows, `reduce` and the archive
//! read them, and it depends on neither.

/// What a scorer hands on: rows of scores, each `n_cols` (= cells) long, stored contiguously and
/// reused between passes, and each column's largest raw logit `q·k/√d`, which the archive's
/// recall compares with the logits of archived keys.
#[derive(Debug, Default)]
pub struct ScoreRows {
    n_cols: usize,
    n_rows: usize,
    data: Vec<f32>,
    raw: Raw,
    /// The column maxima a scorer kept (`Raw::Kept`).
    raw_max: Vec<f32>,
}

/// Where the raw logits' column maxima come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Raw {
    /// The rows are the scorer's raw values: their own column maxima.
    #[default]
    Rows,
    /// The rows hold something else (log probabilities); the scorer kept the maxima.
    Kept,
    /// The rows hold something else and the logits stayed where they were computed.
    Unknown,
}

impl ScoreRows {
    /// Drop all rows and set the row length; the rows are raw values until a scorer says not.
    pub fn reset(&mut self, n_cols: usize) {
        self.n_cols = n_cols;
        self.n_rows = 0;
        self.raw = Raw::Rows;
    }

    /// The rows will not hold raw logits: the scorer keeps their column maxima instead, each
    /// `-inf` until it folds logits into them (`raw_max_mut`).
    pub fn keep_raw_max(&mut self) {
        self.raw = Raw::Kept;
        self.raw_max.clear();
        self.raw_max.resize(self.n_cols, f32::NEG_INFINITY);
    }

    /// The maxima `keep_raw_max` started.
    pub fn raw_max_mut(&mut self) -> &mut [f32] {
        debug_assert_eq!(self.raw, Raw::Kept);
        &mut self.raw_max
    }

    /// The rows do not hold raw logits, and the scorer has none at hand.
    pub fn raw_unknown(&mut self) {
        self.raw = Raw::Unknown;
    }

    /// Each column's largest raw logit into `out` (resized to `n_cols`); false when unknown
    /// (no rows, or logits that stayed on the host's backend).
    pub fn raw_max_into(&self, out: &mut Vec<f32>) -> bool {
        match self.raw {
            Raw::Rows if self.n_rows > 0 => self.max_into(out),
            Raw::Kept => {
                out.clear();
                out.extend_from_slice(&self.raw_max);
            }
            Raw::Rows | Raw::Unknown => return false,
        }
        true
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
