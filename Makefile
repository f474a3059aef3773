# Switchyard. Two commands matter: `make up` runs the platform, `make test` runs the tests.
# Both bootstrap what they need on a fresh machine: the venv, the packages, redis-server.

PYTHON  ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed-stamp
PORT    ?= 8000
PACKAGES := config report contracts engine bls fleet_state quota router bulk build_engines trtllm server_host supervisor autoscaler simulator gateway serving stack faults bench switchyard threads
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: up test unit integration lint bench chaos build redis chromium clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev,sim,kubernetes]'
	touch $(STAMP)

# redis-server and redis-sentinel (sentinel mode, docs/redis.md) from Debian's packages when missing.
redis:
	@command -v redis-server >/dev/null 2>&1 && command -v redis-sentinel >/dev/null 2>&1 || { \
	  echo "installing redis-server and redis-sentinel with apt"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq redis-server redis-sentinel >/dev/null; }

# Debian's chromium when it is missing: the console's browser tests drive it through
# Playwright (tests/integration/test_console_browser.py); no browser is ever downloaded.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing chromium with apt"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium >/dev/null; }

build: $(STAMP)
	$(BIN)/switchyard build

up: $(STAMP) redis build
	$(BIN)/switchyard up --port $(PORT)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy $(PACKAGES)
	$(BIN)/lint-imports

unit: $(STAMP)
	$(BIN)/pytest -q -m "not integration"

integration: $(STAMP) redis chromium
	$(BIN)/pytest -q -m integration

test: $(STAMP) redis chromium lint build
	$(BIN)/pytest -q

bench: $(STAMP) redis build
	$(BIN)/python -m bench

# Chaos under load (docs/chaos.md), then the partition run over network namespaces
# (docs/chaos.md, "Network faults"): 10 minutes each by default; `make chaos MINUTES=2 SEED=7`.
MINUTES ?= 10
SEED    ?= 1
chaos: $(STAMP) redis build
	$(BIN)/python -m bench chaos --minutes $(MINUTES) --seed $(SEED)
	$(BIN)/python -m bench partitions --minutes $(MINUTES) --seed $(SEED)

clean:
	rm -rf var .mypy_cache .ruff_cache
