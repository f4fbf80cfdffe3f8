#!/usr/bin/env python3
"""Regenerate scripts/prompts.json: token ids of a few test prompts per model.

    python3 scripts/make_prompts.py [--models DIR] [--out scripts/prompts.json]

Tokenizes with llama.cpp (llama-cpp-python), adding BOS where the model adds
one and parsing special tokens.  The ids are committed so that the exactness
harness needs neither llama.cpp nor a tokenizer.
"""
import argparse
import json
import os

from llamacpp_logits import tokenize

CHATML = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
GEMMA = "<start_of_turn>user\n{}<end_of_turn>\n<start_of_turn>model\n"
COMMON = [
    "Paris is the capital of France. The capital of Germany is",
    "def add(a, b):\n    return",
    "Once upon a time, there was a little",
]
MODELS = {  # prompts.json key -> (model file, prompts)
    "smollm2": ("SmolLM2-135M-Instruct.Q4_1.gguf",
                COMMON + [CHATML.format("What is 2+2?")]),
    "qwen2": ("qwen2.5-coder-0.5b-instruct.gguf",
              COMMON + [CHATML.format("What is 2+2?")]),
    "gemma3": ("gemma-3-270m-q4_k_m.gguf",
               COMMON + [GEMMA.format("What is 2+2?")]),
}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=os.environ.get("MOLLA_MODELS") or
                    os.path.expanduser("~/.cache/molla/models"))
    ap.add_argument("--out", default=os.path.join(here, "prompts.json"))
    args = ap.parse_args()
    out = {}
    for key, (fname, prompts) in MODELS.items():
        out[key] = [tokenize(os.path.join(args.models, fname), p) for p in prompts]
        for p, ids in zip(prompts, out[key]):
            assert 6 <= len(ids) <= 20, (key, p, ids)
            print(f"{key:8s} {len(ids):2d} {p!r}")
    with open(args.out, "w") as f:
        f.write("{\n" + ",\n".join(
            f'  "{k}": [\n' + ",\n".join(f"    {json.dumps(ids)}" for ids in v)
            + "\n  ]" for k, v in out.items()) + "\n}\n")


if __name__ == "__main__":
    main()
