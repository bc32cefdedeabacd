# Each target does its own set-up: a fresh machine needs nothing but python3 and (for the
# Debian packages the tests use) root or sudo.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
DEMO_ARGS ?= --duration 60

.PHONY: demo test lint debs bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

# In the tests promtool checks /metrics and the rules, a real Alertmanager receives the alerts, a real
# Pushgateway receives `replay --pushgateway`, and stunnel puts TLS in front of the embedded broker.
# apt runs only for what is missing.
debs:
	@missing=""; \
	command -v promtool >/dev/null || missing="$$missing prometheus"; \
	{ command -v stunnel4 || command -v stunnel; } >/dev/null || missing="$$missing stunnel4"; \
	command -v amtool >/dev/null || missing="$$missing prometheus-alertmanager"; \
	command -v prometheus-pushgateway >/dev/null || missing="$$missing prometheus-pushgateway"; \
	[ -z "$$missing" ] || { $(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; }

demo: $(STAMP)
	$(BIN)/rag-monitor demo $(DEMO_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check
	$(BIN)/ruff format --check
	$(BIN)/mypy monitor

# The whole suite on the compiled otlp_proto decoder, trace assembler and record accounting
# (monitor/ingest/_wire.c, _assembly.c, _accounting.c, rebuilt here when a source is newer than its
# build; their absence fails the suite),
# then the decoder and assembler tests again on the pure-Python reference paths. Four pytest
# workers, a test file each at a time: most of the suite's time is waiting (broker group joins,
# servers starting), not CPU.
test: $(STAMP) debs lint
	[ -n "$$(find monitor/ingest -name '_wire*.so' -newer monitor/ingest/_wire.c)" ] && \
	[ -n "$$(find monitor/ingest -name '_assembly*.so' -newer monitor/ingest/_assembly.c)" ] && \
	[ -n "$$(find monitor/ingest -name '_accounting*.so' -newer monitor/ingest/_accounting.c)" ] || \
		$(BIN)/python -m pip install -q --no-deps -e .
	RAGMON_REQUIRE_COMPILED=1 $(BIN)/pytest -q -p no:cacheprovider -n 4 --dist loadfile
	RAGMON_PURE_PYTHON=1 RAGMON_REQUIRE_COMPILED=1 $(BIN)/pytest -q -p no:cacheprovider \
		tests/test_decode.py tests/test_decode_compiled.py tests/test_assemble.py tests/test_assemble_compiled.py

bench: $(STAMP)
	$(BIN)/python bench/ingest.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
