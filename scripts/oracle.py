#!/usr/bin/env python3
"""Exact float64 reference forward pass for GGUF models (llama, qwen2, qwen3, smollm3,
phi3, granite, gemma2, gemma3).

    python3 scripts/oracle.py --model M.gguf --tokens 1,2,3 [--out F] [--top K]

Prints one JSON object {"tokens": [...], "vocab": N, "logprobs": [N floats]}:
the float64 log-softmax of the logits at the LAST position -- the same
contract as `molla logits`.  Every weight is dequantized (with the `gguf`
package) to float64 and the whole forward runs in float64, with llama.cpp's
conventions, so this is the ground truth molla's exactness is measured by:

  * a tensor with GGUF dims [ne0, ne1] is a numpy array of shape (ne1, ne0);
    a linear layer is y = W @ x with W of shape (out, in) = (ne1, ne0);
  * RMSNorm: x / sqrt(mean(x^2) + eps) * weight;
  * RoPE: arch llama rotates adjacent pairs (x[2i], x[2i+1]) ("normal"),
    qwen2 rotates (x[i], x[i + n_rot/2]) ("neox"); theta = pos * freq_i,
    freq_i = base^(-2i/n_rot) [/ rope_freqs[i]]; position of token t is t;
  * attention: causal, GQA, scale 1/sqrt(head_dim), softmax;
  * FFN: down(silu(gate(x)) * up(x)); residuals around attention and FFN;
    final output_norm, then output head (tied to token_embd if absent);
  * qwen3: neox rope, per-head RMSNorm of q and k before rope, no biases;
  * smollm3: llama, but layers l with (l + 1) % 4 == 0 apply no rope;
  * granite: llama, with the embeddings times embedding_scale, scores times
    attention.scale (for 1/sqrt(head_dim)), attention and FFN outputs times
    residual_scale before their adds, logits divided by logit_scale (a key
    that is absent or 0 leaves its step out);
  * phi3: neox rope; q/k/v fused in attn_qkv (rows q, k, v) and gate/up in
    ffn_up (2 * n_ff rows, gate first) when the separate tensors are absent;
  * gemma3 (llama.cpp's build of it): embeddings times sqrt(n_embd); neox
    rope; per-head RMSNorm of q and k before rope; RMSNorm of the attention
    and FFN outputs before their residual adds; GELU (tanh form) in place of
    SiLU; layers l with (l + 1) % 6 != 0 attend to the last sliding_window
    positions only, with rope base 10000 and no rope scaling; queries scaled
    by 1/sqrt(head_dim) (1/sqrt(n_embd / n_head) for the 62-layer 27B);
  * gemma2 (llama.cpp's build of it): gemma3 without the q/k norms; layers
    l with (l + 1) % 2 != 0 attend over the last sliding_window (default
    4096) positions with the global rope; attention scores (after the query
    scale) and the final logits soft-capped as c * tanh(x / c), c from
    attn_logit_softcapping (50) and final_logit_softcapping (30); the
    46-layer 27B scales queries by 1/sqrt(n_embd / n_head).
"""
import argparse
import json
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

ROPE_STYLE = {"llama": "normal", "qwen2": "neox", "qwen3": "neox", "smollm3": "normal",
              "phi3": "neox", "granite": "normal",
              "gemma2": "neox", "gemma3": "neox"}
NOPE_EVERY = {"smollm3": 4}  # layer l applies no rope when (l + 1) % N == 0
GEMMA_SWA_PATTERN, GEMMA_SWA_BASE = 6, 10000.0


class Model:
    def __init__(self, path):
        self.reader = GGUFReader(path)
        self.tensors = {t.name: t for t in self.reader.tensors}
        self.arch = self.meta("general.architecture")
        if self.arch not in ROPE_STYLE:
            raise SystemExit(f"oracle: unsupported architecture {self.arch!r}")
        a = self.arch
        self.n_embd = self.meta(f"{a}.embedding_length")
        self.n_layer = self.meta(f"{a}.block_count")
        self.n_head = self.meta(f"{a}.attention.head_count")
        self.n_head_kv = self.meta(f"{a}.attention.head_count_kv", self.n_head)
        self.eps = self.meta(f"{a}.attention.layer_norm_rms_epsilon")
        self.n_ctx_train = self.meta(f"{a}.context_length")
        self.head_dim_k = self.meta(f"{a}.attention.key_length",
                                    self.n_embd // self.n_head)
        self.head_dim_v = self.meta(f"{a}.attention.value_length",
                                    self.head_dim_k)
        self.n_rot = self.meta(f"{a}.rope.dimension_count", self.head_dim_k)
        self.freq_base = self.meta(f"{a}.rope.freq_base", 10000.0)
        self.freq_scale = 1.0
        scaling = self.meta(f"{a}.rope.scaling.type", "none")
        if scaling == "linear":
            self.freq_scale = 1.0 / self.meta(f"{a}.rope.scaling.factor", 1.0)
        elif scaling != "none":
            raise SystemExit(f"oracle: rope scaling {scaling!r} not supported")
        self.gemma = self.arch in ("gemma2", "gemma3")
        self.window, self.swa_pattern, self.swa_base = 0, 0, None
        self.attn_cap = self.final_cap = None
        if self.arch == "gemma3":
            self.window = self.meta(f"{a}.attention.sliding_window")
            self.swa_pattern, self.swa_base = GEMMA_SWA_PATTERN, GEMMA_SWA_BASE
        if self.arch == "gemma2":
            self.window = self.meta(f"{a}.attention.sliding_window", 4096)
            self.swa_pattern = 2
            self.attn_cap = self.meta(f"{a}.attn_logit_softcapping", 50.0)
            self.final_cap = self.meta(f"{a}.final_logit_softcapping", 30.0)
        query_width = self.head_dim_k
        if (self.arch, self.n_layer) in (("gemma2", 46), ("gemma3", 62)):
            query_width = self.n_embd // self.n_head
        self.q_scale = 1.0 / np.sqrt(query_width)
        self.embd_mul = np.sqrt(self.n_embd) if self.gemma else None
        self.residual_mul = self.logit_div = None
        if self.arch == "granite":
            def scalar(key):
                v = self.meta(f"{a}.{key}", 0.0)
                return v if v != 0.0 else None
            self.q_scale = scalar("attention.scale") or self.q_scale
            self.embd_mul = scalar("embedding_scale")
            self.residual_mul = scalar("residual_scale")
            self.logit_div = scalar("logit_scale")
        self.cache = {}

    def sliding(self, layer):
        """Whether `layer` attends over a sliding window (gemma's local layers)."""
        return self.window > 0 and (layer + 1) % self.swa_pattern != 0

    def meta(self, key, default=None):
        field = self.reader.fields.get(key)
        if field is None:
            if default is None:
                raise SystemExit(f"oracle: missing metadata {key}")
            return default
        value = field.contents()
        return float(value) if isinstance(value, (float, np.floating)) else value

    def has(self, name):
        return name in self.tensors

    def weight(self, name, rows=None):
        """Tensor `name` dequantized to float64, numpy shape (ne1, ne0).

        `rows` selects rows (e.g. token ids of an embedding) without caching
        or dequantizing the rest."""
        if rows is None and name in self.cache:
            return self.cache[name]
        t = self.tensors[name]
        shape = tuple(int(n) for n in reversed(t.shape))  # ggml -> numpy order
        data = t.data.reshape(shape[0], -1) if len(shape) > 1 else t.data
        if rows is not None:
            data = data[rows]
            shape = (len(rows),) + shape[1:]
        w = dequantize(data, t.tensor_type).astype(np.float64).reshape(shape)
        if rows is None:
            self.cache[name] = w
        return w

    def linear(self, name, x):
        """x: (T, in) -> (T, out), i.e. y = W @ x for each position (+ bias)."""
        y = x @ self.weight(name + ".weight").T
        if self.has(name + ".bias"):
            y = y + self.weight(name + ".bias")
        return y


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    with np.errstate(over="ignore"):  # exp(-x) = inf for x << 0: silu -> -0
        return x / (1.0 + np.exp(-x))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def rope(x, m, style, local=False):
    """Rotate the first n_rot dims of every head. x: (T, heads, head_dim).

    `local`: a sliding-window layer (gemma3's: base 10000, no scaling)."""
    T, n_rot = x.shape[0], m.n_rot
    i = np.arange(n_rot // 2, dtype=np.float64)
    if local and m.swa_base is not None:
        freqs = m.swa_base ** (-2.0 * i / n_rot)
    else:
        freqs = m.freq_base ** (-2.0 * i / n_rot) * m.freq_scale
    if m.has("rope_freqs.weight"):  # llama3: per-frequency divisors
        freqs = freqs / m.weight("rope_freqs.weight")[: n_rot // 2]
    theta = np.arange(T, dtype=np.float64)[:, None] * freqs[None, :]
    cos, sin = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    out = x.copy()
    if style == "normal":
        a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = a * cos - b * sin
        out[..., 1:n_rot:2] = a * sin + b * cos
    else:  # neox
        h = n_rot // 2
        a, b = x[..., :h], x[..., h:n_rot]
        out[..., :h] = a * cos - b * sin
        out[..., h:n_rot] = a * sin + b * cos
    return out


def attention(m, layer, x):
    T, p = x.shape[0], f"blk.{layer}."
    if m.has(p + "attn_q.weight"):
        q, k, v = (m.linear(p + f"attn_{t}", x) for t in "qkv")
    else:  # phi3: one fused projection, rows q, k, v
        qkv = m.linear(p + "attn_qkv", x)
        nq, nk = m.n_head * m.head_dim_k, m.n_head_kv * m.head_dim_k
        q, k, v = qkv[:, :nq], qkv[:, nq:nq + nk], qkv[:, nq + nk:]
    q = q.reshape(T, m.n_head, m.head_dim_k)
    k = k.reshape(T, m.n_head_kv, m.head_dim_k)
    v = v.reshape(T, m.n_head_kv, m.head_dim_v)
    if m.has(p + "attn_q_norm.weight"):  # gemma3: per-head norms
        q = rms_norm(q, m.weight(p + "attn_q_norm.weight"), m.eps)
        k = rms_norm(k, m.weight(p + "attn_k_norm.weight"), m.eps)
    style, local = ROPE_STYLE[m.arch], m.sliding(layer)
    nope = NOPE_EVERY.get(m.arch, 0)
    if not nope or (layer + 1) % nope != 0:
        q, k = rope(q, m, style, local), rope(k, m, style, local)
    group = m.n_head // m.n_head_kv  # GQA: kv head = q head // group
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    scores = np.einsum("thd,shd->hts", q, k) * m.q_scale
    if m.attn_cap:
        scores = m.attn_cap * np.tanh(scores / m.attn_cap)
    t, s = np.arange(T)[:, None], np.arange(T)[None, :]
    hidden = s > t  # causal mask
    if local:
        hidden |= t - s >= m.window
    scores[:, hidden] = -np.inf
    scores -= scores.max(axis=-1, keepdims=True)
    probs = np.exp(scores)
    probs /= probs.sum(axis=-1, keepdims=True)
    out = np.einsum("hts,shd->thd", probs, v).reshape(T, m.n_head * m.head_dim_v)
    return m.linear(p + "attn_output", out)


def feed_forward(m, layer, x):
    p = f"blk.{layer}."
    act = gelu_tanh if m.gemma else silu
    if m.has(p + "ffn_gate.weight"):
        gate, up = m.linear(p + "ffn_gate", x), m.linear(p + "ffn_up", x)
    else:  # phi3: one fused projection, gate first
        gu = m.linear(p + "ffn_up", x)
        gate, up = gu[:, :gu.shape[1] // 2], gu[:, gu.shape[1] // 2:]
    return m.linear(p + "ffn_down", act(gate) * up)


def forward(m, tokens):
    """Logits (float64) at every position: shape (T, vocab)."""
    x = m.weight("token_embd.weight", rows=list(tokens))
    if m.embd_mul:
        x = x * m.embd_mul
    for layer in range(m.n_layer):
        p = f"blk.{layer}."
        for norm, part, post in [("attn_norm", attention, "post_attention_norm"),
                                 ("ffn_norm", feed_forward, "post_ffw_norm")]:
            h = part(m, layer, rms_norm(x, m.weight(p + norm + ".weight"), m.eps))
            if m.gemma:  # the output normed before its residual add
                h = rms_norm(h, m.weight(p + post + ".weight"), m.eps)
            if m.residual_mul:  # granite
                h = h * m.residual_mul
            x = x + h
    x = rms_norm(x, m.weight("output_norm.weight"), m.eps)
    head = "output.weight" if m.has("output.weight") else "token_embd.weight"
    z = x @ m.weight(head).T
    if m.logit_div:
        z = z / m.logit_div
    if m.final_cap:
        z = m.final_cap * np.tanh(z / m.final_cap)
    return z


def log_softmax(z):
    z = z - z.max()
    return z - np.log(np.sum(np.exp(z)))


def vocab_size(m):
    return int(m.tensors["token_embd.weight"].shape[1])


def run(m, tokens):
    """The `molla logits` JSON contract for token ids `tokens` on Model m."""
    vocab = vocab_size(m)
    if not tokens or any(t < 0 or t >= vocab for t in tokens):
        raise SystemExit(f"oracle: tokens must be non-empty ids in [0, {vocab})")
    if len(tokens) > m.n_ctx_train:
        raise SystemExit(f"oracle: {len(tokens)} tokens > context {m.n_ctx_train}")
    logits = forward(m, tokens)
    return {"tokens": list(tokens), "vocab": vocab,
            "logprobs": log_softmax(logits[-1]).tolist()}


def parse_tokens(s):
    return [int(t) for t in s.replace(" ", "").split(",") if t]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", required=True, type=parse_tokens,
                    help="comma-separated token ids, evaluated as given")
    ap.add_argument("--out", help="write the JSON here instead of stdout")
    ap.add_argument("--top", type=int, default=0,
                    help="also print the top K tokens to stderr")
    args = ap.parse_args()
    result = run(Model(args.model), args.tokens)
    text = json.dumps(result)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    if args.top:
        lp = np.array(result["logprobs"])
        for i in np.argsort(-lp)[: args.top]:
            print(f"{int(i):8d} {lp[i]: .6f}", file=sys.stderr)


if __name__ == "__main__":
    main()
