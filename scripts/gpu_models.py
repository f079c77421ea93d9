#!/usr/bin/env python3
"""Write random-weight llama GGUF files shaped like real models, with the Python standard library only.

The speed measurements of scripts/gpu-check.sh need models whose layer count, widths, head layout and
vocabulary match real ones (the time per token depends on those, not on the weights), on a machine
that may lack numpy and the gguf package and has no network access. The weights are seeded and tiled
from a block of random values of about the scale of trained weights, so an 8 GB file is written in
seconds and every run writes the same bytes.

usage:
  gpu_models.py write OUT.gguf --shape NAME [--type f16|q8_0] [--seed S]
  gpu_models.py list                 shapes, their parameters and file sizes

Vocabulary: byte-fallback SPM ("llama" tokenizer model): <unk>, <s>, </s>, the 256 byte tokens,
then filler tokens up to the shape's vocabulary size (the output layer keeps its real width).
"""
import argparse
import os
import random
import struct
import sys
import time

# name: layers, n_embd, heads, kv heads, ffn, vocab, rope base, tied output, default type, context
SHAPES = {
    # Llama-3.2-1B: 16 layers, 2048 wide, 32 query / 8 KV heads of 64, ffn 8192, tied embeddings
    "llama-1b": dict(n_layer=16, n_embd=2048, n_head=32, n_head_kv=8, n_ff=8192, n_vocab=128256,
                     rope_base=500000.0, tied=True, type="f16", ctx=131072),
    # Llama-3-8B / 3.1-8B: 32 layers, 4096 wide, 32 query / 8 KV heads of 128, ffn 14336
    "llama-8b": dict(n_layer=32, n_embd=4096, n_head=32, n_head_kv=8, n_ff=14336, n_vocab=128256,
                     rope_base=500000.0, tied=False, type="q8_0", ctx=131072),
    # small shapes for the CPU dry run (head dim 64, GQA)
    "dry-a": dict(n_layer=2, n_embd=256, n_head=4, n_head_kv=2, n_ff=512, n_vocab=4096,
                  rope_base=10000.0, tied=False, type="f16", ctx=8192),
    "dry-b": dict(n_layer=4, n_embd=512, n_head=8, n_head_kv=2, n_ff=1024, n_vocab=8192,
                  rope_base=10000.0, tied=True, type="q8_0", ctx=8192),
}

GGML_F32, GGML_F16, GGML_Q8_0 = 0, 1, 8
FILE_TYPE = {"f16": 1, "q8_0": 7}  # llama_ftype MOSTLY_F16, MOSTLY_Q8_0
ALIGN = 32

# GGUF metadata value types
T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY = 4, 5, 6, 7, 8, 9

F16_TILE = 262139   # elements (prime: no row width divides it, so rows differ)
Q8_TILE = 30011     # q8_0 blocks of 32 weights (prime)


def gguf_str(s):
    b = s.encode("utf-8") if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def kv_entry(key, vtype, value):
    out = gguf_str(key) + struct.pack("<I", vtype)
    if vtype == T_UINT32:
        out += struct.pack("<I", value)
    elif vtype == T_INT32:
        out += struct.pack("<i", value)
    elif vtype == T_FLOAT32:
        out += struct.pack("<f", value)
    elif vtype == T_BOOL:
        out += struct.pack("<B", 1 if value else 0)
    elif vtype == T_STRING:
        out += gguf_str(value)
    else:
        raise ValueError(vtype)
    return out


def kv_array(key, elem_type, values):
    out = [gguf_str(key), struct.pack("<IIQ", T_ARRAY, elem_type, len(values))]
    if elem_type == T_STRING:
        out.extend(gguf_str(v) for v in values)
    elif elem_type == T_FLOAT32:
        out.append(struct.pack("<%df" % len(values), *values))
    elif elem_type == T_INT32:
        out.append(struct.pack("<%di" % len(values), *values))
    else:
        raise ValueError(elem_type)
    return b"".join(out)


def tensor_bytes(ne, gtype):
    n = 1
    for d in ne:
        n *= d
    if gtype == GGML_F32:
        return 4 * n
    if gtype == GGML_F16:
        return 2 * n
    if gtype == GGML_Q8_0:
        assert ne[0] % 32 == 0, ne
        return n // 32 * 34
    raise ValueError(gtype)


def tensors_of(s, wtype):
    """(name, ne, ggml type, weight std) in llama.cpp's order; ne[0] is the input width."""
    E, H, KV, F, V = s["n_embd"], s["n_head"], s["n_head_kv"], s["n_ff"], s["n_vocab"]
    hd = E // H
    out = [("token_embd.weight", [E, V], wtype, 1.0)]
    for il in range(s["n_layer"]):
        p = "blk.%d." % il
        out += [
            (p + "attn_norm.weight", [E], GGML_F32, None),
            (p + "attn_q.weight", [E, H * hd], wtype, E ** -0.5),
            (p + "attn_k.weight", [E, KV * hd], wtype, E ** -0.5),
            (p + "attn_v.weight", [E, KV * hd], wtype, E ** -0.5),
            (p + "attn_output.weight", [H * hd, E], wtype, (H * hd) ** -0.5),
            (p + "ffn_norm.weight", [E], GGML_F32, None),
            (p + "ffn_gate.weight", [E, F], wtype, E ** -0.5),
            (p + "ffn_up.weight", [E, F], wtype, E ** -0.5),
            (p + "ffn_down.weight", [F, E], wtype, F ** -0.5),
        ]
    out.append(("output_norm.weight", [E], GGML_F32, None))
    if not s["tied"]:
        out.append(("output.weight", [E, V], wtype, E ** -0.5))
    return out


def header(name, s, wtype_name, tensors):
    E, H = s["n_embd"], s["n_head"]
    V = s["n_vocab"]
    tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % i for i in range(256)]
    types = [2, 3, 3] + [6] * 256  # UNKNOWN, CONTROL, CONTROL, BYTE
    n_fill = V - len(tokens)
    tokens += ["\u2581w%d" % i for i in range(n_fill)]
    types += [1] * n_fill  # NORMAL
    kvs = [
        kv_entry("general.architecture", T_STRING, "llama"),
        kv_entry("general.name", T_STRING, "beaconkv-random-%s-%s" % (name, wtype_name)),
        kv_entry("general.file_type", T_UINT32, FILE_TYPE[wtype_name]),
        kv_entry("llama.context_length", T_UINT32, s["ctx"]),
        kv_entry("llama.embedding_length", T_UINT32, E),
        kv_entry("llama.block_count", T_UINT32, s["n_layer"]),
        kv_entry("llama.feed_forward_length", T_UINT32, s["n_ff"]),
        kv_entry("llama.attention.head_count", T_UINT32, H),
        kv_entry("llama.attention.head_count_kv", T_UINT32, s["n_head_kv"]),
        kv_entry("llama.rope.dimension_count", T_UINT32, E // H),
        kv_entry("llama.rope.freq_base", T_FLOAT32, s["rope_base"]),
        kv_entry("llama.attention.layer_norm_rms_epsilon", T_FLOAT32, 1e-5),
        kv_entry("llama.vocab_size", T_UINT32, V),
        kv_entry("tokenizer.ggml.model", T_STRING, "llama"),
        kv_array("tokenizer.ggml.tokens", T_STRING, tokens),
        kv_array("tokenizer.ggml.scores", T_FLOAT32, [0.0] * V),
        kv_array("tokenizer.ggml.token_type", T_INT32, types),
        kv_entry("tokenizer.ggml.unknown_token_id", T_UINT32, 0),
        kv_entry("tokenizer.ggml.bos_token_id", T_UINT32, 1),
        kv_entry("tokenizer.ggml.eos_token_id", T_UINT32, 2),
        kv_entry("tokenizer.ggml.add_bos_token", T_BOOL, True),
    ]
    infos, offset = [], 0
    for tname, ne, gtype, _ in tensors:
        infos.append(gguf_str(tname) + struct.pack("<I", len(ne)) + struct.pack("<%dQ" % len(ne), *ne)
                     + struct.pack("<IQ", gtype, offset))
        offset += tensor_bytes(ne, gtype)
        offset += -offset % ALIGN
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs) + b"".join(infos)
    head += b"\0" * (-len(head) % ALIGN)
    return head, offset


class Tiles:
    """Random tiles per (type, std), generated once."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.cache = {}

    def get(self, gtype, std):
        key = (gtype, round(std, 9))
        if key in self.cache:
            return self.cache[key]
        rng = self.rng
        if gtype == GGML_F16:
            vals = [rng.gauss(0.0, std) for _ in range(F16_TILE)]
            tile = struct.pack("<%de" % F16_TILE, *vals)
        elif gtype == GGML_Q8_0:
            # q8_0 block: f16 scale d, 32 int8; int8 uniform over [-128, 127] has std ~73.9
            d = std / 73.9
            qs = rng.getrandbits(8 * 32 * Q8_TILE).to_bytes(32 * Q8_TILE, "little")
            parts = []
            for b in range(Q8_TILE):
                parts.append(struct.pack("<e", d * (0.75 + 0.5 * rng.random())))
                parts.append(qs[32 * b:32 * b + 32])
            tile = b"".join(parts)
        else:
            raise ValueError(gtype)
        self.cache[key] = tile
        return tile


def write_model(path, name, wtype_name, seed):
    s = SHAPES[name]
    wtype = {"f16": GGML_F16, "q8_0": GGML_Q8_0}[wtype_name]
    tensors = tensors_of(s, wtype)
    head, data_bytes = header(name, s, wtype_name, tensors)
    tiles = Tiles(seed)
    t0 = time.time()
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        f.write(head)
        for tname, ne, gtype, std in tensors:
            n = tensor_bytes(ne, gtype)
            if gtype == GGML_F32:
                f.write(struct.pack("<f", 1.0) * (n // 4))  # norm weights
            else:
                tile = tiles.get(gtype, std)
                full, rem = divmod(n, len(tile))
                for _ in range(full):
                    f.write(tile)
                f.write(tile[:rem])
            f.write(b"\0" * (-n % ALIGN))
    os.replace(tmp, path)
    size = len(head) + data_bytes
    assert os.path.getsize(path) == size, (os.path.getsize(path), size)
    print("wrote %s: %s %s, %.2f GiB in %.1f s" % (path, name, wtype_name, size / 2 ** 30, time.time() - t0))


def params_of(s):
    return sum(1 if len(ne) == 1 else ne[0] * ne[1] for _, ne, _, _ in tensors_of(s, GGML_F16))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("out")
    w.add_argument("--shape", required=True, choices=sorted(SHAPES))
    w.add_argument("--type", choices=sorted(FILE_TYPE))
    w.add_argument("--seed", type=int, default=1234)
    sub.add_parser("list")
    a = ap.parse_args()
    if a.cmd == "list":
        for name, s in SHAPES.items():
            for t in ("f16", "q8_0"):
                wt = {"f16": GGML_F16, "q8_0": GGML_Q8_0}[t]
                size = header(name, s, t, tensors_of(s, wt))[1]
                print("%-9s %-5s layers %2d  n_embd %4d  heads %2d/%d  head_dim %3d  ffn %5d  vocab %6d  "
                      "params %.2fB  %.2f GiB" % (name, t, s["n_layer"], s["n_embd"], s["n_head"], s["n_head_kv"],
                                                  s["n_embd"] // s["n_head"], s["n_ff"], s["n_vocab"],
                                                  params_of(s) / 1e9, size / 2 ** 30))
        return 0
    write_model(a.out, a.shape, a.type or SHAPES[a.shape]["type"], a.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
