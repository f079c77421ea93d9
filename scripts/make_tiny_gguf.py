#!/usr/bin/env python3
"""Write a tiny random-weight llama GGUF for fast tests (no model hub, no download).

2 layers, n_embd 256, 4 query heads / 2 KV heads (GQA), head_dim 64 (so quantised K caches get
llama.cpp's Hadamard rotation), byte-fallback SPM vocabulary of 259 tokens. The weights are
seeded, so every run writes the same file.

usage: make_tiny_gguf.py OUT.gguf [--layers N] [--seed S]
needs: pip install gguf numpy
"""
import argparse

import numpy as np
import gguf


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()

    n_embd, n_head, n_head_kv, n_ff, ctx = 256, 4, 2, 512, 8192
    head_dim = n_embd // n_head
    rng = np.random.default_rng(args.seed)

    w = gguf.GGUFWriter(args.out, "llama")
    w.add_name("beaconkv-tiny-random")
    w.add_context_length(ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(args.layers)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    # Byte-fallback SPM vocabulary: <unk>, <s>, </s>, then the 256 byte tokens.
    tokens = [b"<unk>", b"<s>", b"</s>"] + [f"<0x{i:02X}>".encode() for i in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)

    def t(name, *shape, scale=None, ones=False):
        # numpy shape (rows, cols) = ggml ne [cols, rows]
        if ones:
            data = np.ones(shape, dtype=np.float32)
        else:
            s = scale if scale is not None else 1.0 / np.sqrt(shape[-1])
            data = (rng.standard_normal(shape) * s).astype(np.float32)
        w.add_tensor(name, data)

    n_vocab = len(tokens)
    t("token_embd.weight", n_vocab, n_embd, scale=1.0)
    for il in range(args.layers):
        p = f"blk.{il}."
        t(p + "attn_norm.weight", n_embd, ones=True)
        t(p + "attn_q.weight", n_embd, n_embd)
        t(p + "attn_k.weight", n_head_kv * head_dim, n_embd)
        t(p + "attn_v.weight", n_head_kv * head_dim, n_embd)
        t(p + "attn_output.weight", n_embd, n_embd)
        t(p + "ffn_norm.weight", n_embd, ones=True)
        t(p + "ffn_gate.weight", n_ff, n_embd)
        t(p + "ffn_up.weight", n_ff, n_embd)
        t(p + "ffn_down.weight", n_embd, n_ff)
    t("output_norm.weight", n_embd, ones=True)
    t("output.weight", n_vocab, n_embd)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
