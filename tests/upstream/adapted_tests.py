"""Model-agnostic versions of upstream server tests that skip-model-specific.tsv skips.

scripts/upstream-server-suite.sh copies this file (adapted_tests.py, not named test_*.py so that no
pytest run of tests/ collects it outside the suite) to build/upstream-tests/unit/test_adapted.py. Each
test below keeps the upstream test's requests and checks, but derives the token counts it asserts
(stories260K's constants upstream) from the server's own /tokenize, and compares generated text
between slots instead of matching stories260K's words.
"""
import os
import random

import pytest
from utils import *

server: ServerProcess


@pytest.fixture(autouse=True)
def create_server():
    global server
    server = ServerPreset.tinyllama2()


def n_tokens(text: str, add_special: bool = True) -> list[int]:
    res = server.make_request("POST", "/tokenize", data={"content": text, "add_special": add_special, "parse_special": True})
    assert res.status_code == 200
    return res.body["tokens"]


def lcp(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


# upstream: test_completion.py::test_completion_prompt_cache (n_prompt = (40 + r)*5 + 2 there)
def test_completion_prompt_cache_adapted():
    global server
    server.n_slots = 2
    server.kv_unified = True
    server.start()
    rng = random.Random(1234)
    for _ in range(16):
        r = rng.randint(0, 4)
        prompt = (" Hello " + str(r)) * (40 + r)
        n_prompt = len(n_tokens(prompt))
        n_predict = rng.randint(1, 8)
        res = server.make_request("POST", "/completion", data={"prompt": prompt, "n_predict": n_predict})
        assert res.status_code == 200
        assert isinstance(res.body["content"], str) and len(res.body["content"]) > 0
        timings = res.body["timings"]
        assert timings["prompt_n"] + timings["cache_n"] == n_prompt, timings
        assert timings["predicted_n"] == n_predict


# upstream: test_chat_completion.py::test_chat_completion_cached_tokens (77 / 0, 76, 51, 47 there)
def test_chat_completion_cached_tokens_adapted():
    global server
    server.n_slots = 1
    server.start()
    prev: list[int] | None = None
    for user_prompt in ["1 2 3 4 5 6", "1 2 3 4 5 6", "1 2 3 4 5 9", "1 2 3 9 9 9"]:
        messages = [{"role": "system", "content": "Test"}, {"role": "user", "content": user_prompt}]
        res = server.make_request("POST", "/apply-template", data={"messages": messages})
        assert res.status_code == 200
        toks = n_tokens(res.body["prompt"])
        res = server.make_request("POST", "/chat/completions", data={"max_tokens": 8, "messages": messages})
        assert res.status_code == 200
        assert res.body["usage"]["prompt_tokens"] == len(toks)
        want = 0 if prev is None else min(lcp(prev, toks), len(toks) - 1)
        assert res.body["usage"]["prompt_tokens_details"]["cached_tokens"] == want
        prev = toks


# upstream: test_slot_save.py::test_slot_save_restore (21, 84, 6 and "Whiskers|Flana", "Jack|said" there)
def test_slot_save_restore_adapted():
    global server
    server.slot_save_path = "./tmp"
    server.temperature = 0.0
    server.start()
    p_fr, p_de = "What is the capital of France?", "What is the capital of Germany?"
    t_fr, t_de = n_tokens(p_fr), n_tokens(p_de)
    n_diff = len(t_de) - lcp(t_fr, t_de)

    res = server.make_request("POST", "/completion", data={"prompt": p_fr, "id_slot": 1, "cache_prompt": True})
    assert res.status_code == 200
    assert res.body["timings"]["prompt_n"] == len(t_fr)  # all tokens are processed
    n_slot = len(t_fr) + res.body["timings"]["predicted_n"]

    res = server.make_request("POST", "/slots/1?action=save", data={"filename": "slot1_adapted.bin"})
    assert res.status_code == 200
    # the slot holds the prompt and the generated tokens but the last one (never decoded)
    assert res.body["n_saved"] in (n_slot - 1, n_slot)
    n_saved = res.body["n_saved"]

    res = server.make_request("POST", "/completion", data={"prompt": p_de, "id_slot": 1, "cache_prompt": True})
    assert res.status_code == 200
    assert res.body["timings"]["prompt_n"] == n_diff  # only the different part is processed
    content_de = res.body["content"]

    res = server.make_request("POST", "/slots/0?action=restore", data={"filename": "slot1_adapted.bin"})
    assert res.status_code == 200
    assert res.body["n_restored"] == n_saved

    res = server.make_request("POST", "/completion", data={"prompt": p_de, "id_slot": 0, "cache_prompt": True})
    assert res.status_code == 200
    assert res.body["timings"]["prompt_n"] == n_diff
    assert res.body["content"] == content_de

    res = server.make_request("POST", "/completion", data={"prompt": p_de, "id_slot": 1, "cache_prompt": True})
    assert res.status_code == 200
    assert res.body["timings"]["prompt_n"] == 1
    assert res.body["content"] == content_de
