#!/usr/bin/env python3
"""A stand-in for beaconkv-eval's `--mode reason` and `--mode configs` for the tests of
`beaconkv-bench humaneval`.

Every request line ({"id", "turns": [request]}) is answered with one ```python block per
function asked for: the `def` line of the function's prompt and, as its body, the text after
"Body: " in the prompt's docstring. The full cache and beacon write every body; the other
policies write `return None` after the first function. Token counts are a quarter of the
characters (at most --n-tokens generated). FAKE_EVAL_FAIL=reason makes the tool fail after its
first answer line, as the real one does when llama_decode fails.
"""
import json
import os
import re
import sys


def arg(name, default=None):
    a = sys.argv
    return a[a.index(name) + 1] if name in a else default


def policy_budget(config):
    head = config.split("/")[0]
    policy, _, budget = head.partition(":")
    return policy, int(budget) if budget.isdigit() else 0


mode = arg("--mode", "agree")
configs = arg("--configs", "").split(",")
if mode == "configs":
    for c in configs:
        p, b = policy_budget(c)
        if p.removesuffix("+archive") not in ("none", "beacon", "recent", "streaming", "random", "rkv"):
            print(f"error: unknown policy '{p}' in '{c}'", file=sys.stderr)
            sys.exit(1)
        print(f"{c}\tpolicy={p},budget={b}")
    sys.exit(0)
if mode != "reason":
    print(f"error: the fake only knows reason and configs (got '{mode}')", file=sys.stderr)
    sys.exit(1)

n_tokens = int(arg("--n-tokens", "256"))
with open(arg("--tasks"), encoding="utf-8") as f:
    lines = [json.loads(l) for l in f if l.strip()]
fn = re.compile(r"Function \d+ of \d+: `(\w+)`\n```python\n(.*?)\n```", re.S)
results = []
for c in configs:
    policy, budget = policy_budget(c)
    for line in lines:
        text = line["turns"][0]
        blocks = []
        for k, (name, prompt) in enumerate(fn.findall(text)):
            sig = next(l for l in prompt.splitlines() if l.startswith(f"def {name}("))
            body = re.search(r"Body: (.*)", prompt).group(1).strip()
            if policy not in ("none", "beacon") and k > 0:
                body = "return None"
            blocks.append(f"```python\n{sig}\n    {body}\n```\n")
        answer = "Here are the functions.\n\n" + "\n".join(blocks)
        n_prompt = len(text) // 4
        n_gen = max(1, min(n_tokens, len(answer) // 4))
        total = n_prompt + n_gen
        row = {"id": line["id"], "config": c, "policy": policy, "budget": budget,
               "turns": [{"n_prompt": n_prompt, "n_gen": n_gen, "stopped": n_gen < n_tokens,
                          "output": answer}],
               "n_prompt": n_prompt, "n_gen": n_gen,
               "cells_peak": min(budget, total) if budget else total, "prefix_len": 8,
               "evicted": max(0, total - budget) if budget else 0, "compress_events": 2,
               "recalled": 0, "seconds": 0.5}
        print(json.dumps(row), flush=True)
        results.append(row)
        if os.environ.get("FAKE_EVAL_FAIL") == "reason":
            print(f"error: llama_decode returned -1 for '{c}'", file=sys.stderr)
            sys.exit(1)
out = arg("--out")
runs = [{"config": c, "n_gen": sum(r["n_gen"] for r in results if r["config"] == c)} for c in configs]
if out:
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"runs": runs, "results": results}, f)
