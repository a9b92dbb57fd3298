# Two set-up commands on a fresh Debian machine: `make run` and `make test`.
# Each creates .venv/ and installs what it needs on first use (Debian packages too when run as root).
SHELL := /bin/bash
PYTHON ?= $(shell test -x /usr/bin/python3 && echo /usr/bin/python3 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# golang-go + the ttrpc sources: the Go NRI/ttrpc peer the wire tests (tests/nri/) build offline in GOPATH mode.
APT_PACKAGES := python3-venv python3-dev util-linux procps openssl iproute2 golang-go golang-github-containerd-ttrpc-dev
# koordlet/pb/<name>_pb2.py(i) are generated from proto/<name>.proto and not kept in git.
PROTOS := $(wildcard proto/*.proto)
PB := $(patsubst proto/%.proto,koordlet/pb/%_pb2.py,$(PROTOS))

.PHONY: run test lint typecheck bench clean deps pb

$(STAMP): pyproject.toml Makefile
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	  if [ -n "$$missing" ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; fi; \
	fi
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

# Regenerated when a .proto changes or the venv (so grpcio-tools and protobuf) is reinstalled.
koordlet/pb/%_pb2.py koordlet/pb/%_pb2.pyi: proto/%.proto $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=koordlet/pb --pyi_out=koordlet/pb $<

deps: $(STAMP) $(PB)

pb: $(PB)

run: $(STAMP) $(PB)
	$(BIN)/koordlet run --host-root / --pods-dir examples/pods --example-pods-cgroups \
	  --nodeslo examples/nodeslo.yaml --state-dir state --feature-gates Accelerators=true,RDMADevices=true,PSICollector=true

test: $(STAMP) $(PB)
	$(BIN)/ruff check koordlet scheduler tests benchmarks
	$(BIN)/mypy
	$(BIN)/pytest -q -p no:cacheprovider

# Every benchmark runs and prints its table even when an earlier one misses (make says "Error ... (ignored)").
bench: $(STAMP) $(PB)
	-$(BIN)/python -m benchmarks.daemon
	-$(BIN)/python -m benchmarks.collection
	-$(BIN)/python -m benchmarks.scrape
	-$(BIN)/python -m benchmarks.qos_reconcile
	-$(BIN)/python -m benchmarks.qos_effect
	-$(BIN)/python -m benchmarks.scheduler
	-$(BIN)/python -m benchmarks.nri_wire
	-$(BIN)/python -m benchmarks.nri
	-$(BIN)/python -m benchmarks.podresources

clean:
	rm -rf $(VENV) state .pytest_cache .mypy_cache .ruff_cache koordlet/pb/*_pb2.py koordlet/pb/*_pb2.pyi
