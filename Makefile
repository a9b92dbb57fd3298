# Two set-up commands on a fresh Debian machine: `make run` and `make test`.
# Each creates .venv/ and installs what it needs on first use (Debian packages too when run as root).
SHELL := /bin/bash
PYTHON ?= $(shell test -x /usr/bin/python3 && echo /usr/bin/python3 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Debian packages, the venv and bcc come from scripts/install.sh, which the image (Dockerfile) runs too: its package
# lists say what each package is for (`scripts/install.sh packages dev`).
INSTALL := scripts/install.sh
IMAGE := localhost/koordlet:$(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE_BASE := localhost/koordlet-base:bookworm
IMAGE_WORK := /var/tmp/koordlet-image
# koordlet/pb/<name>_pb2.py(i) are generated from proto/<name>.proto and not kept in git.
PROTOS := $(wildcard proto/*.proto)
PB := $(patsubst proto/%.proto,koordlet/pb/%_pb2.py,$(PROTOS))

.PHONY: run test faults lint typecheck bench clean deps pb ebpf-setup image image-test demo docs

$(STAMP): pyproject.toml Makefile $(INSTALL)
	$(INSTALL) dev $(VENV)
	touch $(STAMP)

# Regenerated when a .proto changes or the venv (so grpcio-tools and protobuf) is reinstalled.
koordlet/pb/%_pb2.py koordlet/pb/%_pb2.pyi: proto/%.proto $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=koordlet/pb --pyi_out=koordlet/pb $<

# eBPF set-up, idempotent, before every run/test/bench (mounts do not survive a reboot). As root only: without root
# there is no BPF, the agent falls back to schedstat and the eBPF tests skip (they fail under CI=true). Kernel
# headers are linked for bcc and tracefs/debugfs mounted (scripts/install.sh says how and why).
ebpf-setup: $(STAMP)
	@$(INSTALL) ebpf-host

deps: $(STAMP) $(PB)

pb: $(PB)

run: $(STAMP) $(PB) ebpf-setup
	$(BIN)/koordlet run --host-root / --pods-dir examples/pods --example-pods-cgroups \
	  --nodeslo examples/nodeslo.yaml --state-dir state --feature-gates Accelerators=true,RDMADevices=true,PSICollector=true

test: $(STAMP) $(PB) ebpf-setup
	$(BIN)/ruff check apis koordlet scheduler tests benchmarks demo
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/pytest -q -p no:cacheprovider

# The fault suite alone (tests/faults: injected API, runtime, cgroup, churn and scrape faults, and the wire fuzzing;
# kubelet restarting and stalling are the PodResources proxy's and the pods source's own tests); `make test` runs all.
faults: $(STAMP) $(PB) ebpf-setup
	$(BIN)/pytest -q -p no:cacheprovider tests/faults tests/podresources/test_proxy.py::test_kubelet_restart \
	  tests/podresources/test_proxy.py::test_a_slow_kubelet_is_answered_unavailable \
	  tests/test_kubelet_source.py::test_timeout_is_unreachable_and_not_observed

# Every benchmark runs and prints its table even when an earlier one misses (make says "Error ... (ignored)").
bench: $(STAMP) $(PB) ebpf-setup
	-$(BIN)/python -m benchmarks.daemon
	-$(BIN)/python -m benchmarks.collection
	-$(BIN)/python -m benchmarks.scrape
	-$(BIN)/python -m benchmarks.qos_reconcile
	-$(BIN)/python -m benchmarks.qos_effect
	-$(BIN)/python -m benchmarks.scheduler
	-$(BIN)/python -m benchmarks.scheduler_filed
	-$(BIN)/python -m benchmarks.scheduler_config
	-$(BIN)/python -m benchmarks.numa
	-$(BIN)/python -m benchmarks.noderesource
	-$(BIN)/python -m benchmarks.quota
	-$(BIN)/python -m benchmarks.descheduler
	-$(BIN)/python -m benchmarks.nri_wire
	-$(BIN)/python -m benchmarks.nri
	-$(BIN)/python -m benchmarks.schedlat
	-$(BIN)/python -m benchmarks.podresources
	-$(BIN)/python -m benchmarks.apifaults
	-$(BIN)/python -m benchmarks.churn

# The image without a registry: a Debian root from debootstrap (the mirror this machine's apt uses), committed as
# a base image with buildah from scratch, then the Dockerfile on top of it (no pull).
image:
	@$(INSTALL) image-tools
	@if [ "$$(id -u)" != 0 ]; then echo "make image: debootstrap and buildah need root" >&2; exit 1; fi
	@if ! buildah inspect --type image $(IMAGE_BASE) >/dev/null 2>&1; then \
	  mirror=$$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1); \
	  [ -n "$$mirror" ] || mirror=$$(awk '$$1 == "deb" {print $$2; exit}' /etc/apt/sources.list); \
	  rm -rf $(IMAGE_WORK) && mkdir -p $(IMAGE_WORK) && \
	  debootstrap --variant=minbase bookworm $(IMAGE_WORK)/rootfs $$mirror >$(IMAGE_WORK)/debootstrap.log && \
	  ctr=$$(buildah from scratch) && mnt=$$(buildah mount $$ctr) && cp -a $(IMAGE_WORK)/rootfs/. $$mnt/ && \
	  buildah umount $$ctr && buildah commit -q $$ctr $(IMAGE_BASE) && buildah rm $$ctr >/dev/null && \
	  rm -rf $(IMAGE_WORK); \
	fi
	buildah bud --pull-never --network host --isolation chroot --layers=false --build-arg BASE=$(IMAGE_BASE) \
	  $$(c=$${PIP_CERT:-$$(sed -n 's/^cert *= *//p' /etc/pip.conf 2>/dev/null)}; [ -f "$$c" ] && echo "--volume $$c:/run/build-ca.crt:ro --build-arg PIP_CERT=/run/build-ca.crt") \
	  -t $(IMAGE) -f Dockerfile .

# Not part of `make test`: the image's agent answers `version` and reports the bundled GPU+RDMA node's devices.
# runc, not Debian's default crun: crun refuses hosts whose cgroups are hybrid v1 (this machine's); explicit
# rlimits: podman's defaults (nofile 1048576, ...) exceed this machine's hard limits and the runtime fails to set them.
PODMAN_RUN := podman run --rm --runtime runc --ulimit nofile=4096:4096 --ulimit nproc=4096:4096
EBPF_CHECK := from koordlet.schedlat.hostprep import prepare_host; prepare_host(); \
  from koordlet.schedlat.loader import load; print("eBPF program attached:", load().attach)
image-test:
	$(PODMAN_RUN) --network none $(IMAGE) koordlet version
	$(PODMAN_RUN) --network none -v $(CURDIR)/examples/nodes:/nodes:ro $(IMAGE) koordlet devices \
	  --host-root /nodes/l20-pcie --nvml-snapshot /nodes/l20-pcie/nvml-snapshot.json --node-name l20-pcie -o table
	$(PODMAN_RUN) --network none $(IMAGE) koordlet devices -o table
	@# the chart's command line: /koordlet, no subcommand, upstream's flags (-h: parsed, then exit 0)
	$(PODMAN_RUN) --network none --entrypoint /koordlet $(IMAGE) -addr=:9316 -cgroup-root-dir=/host-cgroup/ -h
	@# bcc compiles and attaches the run-queue program with the image's own kernel headers (the node has none here),
	@# after the preparation `koordlet run` does first (headers, tracefs)
	$(PODMAN_RUN) --network none --privileged --pid host $(IMAGE) python -c '$(EBPF_CHECK)'

# For a person: the agent on the simulated GPU+RDMA node plus this host's cgroups, scraped by Debian's prometheus
# with the DaemonSet's scrape config and recording rules; prints the URLs to open (Ctrl-C stops everything).
demo: $(STAMP) $(PB) ebpf-setup
	$(BIN)/python -m demo

# Regenerates the configuration and metrics references in README.md (tests/test_reference.py fails when stale)
# and the Grafana dashboards of deploy/monitoring/dashboards/ (tests/test_deploy_dashboards.py).
docs: $(STAMP) $(PB)
	$(BIN)/python -m koordlet.reference --write README.md
	$(BIN)/python -m demo.dashboards --write

clean:
	rm -rf $(VENV) state .pytest_cache .mypy_cache .ruff_cache koordlet/pb/*_pb2.py koordlet/pb/*_pb2.pyi
