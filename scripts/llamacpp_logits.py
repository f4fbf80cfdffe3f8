#!/usr/bin/env python3
"""llama.cpp reference logits, with the same CLI and JSON contract as oracle.py.

    python3 scripts/llamacpp_logits.py --model M.gguf --tokens 1,2,3 [--out F]

Prints {"tokens": [...], "vocab": N, "logprobs": [N floats]}: the float64
log-softmax of llama.cpp's float32 logits at the LAST position.  The token ids
are evaluated exactly as given (no BOS added), on the CPU with 2 threads.

Needs the optional package llama-cpp-python (`python3 -m pip install
llama-cpp-python`, which builds llama.cpp from source).  It is the
"how far is a mainstream engine from the exact answer" yardstick; the ground
truth is oracle.py.

    --tokenize TEXT   instead prints the ids llama.cpp's tokenizer gives TEXT
                      (BOS added if the model adds one, special tokens parsed).
    --f32-kv          F32 KV cache (default F16).  On a model whose weights are
                      all F32 (scripts/gguf_to_f32.py) llama.cpp then does no
                      rounding below float32, and agrees with oracle.py to
                      ~1e-5: the check that the oracle itself is right.
"""
import argparse
import json
import sys

import numpy as np


def load(model_path, n_ctx=512, f32_kv=False):
    from llama_cpp import GGML_TYPE_F32, Llama
    kv = {"type_k": GGML_TYPE_F32, "type_v": GGML_TYPE_F32} if f32_kv else {}
    return Llama(model_path=model_path, n_ctx=n_ctx, n_batch=n_ctx,
                 n_threads=2, n_threads_batch=2, n_gpu_layers=0,
                 flash_attn=False, logits_all=True, verbose=False, **kv)


def logits(model_path, tokens, f32_kv=False):
    """The oracle.py / `molla logits` JSON object for `tokens`."""
    llm = load(model_path, n_ctx=max(64, len(tokens)), f32_kv=f32_kv)
    vocab = llm.n_vocab()
    if not tokens or any(t < 0 or t >= vocab for t in tokens):
        raise SystemExit(f"llamacpp_logits: tokens must be ids in [0, {vocab})")
    llm.reset()
    llm.eval(list(tokens))  # exactly these ids, no BOS
    last = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
    z = last.astype(np.float64)
    z = z - z.max()
    lp = z - np.log(np.sum(np.exp(z)))
    return {"tokens": list(tokens), "vocab": int(vocab), "logprobs": lp.tolist()}


def tokenize(model_path, text):
    llm = load(model_path)
    return llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", help="comma-separated token ids")
    ap.add_argument("--tokenize", metavar="TEXT")
    ap.add_argument("--out", help="write the JSON here instead of stdout")
    ap.add_argument("--f32-kv", action="store_true",
                    help="F32 KV cache instead of llama.cpp's default F16")
    ap.add_argument("--top", type=int, default=0,
                    help="also print the top K tokens to stderr")
    args = ap.parse_args()
    if args.tokenize is not None:
        print(",".join(map(str, tokenize(args.model, args.tokenize))))
        return
    if args.tokens is None:
        ap.error("--tokens or --tokenize is required")
    tokens = [int(t) for t in args.tokens.replace(" ", "").split(",") if t]
    result = logits(args.model, tokens, args.f32_kv)
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
