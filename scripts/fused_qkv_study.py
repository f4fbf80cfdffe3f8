#!/usr/bin/env python3
"""How exact is a decode step with q/k/v folded into the layer before (FUSEQKV)?

    python3 scripts/fused_qkv_study.py --model M.gguf [--prompt K] [--formats f32,f16r,q8_0]

The persistent kernel spends four hand-overs a layer: q/k/v, attention + wo, gate/up, down. Layer
l + 1's q/k/v is linear in what layer l's down step already holds:

    qkv = s * Wqkv diag(g) x_new + b,    x_new = x_old + Wdown h,  s = 1 / sqrt(mean(x_new^2) + eps)
        = s * (P + B h) + b,  P = Wqkv diag(g) x_old,  B = Wqkv diag(g) Wdown

(g: layer l + 1's attn_norm weights, x_old: the residual after layer l's attention, h: layer l's
SwiGLU output). Both x_old and h are in the shared memory of layer l's down step, so its blocks can
hand q/k/v (unscaled) straight to the attention step, and the q/k/v step and its hand-over go. The
engine stores C = [A | B], A = Wqkv diag(g), made at load from the dequantized weights
(crates/cuda/src/fused.rs): C's rounding is the only new error. This script measures it: the
oracle's float64 forward with every layer but the first computing q/k/v as s * (A' x_old + B' h)
+ b, A' and B' rounded to each format (--exact-a: A exact, B alone rounded; --g-apart: A' the
rounded Wqkv times g), against the oracle's
own forward (max |delta log-probability| over the reference's top-16 tokens and over 256 probe ids,
at every position of the prompt), next to molla's decode errors (docs/exactness-decode.md: 1e-3 to
5e-3 on these files) and llama.cpp's (0.1 to 0.7).

Formats: f64 (none: checks the algebra), f32, f16 (plain), f16r (f16 of each row divided by its
largest magnitude, an f32 scale a row), bf16, q8_0 (blocks of 32, an f16 scale), q16 (blocks of
32, int16 with an f32 scale).
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle  # noqa: E402


def round_f16r(b):
    scale = np.abs(b).max(axis=1, keepdims=True)
    scale = np.where(scale == 0, 1.0, scale).astype(np.float32).astype(np.float64)
    return (b / scale).astype(np.float16).astype(np.float64) * scale


def round_blocks(b, qmax, scale_dtype):
    rows, cols = b.shape
    pad = (-cols) % 32
    bb = np.pad(b, ((0, 0), (0, pad))).reshape(rows, -1, 32)
    d = np.abs(bb).max(axis=2, keepdims=True) / qmax
    d = d.astype(scale_dtype).astype(np.float64)
    q = np.where(d == 0, 0, np.round(bb / np.where(d == 0, 1, d)))
    q = np.clip(q, -qmax, qmax)
    return (q * d).reshape(rows, -1)[:, :cols]


def to_bf16(b):
    u = b.astype(np.float32).view(np.uint32)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    return u.view(np.float32).astype(np.float64)


FORMATS = {
    "f64": lambda b: b,
    "f32": lambda b: b.astype(np.float32).astype(np.float64),
    "f16": lambda b: b.astype(np.float16).astype(np.float64),
    "f16r": round_f16r,
    "bf16": to_bf16,
    "q8_0": lambda b: round_blocks(b, 127, np.float16),
    "q16": lambda b: round_blocks(b, 32767, np.float32),
}


A_MODE = "rounded"


def qkv_weights(m, layer):
    p = f"blk.{layer}."
    w = np.concatenate([m.weight(p + f"attn_{t}.weight") for t in "qkv"], axis=0)
    bias = None
    if m.has(p + "attn_q.bias"):
        bias = np.concatenate([m.weight(p + f"attn_{t}.bias") for t in "qkv"])
    return w, bias


def fused_forward(m, tokens, fmt):
    """oracle.forward with layer l >= 1's q/k/v as s * (P + B' h) + b (B' = B in format fmt)."""
    x = m.weight("token_embd.weight", rows=list(tokens))
    T = x.shape[0]
    pending = None  # q/k/v (T, rows) for the next layer, made by this layer's down step
    for layer in range(m.n_layer):
        p = f"blk.{layer}."
        g = m.weight(p + "attn_norm.weight")
        wqkv, bias = qkv_weights(m, layer)
        if pending is None:
            qkv = oracle.rms_norm(x, g, m.eps) @ wqkv.T
            if bias is not None:
                qkv = qkv + bias
        else:
            qkv = pending
        nq, nk = m.n_head * m.head_dim_k, m.n_head_kv * m.head_dim_k
        x = x + attention_from(m, layer, qkv[:, :nq], qkv[:, nq:nq + nk], qkv[:, nq + nk:])
        hn = oracle.rms_norm(x, m.weight(p + "ffn_norm.weight"), m.eps)
        gate, up = m.linear(p + "ffn_gate", hn), m.linear(p + "ffn_up", hn)
        h = oracle.silu(gate) * up
        wdown = m.weight(p + "ffn_down.weight")
        x_new = x + h @ wdown.T
        if layer + 1 < m.n_layer:
            q = f"blk.{layer + 1}."
            g1 = m.weight(q + "attn_norm.weight")
            w1, b1 = qkv_weights(m, layer + 1)
            a = w1 * g1[None, :]
            # C = [A | B] rounded as the engine stores it (blocks of 32 never straddle the two).
            bmat = FORMATS[fmt](a @ wdown)
            if A_MODE == "exact":
                amat = a
            elif A_MODE == "g-apart":
                amat = FORMATS[fmt](w1) * g1[None, :]
            else:
                amat = FORMATS[fmt](a)
            pre = x @ amat.T + h @ bmat.T
            s = 1.0 / np.sqrt(np.mean(x_new * x_new, axis=-1, keepdims=True) + m.eps)
            pending = s * pre + (b1 if b1 is not None else 0.0)
        x = x_new
    x = oracle.rms_norm(x, m.weight("output_norm.weight"), m.eps)
    head = "output.weight" if m.has("output.weight") else "token_embd.weight"
    return x @ m.weight(head).T


def attention_from(m, layer, q, k, v):
    """oracle.attention's body from given q, k, v (llama and qwen2 only)."""
    T = q.shape[0]
    q = q.reshape(T, m.n_head, m.head_dim_k)
    k = k.reshape(T, m.n_head_kv, m.head_dim_k)
    v = v.reshape(T, m.n_head_kv, m.head_dim_v)
    style = oracle.ROPE_STYLE[m.arch]
    q, k = oracle.rope(q, m, style), oracle.rope(k, m, style)
    group = m.n_head // m.n_head_kv
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scores = np.einsum("thd,shd->hts", q, k) * m.q_scale
    hidden = np.arange(T)[None, :] > np.arange(T)[:, None]
    scores[:, hidden] = -np.inf
    scores -= scores.max(axis=-1, keepdims=True)
    probs = np.exp(scores)
    probs /= probs.sum(axis=-1, keepdims=True)
    out = np.einsum("hts,shd->thd", probs, v).reshape(T, m.n_head * m.head_dim_v)
    return m.linear(f"blk.{layer}.attn_output", out)


def log_softmax_rows(z):
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def errors(got, ref):
    """Max |delta log-prob| over each position's reference top 16 and 256 probe ids."""
    lg, lr = log_softmax_rows(got), log_softmax_rows(ref)
    probe = np.linspace(0, ref.shape[1] - 1, 256).astype(int)
    top16 = probe_err = 0.0
    same_top1 = True
    for t in range(ref.shape[0]):
        idx = np.argsort(-lr[t])[:16]
        top16 = max(top16, float(np.abs(lg[t, idx] - lr[t, idx]).max()))
        probe_err = max(probe_err, float(np.abs(lg[t, probe] - lr[t, probe]).max()))
        a, b = int(np.argmax(lg[t])), int(np.argmax(lr[t]))
        if a != b and lr[t, b] - lr[t, a] > 0.05:
            same_top1 = False
    return same_top1, top16, probe_err


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", default="0,1,2,3", help="indices into scripts/prompts.json")
    ap.add_argument("--formats", default="f64,f32,f16,f16r,bf16,q8_0,q16")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--exact-a", action="store_true", help="A = Wqkv diag(g) left exact")
    ap.add_argument("--g-apart", action="store_true",
                    help="A' = the rounded Wqkv times g (g applied at the dot)")
    args = ap.parse_args()
    global A_MODE
    A_MODE = "exact" if args.exact_a else "g-apart" if args.g_apart else "rounded"
    m = oracle.Model(args.model)
    if m.arch not in ("llama", "qwen2"):
        raise SystemExit(f"fused_qkv_study: {m.arch} not covered (llama and qwen2 only)")
    key = {"llama": "smollm2", "qwen2": "qwen2"}[m.arch]
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "prompts.json")) as f:
        prompts = json.load(f)[key]
    out = []
    print("| prompt | tokens | format | top1 | top16 | probe |")
    print("|---|---|---|---|---|---|")
    for pi in (int(i) for i in args.prompts.split(",")):
        tokens = prompts[pi]
        ref = oracle.forward(m, tokens)
        for fmt in args.formats.split(","):
            ok, t16, pr = errors(fused_forward(m, tokens, fmt), ref)
            print(f"| {pi} | {len(tokens)} | {fmt} | {'yes' if ok else 'NO'} | {t16:.2e} | {pr:.2e} |",
                  flush=True)
            out.append({"prompt": pi, "format": fmt, "top1": ok, "top16": t16, "probe": pr})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": os.path.basename(args.model), "results": out}, f, indent=1)


if __name__ == "__main__":
    main()
