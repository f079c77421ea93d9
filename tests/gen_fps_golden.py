#!/usr/bin/env python3
"""Generate tests/fixtures/fps_golden.json: golden indices for fps::farthest_point_sampling.

The reference is `_farthest_point_sampling` of the method's reference implementation (PyTorch). torch
is not installable here (its CPU wheel index is unreachable and PyPI's wheel pulls the CUDA
stack), so `fps_seed_port` below is a line-by-line numpy port of it for one (batch, head)
group, in float32 like torch's CPU float path:

    q_norm     = F.normalize(q_flat, p=2, dim=-1)           # x / max(||x||, 1e-12)
    sim_matrix = torch.bmm(q_norm, q_norm.transpose(-2, -1))
    mean_sim   = sim_matrix.mean(dim=2)
    start_idx  = mean_sim.argmin(dim=-1)                    # first index on ties
    max_sim    = sim_matrix[g_idx, start_idx]
    loop: next_idx = max_sim.argmin(-1); max_sim = torch.maximum(max_sim, sim_matrix[next_idx])

Robustness: the Rust port sums in a different order than BLAS, so a case is kept only if its
answer cannot depend on f32 summation order. Each case is run three ways (float32 through
BLAS matmul as the reference implementation does, float32 with per-entry sums, float64 with per-entry sums); all
three must pick the same indices, and at every argmin the runner-up must trail the winner by
more than MARGIN in float64, unless the two are tied exactly in both per-entry runs (identical
rows, zero rows, or 1-d data, where any summation order ties them too). Cases that fail are
dropped with a message rather than loosening the Rust test (none of the cases below is
dropped with seed 20260 and numpy 2.x; the check stays so edits to the cases stay honest).

Inputs are stored as float32 bit patterns (u32) so the Rust side reads them exactly.

Usage: python3 tests/gen_fps_golden.py  (needs numpy)
"""

import json
import os
import sys

import numpy as np

MARGIN = 1e-5
EPS = 1e-12


def normalize(x, dtype):
    """F.normalize(p=2, dim=-1, eps=1e-12)."""
    x = x.astype(dtype)
    norm = np.sqrt((x * x).sum(axis=-1, keepdims=True, dtype=dtype))
    return x / np.maximum(norm, dtype(EPS))


def gram(qn, how):
    """bmm(q_norm, q_norm^T): BLAS like torch, or per-entry sums (order fixed per entry)."""
    if how == "blas":
        return qn @ qn.T
    return (qn[:, None, :] * qn[None, :, :]).sum(axis=-1, dtype=qn.dtype)


def fps_seed_port(points, k, dtype=np.float32, how="blas", trace=None):
    """The seed's _farthest_point_sampling for one group; returns indices (selected_indices)."""
    n = points.shape[0]
    if n <= k:
        return list(range(n))
    q_norm = normalize(points, dtype)
    sim_matrix = gram(q_norm, how)
    mean_sim = sim_matrix.mean(axis=1, dtype=dtype)  # dim=2 of [G, Q, Q]
    start_idx = int(np.argmin(mean_sim))  # numpy argmin: first index on ties, like torch
    selected = [start_idx]
    if trace is not None:
        trace.append(mean_sim.copy())
    max_sim = sim_matrix[start_idx].copy()
    for _ in range(1, k):
        if trace is not None:
            trace.append(max_sim.copy())
        next_idx = int(np.argmin(max_sim))
        selected.append(next_idx)
        curr_sim = sim_matrix[next_idx]
        max_sim = np.maximum(max_sim, curr_sim)
    return selected


def fragile_reason(points, k):
    """None if the case is robust to summation order, else why it is not."""
    if points.shape[0] <= k:
        return None
    traces = {}
    picks = {}
    for name, dtype, how in [("f32-blas", np.float32, "blas"),
                             ("f32-entry", np.float32, "entry"),
                             ("f64-entry", np.float64, "entry")]:
        traces[name] = []
        picks[name] = fps_seed_port(points, k, dtype, how, traces[name])
    if len({tuple(p) for p in picks.values()}) != 1:
        return f"implementations disagree: {picks}"
    for step, v64 in enumerate(traces["f64-entry"]):
        win = int(np.argmin(v64))
        for j in np.nonzero(np.abs(v64 - v64[win]) <= MARGIN)[0]:
            if j == win:
                continue
            exact = all(traces[t][step][j] == traces[t][step][win] for t in ("f32-entry", "f64-entry"))
            if not exact:
                return f"step {step}: index {j} within {MARGIN} of winner {win}"
    return None


def gaussian(rng, n, dim):
    return rng.standard_normal((n, dim)).astype(np.float32)


def make_cases(rng):
    cases = []

    def add(name, pts, k):
        cases.append((name, np.ascontiguousarray(pts, dtype=np.float32), k))

    add("gauss_n10_d4_k3", gaussian(rng, 10, 4), 3)
    add("gauss_n32_d16_k8", gaussian(rng, 32, 16), 8)
    add("gauss_n64_d64_k16", gaussian(rng, 64, 64), 16)
    add("gauss_n100_d8_k20", gaussian(rng, 100, 8), 20)
    add("n_equals_k", gaussian(rng, 5, 8), 5)
    add("n_below_k", gaussian(rng, 3, 4), 8)
    add("k1_start_only", gaussian(rng, 50, 32), 1)

    # Rows scaled over 12 orders of magnitude: only directions may matter.
    scaled = gaussian(rng, 40, 16) * (10.0 ** rng.uniform(-6, 6, size=(40, 1))).astype(np.float32)
    add("row_scales_1e-6_to_1e6", scaled, 10)

    # Exact duplicates, including the most outlying point at a lower and a higher index, so
    # the start is a tie that must resolve to the lower index.
    base = gaussian(rng, 20, 8) + np.float32(1.5)  # shared offset: the outlier is clear
    outlier = -base.mean(axis=0, keepdims=True)
    dup = np.concatenate([base[:3], outlier, base[3:10], base[4:6], outlier, base[10:], base[:2]])
    add("duplicates_and_tied_outlier", dup, 6)

    # Six tight clusters: the sample must take one point per cluster first.
    centers = gaussian(rng, 6, 16) * np.float32(3.0)
    members = centers[rng.integers(0, 6, size=60)] + np.float32(0.05) * gaussian(rng, 60, 16)
    add("clustered_6x", members, 6)

    # A zero row (normalize keeps it zero): it has the lowest mean similarity, and its
    # all-zero similarity row makes the next argmin an exact tie resolved to index 0.
    zc = np.abs(gaussian(rng, 20, 8)) + np.float32(0.1)
    zc[5] = 0.0
    add("zero_row_exact_ties", zc, 4)

    # 1-d data normalises to +-1: all similarities are exactly +-1, ties everywhere.
    add("one_dim_signs", np.array([[0.5], [2.0], [-1.0], [3.0], [-0.25], [7.0]], np.float32), 3)

    # 2-d points on a circle; k close to n stresses the late, crowded picks.
    ang = rng.uniform(0, 2 * np.pi, size=16)
    add("circle_d2_k6", np.stack([np.cos(ang), np.sin(ang)], axis=1), 6)
    return cases


def main():
    rng = np.random.default_rng(20260)
    out = []
    for name, pts, k in make_cases(rng):
        why = fragile_reason(pts, k)
        if why is not None:
            print(f"dropping {name}: {why}", file=sys.stderr)
            continue
        n, dim = pts.shape
        out.append({
            "name": name,
            "n": n,
            "dim": dim,
            "k": k,
            "points_f32_bits": pts.view(np.uint32).ravel().tolist(),
            "expected": fps_seed_port(pts, k),
        })
        print(f"{name}: n={n} dim={dim} k={k} -> {out[-1]['expected']}")
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "fps_golden.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"generator": "tests/gen_fps_golden.py", "cases": out}, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {len(out)} cases to {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
