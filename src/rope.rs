//! RoPE as ggml applies it (NORM and NEOX, YaRN ramp), forward and inverse.
//!
//! PLACEHOLDER written by the engine branch so it compiles; replaced at merge.

/// How rotated pairs are laid out: NORM pairs (2i, 2i+1), NEOX pairs (i, i + n_dims/2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeMode {
    Norm,
    Neox,
}

/// RoPE parameters of one layer, as recorded from the graph's ROPE node.
#[derive(Clone, Debug)]
pub struct Rope {
    pub n_dims: usize,
    pub mode: RopeMode,
    pub n_ctx_orig: i32,
    pub freq_base: f32,
    pub freq_scale: f32,
    pub ext_factor: f32,
    pub attn_factor: f32,
    pub beta_fast: f32,
    pub beta_slow: f32,
    pub freq_factors: Option<Vec<f32>>,
}

fn yarn_corr_dim(n_dims: usize, n_ctx_orig: i32, n_rot: f32, base: f32) -> f32 {
    n_dims as f32 * (n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln()
        / (2.0 * base.ln())
}

impl Rope {
    /// ggml mode bits: 0 = NORM, 2 = NEOX; anything else is not supported here.
    pub fn mode_from_ggml(mode: i32) -> Option<RopeMode> {
        match mode {
            0 => Some(RopeMode::Norm),
            2 => Some(RopeMode::Neox),
            _ => None,
        }
    }

    /// Angle and magnitude of pair `i` at position `pos`.
    fn angle(&self, i: usize, pos: i32) -> (f32, f32) {
        let theta_scale = self.freq_base.powf(-2.0 / self.n_dims as f32);
        let ff = self
            .freq_factors
            .as_ref()
            .and_then(|f| f.get(i).copied())
            .unwrap_or(1.0);
        let theta_extrap = pos as f32 * theta_scale.powi(i as i32) / ff;
        let theta_interp = self.freq_scale * theta_extrap;
        let mut theta = theta_interp;
        let mut mscale = self.attn_factor;
        if self.ext_factor != 0.0 {
            let lo = yarn_corr_dim(self.n_dims, self.n_ctx_orig, self.beta_fast, self.freq_base)
                .floor()
                .max(0.0);
            let hi = yarn_corr_dim(self.n_dims, self.n_ctx_orig, self.beta_slow, self.freq_base)
                .ceil()
                .min(self.n_dims as f32 - 1.0);
            let y = ((i as f32 - lo) / (hi - lo).max(0.001)).clamp(0.0, 1.0);
            let ramp_mix = (1.0 - y) * self.ext_factor;
            theta = theta_interp * (1.0 - ramp_mix) + theta_extrap * ramp_mix;
            mscale *= 1.0 + 0.1 * (1.0 / self.freq_scale).ln();
        }
        (theta, mscale)
    }

    fn apply(&self, x: &mut [f32], pos: i32, inverse: bool) {
        let half = self.n_dims / 2;
        for i in 0..half {
            let (theta, m) = self.angle(i, pos);
            let (s, c) = theta.sin_cos();
            let (s, c, m) = if inverse { (-s, c, 1.0 / m) } else { (s, c, m) };
            let (a, b) = match self.mode {
                RopeMode::Norm => (2 * i, 2 * i + 1),
                RopeMode::Neox => (i, i + half),
            };
            let (x0, x1) = (x[a], x[b]);
            x[a] = (x0 * c - x1 * s) * m;
            x[b] = (x0 * s + x1 * c) * m;
        }
    }

    /// Rotate one head vector to position `pos`.
    pub fn rotate(&self, x: &mut [f32], pos: i32) {
        self.apply(x, pos, false);
    }

    /// Undo `rotate(x, pos)`.
    pub fn unrotate(&self, x: &mut [f32], pos: i32) {
        self.apply(x, pos, true);
    }

    /// Move a vector rotated at `from` to `to`.
    pub fn delta(&self, x: &mut [f32], from: i32, to: i32) {
        self.unrotate(x, from);
        self.rotate(x, to);
    }
}
