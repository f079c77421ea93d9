#!/usr/bin/env python3
"""Soak test of the patched llama-server: N minutes of mixed traffic on 4 compressed slots.

    build/venv/bin/python scripts/soak-server.py --minutes 2 [--model build/models/tiny.gguf]
        [--server build/bin/llama-server] [--out build/soak] [--budget 256] [--archive 2048]

Two phases, each on its own server on 127.0.0.1 (free port; started, and always killed, by this
script), `-np 4` with `--kv-compress beacon`, the archive and `--slot-save-path`:

- main (about 80% of the time): four client threads mix long `ignore_eos` generations past 8x the
  budget, chats and multi-turn conversations reusing the prompt cache, streams dropped after a few
  chunks, invalid requests and slot save/erase/restore;
- speculative (the rest, at least 20 s): the same server flags plus `--spec-type ngram-simple`, with
  four threads sending text that repeats itself, so every slot drafts at once. Speculation is a
  server flag (no request can turn it off), and 4 slots drafting together exceed the server's batch
  (n_batch is lowered to n_ubatch under compression): the server shortens the drafts to fit (it used
  to abort), and a separate phase keeps such a failure from hiding everything the main phase checks.

Pollers read /slots, /metrics, /health and the server's VmRSS throughout.

Exact comparisons (same seeded request, restored slot) only hold when the batch the request runs in
is the same: with compression, how a prompt is split into ubatches decides where compression passes
fall. So they run at checkpoints, in a quiet window: the load threads finish their requests and
wait, the check runs alone on the server, then the load resumes. Checkpoint 0 runs before any load.

Exit code 0 when every invariant holds, 1 when one fails, 2 when the run could not start. The
report (report.json, report.md) and the server's log go to --out.
"""

import argparse
import collections
import contextlib
import http.client
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import server_util
from server_util import ROOT, free_port

# the tiny model has random weights: a grammar keeps its output printable ASCII (greedy sampling under a
# grammar stays deterministic); a real model needs none
ASCII_GRAMMAR = "root ::= [a-z ]+"
GRACE_S = 120  # past --minutes: start-up of the two servers, the last drain and checkpoint, stopping
MAX_DETAILS = 8  # failure details kept per invariant (all are counted)
MAX_STACK_DUMPS = 3  # server thread stacks (gdb) taken when a request hangs or a slot stays busy

INVARIANTS = {
    "alive": "server never crashes (running until stopped, /health answers)",
    "answered": "every request gets an answer within its time limit",
    "no_5xx": "no 5xx response",
    "invalid_4xx": "invalid requests (bad JSON, wrong types, too long, bad slot actions) get a 4xx",
    "budget": "every slot's cells stay within the budget (/slots and timings)",
    "long_gen": "long ignore_eos generations reach n_predict (> 8x budget)",
    "counters": "/metrics *_total counters never decrease",
    "restore_exact": "a slot restored after minutes of load continues exactly as one restored at the save",
    "restore_roundtrip": "slot save/erase/restore under load: 2xx, n_restored == n_saved",
    "same_text": "the same greedy request gives the same text at every checkpoint",
    "slots_free": "every slot is idle once the clients are done (dropped streams included)",
    "plugin_active": "the plugin stays active on every slot (no fallback)",
    "speculative": "ngram drafts were made and verified",
    "rss": "VmRSS minus archive bytes grows by at most the bound after warm-up",
    "on_time": "the run ends within --minutes + grace",
}


def words(n: int, seed: int) -> str:
    """n words of varied text, different for each seed."""
    vocab = ("the quick brown fox jumps over a lazy dog while seven wizards quietly hex "
             "every lighthouse keeper counts ships and stars along the northern coast").split()
    rng = random.Random(seed)
    return " ".join(rng.choice(vocab) for _ in range(n))


class Gate:
    """Load requests enter and leave; a checkpoint closes the gate and waits until none is in flight."""

    def __init__(self):
        self.cv = threading.Condition()
        self.active = 0
        self.closed = False

    @contextlib.contextmanager
    def load(self, stop: threading.Event):
        with self.cv:
            while self.closed and not stop.is_set():
                self.cv.wait(0.2)
            self.active += 1
        try:
            yield
        finally:
            with self.cv:
                self.active -= 1
                self.cv.notify_all()

    def close(self, timeout: float) -> bool:
        with self.cv:
            self.closed = True
            end = time.time() + timeout
            while self.active and time.time() < end:
                self.cv.wait(0.2)
            return self.active == 0

    def open(self):
        with self.cv:
            self.closed = False
            self.cv.notify_all()


class Soak:
    def __init__(self, args):
        self.args = args
        self.model = Path(args.model)
        self.extra = {"grammar": ASCII_GRAMMAR} if self.model.name.startswith("tiny") else {}
        self.budget = args.budget
        # the default prompt=keep holds up to budget prompt cells (--kv-prompt-max 0) beside the budget
        self.limit = 2 * self.budget
        self.np = 4
        self.n_ctx_slot = args.ctx_slot
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.lock = threading.Lock()
        self.checks = collections.Counter()  # invariant -> times checked
        self.fails = collections.Counter()  # invariant -> times failed
        self.details = collections.defaultdict(list)  # invariant -> first failure details
        self.requests = collections.Counter()  # "kind status" -> count
        self.figures = {}  # reported figures (not invariants)
        self.stop = threading.Event()  # load threads and pollers stop
        self.gate = Gate()
        self.events = collections.deque(maxlen=64)  # recent slot actions, to explain counter drops
        self.rss = []  # (t, VmRSS bytes, archive bytes)
        self.archive_bytes = 0
        self.proc = None
        self.phase = "start"
        self.cmds = {}  # phase -> server command line
        self.overran = False
        self.t0 = time.time()
        self.dumps = []  # files of server stacks taken on a hang

    # ---- bookkeeping ----------------------------------------------------------------------------

    def check(self, name: str, ok: bool, detail=None):
        with self.lock:
            self.checks[name] += 1
            if not ok:
                self.fails[name] += 1
                if len(self.details[name]) < MAX_DETAILS:
                    d = detail() if callable(detail) else detail
                    self.details[name].append({"phase": self.phase, "t_s": round(time.time() - self.t0, 1),
                                               "detail": d})
                    print(f"[soak] FAIL {name}: {json.dumps(d)[:600]}", flush=True)
        if not ok and name in ("answered", "slots_free", "alive"):
            self.diagnose(name)

    def diagnose(self, why: str):
        """A hang: the server's thread stacks (gdb, when installed) and its slots, into --out, so that a
        failure on a machine one cannot log into still says where the server was."""
        with self.lock:
            if len(self.dumps) >= MAX_STACK_DUMPS or self.proc is None or self.proc.poll() is not None:
                return
            path = self.out / f"hang-{self.phase}-{len(self.dumps) + 1}.txt"
            self.dumps.append(str(path))
        parts = [f"why: {why}, phase {self.phase}, t={time.time() - self.t0:.1f} s"]
        if shutil.which("gdb"):
            try:
                r = subprocess.run(["gdb", "-p", str(self.proc.pid), "-batch", "-ex", "thread apply all bt 30"],
                                   capture_output=True, text=True, timeout=120)
                parts.append(r.stdout[-60000:] + r.stderr[-2000:])
            except (OSError, subprocess.TimeoutExpired) as e:
                parts.append(f"gdb failed: {e!r}")
        else:
            parts.append("no gdb on this machine: no stacks")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
            conn.request("GET", "/slots")
            parts.append("/slots: " + conn.getresponse().read().decode(errors="replace"))
        except (OSError, http.client.HTTPException) as e:
            parts.append(f"/slots: no answer ({e!r})")
        path.write_text("\n\n".join(parts) + "\n")
        print(f"[soak] hang diagnosis: {path}", flush=True)

    def note(self, key: str, n: int = 1):
        with self.lock:
            self.figures[key] = self.figures.get(key, 0) + n

    # ---- HTTP ---------------------------------------------------------------------------------------

    def call(self, method: str, path: str, body=None, raw: str = None, timeout: float = 60, kind: str = ""):
        """One request on its own connection: (status, parsed JSON or text); status None if no answer.

        Every answer is checked for 5xx here, so no request kind can forget it."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        data = raw if raw is not None else (None if body is None else json.dumps(body))
        try:
            conn.request(method, path, data, {"Content-Type": "application/json"})
            r = conn.getresponse()
            text = r.read().decode(errors="replace")
            status = r.status
        except (OSError, http.client.HTTPException) as e:
            # after the server was stopped on purpose a failed request is expected, not a finding
            if not self.stopping:
                self.check("answered", False, {"kind": kind, "path": path, "error": repr(e), "timeout_s": timeout,
                                               "body": (data or "")[:300], "server_exit": self.proc.poll()})
            if self.proc.poll() is not None:
                self.stop.set()
            return None, repr(e)
        finally:
            conn.close()
        self.check("answered", True)
        with self.lock:
            self.requests[f"{kind or path.split('?')[0]} {status}"] += 1
        self.check("no_5xx", status < 500, lambda: {"kind": kind, "path": path, "status": status,
                                                    "body": (data or "")[:300], "response": text[:500]})
        try:
            return status, json.loads(text)
        except json.JSONDecodeError:
            return status, text

    @property
    def stopping(self) -> bool:
        return self.proc is None or self.proc.poll() is not None and self.stopped_on_purpose

    def complete(self, prompt, n_predict: int, kind: str, timeout: float = 600, **extra):
        body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0.0, "cache_prompt": True,
                **self.extra, **extra}
        status, res = self.call("POST", "/completion", body, timeout=timeout, kind=kind)
        if status == 200:
            self.check_timings(res, kind)
        return status, res

    def check_timings(self, res: dict, kind: str):
        t = res.get("timings", {})
        self.check("budget", 0 <= t.get("kv_cells", -1) <= t.get("kv_cells_allowed", -1) <= self.limit,
                   lambda: {"kind": kind, "where": "timings", "timings": t})

    def slots(self):
        status, res = self.call("GET", "/slots", timeout=30, kind="GET /slots")
        return res if status == 200 else None

    # ---- server ---------------------------------------------------------------------------------

    def start_server(self, speculative: bool):
        self.port = free_port()
        self.save_dir = Path(tempfile.mkdtemp(prefix="beaconkv-soak-slots-"))
        self.log_path = self.out / f"server-{self.phase}.log"
        self.cmd = [
            self.args.server, "-m", str(self.model), "--host", "127.0.0.1", "--port", str(self.port),
            "-t", str(self.args.threads), "-np", str(self.np), "-c", str(self.np * self.n_ctx_slot),
            "--kv-compress", "beacon", "--kv-budget", str(self.budget), "--kv-archive", str(self.args.archive),
            *(["--spec-type", "ngram-simple"] if speculative else []), "--slot-save-path", str(self.save_dir),
            # the RAM prompt cache is part of the mix, capped so that its filling cannot pass for a leak
            "--cache-ram", str(self.args.cache_ram),
            "--metrics", "--slots", "--no-ui",
        ]
        self.stopped_on_purpose = False
        self._log = open(self.log_path, "w")
        # started here, not by server_util.start, so that the watchdog can kill it while it starts;
        # stop_server() ends it whatever happens
        self.proc = subprocess.Popen(self.cmd, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)  # a Ctrl-C in the terminal reaches us only
        try:
            server_util.wait_healthy(f"http://127.0.0.1:{self.port}", self.proc)
        except server_util.ServerError as e:
            raise RuntimeError(f"{e} (log: {self.log_path})") from None

    def stop_server(self):
        if self.proc is None:
            return
        self.stopped_on_purpose = True
        server_util.stop(self.proc, 15)
        self._log.close()
        shutil.rmtree(self.save_dir, ignore_errors=True)

    # ---- pollers --------------------------------------------------------------------------------

    def poll_slots(self):
        """Cells within budget + prompt room and the plugin active, on every slot, twice a second."""
        while not self.stop.wait(0.5):
            slots = self.slots()
            if slots is None:
                continue
            total = 0
            for s in slots:
                kv = s.get("kv_compress") or {}
                self.check("budget", 0 <= kv.get("cells_in_use", -1) <= self.limit
                           and kv.get("cells_peak", -1) <= self.limit,
                           lambda: {"where": "/slots", "slot": s["id"], "kv_compress": kv})
                self.check("plugin_active", kv.get("active") is True, lambda: {"slot": s["id"], "kv_compress": kv})
                total += kv.get("archive_bytes", 0)
            self.archive_bytes = total

    def poll_metrics(self):
        """Every *_total series (labels included) must be >= its last value; also /health and VmRSS."""
        last = {}
        while not self.stop.wait(1.0):
            status, _ = self.call("GET", "/health", timeout=30, kind="GET /health")
            if self.stopping:  # stopped on purpose (end of phase, or the watchdog): not a crash
                break
            self.check("alive", status == 200 and self.proc.poll() is None,
                       lambda: {"health": status, "returncode": self.proc.poll()})
            try:
                rss = next(int(l.split()[1]) * 1024 for l in open(f"/proc/{self.proc.pid}/status")
                           if l.startswith("VmRSS:"))
                if self.phase == "main":
                    self.rss.append((time.time() - self.phase_t0, rss, self.archive_bytes))
            except (OSError, StopIteration):
                pass
            status, text = self.call("GET", "/metrics", timeout=30, kind="GET /metrics")
            if status != 200:
                continue
            for line in text.splitlines():
                if not line.startswith("llamacpp:"):
                    continue
                name, value = line.rsplit(" ", 1)
                if not name.split("{")[0].endswith("_total"):
                    continue
                v = float(value)
                if name in last:
                    prev = last[name]
                    self.check("counters", v >= prev, lambda: {
                        "series": name, "before": prev, "now": v,
                        "recent_slot_actions": list(self.events)[-6:]})
                last[name] = v
            self.figures[f"{self.phase} metrics_last"] = {k: v for k, v in last.items() if "per_pos" not in k}

    def watchdog(self):
        """Past --minutes + grace, kill the server: every request then fails fast and the run ends."""
        while not self.stop_all.wait(1.0):
            if time.time() > self.hard_deadline:
                self.check("on_time", False, {"overran_s": round(time.time() - self.hard_deadline, 1)})
                self.stopped_on_purpose = True
                self.overran = True
                self.proc.kill()
                self.stop.set()
                return

    # ---- load ---------------------------------------------------------------------------------------

    def loop(self, name: str, step, max_iters: int = 100000):
        """Run step(i, rng) until the load ends: bounded in count and, through request timeouts, in time."""
        rng = random.Random(hash(name) & 0xFFFF)
        for i in range(max_iters):
            if self.stop.is_set() or time.time() > self.load_end:
                break
            with self.gate.load(self.stop):
                if self.stop.is_set():
                    break
                step(i, rng)
            self.note(f"iterations {name}")

    def long_step(self, i, rng):
        """A generation 8x the budget and more, sampled or greedy, from a short or a long prompt."""
        n = 8 * self.budget + 64
        prompt = words(rng.choice([20, 600]), seed=i)
        # the long prompt goes as its first 1,200 tokens, so prompt + n_predict stay inside the slot's context
        # in any tokenizer (characters per token vary from model to model)
        status, tok = self.call("POST", "/tokenize", {"content": prompt}, timeout=60, kind="tokenize")
        if status != 200:
            return
        prompt = tok["tokens"][:1200]
        status, res = self.complete(prompt, n, "long", ignore_eos=True, temperature=rng.choice([0.0, 0.8]),
                                    seed=i, id_slot=rng.choice([-1, 0, 1, 2, 3]))
        if status == 200:
            self.check("long_gen", res.get("tokens_predicted") == n,
                       lambda: {"n_predict": n, "tokens_predicted": res.get("tokens_predicted"),
                                "stop_type": res.get("stop_type")})
        else:
            self.check("long_gen", False, {"status": status, "response": str(res)[:300]})

    def chat_step(self, i, rng):
        """A short chat, or a 3-turn conversation pinned to one slot so the next turn reuses its prompt."""
        body = {"max_tokens": 24, "temperature": 0.7, "seed": i, "cache_prompt": True, **self.extra}
        if i % 2 == 0:
            msgs = [{"role": "user", "content": words(12, seed=1000 + i)}]
            status, res = self.call("POST", "/v1/chat/completions", {**body, "messages": msgs}, timeout=300,
                                    kind="chat")
            return
        slot = rng.randrange(self.np)
        msgs = [{"role": "system", "content": words(80, seed=2000 + i)}]
        for turn in range(3):
            msgs.append({"role": "user", "content": words(10, seed=3000 + 10 * i + turn)})
            status, res = self.call("POST", "/v1/chat/completions", {**body, "messages": msgs, "id_slot": slot},
                                    timeout=300, kind="conversation")
            if status != 200:
                return
            msgs.append({"role": "assistant", "content": res["choices"][0]["message"]["content"]})
            if turn > 0:
                self.note("conversation turns after the first")
                if res.get("timings", {}).get("cache_n", 0) > 0:
                    self.note("conversation turns reusing the slot's prompt (cache_n > 0)")

    def stream_cancel_step(self, i, rng):
        """A streamed request the client drops after a few chunks (the slot must be freed)."""
        chat = i % 2 == 1
        path = "/v1/chat/completions" if chat else "/completion"
        body = {"stream": True, "temperature": 0.7, "seed": i, **self.extra}
        if chat:
            body.update(messages=[{"role": "user", "content": words(30, seed=4000 + i)}], max_tokens=4000)
        else:
            body.update(prompt=words(200, seed=4000 + i), n_predict=4000, ignore_eos=True)
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            r = conn.getresponse()
            self.check("no_5xx", r.status < 500, {"kind": "stream", "status": r.status})
            self.check("answered", True)
            for _ in range(rng.randint(2, 10)):
                if not r.readline():
                    break
            self.note("streams dropped mid-way")
        except (OSError, http.client.HTTPException) as e:
            if not self.stopping:
                self.check("answered", False, {"kind": "stream", "error": repr(e)})
        finally:
            conn.close()  # the client leaves mid-stream

    def invalid_requests(self):
        """Requests the server must refuse with a 4xx (the list is cycled through)."""
        too_long = words(2 * self.n_ctx_slot, seed=7)  # > the slot's context in any tokenizer (1+ token/word)
        g = self.extra
        return [
            ("POST", "/completion", None, '{"prompt": "abc", "n_predict": '),  # truncated JSON
            ("POST", "/completion", None, "not json at all"),
            ("POST", "/completion", None, ""),
            ("POST", "/completion", None, "[1, 2, 3]"),
            ("POST", "/completion", {"prompt": "abc", "n_predict": "many", **g}, None),
            ("POST", "/completion", {"prompt": "abc", "n_predict": -5, **g}, None),
            ("POST", "/completion", {"prompt": "abc", "n_predict": 4, "temperature": "hot", **g}, None),
            ("POST", "/completion", {"prompt": "abc", "n_predict": 4, "top_k": [1], **g}, None),
            ("POST", "/completion", {"prompt": "abc", "n_predict": 4, "seed": "x", **g}, None),
            ("POST", "/completion", {"prompt": 12, "n_predict": 4, **g}, None),
            ("POST", "/completion", {"prompt": [999999999], "n_predict": 4, **g}, None),
            ("POST", "/completion", {"prompt": "abc", "n_predict": 4, "grammar": "root ::= ("}, None),
            ("POST", "/completion", {"prompt": too_long, "n_predict": 4, **g}, None),
            ("POST", "/v1/chat/completions", {"messages": "hi", **g}, None),
            ("POST", "/v1/chat/completions", {"model": "x", **g}, None),
            ("POST", "/v1/chat/completions", None, '{"messages": ['),
            ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": too_long}],
                                              "max_tokens": 4, **g}, None),
            ("POST", "/slots/0?action=explode", {}, None),
            ("POST", "/slots/0?action=restore", {"filename": "never-saved.bin"}, None),
            ("POST", "/slots/0?action=save", {"filename": "../outside.bin"}, None),
        ]

    def misc_step(self, i, rng):
        """In turn: an invalid request, a slot save/erase/restore round trip."""
        if i % 2 == 0:
            bad = self.invalid_requests()
            method, path, body, raw = bad[(i // 2) % len(bad)]
            status, res = self.call(method, path, body, raw, timeout=120, kind="invalid")
            if status is not None:
                self.check("invalid_4xx", 400 <= status < 500,
                           lambda: {"path": path, "body": (raw if raw is not None else json.dumps(body))[:200],
                                    "status": status, "response": str(res)[:300]})
        else:
            slot = rng.randrange(self.np)
            name = f"load-{i}.bin"
            self.events.append((round(time.time() - self.t0, 1), f"save+erase+restore slot {slot}"))
            s1, r1 = self.call("POST", f"/slots/{slot}?action=save", {"filename": name}, timeout=300, kind="slot save")
            s2, r2 = self.call("POST", f"/slots/{slot}?action=erase", {}, timeout=300, kind="slot erase")
            s3, r3 = self.call("POST", f"/slots/{slot}?action=restore", {"filename": name}, timeout=300,
                               kind="slot restore")
            if None not in (s1, s2, s3):
                ok = s1 == s2 == s3 == 200 and r1.get("n_saved") == r3.get("n_restored")
                self.check("restore_roundtrip", ok, lambda: {"slot": slot, "save": [s1, r1], "erase": [s2, r2],
                                                              "restore": [s3, r3]})
            with contextlib.suppress(OSError):
                (self.save_dir / name).unlink()

    def spec_step(self, slot: int):
        """Text that repeats itself, pinned to one slot: the ngram drafter proposes drafts on every slot."""
        def step(i, rng):
            status, res = self.complete(words(60, seed=5000 + 10 * i + slot) * 3, 3 * self.budget, "speculative",
                                        ignore_eos=True, seed=i, id_slot=slot, temperature=rng.choice([0.0, 0.8]))
            if status == 200:
                self.note("speculative draft tokens (timings draft_n)", res["timings"].get("draft_n", 0))
        return step

    # ---- checkpoints: exact comparisons, alone on the server -----------------------------------------

    def probe(self):
        """A greedy request on an erased slot 0, its prompt not cached: the same text every time."""
        self.call("POST", "/slots/0?action=erase", {}, kind="checkpoint erase")
        status, res = self.complete(words(40, seed=99), 2 * self.budget + 100, "probe", ignore_eos=True,
                                    id_slot=0, cache_prompt=False)
        return res.get("content") if status == 200 else f"HTTP {status}: {res}"

    def restore_setup(self):
        """Request A (greedy, past the budget) on slot 1, saved; then request B = A's prompt + A's answer + a new
        question, once on the uninterrupted slot and once on the slot restored from the file right away.

        Each later checkpoint restores the file into another slot after minutes of load: the counters must equal
        those at the save and B must give the restored text again, so the file holds all the state B depends on
        (cells, queries, beacons, archive, recall bookkeeping, token ids) and nothing else leaks in. B on the
        uninterrupted slot is compared as a figure, not an invariant: a restore packs the slot's cells together,
        which changes the order of the attention sums' terms, and the rounding that follows can turn a greedy
        choice of a random-weight model (the restore itself is deterministic: the Rust tests check the exact
        continuation where cells keep their places)."""
        self.call("POST", "/slots/1?action=erase", {}, kind="checkpoint erase")
        prompt_a = words(150, seed=11)
        status, a = self.complete(prompt_a, 2 * self.budget, "restore A", ignore_eos=True, id_slot=1)
        if status != 200:
            raise RuntimeError(f"restore check: request A failed: HTTP {status}: {a}")
        status, saved = self.call("POST", "/slots/1?action=save", {"filename": "restore.bin"}, kind="checkpoint save")
        if status != 200:
            raise RuntimeError(f"restore check: save failed: HTTP {status}: {saved}")
        self.saved_kv = self.slots()[1]["kv_compress"]
        self.saved_n = saved["n_saved"]
        self.prompt_b = prompt_a + a["content"] + " " + words(30, seed=12)
        status, b = self.complete(self.prompt_b, self.budget, "restore B", ignore_eos=True, id_slot=1)
        if status != 200:
            raise RuntimeError(f"restore check: request B failed: HTTP {status}: {b}")
        uninterrupted = b["content"]
        self.figures["restore B reused positions (cache_n)"] = b["timings"]["cache_n"]
        self.want_b = self.restored_b(0, 1)
        if self.want_b is not None:
            same = next((i for i, (x, y) in enumerate(zip(uninterrupted, self.want_b)) if x != y),
                        min(len(uninterrupted), len(self.want_b)))
            self.figures["restore B: leading characters equal to the uninterrupted slot's"] = \
                f"{same} of {len(uninterrupted)}"

    def restored_b(self, k: int, slot: int):
        """Restore the file into `slot` (erased first), check its counters against the save's and return B's text
        there (None when the restore failed)."""
        self.call("POST", f"/slots/{slot}?action=erase", {}, kind="checkpoint erase")
        status, res = self.call("POST", f"/slots/{slot}?action=restore", {"filename": "restore.bin"},
                                kind="checkpoint restore")
        if status != 200 or res.get("n_restored") != self.saved_n:
            self.check("restore_exact", False, {"checkpoint": k, "slot": slot, "restore": [status, res]})
            return None
        kv = self.slots()[slot]["kv_compress"]
        # archive_bytes counts allocated capacity, which a restore sizes exactly; `archived` counts the cells
        keys = ["cells_in_use", "evicted", "compress_events", "archived", "recalled"]
        self.check("restore_exact", all(kv[x] == self.saved_kv[x] for x in keys),
                   lambda: {"checkpoint": k, "slot": slot, "saved": self.saved_kv, "restored": kv})
        status, b = self.complete(self.prompt_b, self.budget, "restore B", ignore_eos=True, id_slot=slot)
        return b.get("content") if status == 200 else f"HTTP {status}"

    def restore_check(self, k: int):
        slot = k % self.np  # a different slot each time: the file must not depend on the slot it came from
        got = self.restored_b(k, slot)
        if got is None or self.want_b is None:
            return
        self.check("restore_exact", got == self.want_b,
                   lambda: {"checkpoint": k, "slot": slot, "want": self.want_b[:200], "got": got[:200]})

    def slots_idle(self, k: int, timeout: float = 60):
        end = time.time() + timeout
        while time.time() < end:
            slots = self.slots()
            if slots is not None and not any(s["is_processing"] for s in slots):
                self.check("slots_free", True)
                return
            time.sleep(0.5)
        busy = [{key: s.get(key) for key in ("id", "id_task", "n_ctx", "speculative", "next_token", "kv_compress")}
                | {"n_predict": (s.get("params") or {}).get("n_predict")}
                for s in (self.slots() or []) if s["is_processing"]]
        self.check("slots_free", False, {"checkpoint": k, "busy": busy})

    def checkpoint(self, k: int):
        t = time.time()
        # a load request runs a few seconds to a minute; one still running after 5 minutes is a hang
        if k > 0 and not self.gate.close(timeout=min(300.0, max(30.0, self.hard_deadline - time.time() - 60))):
            self.check("answered", False, {"checkpoint": k, "error": "load requests still in flight"})
        try:
            self.slots_idle(k)
            text = self.probe()
            if k == 0:
                self.want_probe = text
                self.restore_setup()
            else:
                self.check("same_text", text == self.want_probe,
                           lambda: {"checkpoint": k, "want": self.want_probe[:200], "got": text[:200]})
                self.restore_check(k)
        finally:
            self.gate.open()
        print(f"[soak] checkpoint {k} at {time.time() - self.phase_t0:.0f} s ({time.time() - t:.1f} s)", flush=True)

    # ---- the run --------------------------------------------------------------------------------------

    def run(self) -> int:
        minutes = self.args.minutes
        self.stop_all = threading.Event()
        self.t0 = time.time()
        self.hard_deadline = self.t0 + 60 * minutes + GRACE_S
        threading.Thread(target=self.watchdog, daemon=True).start()
        spec_s = max(20.0, 12.0 * minutes)
        self.main_phase(60 * minutes - spec_s)
        self.spec_phase(spec_s)
        self.check("on_time", time.time() <= self.hard_deadline, {"wall_s": round(time.time() - self.t0, 1)})
        return 1 if sum(self.fails.values()) else 0

    def start_phase(self, name: str, speculative: bool, seconds: float):
        if self.overran:
            raise RuntimeError(f"no time left for the {name} phase")
        self.phase = name
        self.stop = threading.Event()
        self.start_server(speculative)
        self.cmds[name] = " ".join(self.cmd)
        print(f"[soak] {name}: {self.cmds[name]}", flush=True)
        self.phase_t0 = time.time()  # the phase's clock starts with a healthy server
        self.phase_end = self.phase_t0 + seconds
        # the load ends early enough for the phase's last checkpoint to run alone before the phase is up
        self.load_end = self.phase_end - max(10.0, seconds / 10)
        self.pollers = [threading.Thread(target=f, daemon=True) for f in (self.poll_slots, self.poll_metrics)]

    def end_phase(self, workers):
        for t in workers:
            t.join(timeout=max(1.0, self.hard_deadline - time.time() - 30))
        self.stop.set()
        for t in self.pollers:
            t.join(timeout=40)
        self.check("alive", self.proc.poll() is None, lambda: {"returncode": self.proc.poll(), "log": str(self.log_path)})
        self.figures[f"{self.phase} wall_s"] = round(time.time() - self.phase_t0, 1)
        self.stop_server()

    def main_phase(self, seconds: float):
        self.start_phase("main", False, seconds)
        self.checkpoint(0)
        steps = {"long": self.long_step, "chat": self.chat_step, "stream": self.stream_cancel_step,
                 "misc": self.misc_step}
        workers = [threading.Thread(target=self.loop, args=(n, f), daemon=True) for n, f in steps.items()]
        for t in self.pollers + workers:
            t.start()
        n_mid = self.args.checkpoints
        span = self.load_end - time.time()
        for k in range(1, n_mid + 1):
            when = time.time() + span / (n_mid + 1)
            while time.time() < when and not self.stop.is_set():
                time.sleep(0.5)
            if self.stop.is_set():
                break
            self.checkpoint(k)
        while time.time() < self.load_end and not self.stop.is_set():
            time.sleep(0.5)
        for t in workers:
            t.join(timeout=max(1.0, self.hard_deadline - time.time() - 30))
        if not self.stop.is_set():
            self.checkpoint(n_mid + 1)
        self.end_phase([])
        self.check_rss()

    def spec_phase(self, seconds: float):
        self.start_phase("speculative", True, seconds)
        workers = [threading.Thread(target=self.loop, args=(f"spec{i}", self.spec_step(i)), daemon=True)
                   for i in range(self.np)]
        for t in self.pollers + workers:
            t.start()
        self.end_phase(workers)
        drafts = self.figures.get("speculative metrics_last", {}).get("llamacpp:spec_decode_num_draft_tokens_total", 0)
        self.check("speculative", drafts > 0, {"spec_decode_num_draft_tokens_total": drafts})

    def check_rss(self):
        """VmRSS minus the archives' bytes (they fill up to --kv-archive cells per slot, by design) at the end
        of warm-up, against its largest value afterwards."""
        warm = min(60.0, (self.phase_end - self.phase_t0) / 3)
        after = [(t, rss - arch) for t, rss, arch in self.rss if t >= warm]
        if len(after) < 2:
            self.check("rss", False, {"error": "too few VmRSS samples after warm-up", "samples": len(self.rss)})
            return
        base = after[0][1]
        peak = max(v for _, v in after)
        mib = 1 << 20
        self.figures["rss"] = {
            "warm_up_s": warm, "bound_mib": self.args.rss_bound_mib,
            "rss_start_mib": round(self.rss[0][1] / mib, 1), "rss_end_mib": round(self.rss[-1][1] / mib, 1),
            "adjusted_at_warm_up_mib": round(base / mib, 1), "adjusted_peak_after_mib": round(peak / mib, 1),
            "growth_mib": round((peak - base) / mib, 1), "archive_end_mib": round(self.rss[-1][2] / mib, 1),
        }
        self.check("rss", peak - base <= self.args.rss_bound_mib * mib, self.figures["rss"])

    # ---- report ---------------------------------------------------------------------------------------

    def report(self, error: str = None):
        rows = [{"invariant": k, "what": v, "checks": self.checks[k], "failures": self.fails[k],
                 "pass": self.checks[k] > 0 and self.fails[k] == 0} for k, v in INVARIANTS.items()]
        data = {
            "command": " ".join([sys.executable, *sys.argv]), "server_commands": self.cmds,
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "model": str(self.model), "minutes": self.args.minutes,
            "budget": self.budget, "error": error, "pass": error is None and all(r["pass"] for r in rows),
            "invariants": rows, "failure_details": dict(self.details), "requests": dict(sorted(self.requests.items())),
            "figures": self.figures,
        }
        (self.out / "report.json").write_text(json.dumps(data, indent=2) + "\n")
        md = [f"# llama-server soak: {'PASS' if data['pass'] else 'FAIL'}", "",
              f"- model `{self.model.name}`, {self.args.minutes} min, budget {self.budget}, {data['date']}",
              *[f"- {phase} server: `{cmd}`" for phase, cmd in self.cmds.items()], ""]
        if error:
            md += [f"**The run stopped early:** {error}", ""]
        md += ["| invariant | result | checks | failures |", "| --- | --- | --- | --- |"]
        md += [f"| {r['what']} | {'pass' if r['pass'] else 'FAIL'} | {r['checks']} | {r['failures']} |" for r in rows]
        md += ["", "## Requests (kind, status: count)", ""]
        md += [f"- {k}: {v}" for k, v in data["requests"].items()]
        md += ["", "## Figures", "", "```json", json.dumps(self.figures, indent=2), "```"]
        if self.details:
            md += ["", "## Failures (first of each)", "", "```json", json.dumps(dict(self.details), indent=2), "```"]
        (self.out / "report.md").write_text("\n".join(md) + "\n")
        print("\n".join(md[:len(rows) + 8]), flush=True)
        if not data["pass"]:
            # printed last: a CI log shows its tail
            for name, ds in self.details.items():
                for d in ds[:3]:
                    print(f"[soak] failure {name}: {json.dumps(d)[:800]}")
            for path in self.dumps:
                print(f"[soak] hang diagnosis in {path}")
            for log in sorted(self.out.glob("server-*.log")):
                tail = log.read_text(errors="replace").splitlines()[-25:]
                print(f"[soak] last lines of {log}:\n" + "\n".join(tail))
        print(f"[soak] report: {self.out / 'report.md'}, {self.out / 'report.json'}; server log: {self.log_path}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=2.0)
    ap.add_argument("--model", default=str(ROOT / "build/models/tiny.gguf"))
    ap.add_argument("--server", default=os.environ.get("BEACONKV_LLAMA_SERVER", str(ROOT / "build/bin/llama-server")),
                    help="llama-server binary (env BEACONKV_LLAMA_SERVER)")
    ap.add_argument("--out", default=str(ROOT / "build/soak"))
    ap.add_argument("--budget", type=int, default=256)
    ap.add_argument("--archive", type=int, default=2048)
    ap.add_argument("--ctx-slot", type=int, default=4096, help="logical context per slot (-c is 4x this)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cache-ram", type=int, default=16, help="--cache-ram MiB of the server")
    ap.add_argument("--checkpoints", type=int, default=3, help="quiet checkpoints during the load")
    ap.add_argument("--rss-bound-mib", type=float, default=64.0)
    args = ap.parse_args()
    if 8 * args.budget + 64 + 700 > args.ctx_slot:
        ap.error("--ctx-slot must hold a long prompt and 8x the budget")

    soak = Soak(args)

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    error = None
    rc = 2
    try:
        rc = soak.run()
    except (RuntimeError, KeyboardInterrupt) as e:
        error = f"{type(e).__name__}: {e}"
    finally:
        soak.stop.set()
        if hasattr(soak, "stop_all"):
            soak.stop_all.set()
        soak.stop_server()  # never leave a server running, whatever happened
    soak.report(error)
    return rc if error is None else 2


if __name__ == "__main__":
    sys.exit(main())
