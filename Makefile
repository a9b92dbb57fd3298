# Two set-up commands on a fresh Debian machine: `make run` and `make test`.
# Each creates .venv/ and installs what it needs on first use (Debian packages too when run as root).
SHELL := /bin/bash
PYTHON ?= $(shell test -x /usr/bin/python3 && echo /usr/bin/python3 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# golang-go + the ttrpc sources: the Go NRI/ttrpc peer the wire tests (tests/nri/) build offline in GOPATH mode.
APT_PACKAGES := python3-venv python3-dev util-linux procps openssl iproute2 golang-go golang-github-containerd-ttrpc-dev
# bcc for the per-pod run-queue wait program (koordlet/schedlat), its runqlat for the comparison test and benchmark,
# the kernel headers it compiles against (see ebpf-setup), and bpftool, the peer of our BTF reader's test.
ARCH := $(shell dpkg --print-architecture 2>/dev/null || echo amd64)
APT_PACKAGES += python3-bpfcc bpfcc-tools linux-headers-$(ARCH) bpftool
# koordlet/pb/<name>_pb2.py(i) are generated from proto/<name>.proto and not kept in git.
PROTOS := $(wildcard proto/*.proto)
PB := $(patsubst proto/%.proto,koordlet/pb/%_pb2.py,$(PROTOS))

.PHONY: run test lint typecheck bench clean deps pb ebpf-setup

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

# eBPF set-up, idempotent, before every run/test/bench (mounts do not survive a reboot). As root only: without root
# there is no BPF, the agent falls back to schedstat and the eBPF tests skip (they fail under CI=true).
# - Kernel headers: bcc compiles against /lib/modules/$(uname -r)/build. This machine runs a newer kernel than any
#   Debian headers package, so the newest installed linux-headers-<version>-$(ARCH) is linked as `build` and its
#   -common half as `source` (Debian splits them; clang needs both). Our program reads tracepoint arguments (layout
#   from tracefs) and task_struct fields at offsets from the running kernel's BTF, never a struct layout from the
#   headers, so older headers compile it correctly. A `build`
#   that exists (the kernel's own headers) is left alone; a dangling one is relinked.
# - tracefs and debugfs are mounted when absent: attaching a tracepoint program needs them.
# - The venv sees Debian's `bcc` package and nothing else from the system: a symlink to
#   /usr/lib/python3/dist-packages/bcc in its site-packages. Not --system-site-packages (every Debian Python
#   package would then satisfy or shadow our pins), not a .pth (it puts all of dist-packages on sys.path).
ebpf-setup: $(STAMP)
	@if [ "$$(id -u)" = 0 ]; then \
	  kdir=/lib/modules/$$(uname -r); \
	  if [ ! -e $$kdir/build ]; then \
	    hdr=$$(ls -d /usr/src/linux-headers-*-$(ARCH) 2>/dev/null | sort -V | tail -n 1); \
	    if [ -n "$$hdr" ]; then \
	      mkdir -p $$kdir && ln -sfn $$hdr $$kdir/build && ln -sfn $${hdr%-$(ARCH)}-common $$kdir/source; \
	      echo "ebpf-setup: $$kdir/build -> $$hdr"; \
	    fi; \
	  fi; \
	  mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing || true; \
	  mountpoint -q /sys/kernel/debug || mount -t debugfs nodev /sys/kernel/debug || true; \
	fi
	@sp=$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'); \
	if [ -d /usr/lib/python3/dist-packages/bcc ] && [ ! -e $$sp/bcc ]; then \
	  ln -sfn /usr/lib/python3/dist-packages/bcc $$sp/bcc && echo "ebpf-setup: the venv sees Debian's bcc"; \
	fi

deps: $(STAMP) $(PB)

pb: $(PB)

run: $(STAMP) $(PB) ebpf-setup
	$(BIN)/koordlet run --host-root / --pods-dir examples/pods --example-pods-cgroups \
	  --nodeslo examples/nodeslo.yaml --state-dir state --feature-gates Accelerators=true,RDMADevices=true,PSICollector=true

test: $(STAMP) $(PB) ebpf-setup
	$(BIN)/ruff check koordlet scheduler tests benchmarks
	$(BIN)/mypy
	$(BIN)/pytest -q -p no:cacheprovider

# Every benchmark runs and prints its table even when an earlier one misses (make says "Error ... (ignored)").
bench: $(STAMP) $(PB) ebpf-setup
	-$(BIN)/python -m benchmarks.daemon
	-$(BIN)/python -m benchmarks.collection
	-$(BIN)/python -m benchmarks.scrape
	-$(BIN)/python -m benchmarks.qos_reconcile
	-$(BIN)/python -m benchmarks.qos_effect
	-$(BIN)/python -m benchmarks.scheduler
	-$(BIN)/python -m benchmarks.quota
	-$(BIN)/python -m benchmarks.nri_wire
	-$(BIN)/python -m benchmarks.nri
	-$(BIN)/python -m benchmarks.schedlat
	-$(BIN)/python -m benchmarks.podresources

clean:
	rm -rf $(VENV) state .pytest_cache .mypy_cache .ruff_cache koordlet/pb/*_pb2.py koordlet/pb/*_pb2.pyi
