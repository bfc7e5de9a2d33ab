# tokenstep: `make run` opens the app, `make test` runs everything CI runs.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# llama-cpp-python builds llama.cpp from source; use both cores.
export CMAKE_BUILD_PARALLEL_LEVEL ?= 2
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: run test lint typecheck pytest screenshots bench clean llama-server llama-server

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

pytest: $(VENV)/.installed-test llama-server browser bytecode
	$(BIN)/python -m pytest -q

test: lint typecheck pytest

# The worker's stateful test for longer: new random command sequences for FUZZ_MINUTES
# minutes (make test runs it with a fixed seed and a few examples).
FUZZ_MINUTES ?= 30
.PHONY: fuzz
fuzz: $(VENV)/.installed-test
	HYPOTHESIS_PROFILE=fuzz FUZZ_MINUTES=$(FUZZ_MINUTES) $(BIN)/python -m pytest -q -s \
		tests/test_worker_states.py

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
	$(BIN)/python scripts/screenshot_tour.py

bench: $(VENV)/.installed-test llama-server bytecode
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
