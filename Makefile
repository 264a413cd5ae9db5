# sluice — build and test.
#
# The Go tests run against a real PostgreSQL: DATABASE_URL if set, else a
# private server that internal/pgtest fetches (version SLUICE_PG_VERSION,
# 14 to 18, default 18) and starts on 127.0.0.1.

GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
GOTESTFLAGS ?=
BIN         := bin

# The Go modules (README.md, "Layout"): the library at the root, the command
# and its HTTP server, the benchmark, the private PostgreSQL of the command
# and the tests, and the fault tests. Every Go target goes through each of
# them with GOWORK=off, so that each builds from its own go.mod as it would
# for someone who requires it (go.work is for working across them by hand).
MODULES := . cmd/sluice bench internal/pgserver internal/faults
export GOWORK := off

# each_module runs "go $(1)" in every module, stopping at the first failure;
# each_module_all runs it in every module and fails at the end if any failed.
each_module = set -e; for m in $(MODULES); do echo "== $$m: go $(1)"; (cd $$m && $(GO) $(1)); done
each_module_all = st=0; for m in $(MODULES); do echo "== $$m: go $(1)"; (cd $$m && $(GO) $(1)) || st=1; done; exit $$st

# Without HOME (as on some CI runners) Go and staticcheck find no module or
# build cache: keep them in the temporary directory then.
ifeq ($(strip $(HOME)),)
export GOPATH         ?= $(or $(TMPDIR),/tmp)/sluice-gopath
export XDG_CACHE_HOME ?= $(or $(TMPDIR),/tmp)/sluice-cache
endif

.PHONY: build demo bench browser test vet staticcheck test-go test-pg14 test-pg15 test-pg16 test-pg17 test-pg18 clean

## build: compile every package of every module, the sluice command into
## bin/sluice and the benchmark's command into bin/sluice-bench
build:
	@$(call each_module,build ./...)
	cd cmd/sluice && $(GO) build -o $(CURDIR)/$(BIN)/sluice .
	cd bench && $(GO) build -o $(CURDIR)/$(BIN)/sluice-bench .

## demo: build sluice and run its live demo (about a minute) on the
## embedded PostgreSQL, or on DATABASE_URL if set. DEMOFLAGS adds flags,
## such as DEMOFLAGS='--duration 20s --rate 1000'.
DEMOFLAGS ?=
demo:
	@echo "make demo: building bin/sluice (the first build compiles every dependency: a minute or two on 2 cores; later ones take seconds)"
	@cd cmd/sluice && $(GO) build -o $(CURDIR)/$(BIN)/sluice .
	@echo "make demo: running bin/sluice demo $(DEMOFLAGS)"
	@$(BIN)/sluice demo $(DEMOFLAGS)

## bench: build the benchmark's command (bench/, a module of its own) into
## bin/sluice-bench and run the default benchmark set (about 25 minutes) on
## the embedded PostgreSQL, or on DATABASE_URL if set; results go to
## bench/results/<timestamp>/. Leases of 5 s, so that cells outlast them
## (bench/README.md). BENCHFLAGS adds or overrides flags.
BENCHFLAGS ?=
bench:
	cd bench && $(GO) build -o $(CURDIR)/$(BIN)/sluice-bench .
	$(BIN)/sluice-bench send drain keyed latency steady shootout overload app xmin http statusburst memory \
		--xmin-duration 2m --interval 30s --xmin-systems sluice,skiplocked,pgmq,pgmq-compat --lease 5s $(BENCHFLAGS)

## test: vet, staticcheck, the real pgmq clients, the Python and TypeScript
## clients (their tests and package builds), then the Go tests, last so that
## the Go benchmark's smoke test of the clients (TestClientsSmoke) finds the
## Python venv and the compiled TypeScript client instead of skipping
test: vet staticcheck test-pgmq-clients test-python build-python test-typescript pack-typescript test-go

vet:
	@$(call each_module,vet ./...)

staticcheck:
	@$(call each_module,run $(STATICCHECK) ./...)

## browser: headless Chromium for the dashboard's browser tests (Debian
## package chromium), installed with apt-get when missing
browser:
	@command -v chromium >/dev/null 2>&1 || { echo "make browser: installing chromium (apt-get)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; }

## test-go: the Go tests of every module (with the browser tests: make
## browser first)
test-go: browser
	@export SLUICE_REQUIRE_BROWSER=1; $(call each_module_all,test ./... -count=1 -timeout 20m $(GOTESTFLAGS))

## test-pgmq-clients: the pgmq Python client (PyPI) and pgmq-js (npm), pinned
## and unchanged, against the pgmq compatibility layer, on a fresh database
## (a private PostgreSQL, or one on DATABASE_URL). The venv and node_modules
## are made here from tests/pgmqcompat/{python/requirements.txt,js/package-lock.json}.
PYTHON    ?= python3
NPM       ?= npm
PGMQ_PY   := tests/pgmqcompat/python
PGMQ_JS   := tests/pgmqcompat/js
PGMQ_VENV := $(PGMQ_PY)/.venv

$(PGMQ_VENV)/.installed: $(PGMQ_PY)/requirements.txt
	$(PYTHON) -m venv $(PGMQ_VENV)
	$(PGMQ_VENV)/bin/pip install -q --disable-pip-version-check -r $(PGMQ_PY)/requirements.txt
	touch $@

$(PGMQ_JS)/node_modules/.installed: $(PGMQ_JS)/package-lock.json
	cd $(PGMQ_JS) && $(NPM) ci --no-audit --no-fund
	touch $@

.PHONY: test-pgmq-clients
test-pgmq-clients: $(PGMQ_VENV)/.installed $(PGMQ_JS)/node_modules/.installed
	$(GO) build -o $(BIN)/pgmqcompat-run ./internal/pgmqcompat/cmd/pgmqcompat-run
	$(BIN)/pgmqcompat-run sh -c '$(PGMQ_VENV)/bin/python -m pytest -q -p no:cacheprovider $(PGMQ_PY) && cd $(PGMQ_JS) && node --test'

## test-python: the Python client (clients/python): mypy --strict, then its
## pytest suite (the shared conformance vectors, client and worker tests) on
## a fresh database (a private PostgreSQL, or one on DATABASE_URL). The venv
## is made here from clients/python/requirements-dev.txt (pinned), with the
## package installed editable.
PY_DIR  := clients/python
PY_VENV := $(PY_DIR)/.venv

$(PY_VENV)/.installed: $(PY_DIR)/requirements-dev.txt $(PY_DIR)/pyproject.toml
	$(PYTHON) -m venv $(PY_VENV)
	$(PY_VENV)/bin/pip install -q --disable-pip-version-check -r $(PY_DIR)/requirements-dev.txt
	$(PY_VENV)/bin/pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e $(PY_DIR)
	touch $@

.PHONY: test-python build-python generate-python check-python-generated
test-python: check-python-generated $(PY_VENV)/.installed
	cd $(PY_DIR) && .venv/bin/mypy
	$(GO) build -o $(BIN)/pgtest-run ./internal/pgtest/cmd/pgtest-run
	$(BIN)/pgtest-run $(PY_VENV)/bin/python -m pytest -q -p no:cacheprovider $(PY_DIR)/tests

## generate-python: rewrite the Python client's sync modules (client.py,
## worker.py) from their asyncio sources (aio.py, aio_worker.py)
generate-python:
	$(PYTHON) $(PY_DIR)/tools/async_to_sync.py

## check-python-generated: fail (with a diff) when those generated modules are
## not current; part of test-python
check-python-generated:
	$(PYTHON) $(PY_DIR)/tools/async_to_sync.py --check

## build-python: the Python client's sdist and wheel, into clients/python/dist/
build-python: $(PY_VENV)/.installed
	rm -rf $(PY_DIR)/dist
	cd $(PY_DIR) && .venv/bin/python -m build --no-isolation --outdir dist .

## test-typescript: the TypeScript client (clients/typescript): npm ci from
## its package-lock.json, then npm test, as on a fresh clone: compile with tsc
## (strict), then its tests (node --test: calls, worker, crash, the
## conformance vectors of test/conformance/) on a fresh database (a private
## PostgreSQL, or one on DATABASE_URL) made by pgmqcompat-run (go run).
TS_DIR := clients/typescript

$(TS_DIR)/node_modules/.installed: $(TS_DIR)/package-lock.json
	cd $(TS_DIR) && $(NPM) ci --no-audit --no-fund
	touch $@

.PHONY: test-typescript pack-typescript
test-typescript: $(TS_DIR)/node_modules/.installed
	cd $(TS_DIR) && $(NPM) test

## pack-typescript: build the npm package of the TypeScript client into bin/
pack-typescript: $(TS_DIR)/node_modules/.installed
	mkdir -p $(BIN)
	cd $(TS_DIR) && $(NPM) pack --silent --pack-destination $(CURDIR)/$(BIN)

## test-pgNN: the Go tests against PostgreSQL NN
test-pg14 test-pg15 test-pg16 test-pg17 test-pg18: test-pg%:
	SLUICE_PG_VERSION=$* $(MAKE) test-go

## test-faults: every fault scenario at full length (make test runs them
## short): 10 PostgreSQL kills, 30 consumer deaths, 8 connection cuts,
## statement timeouts, clock skew, mixed; prints the summary table.
.PHONY: test-faults
test-faults:
	cd internal/faults && SLUICE_FAULTS_LONG=1 SLUICE_FAULT_KILLS=10 $(GO) test . -count=1 -v -timeout 30m $(GOTESTFLAGS)

## generate: rewrite docs/sql.md (the SQL API reference) from sql/, the
## Python client's generated sync modules (generate-python), and the
## conformance vector of each queue option (test/conformance/option_*.json)
## from the table of options (test/queue_options.json)
.PHONY: generate
generate: generate-python
	$(GO) run ./internal/sqldoc/cmd/sqldoc -o docs/sql.md
	$(GO) run ./internal/optvec/cmd/optvec

clean:
	rm -rf $(BIN)
