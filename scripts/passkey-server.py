#!/usr/bin/env python3
"""Passkey retrieval through a live llama-server: the prompts of `beaconkv-eval --mode passkey`
(a key hidden in ~2,100 tokens of filler at five depths, asked for at the end), sent to
/completion one after another; prints each answer and how many were found.

    scripts/passkey-server.py MODEL [llama-server flags...]
    e.g. scripts/passkey-server.py ~/.cache/beaconkv/models/SmolLM2-135M-Instruct.Q4_1.gguf \\
             --kv-compress beacon --kv-budget 256 --kv-archive 2048
"""
import json
import sys
import urllib.request

from server_util import ROOT, free_port, post, start, stop

FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
HEAD = ("There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
        "I will quiz you about the important information there.\n")


def prompt(key: int, depth: float, n_rep: int = 85) -> str:
    text = HEAD
    for i in range(n_rep):
        if i == int(n_rep * depth):
            text += f"The pass key is {key}. Remember it. {key} is the pass key.\n"
        text += FILLER
    return text + "\nWhat is the pass key? The pass key is"


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    model, flags = sys.argv[1], sys.argv[2:]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = start([ROOT / "build/bin/llama-server", "-m", model, "-c", "4096", "--port", str(port),
                    "-t", "2", "-np", "1", "--slots", *flags], url)
    try:
        found = 0
        for i, depth in enumerate([0.1, 0.3, 0.5, 0.7, 0.9]):
            key = 10000 + (i * 7919 + 4271) % 90000  # beaconkv-eval's keys
            body = {"prompt": prompt(key, depth), "n_predict": 8, "temperature": 0.0, "cache_prompt": False}
            res = post(url + "/completion", body, timeout=600)
            ok = str(key) in res["content"]
            found += ok
            print(f"depth {depth}: {'found' if ok else 'not found'} {res['content']!r}", flush=True)
        kv = json.load(urllib.request.urlopen(url + "/slots"))[0].get("kv_compress")
        print(f"found {found} of 5; slot kv_compress: {kv}")
    finally:
        stop(server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
