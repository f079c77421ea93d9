"""Offline adaptation of llama.cpp's server test suite (tools/server/tests) for BeaconKV.

scripts/upstream-server-suite.sh copies the upstream suite to build/upstream-tests, puts this module
beside utils.py and replaces conftest.py by tests/upstream/suite_conftest.py, which imports it before any
test module is collected. Nothing of the upstream tree is edited in place.

What it changes, at run time, in the copy's `utils` module:
  * models: every Hugging Face preset (`--hf-repo/--hf-file`) is mapped to a local GGUF
    (MODEL_MAP below); a preset with no local equivalent skips the test with the reason.
  * network: any HTTP request to a host that is not the loopback (model / image downloads, the
    upstream `download_file`) skips the test ("needs network"); known draft-model URLs map to a
    local file instead.
  * ports: the fixed ports of the suite (8080..8085) are moved to $BKV_PORT_BASE.. so the run does
    not collide with other servers on the machine.
  * server logs: each server start writes its log to $BKV_LOG_DIR/<test>.<n>.log (unless the test
    chose a log file itself), so a failure can be read afterwards.
  * SKIP: tests that cannot run here (a model type we do not have, network, router mode) are
    skipped at collection with the reason.

Environment (set by the script): BKV_TINYLLAMA, BKV_INFILL, BKV_MOE, BKV_DRAFT, BKV_GEMMA3 (model
paths), BKV_PORT_BASE, BKV_LOG_DIR.
"""
import os
import re
import urllib.parse

import pytest
import requests

import utils
from utils import ServerProcess, ServerPreset

# ---------------------------------------------------------------- models

# upstream preset (hf repo[/file]) -> environment variable holding the local model path
MODEL_MAP = {
    # stories260K (tiny llama, SPM vocab of 512) -> SmolLM2-135M-Instruct (llama arch) or tiny.gguf
    "ggml-org/test-model-stories260K": "BKV_TINYLLAMA",
    # stories260K with FIM tokens -> Qwen2.5-Coder-0.5B-Instruct (has FIM tokens; SmolLM2 has none)
    "ggml-org/test-model-stories260K-infill": "BKV_INFILL",
    # stories15M MoE (speculative main model) -> SmolLM2
    "ggml-org/stories15M_MOE/stories15M_MOE-F16.gguf": "BKV_MOE",
    # tinygemma3 (vision model, mmproj from the HF registry) -> Gemma 3 270M, text only (no mmproj)
    "ggml-org/tinygemma3-GGUF:Q8_0": "BKV_GEMMA3",
}

# upstream download_file URL -> environment variable holding the local file
DOWNLOAD_MAP = {
    # speculative draft model (same vocabulary as the main model) -> the main model's local stand-in
    "https://huggingface.co/ggml-org/tiny-llamas/resolve/main/stories15M-q4_0.gguf": "BKV_DRAFT",
}

# ---------------------------------------------------------------- skips

# (regex on the pytest node id, reason). Applied at collection; listed in docs/testing.md.
SKIP = [
    # whole files
    (r"^unit/test_embedding\.py", "embedding model (bert-bge-small) not available offline"),
    (r"^unit/test_rerank\.py", "reranker model (jina-reranker-v1-tiny) not available offline"),
    (r"^unit/test_lora\.py", "LoRA adapters for stories15M-MoE / Llama-3.1-8B not available offline"),
    (r"^unit/test_vision_api\.py", "vision model tinygemma3 + mmproj and test images not available offline"),
    (r"^unit/test_router\.py", "router mode: resolves models by HF name from the cache / a preset repo"),
    (r"^unit/test_stream\.py", "router mode with the HF model ggml-org/tinygemma3-GGUF"),
    (r"^unit/test_mcp_servers\.py", "router mode (MCP servers), no model involved in KV"),
    (r"^unit/test_tools_builtin\.py", "router mode (built-in tools), no model involved in KV"),
    # single tests
    (r"^unit/test_basic\.py::test_load_split_model", "split GGUF stories15M-q8_0-0000x-of-00003 not available offline"),
    (r"^unit/test_basic\.py::test_no_ui", "the web UI is not built (scripts/build-llama.sh: -DLLAMA_BUILD_UI=OFF)"),
    (r"^unit/test_security\.py::test_access_static_assets", "the web UI is not built (scripts/build-llama.sh: -DLLAMA_BUILD_UI=OFF)"),
    (r"^unit/test_proxy\.py::test_mcp_proxy$", "the server's CORS proxy fetches http://example.com (no network)"),
    (r"^unit/test_security\.py::test_cors_origins_", "router preset (no model)"),
    (r"^unit/test_security\.py::test_local_media_file", "needs tinygemma3's mmproj (vision)"),
    (r"^unit/test_slot_save\.py::test_slot_save_restore_with_image", "needs tinygemma3's mmproj and HF test images"),
    (r"^unit/test_slot_save\.py::test_slot_save_restore_with_two_images", "needs tinygemma3's mmproj and HF test images"),
    (r"^unit/test_slot_save\.py::test_slot_save_restore_image_payload", "needs tinygemma3's mmproj and HF test images"),
    (r"^unit/test_slot_save\.py::test_slot_restore_media_file_without_mmproj", "needs tinygemma3's mmproj and HF test images"),
    (r"^unit/test_compat_anthropic\.py::.*(vision|image)", "needs tinygemma3's mmproj and HF test images"),
    (r"^unit/test_compat_anthropic\.py::test_anthropic_thinking", "DeepSeek-R1-Distill-Qwen-7B not available offline"),
]

# extra skips, one "regex<TAB>reason" a line (tests/upstream/skip-model-specific.tsv: expectations that
# only stories260K meets; see docs/testing.md)
_extra = os.path.join(os.path.dirname(os.path.abspath(__file__)), "skip-model-specific.tsv")
if os.environ.get("BKV_SKIP_MODEL_SPECIFIC", "1") == "1" and os.path.exists(_extra):
    with open(_extra) as f:
        for line in f:
            line = line.rstrip("\n")
            if line and not line.startswith("#") and "\t" in line:
                rx, reason = line.split("\t", 1)
                SKIP.append((rx, reason))


def pytest_collection_modifyitems(config, items):
    for item in items:
        for rx, reason in SKIP:
            if re.search(rx, item.nodeid):
                item.add_marker(pytest.mark.skip(reason=reason))
                break


# ---------------------------------------------------------------- network guard

_LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}
_orig_request = requests.sessions.Session.request


def _guarded_request(self, method, url, *args, **kwargs):
    host = urllib.parse.urlsplit(url).hostname or ""
    if host not in _LOOPBACK and not host.startswith("127."):
        pytest.skip(f"needs network ({url})")
    return _orig_request(self, method, url, *args, **kwargs)


requests.sessions.Session.request = _guarded_request


def _download_file(url: str, output_file_path: str | None = None) -> str:
    var = DOWNLOAD_MAP.get(url)
    if var and os.environ.get(var):
        return os.environ[var]
    pytest.skip(f"needs network ({url})")


utils.download_file = _download_file

# ---------------------------------------------------------------- server start

_orig_start = ServerProcess.start
_PORT_BASE = int(os.environ.get("BKV_PORT_BASE", "8080"))
_LOG_DIR = os.environ.get("BKV_LOG_DIR")
_starts: dict[str, int] = {}


def _test_name() -> str:
    cur = os.environ.get("PYTEST_CURRENT_TEST", "unknown").split(" ")[0]
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", cur.replace("unit/", "").replace(".py::", "."))[:180]


def _start(self, timeout_seconds: int = utils.DEFAULT_HTTP_TIMEOUT) -> None:
    if self.model_hf_repo is not None:
        key = self.model_hf_repo if self.model_hf_file is None else f"{self.model_hf_repo}/{self.model_hf_file}"
        var = MODEL_MAP.get(key)
        if var is None or not os.environ.get(var):
            pytest.skip(f"no local model for {key}")
        self.model_file = os.environ[var]
        self.model_hf_repo = None
        self.model_hf_file = None
    elif self.model_file is None and self.model_url is None:
        pytest.skip("router mode (no model): not relevant to KV compression")
    if self.mmproj_url:
        pytest.skip(f"needs an mmproj ({self.mmproj_url})")
    self.offline = True
    # one thread: on a small, shared machine two spinning threads lose far more than they gain
    if self.n_threads is None:
        self.n_threads = int(os.environ.get("BKV_THREADS", "1"))
    # the suite's fixed ports 8080..8085 -> BKV_PORT_BASE + (port - 8080)
    if 8080 <= int(self.server_port) <= 8099:
        self.server_port = _PORT_BASE + int(self.server_port) - 8080
    # GCP compat mode (AIP_MODE=PREDICTION) listens on $AIP_HTTP_PORT (default 8080), not --port
    os.environ["AIP_HTTP_PORT"] = str(self.server_port)
    if _LOG_DIR and not self.log_path:
        name = _test_name()
        n = _starts.get(name, 0) + 1
        _starts[name] = n
        os.makedirs(_LOG_DIR, exist_ok=True)
        self.log_path = os.path.join(_LOG_DIR, f"{name}.{n}.log")
        print(f"tests: server log: {self.log_path}")
        _orig_start(self, timeout_seconds)
        self.log_path = None  # a restart of the same object gets a new file
        return
    _orig_start(self, timeout_seconds)


ServerProcess.start = _start
