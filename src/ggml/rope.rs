//! Rotary position embedding, reproducing ggml's CPU `ggml_rope_ext` (llama.cpp 11434).
//!
//! The plugin captures queries after RoPE. To sample beacons it needs them position-free
//! (`unrotate`), and to score it rotates them to the scoring position (`rotate`). Both must
//! agree with what ggml did to the keys in the cache, so the forward angle and magnitude follow
//! `ggml_rope_cache_init` / `rope_yarn` operation for operation in f32: the running
//! `theta *= theta_scale` product, the YaRN ramp on the pair index, and the YaRN magnitude
//! correction. Only NORM and NEOX layouts are handled; M-RoPE and vision modes are refused by
//! [`Rope::mode_from_ggml`] so callers score those captures as they are.
//!
//! Fused multiply-adds: ggml-cpu is built with `-mfma` (GGML_FMA, on by default for x86 AVX2
//! builds; aarch64 always has FMA) and GCC contracts `a*b + c*d` into `fma(a, b, c*d)`. So
//! the YaRN angle blend, the YaRN magnitude and both rotated outputs are written here as the
//! same `mul_add`s. `rotate` is bit-exact with `ggml_rope_ext` of a GGML_FMA libggml-cpu (the
//! project's build: GGML_NATIVE=OFF still compiles ggml-cpu with `-mfma` on x86-64), for the
//! same libm `sinf`/`cosf`: `tests/ggml_crosscheck.rs` requires identical bits for every
//! configuration ggml's own `ggml_rope_ext` computes there (NORM, NEOX, partial rotary, YaRN,
//! freq_factors; positions 0 to 20,000). The unit test `bit_exact_with_ggml_transcription`
//! checks the same against a loop-for-loop transcription of ggml's CPU code. A ggml built
//! without FMA (baseline x86-64, MSVC) rounds twice instead: without the fusing, 880 of 5,760
//! values differed by 1 ulp. `unrotate` is not bit-exact (it inverts in f64): its round trip
//! is within 4e-6 relative (`prop_round_trip`; un-rotating ggml's own outputs, the cross-check
//! measured at most 7.9e-8).

use std::f32::consts::PI;

/// How dimensions are paired for rotation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeMode {
    /// GGML_ROPE_TYPE_NORMAL (0): adjacent pairs (2i, 2i+1), as in LLaMA's original layout.
    Norm,
    /// GGML_ROPE_TYPE_NEOX (2): split halves (i, i + n_dims/2), as in GPT-NeoX / HF models.
    Neox,
}

/// One layer's RoPE parameters, as read from the op params of its ROPE graph node.
#[derive(Clone, Debug, PartialEq)]
pub struct Rope {
    /// Rotated dimensions (even); dimensions at or above it pass through (partial rotary).
    pub n_dims: usize,
    pub mode: RopeMode,
    /// Training context, used only by the YaRN correction range.
    pub n_ctx_orig: i32,
    pub freq_base: f32,
    pub freq_scale: f32,
    pub ext_factor: f32,
    pub attn_factor: f32,
    pub beta_fast: f32,
    pub beta_slow: f32,
    /// Per-pair frequency divisors (ggml's optional third source); at least n_dims/2 values.
    pub freq_factors: Option<Vec<f32>>,
}

impl Rope {
    /// ggml mode value (0 = NORM, 2 = NEOX) -> Some(mode); anything else (M-RoPE, vision, ...)
    /// -> None
    pub fn mode_from_ggml(mode: i32) -> Option<RopeMode> {
        match mode {
            0 => Some(RopeMode::Norm),
            2 => Some(RopeMode::Neox),
            _ => None,
        }
    }

    /// A plain RoPE (no scaling, no YaRN) for `n_dims` rotated dimensions.
    #[cfg(test)]
    pub fn plain(n_dims: usize, mode: RopeMode, freq_base: f32) -> Self {
        Rope {
            n_dims,
            mode,
            n_ctx_orig: 0,
            freq_base,
            freq_scale: 1.0,
            ext_factor: 0.0,
            attn_factor: 1.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
            freq_factors: None,
        }
    }

    /// Apply RoPE at position `pos` in place to one head vector x (len = head_dim >= n_dims):
    /// exactly what ggml_rope_ext computes (incl. YaRN mscale / attn_factor, freq_factors,
    /// partial rotary: dims >= n_dims untouched).
    pub fn rotate(&self, x: &mut [f32], pos: i32) {
        let mut cs = Vec::with_capacity(self.n_dims / 2);
        self.rotation(pos, &mut cs);
        self.rotate_with(x, &cs);
    }

    /// Exact inverse of rotate (undoes the magnitude scaling too).
    ///
    /// Inverts the very matrix `rotate` applies (its f32-rounded cos and sin), in f64, so the
    /// round trip loses only the final rounding to f32.
    pub fn unrotate(&self, x: &mut [f32], pos: i32) {
        let mut cs = Vec::with_capacity(self.n_dims / 2);
        self.rotation(pos, &mut cs);
        let mut inverse = Vec::with_capacity(cs.len());
        inverse_rotation(&cs, &mut inverse);
        self.unrotate_with(x, &inverse);
    }

    /// The rotation at `pos`: `[cos, sin]` of every pair's angle times the magnitude factor,
    /// in f32 as ggml rounds them, into `out` (n_dims/2 entries). Every head rotated to the same
    /// position shares it; computing it (sin, cos, the angle recurrence) is most of a rotation.
    pub fn rotation(&self, pos: i32, out: &mut Vec<[f32; 2]>) {
        let ms = self.mscale();
        out.clear();
        out.extend(
            self.angles(pos)
                .map(|theta| [theta.cos() * ms, theta.sin() * ms]),
        );
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
            // x0*c - x1*s and x0*s + x1*c, fused as GCC fuses them (module docs)
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

    /// YaRN correction range [low, high] in pair index, as ggml_rope_yarn_corr_dims: the pairs
    /// whose wavelength fits `beta_fast` / `beta_slow` times in the training context.
    pub fn corr_dims(&self) -> [f32; 2] {
        let corr = |n_rot: f32| {
            let ratio = self.n_ctx_orig as f32 / (n_rot * 2.0 * PI);
            self.n_dims as f32 * ratio.ln() / (2.0 * self.freq_base.ln())
        };
        let start = corr(self.beta_fast).floor();
        let end = corr(self.beta_slow).ceil();
        [start.max(0.0), end.min((self.n_dims as i32 - 1) as f32)]
    }

    /// Magnitude factor ggml folds into cos and sin: attn_factor, times YaRN's
    /// 1 + 0.1 ln(1/freq_scale) when extrapolation mixing is on.
    pub fn mscale(&self) -> f32 {
        if self.ext_factor != 0.0 {
            self.attn_factor * 0.1f32.mul_add((1.0 / self.freq_scale).ln(), 1.0)
        } else {
            self.attn_factor
        }
    }

    /// ggml's per-pair frequency step, base^(-2/n_dims).
    pub fn theta_scale(&self) -> f32 {
        self.freq_base.powf(-2.0 / self.n_dims as f32)
    }

    /// The rotation angle of every pair at `pos`, in pair order, as `ggml_rope_cache_init`
    /// computes it: a running f32 product `pos * theta_scale^i`, divided by the pair's freq
    /// factor, interpolated by freq_scale and, with YaRN, blended back towards extrapolation
    /// on the low pairs by the ramp.
    pub fn angles(&self, pos: i32) -> impl Iterator<Item = f32> + '_ {
        assert!(
            self.n_dims.is_multiple_of(2),
            "n_dims {} is odd",
            self.n_dims
        );
        let theta_scale = self.theta_scale();
        let corr = self.corr_dims();
        let mut theta_base = pos as f32;
        (0..self.n_dims / 2).map(move |i| {
            let ff = self.freq_factors.as_ref().map_or(1.0, |f| f[i]);
            let theta = self.yarn_theta(theta_base / ff, i, corr);
            theta_base *= theta_scale;
            theta
        })
    }

    /// rope_yarn's angle for pair `i` given its extrapolated (unscaled) angle.
    fn yarn_theta(&self, theta_extrap: f32, i: usize, corr: [f32; 2]) -> f32 {
        let theta_interp = self.freq_scale * theta_extrap;
        if self.ext_factor == 0.0 {
            return theta_interp;
        }
        let ramp_mix = yarn_ramp(corr[0], corr[1], i) * self.ext_factor;
        theta_interp.mul_add(1.0 - ramp_mix, theta_extrap * ramp_mix)
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

/// Rotations computed during one call (a capture, a scoring pass), shared by every head and
/// every layer with the same RoPE: layers usually share one, so a token's 270 head rotations
/// (SmolLM2) cost one evaluation of sin and cos. Cleared at the start of each call, so an id
/// never outlives the layer list that assigned it.
#[derive(Default)]
pub struct RotationMemo {
    index: std::collections::HashMap<(usize, i32), usize>,
    tables: Vec<[f32; 2]>,
    inverses: Vec<[f64; 2]>,
    one: Vec<[f32; 2]>,
    one_inverse: Vec<[f64; 2]>,
}

impl RotationMemo {
    pub fn clear(&mut self) {
        self.index.clear();
        self.tables.clear();
        self.inverses.clear();
    }

    /// The rotation of `rope` (whose layers share `rope_id`) at `pos`.
    pub fn get(&mut self, rope_id: usize, rope: &Rope, pos: i32) -> &[[f32; 2]] {
        let at = self.entry(rope_id, rope, pos);
        &self.tables[at..at + rope.n_dims / 2]
    }

    /// The inverse of [`RotationMemo::get`]'s rotation, for [`Rope::unrotate_with`].
    pub fn get_inverse(&mut self, rope_id: usize, rope: &Rope, pos: i32) -> &[[f64; 2]] {
        let at = self.entry(rope_id, rope, pos);
        &self.inverses[at..at + rope.n_dims / 2]
    }

    fn entry(&mut self, rope_id: usize, rope: &Rope, pos: i32) -> usize {
        if let Some(&at) = self.index.get(&(rope_id, pos)) {
            return at;
        }
        rope.rotation(pos, &mut self.one);
        inverse_rotation(&self.one, &mut self.one_inverse);
        let at = self.tables.len();
        self.tables.extend_from_slice(&self.one);
        self.inverses.extend_from_slice(&self.one_inverse);
        self.index.insert((rope_id, pos), at);
        at
    }
}

/// YaRN's ramp: 1 below the correction range, 0 above it, linear in the pair index between.
fn yarn_ramp(low: f32, high: f32, pair: usize) -> f32 {
    let y = (pair as f32 - low) / (high - low).max(0.001);
    1.0 - y.clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A transcription of ggml's CPU path, loop for loop: the cos/sin cache is filled for all
    /// `ne0` values with the running theta, then `rotate_pairs` walks `i0` in steps of two with
    /// `ic = i0` (NORM, scale 1) or `ic = i0/2` (NEOX), and the tail is copied. Products that
    /// GCC fuses in a GGML_FMA build are written as `mul_add` (see the module docs).
    #[allow(clippy::manual_clamp)] // spelled as ggml's MIN/MAX on purpose
    fn ggml_reference(r: &Rope, src: &[f32], pos: i32) -> Vec<f32> {
        let ne0 = src.len();
        let n_dims = r.n_dims;
        let theta_scale = r.freq_base.powf(-2.0f32 / n_dims as f32);
        let corr = ref_corr_dims(
            n_dims as i32,
            r.n_ctx_orig,
            r.freq_base,
            r.beta_fast,
            r.beta_slow,
        );
        let mut cache = vec![0f32; ne0];
        let mut theta = pos as i64 as f32;
        for i0 in (0..ne0).step_by(2) {
            let ff = r
                .freq_factors
                .as_ref()
                .and_then(|f| f.get(i0 / 2).copied())
                .unwrap_or(1.0);
            let theta_extrap = theta / ff;
            let theta_interp = r.freq_scale * theta_extrap;
            let mut th = theta_interp;
            let mut mscale = r.attn_factor;
            if r.ext_factor != 0.0 {
                let y = ((i0 / 2) as f32 - corr[0]) / f32::max(0.001, corr[1] - corr[0]);
                let ramp = 1.0 - f32::min(1.0, f32::max(0.0, y));
                let ramp_mix = ramp * r.ext_factor;
                // GCC with -mfma contracts `a*b + c*d` to fma(a, b, c*d)
                th = theta_interp.mul_add(1.0 - ramp_mix, theta_extrap * ramp_mix);
                mscale *= 0.1f32.mul_add((1.0f32 / r.freq_scale).ln(), 1.0f32);
            }
            cache[i0] = th.cos() * mscale;
            cache[i0 + 1] = th.sin() * mscale;
            theta *= theta_scale;
        }
        let (n_offset, scale) = match r.mode {
            RopeMode::Norm => (1, 1),
            RopeMode::Neox => (n_dims / 2, 2),
        };
        let mut dst = src.to_vec();
        for i0 in (0..n_dims).step_by(2) {
            let ic = i0 / scale;
            let (c, s) = (cache[i0], cache[i0 + 1]);
            let (x0, x1) = (src[ic], src[ic + n_offset]);
            dst[ic] = x0.mul_add(c, -(x1 * s));
            dst[ic + n_offset] = x0.mul_add(s, x1 * c);
        }
        dst
    }

    fn ref_corr_dims(n_dims: i32, n_ctx_orig: i32, base: f32, fast: f32, slow: f32) -> [f32; 2] {
        let dim = |n_rot: f32| {
            n_dims as f32 * (n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln()
                / (2.0 * base.ln())
        };
        [
            f32::max(0.0, dim(fast).floor()),
            f32::min((n_dims - 1) as f32, dim(slow).ceil()),
        ]
    }

    fn yarn(n_dims: usize, mode: RopeMode) -> Rope {
        Rope {
            n_ctx_orig: 4096,
            freq_scale: 0.25,
            ext_factor: 1.0,
            attn_factor: 1.0,
            ..Rope::plain(n_dims, mode, 10000.0)
        }
    }

    fn sample(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| ((i as f32 + 1.0) * (0.37 + seed as f32 * 0.11)).sin() * 2.0)
            .collect()
    }

    fn dotp(a: &[f32], b: &[f32]) -> f64 {
        a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum()
    }

    /// Every flavour the round-trip property must hold for.
    fn configs() -> Vec<(Rope, usize)> {
        let ff: Vec<f32> = (0..32).map(|i| 1.0 + i as f32 * 0.25).collect();
        let mut v = Vec::new();
        for mode in [RopeMode::Norm, RopeMode::Neox] {
            v.push((Rope::plain(64, mode, 10000.0), 64));
            v.push((Rope::plain(32, mode, 500000.0), 64)); // partial rotary
            v.push((
                Rope {
                    freq_factors: Some(ff.clone()),
                    ..Rope::plain(64, mode, 1e6)
                },
                64,
            ));
            v.push((yarn(128, mode), 128));
            v.push((
                Rope {
                    attn_factor: 0.7,
                    freq_scale: 0.5,
                    ..yarn(48, mode)
                },
                80,
            ));
        }
        v
    }

    fn assert_close(a: &[f32], b: &[f32], tol: f32, what: &str) {
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() <= tol * (1.0 + y.abs()),
                "{what}: [{i}] {x} vs {y}"
            );
        }
    }

    #[test]
    fn mode_from_ggml_accepts_only_norm_and_neox() {
        assert_eq!(Rope::mode_from_ggml(0), Some(RopeMode::Norm));
        assert_eq!(Rope::mode_from_ggml(2), Some(RopeMode::Neox));
        for m in [1, 8, 24, 40, -1] {
            assert_eq!(Rope::mode_from_ggml(m), None, "mode {m}");
        }
    }

    #[test]
    fn hand_computed_norm_one_radian() {
        let r = Rope::plain(2, RopeMode::Norm, 10000.0);
        let mut x = [1.0f32, 0.0, 5.0];
        r.rotate(&mut x, 1);
        assert!(
            (x[0] - 1f32.cos()).abs() < 1e-6 && (x[1] - 1f32.sin()).abs() < 1e-6,
            "{x:?}"
        );
        assert_eq!(x[2], 5.0, "dims >= n_dims untouched");
        assert!((x[0] - 0.540_302_3).abs() < 1e-6 && (x[1] - 0.841_470_96).abs() < 1e-6);
    }

    #[test]
    fn hand_computed_pairing_norm_vs_neox() {
        // n_dims 4, base 10000: pair 0 turns by pos, pair 1 by pos * 10000^(-1/2) = pos / 100.
        let x = [1.0f32, 2.0, 3.0, 4.0, 9.0, -9.0];
        let (a0, a1) = (2.0f64, 0.02f64);
        let rot = |x0: f32, x1: f32, a: f64| {
            let (s, c) = a.sin_cos();
            (
                (x0 as f64 * c - x1 as f64 * s) as f32,
                (x0 as f64 * s + x1 as f64 * c) as f32,
            )
        };
        let mut n = x;
        Rope::plain(4, RopeMode::Norm, 10000.0).rotate(&mut n, 2);
        let ((p0, p1), (p2, p3)) = (rot(1.0, 2.0, a0), rot(3.0, 4.0, a1));
        assert_close(&n, &[p0, p1, p2, p3, 9.0, -9.0], 1e-6, "norm");
        let mut g = x;
        Rope::plain(4, RopeMode::Neox, 10000.0).rotate(&mut g, 2);
        let ((q0, q2), (q1, q3)) = (rot(1.0, 3.0, a0), rot(2.0, 4.0, a1));
        assert_close(&g, &[q0, q1, q2, q3, 9.0, -9.0], 1e-6, "neox");
        assert_ne!(n, g);
    }

    #[test]
    fn ggml_constants() {
        let r = yarn(128, RopeMode::Neox);
        assert_eq!(r.theta_scale(), 10000f32.powf(-2.0 / 128.0));
        // 128*ln(4096/(32*2pi))/(2 ln 1e4) = 20.94 -> 20; with beta 1: 45.03 -> 46
        assert_eq!(r.corr_dims(), [20.0, 46.0]);
        let small = Rope {
            n_ctx_orig: 2048,
            ..yarn(16, RopeMode::Norm)
        };
        // 16*ln(2048/(64 pi))/(2 ln 1e4) = 2.016 -> 2; 16*ln(2048/(2 pi))/(2 ln 1e4) = 5.03 -> 6
        assert_eq!(small.corr_dims(), [2.0, 6.0]);
        let wide = Rope {
            n_ctx_orig: 1 << 30,
            ..yarn(16, RopeMode::Norm)
        };
        assert_eq!(wide.corr_dims()[1], 15.0, "clamped to n_dims - 1");
        let expect = 1.0 + 0.1 * 4f64.ln();
        assert!((r.mscale() as f64 - expect).abs() < 1e-6);
        assert_eq!(
            Rope {
                ext_factor: 0.0,
                attn_factor: 0.5,
                ..r.clone()
            }
            .mscale(),
            0.5
        );
        assert_eq!(
            Rope {
                attn_factor: 2.0,
                ..r
            }
            .mscale(),
            2.0 * (1.0 + 0.1 * 4f32.ln())
        );
    }

    #[test]
    fn yarn_ramp_shape() {
        assert_eq!(yarn_ramp(20.0, 46.0, 0), 1.0);
        assert_eq!(yarn_ramp(20.0, 46.0, 20), 1.0);
        assert_eq!(yarn_ramp(20.0, 46.0, 33), 0.5);
        assert_eq!(yarn_ramp(20.0, 46.0, 46), 0.0);
        assert_eq!(yarn_ramp(5.0, 5.0, 5), 1.0);
        assert_eq!(yarn_ramp(5.0, 5.0, 6), 0.0);
    }

    #[test]
    fn yarn_magnitude_is_applied_and_undone() {
        let r = yarn(64, RopeMode::Norm);
        let x = sample(64, 3);
        let mut y = x.clone();
        r.rotate(&mut y, 1234);
        let ratio = (dotp(&y, &y) / dotp(&x, &x)).sqrt();
        assert!(
            (ratio - (1.0 + 0.1 * 4f64.ln())).abs() < 1e-5,
            "ratio {ratio}"
        );
        r.unrotate(&mut y, 1234);
        assert_close(&y, &x, 2e-6, "yarn round trip");
    }

    #[test]
    fn bit_exact_with_ggml_transcription() {
        for (r, hd) in configs() {
            for pos in [0i32, 1, 7, 100, 4095, 32768, 1_000_000, -5] {
                let x = sample(hd, pos.unsigned_abs() % 13);
                let mut got = x.clone();
                r.rotate(&mut got, pos);
                let want = ggml_reference(&r, &x, pos);
                let gb: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
                let wb: Vec<u32> = want.iter().map(|v| v.to_bits()).collect();
                assert_eq!(gb, wb, "{r:?} hd={hd} pos={pos}");
            }
        }
    }

    #[test]
    fn yarn_angles_blend_interp_and_extrap() {
        let r = yarn(128, RopeMode::Neox);
        let angles: Vec<f32> = r.angles(1000).collect();
        let plain: Vec<f32> = Rope::plain(128, RopeMode::Neox, 10000.0)
            .angles(1000)
            .collect();
        assert_eq!(
            angles[0], plain[0],
            "below low corr dim: pure extrapolation"
        );
        assert_eq!(
            angles[63],
            plain[63] * 0.25,
            "above high corr dim: pure interpolation"
        );
        assert!(angles[33] > plain[33] * 0.25 && angles[33] < plain[33]);
    }

    #[test]
    fn partial_rotary_leaves_tail_untouched() {
        let r = Rope::plain(32, RopeMode::Neox, 10000.0);
        let x = sample(64, 5);
        let mut y = x.clone();
        r.rotate(&mut y, 77);
        assert_eq!(&y[32..], &x[32..]);
        assert_ne!(&y[..32], &x[..32]);
        r.unrotate(&mut y, 77);
        assert_eq!(&y[32..], &x[32..]);
    }

    #[test]
    fn round_trip_all_configs() {
        for (r, hd) in configs() {
            for pos in [0, 3, 511, 40000, 1_000_000] {
                let x = sample(hd, 2);
                let mut y = x.clone();
                r.rotate(&mut y, pos);
                if pos != 0 {
                    assert_ne!(y, x);
                }
                r.unrotate(&mut y, pos);
                assert_close(&y, &x, 2e-6, &format!("{r:?} pos {pos}"));
            }
        }
    }

    #[test]
    fn memo_rotations_are_the_ropes_own() {
        let mut memo = RotationMemo::default();
        for (id, (r, hd)) in configs().into_iter().enumerate() {
            for pos in [0, 7, 40000] {
                let x = sample(hd, 3);
                let (mut a, mut b) = (x.clone(), x.clone());
                r.rotate(&mut a, pos);
                r.rotate_with(&mut b, memo.get(id, &r, pos));
                assert_eq!(a, b, "{r:?} pos {pos}: memo rotation differs");
                r.unrotate_with(&mut b, memo.get_inverse(id, &r, pos));
                r.unrotate(&mut a, pos);
                assert_eq!(a, b, "{r:?} pos {pos}: memo inverse differs");
            }
        }
        // ids are trusted within a call (the engine gives equal RoPEs one id): a cleared memo
        // forgets them, so another RoPE may take an id over
        let r1 = &configs()[1].0;
        memo.clear();
        let mut fresh = Vec::new();
        r1.rotation(7, &mut fresh);
        assert_eq!(memo.get(0, r1, 7), &fresh[..]);
    }

    #[test]
    fn relative_position_property() {
        for mode in [RopeMode::Norm, RopeMode::Neox] {
            let ff: Vec<f32> = (0..32).map(|i| 1.0 + i as f32 * 0.1).collect();
            let rs = [
                Rope::plain(64, mode, 10000.0),
                Rope {
                    freq_scale: 0.5,
                    freq_factors: Some(ff),
                    ..Rope::plain(64, mode, 1e4)
                },
            ];
            for r in rs {
                let (q, k) = (sample(64, 1), sample(64, 2));
                let scale = dotp(&q, &q).sqrt() * dotp(&k, &k).sqrt();
                let score = |m: i32, n: i32| {
                    let (mut rq, mut rk) = (q.clone(), k.clone());
                    r.rotate(&mut rq, m);
                    r.rotate(&mut rk, n);
                    dotp(&rq, &rk)
                };
                for (m, n, t) in [(5, 2, 100), (300, 17, 1000), (40, 40, 777), (2, 9, 50)] {
                    let (s0, s1) = (score(m, n), score(m + t, n + t));
                    assert!(
                        (s0 - s1).abs() < 1e-3 * scale,
                        "{mode:?} {m},{n},+{t}: {s0} {s1}"
                    );
                }
                // and the score genuinely depends on the offset
                assert!((score(5, 2) - score(50, 2)).abs() > 1e-2 * scale);
            }
        }
    }

    proptest! {
        #[test]
        fn prop_round_trip(
            neox in any::<bool>(),
            half_dims in 1usize..40,
            extra in 0usize..8,
            base in 100.0f32..1e6,
            yarn_on in any::<bool>(),
            fscale in 0.05f32..1.0,
            from in -1000i32..200_000,
            seed in 0u32..1000,
        ) {
            let mode = if neox { RopeMode::Neox } else { RopeMode::Norm };
            let n_dims = 2 * half_dims;
            let hd = n_dims + 2 * extra;
            let r = Rope {
                n_ctx_orig: 8192,
                freq_scale: fscale,
                ext_factor: if yarn_on { 1.0 } else { 0.0 },
                ..Rope::plain(n_dims, mode, base)
            };
            let x = sample(hd, seed);
            let mut y = x.clone();
            r.rotate(&mut y, from);
            r.unrotate(&mut y, from);
            for (a, b) in y.iter().zip(&x) {
                prop_assert!((a - b).abs() <= 4e-6 * (1.0 + b.abs()));
            }
        }
    }
}
