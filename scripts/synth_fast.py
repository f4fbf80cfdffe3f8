#!/usr/bin/env python3
"""A synthetic F16 GGUF of a model's real shapes, written in seconds: the tensors (names, shapes,
order and metadata) of ../shared/peers/device/synth.py's, but each matrix's values are a seeded
pool of N(0, 0.02) values repeated, streamed to the file, instead of drawn one by one and held in
memory. synth.py takes about 3.5 minutes for the Llama-3.1-8B shape on the GPU machine (16 GB of
F16 drawn in one thread); this takes the time the disk needs. Speed measurements do not depend on
the values (llama-quantize then gives the file its type mix, as for synth.py's); `scripts/
bench-cuda` writes the 8B's file with this, already quantized (--types, below).

    python3 scripts/synth_fast.py META.gguf OUT.gguf [--untied] [--seed N] [--types TYPES.json --ftype N]

With --types (a JSON object: tensor name -> ggml type name, as llama-quantize chose them, e.g.
scripts/l8-q4km-types.json for the 8B's Q4_K_M), the matrices named there are written already
quantized: random quants and scale bytes from the pool, each block's f16 scales set so that the
weights stay within about +-0.02, no F16 file and no llama-quantize (the 8B's 4.9 GB Q4_K_M file
in the time the disk needs, where llama-quantize takes minutes). Q4_K and Q6_K blocks only.
--ftype: general.file_type, llama.cpp's name for the mix (15: Q4_K_M).

Needs numpy and the `gguf` package (the peers' wheel).
"""
import json
import sys

import gguf
import numpy as np

# Values in the pool: a prime, so that no row width divides it and rows differ.
POOL = 16_777_259


def copy_fields(reader, writer):
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        vtype = field.types[0]
        val = field.contents()
        if vtype == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(key, val, vtype, sub_type=field.types[-1])
        else:
            writer.add_key_value(key, val, vtype)


def tensors(r, arch, tied):
    """(name, shape as (rows, cols) or (n,), dtype) in synth.py's order."""
    g = lambda k: r.fields[f"{arch}.{k}"].contents()
    n_embd, n_ff, n_layer = g("embedding_length"), g("feed_forward_length"), g("block_count")
    n_head, n_kv = g("attention.head_count"), g("attention.head_count_kv")
    hd = n_embd // n_head
    n_vocab = len(r.fields["tokenizer.ggml.tokens"].contents())
    out = [("token_embd.weight", (n_vocab, n_embd), np.float16)]
    for i in range(n_layer):
        p = f"blk.{i}."
        out.append((p + "attn_norm.weight", (n_embd,), np.float32))
        out.append((p + "attn_q.weight", (n_head * hd, n_embd), np.float16))
        out.append((p + "attn_k.weight", (n_kv * hd, n_embd), np.float16))
        out.append((p + "attn_v.weight", (n_kv * hd, n_embd), np.float16))
        if arch == "qwen2":
            for nm, n in (("q", n_head * hd), ("k", n_kv * hd), ("v", n_kv * hd)):
                out.append((p + f"attn_{nm}.bias", (n,), np.float32))
        out.append((p + "attn_output.weight", (n_embd, n_head * hd), np.float16))
        out.append((p + "ffn_norm.weight", (n_embd,), np.float32))
        out.append((p + "ffn_gate.weight", (n_ff, n_embd), np.float16))
        out.append((p + "ffn_up.weight", (n_ff, n_embd), np.float16))
        out.append((p + "ffn_down.weight", (n_embd, n_ff), np.float16))
    out.append(("output_norm.weight", (n_embd,), np.float32))
    if not tied:
        out.append(("output.weight", (n_vocab, n_embd), np.float16))
    return out


# Quantized blocks written directly (--types): bytes a block of 256 weights, and each f16 scale
# field (offset in the block, value) set so that |w| stays within about 0.02: Q4_K's
# w = d * sc * q - dmin * m (q < 16, sc and m < 64), Q6_K's w = d * sc * (q - 32) (|sc| <= 128).
QUANT = {
    "Q4_K": {"bytes": 144, "f16": [(0, 2.0e-5), (2, 1.5e-4)]},
    "Q6_K": {"bytes": 210, "f16": [(208, 5.0e-6)]},
}


# An F16 matrix: the pool's values as they are.
F16 = {"bytes": 2, "f16": []}


def write_blocks(fout, q, nbytes, pool, start):
    """nbytes of q's blocks: the pool's bytes from value `start` on, repeated, each block's f16
    scale fields set."""
    bb = q["bytes"]
    per = (64 << 20) // bb  # blocks a write
    blocks = nbytes // bb
    src = np.frombuffer(pool, dtype=np.uint8)
    at = (2 * start) % len(src)
    done = 0
    while done < blocks:
        k = min(per, blocks - done)
        want = k * bb
        parts = []
        while want > 0:
            take = src[at : at + want]
            parts.append(take)
            want -= len(take)
            at = (at + len(take)) % len(src)
        a = np.concatenate(parts).reshape(k, bb)
        if q["f16"]:
            a = a.copy()
            for off, v in q["f16"]:
                a[:, off : off + 2] = np.frombuffer(np.float16(v).tobytes(), dtype=np.uint8)
        a.tofile(fout)
        done += k


def main():
    meta, path = sys.argv[1], sys.argv[2]
    seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 1234
    rng = np.random.default_rng(seed)
    r = gguf.GGUFReader(meta)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(path, arch)
    copy_fields(r, w)
    plan = tensors(r, arch, "--untied" not in sys.argv)
    types = {}
    if "--types" in sys.argv:
        with open(sys.argv[sys.argv.index("--types") + 1]) as f:
            types = json.load(f)
        # What llama-quantize adds to the metadata.
        if "--ftype" in sys.argv:
            w.add_uint32("general.file_type", int(sys.argv[sys.argv.index("--ftype") + 1]))
        w.add_uint32("general.quantization_version", 2)
    nbytes = {}
    for name, shape, dt in plan:
        n = int(np.prod(shape))
        if name in types:
            q = QUANT[types[name]]
            rows, cols = shape
            nbytes[name] = rows * (cols // 256) * q["bytes"]
            # GGUF shapes are (cols, rows); the writer reverses numpy's (rows, cols).
            w.add_tensor_info(name, shape, np.dtype(np.float16), nbytes[name],
                              raw_dtype=gguf.GGMLQuantizationType[types[name]])
        else:
            nbytes[name] = n * np.dtype(dt).itemsize
            w.add_tensor_info(name, shape, np.dtype(dt), nbytes[name])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    pool = (rng.standard_normal(POOL, dtype=np.float32) * 0.02).astype(np.float16).tobytes()
    fout = w.fout[0]
    start = 0  # where in the pool the next matrix starts, so that matrices differ
    for name, shape, dt in plan:
        n = int(np.prod(shape))
        w.write_padding(fout, fout.tell())
        if dt == np.float32:
            if name.endswith(".bias"):
                v = 0.02 * rng.standard_normal(n, dtype=np.float32)
            else:
                v = 1.0 + 0.05 * rng.standard_normal(n, dtype=np.float32)
            v.astype(np.float32).tofile(fout)
        else:
            write_blocks(fout, QUANT[types[name]] if name in types else F16, nbytes[name], pool, start)
            start = (start + 7919 * 1024 + 1) % POOL
        w.write_padding(fout, nbytes[name])
    w.close()


if __name__ == "__main__":
    main()
