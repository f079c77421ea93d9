//! Rotating and un-rotating head vectors with a rotation from [`Rope::rotation`].

use super::{Rope, RopeMode};

impl Rope {
    /// Apply RoPE at position `pos` in place to one head vector x (len = head_dim >= n_dims):
    /// exactly what ggml_rope_ext computes (incl. YaRN mscale / attn_factor, freq_factors,
    /// partial rotary: dims >= n_dims untouched).
    #[cfg(any(test, feature = "testing"))]
    pub fn rotate(&self, x: &mut [f32], pos: i32) {
        let mut cs = Vec::with_capacity(self.n_dims / 2);
        self.rotation(pos, &mut cs);
        self.rotate_with(x, &cs);
    }

    /// Exact inverse of rotate (undoes the magnitude scaling too).
    ///
    /// Inverts the very matrix `rotate` applies (its f32-rounded cos and sin), in f64, so the
    /// round trip loses only the final rounding to f32.
    #[cfg(any(test, feature = "testing"))]
    pub fn unrotate(&self, x: &mut [f32], pos: i32) {
        let mut cs = Vec::with_capacity(self.n_dims / 2);
        self.rotation(pos, &mut cs);
        let mut inverse = Vec::with_capacity(cs.len());
        inverse_rotation(&cs, &mut inverse);
        self.unrotate_with(x, &inverse);
    }

    /// [`Rope::rotate`] with the rotation of its position, from [`Rope::rotation`].
    pub fn rotate_with(&self, x: &mut [f32], rotation: &[[f32; 2]]) {
        #[cfg(target_arch = "x86_64")]
        {
            if crate::kernels::has_fma() {
                // SAFETY: the CPU has FMA (checked above).
                return unsafe { self.rotate_with_fma(x, rotation) };
            }
        }
        self.rotate_pairs(x, rotation)
    }

    /// `rotate_pairs` compiled with the FMA instruction: `mul_add` is then one instruction
    /// instead of a call into the software fallback, with the same (fused) result.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "fma")]
    unsafe fn rotate_with_fma(&self, x: &mut [f32], rotation: &[[f32; 2]]) {
        self.rotate_pairs(x, rotation)
    }

    #[inline(always)]
    fn rotate_pairs(&self, x: &mut [f32], rotation: &[[f32; 2]]) {
        self.for_each_pair(x, rotation, |[c, s], x0, x1| {
            // x0*c - x1*s and x0*s + x1*c, fused as GCC fuses them (the `rope` module docs)
            (x0.mul_add(c, -(x1 * s)), x0.mul_add(s, x1 * c))
        });
    }

    /// [`Rope::unrotate`] with the inverse rotation of its position, from [`inverse_rotation`].
    pub fn unrotate_with(&self, x: &mut [f32], inverse: &[[f64; 2]]) {
        #[cfg(target_arch = "x86_64")]
        {
            if crate::kernels::has_avx2_fma() {
                // SAFETY: the CPU has AVX2 and FMA (checked above).
                return unsafe { self.unrotate_with_avx2(x, inverse) };
            }
        }
        self.unrotate_pairs(x, inverse)
    }

    /// `unrotate_pairs` compiled for AVX2: the same operations (Rust never fuses a product and
    /// a sum on its own, so the result is bit-identical), four pairs per instruction.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn unrotate_with_avx2(&self, x: &mut [f32], inverse: &[[f64; 2]]) {
        self.unrotate_pairs(x, inverse)
    }

    #[inline(always)]
    fn unrotate_pairs(&self, x: &mut [f32], inverse: &[[f64; 2]]) {
        self.for_each_pair(x, inverse, |[c, s], y0, y1| {
            let (y0, y1) = (y0 as f64, y1 as f64);
            ((y0 * c + y1 * s) as f32, (y1 * c - y0 * s) as f32)
        });
    }

    /// Visit every rotated pair of `x` with its `[cos, sin]` and replace it by
    /// `f(cos_sin, x0, x1)`; dimensions past n_dims are never touched.
    #[inline(always)]
    fn for_each_pair<T: Copy>(
        &self,
        x: &mut [f32],
        rotation: &[[T; 2]],
        f: impl Fn([T; 2], f32, f32) -> (f32, f32),
    ) {
        let n = self.n_dims;
        assert!(x.len() >= n, "head of {} values < n_dims {n}", x.len());
        assert_eq!(rotation.len(), n / 2, "rotation of another RoPE");
        // one loop per layout, over zipped slices: no index arithmetic or bounds checks, so the
        // compiler can vectorise it
        match self.mode {
            RopeMode::Norm => {
                for (p, &cs) in x[..n].chunks_exact_mut(2).zip(rotation) {
                    (p[0], p[1]) = f(cs, p[0], p[1]);
                }
            }
            RopeMode::Neox => {
                let (lo, hi) = x[..n].split_at_mut(n / 2);
                for ((a, b), &cs) in lo.iter_mut().zip(hi).zip(rotation) {
                    (*a, *b) = f(cs, *a, *b);
                }
            }
        }
    }
}

/// The inverse of a rotation from [`Rope::rotation`]: per pair `[c, s] / (c² + s²)` in f64, the
/// transpose of the rotation matrix divided by its determinant.
pub fn inverse_rotation(rotation: &[[f32; 2]], out: &mut Vec<[f64; 2]>) {
    out.clear();
    out.extend(rotation.iter().map(|&[c, s]| {
        let (c, s) = (c as f64, s as f64);
        let det = c * c + s * s;
        [c / det, s / det]
    }));
}
