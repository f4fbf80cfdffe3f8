#!/usr/bin/env python3
"""Checks an architecture's semantics three ways on a small random F32 model.

    python3 scripts/arch_check.py --arch qwen3 --vocab-from QWEN2.gguf [--molla BIN]

Writes a small model of `--arch` (random F32 weights, two layers (gemma3: six, over a
4-position window), heads wider than n_embd / n_head but for qwen2, the tokenizer metadata of `--vocab-from` so llama.cpp loads it), then
compares the last position's log-probabilities of three engines on a few prompts: the float64
oracle (scripts/oracle.py), llama.cpp (scripts/llamacpp_logits.py with an F32 KV cache, so it
rounds nothing below float32) and `molla logits` (prefill and decode).  With every weight F32
the engines should agree to ~1e-5: oracle vs llama.cpp checks that the oracle implements the
architecture as llama.cpp does; molla vs oracle checks molla.  Exits 1 when a top-1 differs
or a top-16 error exceeds --max (molla, default 1e-4) or --max-peer (llama.cpp, default 2e-3:
its GELU is a float16 table).  Without llama-cpp-python (or with
--no-llamacpp) only molla is compared with the oracle (scripts/test does that for every arch).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import llamacpp_logits  # noqa: E402
import oracle  # noqa: E402

try:
    import llama_cpp  # noqa: F401

    HAVE_LLAMACPP = True
except ImportError:
    HAVE_LLAMACPP = False

# What each architecture adds to a llama block (tensors per layer, metadata).
ARCHS = {
    "llama": {},
    "qwen2": {"bias": True},
    "qwen3": {"qk_norm": True},
    "smollm3": {},
    "phi3": {"fused": True},
    "granite": {"scales": {"embedding_scale": 3.0, "attention.scale": 0.05,
                           "residual_scale": 0.4, "logit_scale": 2.5}},
    "gemma2": {"post_norms": True, "window": 4, "caps": (0.5, 2.0)},
    "gemma3": {"qk_norm": True, "post_norms": True, "window": 4},
}


def write_model(path, arch, vocab_from, seed=3):
    spec = ARCHS[arch]
    rng = np.random.default_rng(seed)
    src = GGUFReader(vocab_from)
    n_vocab = int(len(src.fields["tokenizer.ggml.tokens"].data))
    n_embd, n_head, n_kv, hd, n_ff, n_layer = 64, 4, 2, 32, 128, 2
    if arch in ("qwen2", "phi3", "granite"):
        hd = n_embd // n_head  # llama.cpp wants q as wide as n_embd there
    if arch == "gemma3":
        n_layer = 6  # five sliding-window layers and a global one
    if arch == "gemma2":
        n_layer = 4  # sliding-window and global layers in turn
    if arch == "smollm3":
        n_layer, hd = 4, n_embd // n_head  # the fourth layer without rope; llama.cpp's asserts
    w = GGUFWriter(path, arch)
    for key, field in src.fields.items():
        if key.startswith("tokenizer.") and key != "tokenizer.chat_template":
            vtype = field.types[0]
            sub = field.types[-1] if vtype == GGUFValueType.ARRAY else None
            w.add_key_value(key, field.contents(), vtype, sub_type=sub)
    u32 = GGUFValueType.UINT32
    for k, v in [("context_length", 256), ("embedding_length", n_embd),
                 ("block_count", n_layer), ("feed_forward_length", n_ff),
                 ("attention.head_count", n_head), ("attention.head_count_kv", n_kv),
                 ("attention.key_length", hd), ("attention.value_length", hd)]:
        w.add_key_value(f"{arch}.{k}", v, u32)
    f32 = GGUFValueType.FLOAT32
    w.add_key_value(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6, f32)
    w.add_key_value(f"{arch}.rope.freq_base", 1e6, f32)
    if "window" in spec:
        w.add_key_value(f"{arch}.attention.sliding_window", spec["window"], u32)
    for key, v in spec.get("scales", {}).items():
        w.add_key_value(f"{arch}.{key}", v, f32)
    if "caps" in spec:  # small caps, so that soft-capping changes the result
        w.add_key_value(f"{arch}.attn_logit_softcapping", spec["caps"][0], f32)
        w.add_key_value(f"{arch}.final_logit_softcapping", spec["caps"][1], f32)

    def mat(rows, cols):
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    w.add_tensor("token_embd.weight", mat(n_vocab, n_embd))
    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", norm(n_embd))
        if spec.get("fused"):
            w.add_tensor(p + "attn_qkv.weight", mat((n_head + 2 * n_kv) * hd, n_embd))
        else:
            w.add_tensor(p + "attn_q.weight", mat(n_head * hd, n_embd))
            w.add_tensor(p + "attn_k.weight", mat(n_kv * hd, n_embd))
            w.add_tensor(p + "attn_v.weight", mat(n_kv * hd, n_embd))
        if spec.get("bias"):
            for t, n in [("q", n_head * hd), ("k", n_kv * hd), ("v", n_kv * hd)]:
                w.add_tensor(p + f"attn_{t}.bias", (0.1 * rng.standard_normal(n)).astype(np.float32))
        if spec.get("qk_norm"):
            w.add_tensor(p + "attn_q_norm.weight", norm(hd))
            w.add_tensor(p + "attn_k_norm.weight", norm(hd))
        w.add_tensor(p + "attn_output.weight", mat(n_embd, n_head * hd))
        if spec.get("post_norms"):
            w.add_tensor(p + "post_attention_norm.weight", norm(n_embd))
            w.add_tensor(p + "post_ffw_norm.weight", norm(n_embd))
        w.add_tensor(p + "ffn_norm.weight", norm(n_embd))
        if spec.get("fused"):
            w.add_tensor(p + "ffn_up.weight", mat(2 * n_ff, n_embd))
        else:
            w.add_tensor(p + "ffn_gate.weight", mat(n_ff, n_embd))
            w.add_tensor(p + "ffn_up.weight", mat(n_ff, n_embd))
        w.add_tensor(p + "ffn_down.weight", mat(n_embd, n_ff))
    w.add_tensor("output_norm.weight", norm(n_embd))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return n_vocab


def top16(ref, got):
    ref, got = np.array(ref), np.array(got)
    top = np.argsort(-ref)[:16]
    return float(np.abs(ref[top] - got[top]).max()), int(np.argmax(ref)) == int(np.argmax(got))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", required=True, choices=sorted(ARCHS))
    ap.add_argument("--vocab-from", required=True, help="a GGUF whose tokenizer to copy")
    ap.add_argument("--molla", default=os.path.join(HERE, "..", "target", "release", "molla"))
    ap.add_argument("--max", type=float, default=1e-4)
    ap.add_argument("--max-peer", type=float, default=2e-3)
    ap.add_argument("--no-llamacpp", action="store_true")
    args = ap.parse_args()
    peer = HAVE_LLAMACPP and not args.no_llamacpp
    if not peer:
        print(f"{args.arch}: llama.cpp not compared (llama-cpp-python missing or --no-llamacpp)")
    worst = {"molla": 0.0, "llama.cpp": 0.0}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, f"{args.arch}.gguf")
        n_vocab = write_model(path, args.arch, args.vocab_from)
        m = oracle.Model(path)
        rng = np.random.default_rng(11)
        for n in [3, 9, 17]:
            toks = [int(t) for t in rng.integers(0, n_vocab, n)]
            ref = oracle.run(m, toks)["logprobs"]
            rows = []
            if peer:
                rows.append(("llama.cpp", llamacpp_logits.logits(path, toks, f32_kv=True)["logprobs"]))
            for extra in [[], ["--decode"]]:
                out = subprocess.run(
                    [args.molla, "logits", "--model", path, "--tokens",
                     ",".join(map(str, toks))] + extra,
                    check=True, capture_output=True, text=True).stdout
                rows.append(("molla" + (" decode" if extra else ""), json.loads(out)["logprobs"]))
            for name, lp in rows:
                err, same = top16(ref, lp)
                who = "llama.cpp" if name == "llama.cpp" else "molla"
                worst[who] = max(worst[who], err if same else float("inf"))
                print(f"{args.arch} {n:2d} tokens {name:12s} top16 {err:.2e} top1 {'yes' if same else 'NO'}")
    peer_text = (f"llama.cpp {worst['llama.cpp']:.2e} (max {args.max_peer:g})" if peer
                 else "llama.cpp not compared")
    print(f"{args.arch}: worst top-16 error molla {worst['molla']:.2e} (max {args.max:g}), "
          f"{peer_text}")
    ok = worst["molla"] <= args.max and worst["llama.cpp"] <= args.max_peer
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
