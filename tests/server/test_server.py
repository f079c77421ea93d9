"""The patched llama-server (and llama-cli) with KV compression, tested live over HTTP.

Budgets are small so that every run passes its budget many times; outputs are greedy, so two runs of
the same request can be compared token for token.
"""

import http.client
import json
import subprocess
import threading
import time

import pytest

from conftest import ASCII_GRAMMAR, tool

BUDGET = 96
# the server's defaults: the prompt is kept beside the budget (prompt=keep, up to BUDGET cells of it)
KV_DEFAULT = ["--kv-compress", "beacon", "--kv-budget", str(BUDGET), "--kv-window", "16"]
# the budget bounds the whole sequence, prompt included, so the bounds below are the budget itself
KV = [*KV_DEFAULT, "--kv-prompt", "inside"]


def words(n: int, seed: int = 0) -> str:
    """n characters of varied text (the tiny model's vocabulary is bytes: one token per character)."""
    base = "the quick brown fox jumps over the lazy dog while seven wizards quietly hex "
    s = "".join(base[(i * 7 + seed) % len(base)] for i in range(n))
    return s


def kv_of(res) -> dict:
    t = res["timings"]
    assert "kv_cells" in t, f"timings carry no KV compression figures: {t}"
    return t


# ---- long generations stay inside the budget ---------------------------------------------------


def test_long_completion_stays_within_budget_tiny(server, tiny):
    """The defaults: a 100-character prompt (more tokens than the room of BUDGET cells) keeps its
    first BUDGET cells whole, and the answer runs within the budget beside them."""
    s = server(tiny, "-c", "4096", *KV_DEFAULT)
    res = s.complete(words(100), 8 * BUDGET)
    assert res["tokens_predicted"] == 8 * BUDGET
    t = kv_of(res)
    n_prompt = t["prompt_n"]
    kept = min(n_prompt, BUDGET)
    assert t["kv_prompt_cells"] == kept and t["kv_cells_allowed"] == BUDGET + kept, t
    assert kept < t["kv_cells"] <= BUDGET + kept
    assert t["kv_evicted"] >= n_prompt + 8 * BUDGET - (BUDGET + kept) - 1
    kv = s.slot(0)["kv_compress"]
    assert kv["cells_peak"] <= BUDGET + kept and kv["compress_events"] > 0
    m = s.metrics()
    assert m["kv_evicted_total"] == kv["evicted"]
    assert m["kv_compress_events_total"] == kv["compress_events"]
    assert 0 < m["kv_cells_used"] <= BUDGET + kept
    assert m["kv_cells_physical"] < 4096
    assert m["kv_plugin_seconds_total"] > 0
    assert kv["scoring"].startswith("in place (")
    assert kv["reads_pass"] == 0 and kv["reads_capture"] == 0, "K in host memory is read in place"
    status, props = s.get("/props")
    assert status == 200
    assert f"budget={BUDGET}" in props["kv_compress"]["spec"]
    assert props["kv_compress"]["scoring"] == kv["scoring"]
    assert props["kv_compress"]["cells_physical"] == m["kv_cells_physical"]
    # the slot logs it when it is released, just after the response is sent
    deadline = time.time() + 10
    while '"cells_peak":' not in s.log() and time.time() < deadline:
        time.sleep(0.1)
    assert '"cells_peak":' in s.log(), "no per-slot compression log line at the end of the request"


def test_long_completion_stays_within_budget_smollm2(server, smol):
    budget = 128
    s = server(smol, "-c", "4096", "--kv-compress", "beacon", "--kv-budget", str(budget))
    res = s.complete("Write a long story about a lighthouse keeper.", 8 * budget)
    assert res["tokens_predicted"] == 8 * budget
    t = kv_of(res)
    # the default prompt=keep: the prompt's cells beside the budget
    assert t["kv_prompt_cells"] == t["prompt_n"] and t["kv_cells_allowed"] == budget + t["prompt_n"], t
    assert t["kv_cells"] <= t["kv_cells_allowed"]
    assert s.slot(0)["kv_compress"]["cells_peak"] <= t["kv_cells_allowed"]


def test_parallel_slots_are_each_bounded(server, tiny):
    s = server(tiny, "-c", "16384", "-np", "4", *KV)
    results = [None] * 4

    def run(i):
        results[i] = s.complete(words(80, seed=i), 4 * BUDGET, id_slot=i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    for i, res in enumerate(results):
        assert res is not None, f"request {i} did not finish"
        assert res["tokens_predicted"] == 4 * BUDGET
        assert kv_of(res)["kv_cells"] <= BUDGET
    for i in range(4):
        assert s.slot(i)["kv_compress"]["cells_peak"] <= BUDGET
    assert s.metrics()["kv_cells_used"] <= 4 * BUDGET


# ---- state: prompt cache, slot save/restore ------------------------------------------------------


def conversation(s, first: str, second: str, n: int):
    """Two turns of one conversation: the second prompt extends the first turn's prompt + answer."""
    a = s.complete(first, n)
    b = s.complete(first + a["content"] + second, n)
    return a["content"], b["content"]


def test_interleaved_conversations_resume_exactly(server, tiny):
    a1, a2 = words(150, 1), words(40, 2)
    b1 = words(150, 3)
    n = 2 * BUDGET
    fresh = server(tiny, "-c", "4096", "-np", "1", *KV)
    want = conversation(fresh, a1, a2, n)
    fresh.stop()

    s = server(tiny, "-c", "4096", "-np", "1", *KV)
    first = s.complete(a1, n)["content"]
    assert first == want[0]
    s.complete(b1, n)  # another conversation takes the slot: A goes to the prompt cache
    second = s.complete(a1 + first + a2, n)
    assert "kv_cells" in second["timings"]
    assert second["content"] == want[1], "resumed conversation differs from the uninterrupted one"
    t = second["timings"]
    # cache_n: positions not recomputed (upstream's contract); kv_cache_cells: those still in the cache
    assert t["cache_n"] + t["prompt_n"] == second["tokens_evaluated"], t
    assert t["cache_n"] > BUDGET and 0 < t["kv_cache_cells"] <= BUDGET, t


@pytest.mark.parametrize("policy", ["beacon", "recent"])
def test_reused_prompt_continues_as_on_a_fresh_slot(server, tiny, policy):
    # a later request shares 280 characters of the first one's 300 (over 256 tokens); the first request generates
    # 50 tokens within the budget (their queries displace the prompt's), the second compresses many times
    budget = 512
    kv = ["--kv-compress", policy, "--kv-budget", str(budget), "--kv-window", "16"]
    first, second = words(300, 5), words(280, 5) + words(40, 9)
    fresh = server(tiny, "-c", "4096", "-np", "1", *kv)
    want = fresh.complete(second, 3 * budget)["content"]
    fresh.stop()

    s = server(tiny, "-c", "4096", "-np", "1", *kv)
    assert s.complete(first, 50)["timings"]["kv_evicted"] == 0
    res = s.complete(second, 3 * budget)
    # the prompt state was copied every 256 positions: 256 are reused, the rest computed again
    assert res["timings"]["cache_n"] == 256, res["timings"]
    assert res["content"] == want, "the reused prompt continues differently from the fresh slot"


def test_same_prompt_again_after_eviction_continues_as_on_a_fresh_slot(server, tiny):
    # the first request evicted positions of its own prompt: nothing of it can be reused exactly
    prompt = words(400, 6)
    fresh = server(tiny, "-c", "4096", "-np", "1", *KV)
    want = fresh.complete(prompt, 2 * BUDGET)["content"]
    fresh.stop()

    s = server(tiny, "-c", "4096", "-np", "1", *KV)
    s.complete(prompt, 2 * BUDGET)
    res = s.complete(prompt, 2 * BUDGET)
    assert res["timings"]["cache_n"] == 0, res["timings"]
    assert res["content"] == want


def test_slot_save_erase_restore_continues(server, tiny, tmp_path):
    a1, a2 = words(150, 4), words(40, 5)
    n = 2 * BUDGET
    fresh = server(tiny, "-c", "4096", "-np", "1", *KV)
    want = conversation(fresh, a1, a2, n)
    fresh.stop()

    s = server(tiny, "-c", "4096", "-np", "1", "--slot-save-path", str(tmp_path), *KV)
    first = s.complete(a1, n)["content"]
    status, res = s.post("/slots/0?action=save", {"filename": "a.bin"})
    assert status == 200, res
    status, res = s.post("/slots/0?action=erase", {})
    assert status == 200, res
    kv = s.slot(0)["kv_compress"]
    assert kv["cells_in_use"] == 0 and kv["evicted"] == 0, f"erase left plugin state behind: {kv}"
    status, res = s.post("/slots/0?action=restore", {"filename": "a.bin"})
    assert status == 200, res
    assert s.slot(0)["kv_compress"]["evicted"] > 0, "restore did not bring back the plugin state"
    second = s.complete(a1 + first + a2, n)["content"]
    assert second == want[1], "restored slot does not continue like the uninterrupted one"


def test_metrics_counters_never_decrease(server, tiny, tmp_path):
    """The kv_*_total series are server-lifetime counters: erasing, restoring or reusing a slot (which
    replaces its plugin counters) must not lower them."""
    s = server(tiny, "-c", "4096", "-np", "1", "--slot-save-path", str(tmp_path), *KV)
    s.complete(words(100, 16), 4 * BUDGET)
    seen = [s.metrics()]
    assert seen[0]["kv_evicted_total"] > 0 and seen[0]["kv_compress_events_total"] > 0, seen[0]
    status, res = s.post("/slots/0?action=save", {"filename": "m.bin"})
    assert status == 200, res
    status, res = s.post("/slots/0?action=erase", {})
    assert status == 200, res
    seen.append(s.metrics())
    status, res = s.post("/slots/0?action=restore", {"filename": "m.bin"})
    assert status == 200, res
    seen.append(s.metrics())
    s.complete(words(90, 17), 2 * BUDGET)  # a new prompt: the slot's cache (and its counters) start over
    seen.append(s.metrics())
    for before, after in zip(seen, seen[1:]):
        for name, value in before.items():
            if name.endswith("_total"):
                assert after[name] >= value, f"{name} went down: {value} -> {after[name]}"


def test_slot_file_from_uncompressed_server_is_refused(server, tiny, tmp_path):
    plain = server(tiny, "-c", "4096", "-np", "1", "--slot-save-path", str(tmp_path))
    plain.complete(words(100, 6), 16)
    status, res = plain.post("/slots/0?action=save", {"filename": "plain.bin"})
    assert status == 200, res
    plain.stop()

    s = server(tiny, "-c", "4096", "-np", "1", "--slot-save-path", str(tmp_path), *KV)
    status, res = s.post("/slots/0?action=restore", {"filename": "plain.bin"})
    assert status >= 400, f"a slot saved without compression was accepted: {res}"
    assert s.slot(0)["kv_compress"]["cells_in_use"] == 0
    res = s.complete(words(60, 7), 2 * BUDGET)  # the server still serves, bounded
    assert kv_of(res)["kv_cells"] <= BUDGET


# ---- speculative decoding -------------------------------------------------------------------------


def test_speculative_ngram_with_compression(server, tiny):
    s = server(tiny, "-c", "4096", "--spec-type", "ngram-simple", *KV)
    res = s.complete(words(120, 8) * 2, 6 * BUDGET)
    assert res["tokens_predicted"] == 6 * BUDGET
    assert res["timings"].get("draft_n", 0) > 0, "no draft was verified"
    assert kv_of(res)["kv_cells"] <= BUDGET


def test_all_slots_drafting_at_once_fit_the_batch(server, tiny):
    """Compression lowers n_batch to n_ubatch (49 here: 1 + the ngram drafter's 48), and the server's batch
    holds max(n_batch, n_parallel) tokens: four slots drafting at once used to overflow it and abort the
    server. The drafts are shortened to what fits instead."""
    s = server(tiny, "-c", "16384", "-np", "4", "--kv-compress", "beacon", "--kv-budget", "256",
               "--spec-type", "ngram-simple")
    line = "the quick brown fox jumps over the lazy dog "
    prompt = line * 20
    # the answer is held to the prompt's line, so every slot's n-gram drafter finds a full draft at every step
    # and all four draft at once (the random model's free output repeats too rarely to draft on every CPU)
    grammar = f'root ::= ("{line}")+'
    n = 768
    results = [None] * 4

    def run(i):
        results[i] = s.post("/completion", {"prompt": prompt, "n_predict": n, "temperature": 0.0,
                                            "ignore_eos": True, "id_slot": i, "grammar": grammar})

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert s.proc.poll() is None, f"llama-server exited with {s.proc.returncode}:\n{s.log()[-3000:]}"
    assert s.get("/health")[0] == 200
    for i, r in enumerate(results):
        assert r is not None, f"request {i} did not finish"
        status, res = r
        assert status == 200, f"request {i}: HTTP {status}: {res}"
        assert res["tokens_predicted"] == n
        assert res["timings"].get("draft_n", 0) > n // 2, f"request {i}: few drafts verified: {res['timings']}"
        assert res["content"].startswith(line * 3), f"request {i}: {res['content'][:200]!r}"


def test_a_short_prompt_is_not_starved_by_long_ones_on_earlier_slots(server, tiny):
    """Compression lowers the batch to one ubatch (32 tokens at this budget). Prompts fill it slot by slot;
    in upstream's fixed order, slots 0 and 1 processing long prompts took every batch and slot 2's short
    prompt waited for both (under steady traffic on the first slots: without bound). The order rotates
    now, so the short prompt is done long before the long ones."""
    s = server(tiny, "-c", "12288", "-np", "3", "-t", "1", "--kv-compress", "beacon", "--kv-budget", "256")
    done = {}

    def run(slot, prompt):
        res = s.complete(prompt, 1, id_slot=slot, cache_prompt=False)
        done[slot] = (time.time(), res["timings"]["prompt_n"])

    long_runs = [threading.Thread(target=run, args=(i, words(2700, seed=i))) for i in (0, 1)]
    for t in long_runs:
        t.start()
    deadline = time.time() + 30
    while not (s.slot(0)["is_processing"] and s.slot(1)["is_processing"]):
        assert time.time() < deadline and not done, "the long prompts did not start together"
        time.sleep(0.005)
    run(2, words(200, seed=2))
    for t in long_runs:
        t.join(timeout=300)
    assert sorted(done) == [0, 1, 2]
    assert done[0][1] >= 2700 and done[1][1] >= 2700, done  # the long prompts were processed, not cached
    assert done[2][0] < min(done[0][0], done[1][0]), f"the short prompt finished after the long ones: {done}"


def test_a_request_pinned_to_a_busy_slot_leaves_its_work_alone(server, tiny):
    """A request for a busy slot (`id_slot`) waits for it. Upstream's slot selection first ran the RAM prompt
    cache's swap on that slot (save its prompt, load the cached prompt closest to the waiting request),
    replacing the running request's tokens and cells: a running generation continued from the wrong
    context, a prompt being processed was left longer than the request's own and the slot never finished
    (with compression, prompts take many small batches, so this window is wide)."""
    s = server(tiny, "-c", "8192", "-np", "2", "-t", "1", "--cache-ram", "64",
               "--kv-compress", "beacon", "--kv-budget", "256")
    cached, other = words(300, seed=21), words(300, seed=22)
    s.complete(cached, 8, id_slot=0)
    s.complete(other, 8, id_slot=0)  # slot 0's previous prompt goes to the RAM cache
    long_prompt = words(2500, seed=23)
    want = s.complete(long_prompt, 600, id_slot=1, cache_prompt=False)["content"]

    got = {}
    runner = threading.Thread(target=lambda: got.update(
        res=s.complete(long_prompt, 600, id_slot=0, cache_prompt=False)))
    runner.start()
    deadline = time.time() + 30
    while not s.slot(0)["is_processing"]:
        assert time.time() < deadline, "the long request did not start"
        time.sleep(0.005)
    # a request for the cached prompt, pinned to the busy slot, while it processes its prompt and generates
    waiting = threading.Thread(target=lambda: got.update(waiting=s.complete(cached, 8, id_slot=0)))
    waiting.start()
    runner.join(timeout=120)
    waiting.join(timeout=120)
    assert "res" in got, f"the running request never finished:\n{s.log()[-2000:]}"
    assert got["res"]["content"] == want, "the running request's text changed when another request waited for its slot"
    assert "waiting" in got, "the waiting request never ran"


def test_speculative_draft_model_with_compression(server, tiny):
    s = server(tiny, "-c", "4096", "-md", str(tiny), "--spec-type", "draft-simple", "--spec-draft-n-max", "8",
               "--spec-draft-p-min", "0", *KV)
    res = s.complete(words(120, 9), 6 * BUDGET)
    assert res["tokens_predicted"] == 6 * BUDGET
    assert res["timings"].get("draft_n", 0) > 0, "no draft was verified"
    assert kv_of(res)["kv_cells"] <= BUDGET
    # the target context is compressed; the draft model's context keeps its full cache (one attachment)
    assert s.log().count("KV compression on") == 1, s.log()[-3000:]


# ---- cancellation and bad input -------------------------------------------------------------------


def test_cancelled_stream_frees_slot_and_state(server, tiny, tmp_path):
    s = server(tiny, "-c", "4096", "--slot-save-path", str(tmp_path), *KV)
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
    body = json.dumps({"prompt": words(100, 10), "n_predict": 4000, "stream": True,
                       "ignore_eos": True, "temperature": 0.0, **s.body})
    conn.request("POST", "/completion", body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 200
    for _ in range(20):
        assert r.readline()
    conn.close()  # the client goes away mid-stream

    deadline = time.time() + 60
    while s.slot(0)["is_processing"]:
        assert time.time() < deadline, "slot still busy 60 s after the client left"
        time.sleep(0.2)
    status, res = s.post("/slots/0?action=erase", {})
    assert status == 200, res
    kv = s.slot(0)["kv_compress"]
    assert kv["cells_in_use"] == 0 and kv["evicted"] == 0, f"plugin state survived the erase: {kv}"
    assert kv_of(s.complete(words(50, 11), 2 * BUDGET))["kv_cells"] <= BUDGET


def test_prompt_kept_whole_on_top_of_the_budget(server, tiny):
    """--kv-prompt keep (the default): a 300-token prompt stays whole while the answer runs within the budget
    beside it (the tiny model's prompt has more tokens than characters); the timings say how many cells the prompt holds and how many the sequence may."""
    s = server(tiny, "-c", "4096", *KV_DEFAULT, "--kv-prompt-max", "600")
    res = s.complete(words(300, 3), 4 * BUDGET)
    t = kv_of(res)
    n_prompt = res["timings"]["prompt_n"]
    assert t["kv_prompt_cells"] == n_prompt, t
    assert t["kv_cells_allowed"] == BUDGET + n_prompt, t
    assert n_prompt < t["kv_cells"] <= BUDGET + n_prompt, t
    assert t["kv_evicted"] > 0
    # a prompt longer than --kv-prompt-max keeps its first 600 cells
    res = s.complete(words(700, 5), 8)
    t = kv_of(res)
    assert res["timings"]["prompt_n"] > 600
    assert t["kv_prompt_cells"] == 600 and t["kv_cells"] <= BUDGET + 600, t


def test_prompt_longer_than_context_gets_400(server, tiny):
    s = server(tiny, "-c", "1024", *KV)
    status, res = s.post("/completion", {"prompt": words(1200, 12), "n_predict": 4})
    assert status == 400, res


@pytest.mark.parametrize("flag,value", [("--kv-budget", "-5"), ("--kv-window", "100000"),
                                        ("--kv-compress", "lru"), ("--kv-prefix", "half"),
                                        ("--kv-prompt", "all"), ("--kv-prompt-max", "-1")])
def test_bad_flag_stops_startup_naming_it(tiny, flag, value):
    args = [str(tool("llama-server")), "-m", str(tiny), "--port", "0", flag, value]
    if flag != "--kv-budget":
        args += ["--kv-budget", "256"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert flag in out.stdout + out.stderr, (out.stdout + out.stderr)[-2000:]


def test_policy_none_matches_no_flags(server, tiny):
    prompt = words(200, 13)
    plain = server(tiny, "-c", "2048")
    want = plain.complete(prompt, 200)["content"]
    plain.stop()
    none = server(tiny, "-c", "2048", "--kv-compress", "none")
    got = none.complete(prompt, 200)
    assert got["content"] == want
    assert got["timings"]["kv_evicted"] == 0


# ---- llama-cli -------------------------------------------------------------------------------------


def test_llama_cli_single_turn_generates_past_budget(tiny):
    out = subprocess.run(
        [str(tool("llama-cli")), "-m", str(tiny), "-p", words(60, 14), "-n", str(6 * BUDGET),
         "-st", "--ignore-eos", "--temp", "0", "-t", "2", "-c", "2048", *KV, "-v",
         "--grammar", ASCII_GRAMMAR],
        capture_output=True, timeout=300, stdin=subprocess.DEVNULL,
    )
    log = (out.stdout + out.stderr).decode(errors="replace")
    assert out.returncode == 0, log[-3000:]
    assert "KV compression on" in log
    line = [l for l in log.splitlines() if "kv compression: {" in l]
    assert line, log[-3000:]
    kv = json.loads(line[-1].split("kv compression: ", 1)[1])
    assert kv["cells_peak"] <= BUDGET and kv["evicted"] > 0


# ---- a cache layout the plugin refuses --------------------------------------------------------------


def test_refused_layout_runs_with_the_full_cache(server):
    """A recurrent-only model (Mamba-2) has no attention cache to evict: the plugin is refused at
    attach, and the context is recreated with the full cache instead of the one sized for the budget."""
    from conftest import ROOT
    model = ROOT / "build/models/tiny-mamba2.gguf"
    if not model.exists():
        subprocess.run([str(ROOT / "build/venv/bin/python"), str(ROOT / "scripts/make_tiny_hybrid_gguf.py"),
                        "mamba2", str(model)], check=True, timeout=300)
    s = server(model, "-c", "2048", *KV)
    log = s.log()
    assert log.count("KV plugin not attached") == 1, log[-3000:]
    assert "recreating the context with the full, uncompressed KV cache" in log
    res = s.complete(words(60, 15), 8 * BUDGET)
    assert res["tokens_predicted"] == 8 * BUDGET
    assert "kv_cells" not in res["timings"]
    status, props = s.get("/props")
    assert status == 200 and props["kv_compress"] is None


# ---- the archive of evicted cells --------------------------------------------------------------


def test_archive_is_reported_and_restored_with_the_slot(server, tiny, tmp_path):
    archive = ["--kv-archive", "256", "--kv-compress-spec", "page=8,recall_every=1"]
    s = server(tiny, "-c", "4096", "-np", "1", "--slot-save-path", str(tmp_path), *KV, *archive)
    res = s.complete(words(100), 4 * BUDGET)
    assert res["tokens_predicted"] == 4 * BUDGET
    assert 0 < kv_of(res)["kv_cells"] <= BUDGET
    kv = s.slot(0)["kv_compress"]
    assert kv["cells_peak"] <= BUDGET
    assert 0 < kv["archived"] <= 256 and kv["archive_bytes"] > 0, kv
    # every cell that left the cache is in the archive (or was dropped when it was full)
    m = s.metrics()
    assert m["kv_archive_bytes"] == kv["archive_bytes"]
    assert m["kv_recalled_total"] == kv["recalled"]
    status, props = s.get("/props")
    assert "archive=256" in props["kv_compress"]["spec"]
    # the archive rides in the slot's saved state
    status, res = s.post("/slots/0?action=save", {"filename": "a.bin"})
    assert status == 200, res
    s.post("/slots/0?action=erase", {})
    assert s.slot(0)["kv_compress"]["archived"] == 0
    status, res = s.post("/slots/0?action=restore", {"filename": "a.bin"})
    assert status == 200, res
    assert s.slot(0)["kv_compress"]["archived"] == kv["archived"]


def passkey_prompt(key: int, n_rep: int = 85, depth: float = 0.5) -> str:
    """A number hidden in ~2,100 tokens of filler, asked for at the end (beaconkv-eval's passkey)."""
    filler = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
    text = ("There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
            "I will quiz you about the important information there.\n")
    for i in range(n_rep):
        if i == int(n_rep * depth):
            text += f"The pass key is {key}. Remember it. {key} is the pass key.\n"
        text += filler
    return text + "\nWhat is the pass key? The pass key is"


def test_archive_brings_back_what_the_question_quotes_smollm2(server, smol):
    # the question ends with the words the needle began with: the prompt chunk that holds them
    # recalls the needle before it is computed, and the key is answered at 256 cells, which the
    # method's logit scores alone cannot (they keep a few of the needle's tokens and answer with
    # filler; the default probability scores keep the needle without the archive)
    key = 30109
    answers = {}
    for name, extra in [("beacon", []), ("archive", ["--kv-archive", "2048"])]:
        s = server(smol, "-c", "4096", "--kv-compress", "beacon", "--kv-budget", "256",
                   "--kv-compress-spec", "score=logit,prompt=inside", *extra)
        res = s.complete(passkey_prompt(key), 8, ignore_eos=False)
        assert kv_of(res)["kv_cells"] <= 256
        answers[name] = (res["content"], s.slot(0)["kv_compress"])
        s.stop()
    content, kv = answers["archive"]
    assert str(key) in content, answers
    assert kv["recalled"] > 0 and kv["cells_peak"] <= 256, kv
    assert str(key) not in answers["beacon"][0], answers


def test_archive_with_a_streaming_policy_stops_startup(tiny):
    out = subprocess.run(
        [str(tool("llama-server")), "-m", str(tiny), "--kv-compress", "streaming", "--kv-archive", "64",
         "--port", "0"],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode != 0
    assert "--kv-archive" in out.stderr, out.stderr[-2000:]


# ---- a request's own budget and policy -------------------------------------------------------------


def test_request_budget_holds_for_that_request_only(server, tiny):
    s = server(tiny, "-c", "4096", *KV)
    own = BUDGET // 2
    t = kv_of(s.complete(words(60, 21), 6 * BUDGET, kv_budget=own))
    assert 0 < t["kv_cells"] <= own and t["kv_evicted"] > 0
    kv = s.slot(0)["kv_compress"]
    assert (kv["budget"], kv["policy"]) == (own, "beacon")
    assert 0 < kv["cells_peak"] <= own
    # the next request on the slot, without kv_budget: the server's budget again
    t = kv_of(s.complete(words(60, 22), 6 * BUDGET))
    assert own < t["kv_cells"] <= BUDGET
    kv = s.slot(0)["kv_compress"]
    assert kv["budget"] == BUDGET and own < kv["cells_peak"] <= BUDGET


def test_request_policy_gives_what_a_server_on_that_policy_gives(server, tiny):
    prompt = words(60, 23)
    streaming = server(tiny, "-c", "4096", *[v if v != "beacon" else "streaming" for v in KV])
    want = streaming.complete(prompt, 4 * BUDGET)["content"]
    streaming.stop()
    s = server(tiny, "-c", "4096", *KV)
    got = s.complete(prompt, 4 * BUDGET, kv_compress="streaming")
    assert got["content"] == want
    assert kv_of(got)["kv_cells"] <= BUDGET
    assert s.slot(0)["kv_compress"]["policy"] == "streaming"
    assert s.complete(prompt, 4 * BUDGET)["content"] != want, "beacon evicts other cells than streaming"
    assert s.slot(0)["kv_compress"]["policy"] == "beacon"


def test_bad_request_values_get_400_naming_the_field(server, tiny):
    # budget 96, window 16: min = budget*7/8 must hold window + 1 = 17 cells, so 20..=96
    s = server(tiny, "-c", "4096", *KV)
    allowed = "allowed here: beacon, streaming, random"
    cases = [
        ({"kv_budget": 19}, "kv_budget", "allowed range 20..=96"),
        ({"kv_budget": BUDGET + 1}, "kv_budget", "allowed range 20..=96"),
        ({"kv_budget": -1}, "kv_budget", "allowed range 20..=96"),
        ({"kv_budget": "64"}, "kv_budget", "integer"),
        ({"kv_compress": "lru"}, "kv_compress", allowed),
        ({"kv_compress": "recent"}, "kv_compress", allowed),
        ({"kv_compress": "none"}, "kv_compress", allowed),
        ({"kv_compress": 3}, "kv_compress", "policy name"),
    ]
    for extra, field, says in cases:
        for path in ["/completion", "/v1/completions"]:
            status, res = s.post(path, {"prompt": "hello", "n_predict": 4, **extra})
            msg = res["error"]["message"] if isinstance(res, dict) else res
            assert status == 400 and msg.startswith(field + ":") and says in msg, (path, extra, status, msg)
    assert s.slot(0)["kv_compress"]["budget"] == BUDGET
    plain = server(tiny, "-c", "4096")
    status, res = plain.post("/completion", {"prompt": "hello", "n_predict": 4, "kv_budget": 64})
    assert status == 400 and "KV compression is off" in res["error"]["message"], res
    assert plain.complete("hello", 4, kv_budget=None)["tokens_predicted"] == 4
