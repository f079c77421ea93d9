#!/usr/bin/env python3
"""Write a tiny random-weight *hybrid* GGUF (attention + recurrent layers) for fast tests.

No model hub, no download: every tensor is seeded random data, so every run writes the same
file. The tensor names, shapes and hparams keys are the ones llama.cpp 11434 loads for each
architecture (src/models/<arch>.cpp, load_arch_hparams / load_arch_tensors).

ARCH:
  qwen35     Qwen3.5 (dense): Gated DeltaNet linear-attention layers + one full-attention layer
             in every 4 (full_attention_interval), gated attention with Q/K RMS norm, IMRoPE
             (M-RoPE sections), partial rotary. llama.cpp: llama_memory_hybrid; supports
             recurrent-state rollback (n_rs_seq) for speculative decoding.
  qwen3next  Qwen3-Next (MoE): the same Gated DeltaNet / gated attention stack with a routed +
             shared-expert FFN, NEOX RoPE. llama.cpp: llama_memory_hybrid, no rollback.
  lfm2       LFM2: gated short-convolution layers + GQA attention layers (head_count_kv is a
             per-layer array, 0 = convolution layer). llama.cpp: llama_memory_hybrid.
  lfm2-swa   LFM2 with `lfm2.attention.sliding_window`: every attention layer is a sliding-window
             layer. llama.cpp: llama_memory_hybrid_iswa whose base (non-SWA) cache has no layer.
  mamba2     Mamba-2, recurrent only (no attention at all). llama.cpp: llama_memory_recurrent.
  qwen4exp   Qwen4-Exp: the Qwen3.5 Gated DeltaNet / gated attention stack inside hyper-connection
             residual streams (no layer norms), a routed + shared-expert FFN, and a QSA sparse-
             attention indexer on the attention layers (top-k blocks of compress_ratio cells).
             llama.cpp: llama_memory_hybrid_idx (attention + recurrent + indexer key cache).
  dots3note  dots3-note: MLA attention (absorbed, K-only latent cache) alternating sliding-window
             and full layers, a DSA lightning indexer on the full layers, head-wise output gate,
             a dense first FFN then routed + shared experts (sigmoid gating). No recurrent part.
             llama.cpp: llama_kv_cache_dsa_iswa (DSA cache + SWA cache).

All share: n_embd 256, byte-fallback SPM vocabulary of 259 tokens (as scripts/make_tiny_gguf.py),
head_dim 64, 4 query heads / 2 KV heads on attention layers (dots3note: MLA, 4 heads, 1 latent
KV head), F32 weights.

usage: make_tiny_hybrid_gguf.py ARCH OUT.gguf [--layers N] [--seed S] [--swa N]
needs: pip install gguf numpy
"""
import argparse

import numpy as np
import gguf

N_EMBD = 256
N_HEAD = 4
N_HEAD_KV = 2
HEAD_DIM = 64
N_FF = 512
CTX = 8192


class Builder:
    def __init__(self, out: str, arch: str, seed: int):
        self.arch = arch
        self.rng = np.random.default_rng(seed)
        self.w = gguf.GGUFWriter(out, arch)
        self.w.add_name(f"beaconkv-tiny-{arch}-random")
        self.w.add_file_type(gguf.LlamaFileType.ALL_F32)

    def key(self, name: str) -> str:
        return f"{self.arch}.{name}"

    def u32(self, name: str, v: int) -> None:
        self.w.add_uint32(self.key(name), v)

    def f32(self, name: str, v: float) -> None:
        self.w.add_float32(self.key(name), v)

    def arr(self, name: str, v: list) -> None:
        self.w.add_array(self.key(name), v)

    def common(self, n_layer: int, n_head_kv=N_HEAD_KV) -> None:
        self.u32("context_length", CTX)
        self.u32("embedding_length", N_EMBD)
        self.u32("block_count", n_layer)
        self.u32("feed_forward_length", N_FF)
        self.u32("attention.head_count", N_HEAD)
        if isinstance(n_head_kv, list):
            self.arr("attention.head_count_kv", n_head_kv)
        else:
            self.u32("attention.head_count_kv", n_head_kv)
        self.f32("attention.layer_norm_rms_epsilon", 1e-6)
        self.vocab()

    def vocab(self) -> None:
        # Byte-fallback SPM vocabulary: <unk>, <s>, </s>, then the 256 byte tokens.
        tokens = [b"<unk>", b"<s>", b"</s>"] + [f"<0x{i:02X}>".encode() for i in range(256)]
        types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
        types += [gguf.TokenType.BYTE] * 256
        w = self.w
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens)
        w.add_token_scores([0.0] * len(tokens))
        w.add_token_types(types)
        w.add_unk_token_id(0)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_add_bos_token(True)
        self.n_vocab = len(tokens)

    def t(self, name: str, *shape: int, scale=None, ones=False, value=None) -> None:
        # numpy shape (rows, cols) = ggml ne [cols, rows]
        if value is not None:
            data = np.full(shape, value, dtype=np.float32)
        elif ones:
            data = np.ones(shape, dtype=np.float32)
        else:
            s = scale if scale is not None else 1.0 / np.sqrt(shape[-1])
            data = (self.rng.standard_normal(shape) * s).astype(np.float32)
        self.w.add_tensor(name, data)

    def finish(self) -> None:
        w = self.w
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()


def gated_delta_net_hparams(b: Builder, n_layer: int, interval: int) -> dict:
    # head_k_dim = head_v_dim = ssm.state_size; n_k_heads = ssm.group_count;
    # n_v_heads = ssm.time_step_rank; ssm.inner_size = head_v_dim * n_v_heads
    d_state, n_group, dt_rank, d_conv = 32, 2, 4, 4
    d_inner = d_state * dt_rank
    b.u32("ssm.conv_kernel", d_conv)
    b.u32("ssm.inner_size", d_inner)
    b.u32("ssm.state_size", d_state)
    b.u32("ssm.time_step_rank", dt_rank)
    b.u32("ssm.group_count", n_group)
    b.u32("full_attention_interval", interval)
    key_dim = d_state * n_group
    value_dim = d_state * dt_rank
    return dict(d_state=d_state, n_group=n_group, dt_rank=dt_rank, d_conv=d_conv,
                key_dim=key_dim, value_dim=value_dim, conv_dim=2 * key_dim + value_dim)


def gated_delta_net_layer(b: Builder, p: str, h: dict, qwen3next: bool) -> None:
    if qwen3next:
        # fused beta/alpha projection: [beta (n_v_heads) | alpha (n_v_heads)]
        b.t(p + "ssm_ba.weight", 2 * h["dt_rank"], N_EMBD)
    else:
        b.t(p + "ssm_beta.weight", h["dt_rank"], N_EMBD)
        b.t(p + "ssm_alpha.weight", h["dt_rank"], N_EMBD)
    b.t(p + "attn_qkv.weight", h["conv_dim"], N_EMBD)
    b.t(p + "attn_gate.weight", h["value_dim"], N_EMBD)
    b.t(p + "ssm_conv1d.weight", h["conv_dim"], h["d_conv"], scale=0.5)
    b.t(p + "ssm_dt.bias", h["dt_rank"], scale=0.5)
    # ssm_a = -exp(A_log): negative, so the state decays
    b.w.add_tensor(p + "ssm_a", -np.exp(b.rng.uniform(-2.0, 0.5, h["dt_rank"])).astype(np.float32))
    b.t(p + "ssm_norm.weight", h["d_state"], ones=True)
    b.t(p + "ssm_out.weight", N_EMBD, h["value_dim"])


def gated_attention_layer(b: Builder, p: str) -> None:
    # joint Q + gate projection, Q/K RMS norms (Qwen3-Next / Qwen3.5 full-attention layer)
    b.t(p + "attn_q.weight", 2 * N_HEAD * HEAD_DIM, N_EMBD)
    b.t(p + "attn_k.weight", N_HEAD_KV * HEAD_DIM, N_EMBD)
    b.t(p + "attn_v.weight", N_HEAD_KV * HEAD_DIM, N_EMBD)
    b.t(p + "attn_output.weight", N_EMBD, N_HEAD * HEAD_DIM)
    b.t(p + "attn_q_norm.weight", HEAD_DIM, ones=True)
    b.t(p + "attn_k_norm.weight", HEAD_DIM, ones=True)


def moe_ffn_layer(b: Builder, p: str, n_expert: int, n_ff_exp: int, n_ff_shexp: int) -> None:
    """Routed experts plus a gated shared expert (Qwen3-Next, Qwen4exp)."""
    b.t(p + "ffn_gate_inp.weight", n_expert, N_EMBD)
    b.t(p + "ffn_gate_exps.weight", n_expert, n_ff_exp, N_EMBD)
    b.t(p + "ffn_up_exps.weight", n_expert, n_ff_exp, N_EMBD)
    b.t(p + "ffn_down_exps.weight", n_expert, N_EMBD, n_ff_exp)
    b.t(p + "ffn_gate_inp_shexp.weight", N_EMBD)
    b.t(p + "ffn_gate_shexp.weight", n_ff_shexp, N_EMBD)
    b.t(p + "ffn_up_shexp.weight", n_ff_shexp, N_EMBD)
    b.t(p + "ffn_down_shexp.weight", N_EMBD, n_ff_shexp)


def make_qwen35(b: Builder, n_layer: int) -> None:
    interval = 4
    b.common(n_layer)
    b.u32("attention.key_length", HEAD_DIM)
    b.u32("attention.value_length", HEAD_DIM)
    n_rot = 32  # partial rotary, as the real models (64 of 256)
    b.u32("rope.dimension_count", n_rot)
    b.arr("rope.dimension_sections", [6, 5, 5, 0])  # sum = n_rot / 2
    b.f32("rope.freq_base", 1e7)
    h = gated_delta_net_hparams(b, n_layer, interval)

    b.t("token_embd.weight", b.n_vocab, N_EMBD, scale=1.0)
    for il in range(n_layer):
        p = f"blk.{il}."
        b.t(p + "attn_norm.weight", N_EMBD, ones=True)
        b.t(p + "post_attention_norm.weight", N_EMBD, ones=True)
        if (il + 1) % interval != 0:
            gated_delta_net_layer(b, p, h, qwen3next=False)
        else:
            gated_attention_layer(b, p)
        b.t(p + "ffn_gate.weight", N_FF, N_EMBD)
        b.t(p + "ffn_up.weight", N_FF, N_EMBD)
        b.t(p + "ffn_down.weight", N_EMBD, N_FF)
    b.t("output_norm.weight", N_EMBD, ones=True)
    b.t("output.weight", b.n_vocab, N_EMBD)


def make_qwen3next(b: Builder, n_layer: int) -> None:
    interval = 4
    n_expert, n_expert_used, n_ff_exp, n_ff_shexp = 4, 2, 128, 128
    b.common(n_layer)
    b.u32("attention.key_length", HEAD_DIM)
    b.u32("attention.value_length", HEAD_DIM)
    n_rot = 32
    b.u32("rope.dimension_count", n_rot)
    b.f32("rope.freq_base", 1e7)
    b.u32("expert_count", n_expert)
    b.u32("expert_used_count", n_expert_used)
    b.u32("expert_feed_forward_length", n_ff_exp)
    b.u32("expert_shared_feed_forward_length", n_ff_shexp)
    h = gated_delta_net_hparams(b, n_layer, interval)

    b.t("token_embd.weight", b.n_vocab, N_EMBD, scale=1.0)
    for il in range(n_layer):
        p = f"blk.{il}."
        b.t(p + "attn_norm.weight", N_EMBD, ones=True)
        b.t(p + "post_attention_norm.weight", N_EMBD, ones=True)
        if (il + 1) % interval != 0:
            gated_delta_net_layer(b, p, h, qwen3next=True)
        else:
            gated_attention_layer(b, p)
        moe_ffn_layer(b, p, n_expert, n_ff_exp, n_ff_shexp)
    b.t("output_norm.weight", N_EMBD, ones=True)
    b.t("output.weight", b.n_vocab, N_EMBD)


def make_lfm2(b: Builder, n_layer: int, swa: int) -> None:
    # real LFM2 interleaves conv and attention layers; here: conv, conv, attn, repeated
    is_attn = [(il % 3) == 2 for il in range(n_layer)]
    b.common(n_layer, n_head_kv=[N_HEAD_KV if a else 0 for a in is_attn])
    b.f32("rope.freq_base", 1e6)
    l_cache = 3
    b.u32("shortconv.l_cache", l_cache)
    if swa > 0:
        b.u32("attention.sliding_window", swa)

    b.t("token_embd.weight", b.n_vocab, N_EMBD, scale=1.0)
    for il in range(n_layer):
        p = f"blk.{il}."
        b.t(p + "attn_norm.weight", N_EMBD, ones=True)
        b.t(p + "ffn_norm.weight", N_EMBD, ones=True)
        if is_attn[il]:
            b.t(p + "attn_q.weight", N_HEAD * HEAD_DIM, N_EMBD)
            b.t(p + "attn_k.weight", N_HEAD_KV * HEAD_DIM, N_EMBD)
            b.t(p + "attn_v.weight", N_HEAD_KV * HEAD_DIM, N_EMBD)
            b.t(p + "attn_output.weight", N_EMBD, N_EMBD)
            b.t(p + "attn_q_norm.weight", HEAD_DIM, ones=True)
            b.t(p + "attn_k_norm.weight", HEAD_DIM, ones=True)
        else:
            b.t(p + "shortconv.conv.weight", N_EMBD, l_cache, scale=0.5)
            b.t(p + "shortconv.in_proj.weight", 3 * N_EMBD, N_EMBD)
            b.t(p + "shortconv.out_proj.weight", N_EMBD, N_EMBD)
        b.t(p + "ffn_gate.weight", N_FF, N_EMBD)
        b.t(p + "ffn_up.weight", N_FF, N_EMBD)
        b.t(p + "ffn_down.weight", N_EMBD, N_FF)
    # LFM2's output norm is stored as token_embd_norm; the LM head is tied to token_embd
    b.t("token_embd_norm.weight", N_EMBD, ones=True)


def make_mamba2(b: Builder, n_layer: int) -> None:
    d_conv, d_state, n_group, head_dim = 4, 64, 1, 64
    d_inner = 2 * N_EMBD
    n_head = d_inner // head_dim
    b.u32("context_length", CTX)
    b.u32("embedding_length", N_EMBD)
    b.u32("block_count", n_layer)
    b.u32("feed_forward_length", 0)
    b.u32("attention.head_count", 0)
    b.f32("attention.layer_norm_rms_epsilon", 1e-5)
    b.u32("ssm.conv_kernel", d_conv)
    b.u32("ssm.inner_size", d_inner)
    b.u32("ssm.state_size", d_state)
    b.u32("ssm.time_step_rank", n_head)
    b.u32("ssm.group_count", n_group)
    b.vocab()
    d_in_proj = 2 * d_inner + 2 * n_group * d_state + n_head
    conv_dim = d_inner + 2 * n_group * d_state
    b.t("token_embd.weight", b.n_vocab, N_EMBD, scale=1.0)
    for il in range(n_layer):
        p = f"blk.{il}."
        b.t(p + "attn_norm.weight", N_EMBD, ones=True)
        b.t(p + "ssm_in.weight", d_in_proj, N_EMBD)
        b.t(p + "ssm_conv1d.weight", conv_dim, d_conv, scale=0.5)
        b.t(p + "ssm_conv1d.bias", conv_dim, scale=0.1)
        b.t(p + "ssm_dt.bias", n_head, scale=0.5)
        b.w.add_tensor(p + "ssm_a", -np.exp(b.rng.uniform(-2.0, 0.5, (n_head, 1))).astype(np.float32))
        b.t(p + "ssm_d", n_head, 1, ones=True)
        b.t(p + "ssm_norm.weight", n_group, d_inner // n_group, ones=True)
        b.t(p + "ssm_out.weight", N_EMBD, d_inner)
    b.t("output_norm.weight", N_EMBD, ones=True)
    b.t("output.weight", b.n_vocab, N_EMBD)


def make_qwen4exp(b: Builder, n_layer: int) -> None:
    # src/models/qwen4exp.cpp: every hparam below is required (no PLE n-gram table: ple.* absent)
    interval = 4
    n_expert, n_expert_used, n_ff_exp, n_ff_shexp = 4, 2, 128, 128
    hc, hc_lr = 2, 16  # hyper-connection streams and the rank of their mixers
    idx_heads, idx_dim, idx_top_k, kpool = 4, 64, 16, 4
    hc_dim = hc * N_EMBD
    b.common(n_layer)
    b.u32("attention.key_length", HEAD_DIM)
    b.u32("attention.value_length", HEAD_DIM)
    n_rot = 32
    b.u32("rope.dimension_count", n_rot)
    b.arr("rope.dimension_sections", [6, 5, 5, 0])  # IMRoPE, sum = n_rot / 2
    b.f32("rope.freq_base", 1e7)
    b.u32("expert_count", n_expert)
    b.u32("expert_used_count", n_expert_used)
    b.u32("expert_feed_forward_length", n_ff_exp)
    b.u32("expert_shared_feed_forward_length", n_ff_shexp)
    b.u32("hyper_connection.count", hc)
    b.u32("hyper_connection.low_rank", hc_lr)
    b.u32("attention.indexer.head_count", idx_heads)
    b.u32("attention.indexer.key_length", idx_dim)
    b.u32("attention.indexer.top_k", idx_top_k)  # a multiple of the compress ratio
    is_attn = [(il + 1) % interval == 0 for il in range(n_layer)]
    # QSA on every attention layer, one block size for the model; 0 = no indexer pooling (GDN layer)
    b.arr("attention.compress_ratios", [kpool if a else 0 for a in is_attn])
    h = gated_delta_net_hparams(b, n_layer, interval)

    def hc_mixer(prefix: str, inject: bool) -> None:
        b.t(prefix + "_norm.weight", hc, N_EMBD, ones=True)  # ggml [n_embd, hc]
        b.t(prefix + "_down.weight", hc_lr, hc_dim)
        b.t(prefix + "_up.weight", hc_dim, hc_lr)
        if inject:
            b.t(prefix + "_inject.weight", hc, hc_dim)

    b.t("token_embd.weight", b.n_vocab, N_EMBD, scale=1.0)
    # no output_norm: the final hyper-connection mixer is the output norm
    hc_mixer("output_hc", inject=False)
    for il in range(n_layer):
        p = f"blk.{il}."
        hc_mixer(p + "hc_attn", inject=True)
        hc_mixer(p + "hc_ffn", inject=True)
        if is_attn[il]:
            gated_attention_layer(b, p)
            b.t(p + "indexer.q_proj.weight", idx_heads * idx_dim, N_EMBD)
            b.t(p + "indexer.k_proj.weight", idx_dim, N_EMBD)
            b.t(p + "indexer.q_norm.weight", idx_dim, ones=True)
            b.t(p + "indexer.k_norm.weight", idx_dim, ones=True)
        else:
            gated_delta_net_layer(b, p, h, qwen3next=False)
        moe_ffn_layer(b, p, n_expert, n_ff_exp, n_ff_shexp)
    b.t("output.weight", b.n_vocab, N_EMBD)


def make_dots3note(b: Builder, n_layer: int, swa: int) -> None:
    # src/models/dots3note.cpp, conversion/dots3.py: sliding, full, sliding, full, ...
    is_swa = [(il % 2) == 0 for il in range(n_layer)]
    n_expert, n_expert_used, n_ff_exp, n_shared = 4, 2, 128, 1
    q_lora = 64
    n_rot = 32  # qk_rope_head_dim, shared by both layer kinds
    # MLA geometry: (kv_lora_rank, qk_nope_head_dim, v_head_dim) per layer kind
    full = dict(kv_lora=64, nope=32, v=32)
    slid = dict(kv_lora=32, nope=32, v=32)
    # the indexer head must be a multiple of 64 (its keys get a 64-wide Hadamard rotation)
    idx_heads, idx_dim, idx_top_k = 32, 64, 16
    b.common(n_layer, n_head_kv=1)  # MLA: one latent KV head
    # the (absorbed) cache rows: K = latent | rope, V = latent
    b.u32("attention.key_length", full["kv_lora"] + n_rot)
    b.u32("attention.value_length", full["kv_lora"])
    b.u32("attention.key_length_swa", slid["kv_lora"] + n_rot)
    b.u32("attention.value_length_swa", slid["kv_lora"])
    b.u32("attention.q_lora_rank", q_lora)
    b.u32("attention.kv_lora_rank", full["kv_lora"])
    b.u32("attention.key_length_mla", full["nope"] + n_rot)
    b.u32("attention.value_length_mla", full["v"])
    b.u32("attention.kv_lora_rank_swa", slid["kv_lora"])
    b.u32("attention.key_length_mla_swa", slid["nope"] + n_rot)
    b.u32("attention.value_length_mla_swa", slid["v"])
    b.u32("attention.sliding_window", swa)
    b.w.add_array(b.key("attention.sliding_window_pattern"), is_swa)
    b.u32("rope.dimension_count", n_rot)
    b.f32("rope.freq_base", 1e6)
    b.f32("rope.freq_base_swa", 1e4)
    b.u32("attention.indexer.head_count", idx_heads)
    b.u32("attention.indexer.key_length", idx_dim)
    b.u32("attention.indexer.top_k", idx_top_k)
    b.w.add_array(b.key("attention.indexer.types"), [not s for s in is_swa])
    b.u32("expert_count", n_expert)
    b.u32("expert_used_count", n_expert_used)
    b.u32("expert_feed_forward_length", n_ff_exp)
    b.u32("expert_shared_count", n_shared)
    b.u32("leading_dense_block_count", 1)
    b.u32("expert_gating_func", 2)  # sigmoid
    b.w.add_bool(b.key("expert_weights_norm"), True)
    b.f32("expert_weights_scale", 1.0)

    b.t("token_embd.weight", b.n_vocab, N_EMBD, scale=1.0)
    for il in range(n_layer):
        p = f"blk.{il}."
        g = slid if is_swa[il] else full
        k_mla = g["nope"] + n_rot
        b.t(p + "attn_norm.weight", N_EMBD, ones=True)
        b.t(p + "attn_q_a_norm.weight", q_lora, ones=True)
        b.t(p + "attn_kv_a_norm.weight", g["kv_lora"], ones=True)
        b.t(p + "attn_k_norm.weight", n_rot, ones=True)  # on the shared rope key
        b.t(p + "attn_q_a.weight", q_lora, N_EMBD)
        b.t(p + "attn_q_b.weight", N_HEAD * k_mla, q_lora)
        b.t(p + "attn_kv_a_mqa.weight", g["kv_lora"] + n_rot, N_EMBD)
        b.t(p + "attn_k_b.weight", N_HEAD, g["kv_lora"], g["nope"])  # ggml [nope, kv_lora, n_head]
        b.t(p + "attn_v_b.weight", N_HEAD, g["v"], g["kv_lora"])     # ggml [kv_lora, v, n_head]
        b.t(p + "attn_output.weight", N_EMBD, N_HEAD * g["v"])
        b.t(p + "attn_gate.weight", N_HEAD, N_EMBD)  # one sigmoid gate per head
        b.t(p + "ffn_norm.weight", N_EMBD, ones=True)
        if not is_swa[il]:
            b.t(p + "indexer.k_norm.weight", idx_dim, ones=True)
            b.t(p + "indexer.k_norm.bias", idx_dim, value=0.0)
            b.t(p + "indexer.proj.weight", idx_heads, N_EMBD)
            b.t(p + "indexer.attn_k.weight", idx_dim, N_EMBD)
            b.t(p + "indexer.attn_q_b.weight", idx_heads * idx_dim, q_lora)
        if il < 1:
            b.t(p + "ffn_gate.weight", N_FF, N_EMBD)
            b.t(p + "ffn_up.weight", N_FF, N_EMBD)
            b.t(p + "ffn_down.weight", N_EMBD, N_FF)
        else:
            b.t(p + "ffn_gate_inp.weight", n_expert, N_EMBD)
            b.t(p + "exp_probs_b.bias", n_expert, value=0.0)
            b.t(p + "ffn_gate_exps.weight", n_expert, n_ff_exp, N_EMBD)
            b.t(p + "ffn_up_exps.weight", n_expert, n_ff_exp, N_EMBD)
            b.t(p + "ffn_down_exps.weight", n_expert, N_EMBD, n_ff_exp)
            b.t(p + "ffn_gate_shexp.weight", n_ff_exp * n_shared, N_EMBD)
            b.t(p + "ffn_up_shexp.weight", n_ff_exp * n_shared, N_EMBD)
            b.t(p + "ffn_down_shexp.weight", N_EMBD, n_ff_exp * n_shared)
    b.t("output_norm.weight", N_EMBD, ones=True)
    b.t("output.weight", b.n_vocab, N_EMBD)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("arch", choices=["qwen35", "qwen3next", "lfm2", "lfm2-swa", "mamba2", "qwen4exp", "dots3note"])
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=None,
                    help="layers (default: 8 for qwen35/qwen3next = 2 attention layers; 6 for lfm2; 2 for "
                         "mamba2; 4 for qwen4exp = 1 attention layer; 4 for dots3note = 2 SWA + 2 full)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--swa", type=int, default=128, help="sliding window of lfm2-swa and dots3note (default 128)")
    args = ap.parse_args()

    gguf_arch = "lfm2" if args.arch == "lfm2-swa" else args.arch
    b = Builder(args.out, gguf_arch, args.seed)
    if args.arch == "qwen35":
        make_qwen35(b, args.layers or 8)
    elif args.arch == "qwen3next":
        make_qwen3next(b, args.layers or 8)
    elif args.arch == "lfm2":
        make_lfm2(b, args.layers or 6, 0)
    elif args.arch == "lfm2-swa":
        make_lfm2(b, args.layers or 6, args.swa)
    elif args.arch == "qwen4exp":
        make_qwen4exp(b, args.layers or 4)
    elif args.arch == "dots3note":
        make_dots3note(b, args.layers or 4, args.swa)
    else:
        make_mamba2(b, args.layers or 2)
    b.finish()


if __name__ == "__main__":
    main()
