"""Helpers shared by everything that drives a live llama-server (build/bin/llama-server): the
scripts, the soak test and tests/server. start() is the one start-and-wait loop, stop() the one
way to end a server."""

import json
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class ServerError(RuntimeError):
    """llama-server exited during start-up or did not become healthy in time."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body, timeout):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def wait_healthy(url: str, proc: subprocess.Popen, seconds: float = 120) -> None:
    """Until GET /health answers 200; raises ServerError if the server exits or does not answer
    in time (a loading server answers 503, which urllib raises as an OSError: wait on)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            raise ServerError(f"llama-server exited with {proc.returncode} during start-up")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise ServerError(f"llama-server not healthy after {seconds} s")


def stop(proc: subprocess.Popen, seconds: float = 20) -> None:
    """SIGTERM, then SIGKILL after `seconds`; waits for the process either way."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=seconds)


def start(cmd, url: str, log=subprocess.DEVNULL, seconds: float = 120, **popen) -> subprocess.Popen:
    """Starts `cmd` (a llama-server command line serving `url`) with stdout and stderr to `log` (a
    file object, or DEVNULL) and waits until it is healthy. On ServerError the process is stopped
    first. `popen`: more arguments of subprocess.Popen (start_new_session, ...)."""
    proc = subprocess.Popen([str(c) for c in cmd], stdout=log, stderr=subprocess.STDOUT, **popen)
    try:
        wait_healthy(url, proc, seconds)
    except ServerError:
        stop(proc)
        raise
    return proc
