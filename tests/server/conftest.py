"""Live llama-server tests: start the patched build/bin/llama-server on 127.0.0.1, talk HTTP, stop it.

Every server runs on a free port, is killed at the end of its test, and every request and loop is
bounded in time. Needs `make build` (the tools and the tiny model) and, for the SmolLM2 tests, the
model cache that `scripts/fetch-models.sh smollm2` fills.
"""

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import server_util  # noqa: E402  (scripts/: the start-and-wait loop every server user shares)
BIN = Path(os.environ.get("BEACONKV_BIN_DIR", ROOT / "build/bin"))
TINY = ROOT / "build/models/tiny.gguf"
# the tiny model has random weights: keep its output to printable ASCII so the server's output parser
# (and JSON) always accepts it; greedy sampling under a grammar is still deterministic
ASCII_GRAMMAR = "root ::= [a-z ]+"


def tool(name: str) -> Path:
    path = BIN / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make build` first")
    return path


def smollm2() -> Path:
    out = subprocess.run(
        [str(ROOT / "scripts/fetch-models.sh"), "smollm2"],
        capture_output=True, text=True, timeout=600,
    )
    if out.returncode != 0:
        pytest.fail(f"scripts/fetch-models.sh smollm2 failed: {out.stderr[-2000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


class Server:
    """One llama-server process; `log` holds what it printed once it is stopped."""

    def __init__(self, model: Path, *args: str, tmp: Path, timeout: float = 120):
        self.port = server_util.free_port()
        self.body = {"grammar": ASCII_GRAMMAR} if Path(model).name.startswith("tiny") else {}
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / f"server-{self.port}.log"
        self.args = [
            str(tool("llama-server")), "-m", str(model), "--host", "127.0.0.1",
            "--port", str(self.port), "-t", "2", "--no-ui", "--metrics", "--slots",
            *([] if "-np" in args else ["-np", "1"]),  # one slot unless asked: slot 0 is the one used
            *args,
        ]
        self._log = open(self.log_path, "w")
        try:
            self.proc = server_util.start(self.args, self.url, self._log, seconds=timeout)
        except server_util.ServerError as e:
            self._log.close()
            raise AssertionError(f"{e}:\n{self.log()[-4000:]}") from None

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def request(self, method: str, path: str, body=None, timeout: float = 300):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                raw = r.read().decode()
                status = r.status
        except urllib.error.HTTPError as e:
            raw = e.read().decode()
            status = e.code
        try:
            return status, json.loads(raw)
        except json.JSONDecodeError:
            return status, raw

    def get(self, path: str, timeout: float = 60):
        return self.request("GET", path, timeout=timeout)

    def post(self, path: str, body, timeout: float = 300):
        return self.request("POST", path, body, timeout=timeout)

    def complete(self, prompt, n_predict: int, **extra):
        body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0.0, "ignore_eos": True,
                "cache_prompt": True, **self.body, **extra}
        status, res = self.post("/completion", body)
        assert status == 200, f"HTTP {status}: {res}"
        return res

    def slot(self, i: int = 0):
        status, slots = self.get("/slots")
        assert status == 200, slots
        return slots[i]

    def metrics(self) -> dict:
        status, text = self.get("/metrics")
        assert status == 200, text
        out = {}
        for line in text.splitlines():
            if line.startswith("llamacpp:"):
                name, value = line.split()
                out[name[len("llamacpp:"):]] = float(value)
        return out

    def stop(self):
        server_util.stop(self.proc, 20)
        self._log.close()


@pytest.fixture
def server(tmp_path):
    """server(model, *args) starts a llama-server; all are stopped when the test ends."""
    started = []

    def start(model, *args, **kw):
        s = Server(model, *args, tmp=tmp_path, **kw)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture(scope="session")
def tiny() -> Path:
    if not TINY.exists():
        pytest.fail(f"{TINY} is missing: run `make build` first")
    return TINY


@pytest.fixture(scope="session")
def smol() -> Path:
    return smollm2()
