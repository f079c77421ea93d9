//! Rotary position embedding, reproducing ggml's CPU `ggml_rope_ext` (llama.cpp 11434).
//!
//! The plugin captures queries after RoPE. To sample beacons it needs them position-free
//! (`unrotate`), and to score it rotates them to the scoring position (`rotate`). Both must
//! agree with what ggml did to the keys in the cache, so the forward angle and magnitude follow
//! `ggml_rope_cache_init` / `rope_yarn` operation for operation in f32: the running
//! `theta *= theta_scale` product, the YaRN ramp on the pair index, and the YaRN magnitude
//! correction. Only NORM and NEOX layouts are handled (libllama describes an M-RoPE or IMRoPE layer
//! as NEOX with +inf frequency factors on the pairs a text position holds still); vision modes are
//! refused by [`Rope::mode_from_ggml`] so callers score those captures as they are.
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
//! without FMA (baseline x86-64, MSVC) rounds twice instead, so its values can differ from
//! `rotate`'s in the last bit. `unrotate` is not bit-exact (it inverts in f64): its round trip,
//! and un-rotating ggml's own outputs, is within 4e-6 relative (`prop_round_trip` and the
//! cross-check hold it to that bound).
//!
//! Layout: this file holds the parameters and the angles ggml derives from them; `apply.rs`
//! rotates and un-rotates head vectors; `memo.rs` shares rotations across heads and layers.

mod apply;
mod memo;
#[cfg(test)]
mod tests;

pub use apply::inverse_rotation;
pub use memo::RotationMemo;

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
}

/// YaRN's ramp: 1 below the correction range, 0 above it, linear in the pair index between.
fn yarn_ramp(low: f32, high: f32, pair: usize) -> f32 {
    let y = (pair as f32 - low) / (high - low).max(0.001);
    1.0 - y.clamp(0.0, 1.0)
}
