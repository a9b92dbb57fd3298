#!/bin/bash
# One install script for a developer machine (the Makefile's set-up) and for the image (Dockerfile), so the image
# installs exactly what the tests run against.
#
#   scripts/install.sh dev VENV      Debian packages (as root) for the agent, its tests and benchmarks, then VENV
#                                    with `pip install -e .[dev]` and Debian's bcc visible in it
#   scripts/install.sh image VENV    the agent only: Debian packages, VENV with `pip install .` (protobuf modules
#                                    generated first, the generator removed again), bcc, a merged kernel-headers tree
#   scripts/install.sh ebpf-host     as root: kernel headers linked for bcc, tracefs and debugfs mounted
#   scripts/install.sh image-tools   as root: debootstrap, buildah and podman (`make image`, `make image-test`)
#   scripts/install.sh packages dev|image   print the Debian package list
set -euo pipefail

ARCH=$(dpkg --print-architecture 2>/dev/null || echo amd64)
PYTHON=${PYTHON:-/usr/bin/python3}
HERE=$(cd "$(dirname "$0")/.." && pwd)

# What the agent needs at run time, in the image as on a developer machine:
# - python3-venv: the venv; iproute2/util-linux/procps: tools the agent and its NRI/cgroup code shell out to or
#   the troubleshooting section tells a person to run
# - python3-bpfcc + linux-headers-$ARCH: the run-queue wait program (koordlet/schedlat) compiles with bcc/LLVM
#   against kernel headers (see link_headers)
IMAGE_PACKAGES="python3 python3-venv ca-certificates iproute2 util-linux procps python3-bpfcc linux-headers-$ARCH"
# Tests and benchmarks on top: python3-dev (wheels), openssl (test certificates), golang-go + the ttrpc sources
# (the Go NRI/ttrpc peer of tests/nri), bcc's runqlat (bpfcc-tools) and bpftool (peers of the eBPF tests),
# prometheus (the end-to-end scrape test and `make demo`), prometheus-node-exporter (beside the agent in `make bench`'s
# scrape benchmark).
DEV_PACKAGES="$IMAGE_PACKAGES python3-dev openssl golang-go golang-github-containerd-ttrpc-dev bpfcc-tools bpftool"
DEV_PACKAGES="$DEV_PACKAGES prometheus prometheus-node-exporter"
# kubectl renders deploy/ and the chart overlay (deploy/chart/, tests/test_deploy*.py; its kustomize). Debian's is
# kubernetes-client; a kubectl already installed (another vendor's package, which owns /usr/bin/kubectl too) is kept.
command -v kubectl >/dev/null 2>&1 || DEV_PACKAGES="$DEV_PACKAGES kubernetes-client"
IMAGE_TOOLS="debootstrap buildah podman runc"

apt_install() {
  local lean=""
  if [ "$1" = --lean ]; then lean=--no-install-recommends; shift; fi
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "install.sh: not root (or no apt-get): Debian packages not checked: $*" >&2
    return 0
  fi
  local missing=""
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
  if [ -n "$missing" ]; then
    echo "install.sh: apt-get install$missing"
    apt-get update -qq
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $lean $missing
  fi
}

make_venv() {
  local venv=$1
  test -x "$venv/bin/python" || "$PYTHON" -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
}

# The venv sees Debian's bcc and nothing else from the system: a symlink to /usr/lib/python3/dist-packages/bcc in
# its site-packages. Not --system-site-packages (every Debian Python package would then satisfy or shadow our
# pins), not a .pth (it puts all of dist-packages on sys.path).
link_bcc() {
  local venv=$1 sp
  sp=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  if [ -d /usr/lib/python3/dist-packages/bcc ] && [ ! -e "$sp/bcc" ]; then
    ln -sfn /usr/lib/python3/dist-packages/bcc "$sp/bcc" && echo "install.sh: the venv sees Debian's bcc"
  fi
}

# bcc compiles against /lib/modules/$(uname -r)/build. A machine whose kernel is newer than any Debian headers
# package gets the newest installed linux-headers-<version>-$ARCH linked as `build` and its -common half as
# `source` (Debian splits them; clang needs both). Our program reads tracepoint arguments (layout from tracefs) and
# task_struct fields at offsets from the running kernel's BTF, never a struct layout from the headers, so older
# headers compile it correctly. A `build` that exists (the kernel's own headers) is left alone.
link_headers() {
  local kdir hdr
  kdir=/lib/modules/$(uname -r)
  [ -e "$kdir/build" ] && return 0
  hdr=$(ls -d /usr/src/linux-headers-*-"$ARCH" 2>/dev/null | sort -V | tail -n 1)
  [ -n "$hdr" ] || return 0
  mkdir -p "$kdir" && ln -sfn "$hdr" "$kdir/build" && ln -sfn "${hdr%-"$ARCH"}-common" "$kdir/source"
  echo "install.sh: $kdir/build -> $hdr"
}

# In the image /lib/modules and /usr/src are the node's (read-only mounts), so nothing can be linked there at run
# time. The image keeps its own Debian headers as one merged tree (the -common half, then the $ARCH half over it);
# `koordlet run` points bcc at it (BCC_KERNEL_SOURCE, which takes a single directory) when the node has no headers
# (koordlet/schedlat/hostprep.py; the image has no entrypoint, as the chart's `command: [/koordlet]` would bypass it).
merge_headers() {
  local hdr=$1 out=/usr/lib/koordlet/kernel-headers
  [ -n "$hdr" ] || { echo "install.sh: no Debian kernel headers installed" >&2; return 1; }
  rm -rf "$out" && mkdir -p "$out"
  cp -a "${hdr%-"$ARCH"}-common/." "$out/"
  # the $ARCH half's own links (scripts, tools: kbuild, which bcc does not use) would dangle here
  (cd "$hdr" && find . -mindepth 1 -maxdepth 1 ! -type l -exec cp -a {} "$out/" \;)
  echo "install.sh: merged kernel headers in $out (from $hdr)"
}

mount_trace() {
  # attaching a tracepoint program needs tracefs (and debugfs for older paths); mounts do not survive a reboot
  mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing || true
  mountpoint -q /sys/kernel/debug || mount -t debugfs nodev /sys/kernel/debug || true
}

generate_pb() {
  local venv=$1
  for proto in "$HERE"/proto/*.proto; do
    "$venv/bin/python" -m grpc_tools.protoc -I"$HERE/proto" --python_out="$HERE/koordlet/pb" \
      --pyi_out="$HERE/koordlet/pb" "$proto"
  done
}

cmd=${1:-}
case "$cmd" in
  packages)
    case "${2:-}" in dev) echo "$DEV_PACKAGES" ;; image) echo "$IMAGE_PACKAGES" ;; *) exit 2 ;; esac ;;
  dev)
    venv=${2:?venv dir}
    # shellcheck disable=SC2086
    apt_install $DEV_PACKAGES
    make_venv "$venv"
    "$venv/bin/pip" install -q -e "$HERE[dev]"
    link_bcc "$venv" ;;
  image)
    venv=${2:?venv dir}
    # the image leaves out recommended packages (the agent uses none of them)
    # shellcheck disable=SC2086
    apt_install --lean $IMAGE_PACKAGES
    make_venv "$venv"
    # koordlet/pb is generated, not in git: grpcio-tools generates it and leaves again (grpcio, which the
    # PodResources proxy imports, is a dependency of its own and stays)
    grpcio=$(cd "$HERE" && "$PYTHON" -c 'import tomllib; d = tomllib.load(open("pyproject.toml", "rb"))
print(next(x for x in d["project"]["optional-dependencies"]["dev"] if x.startswith("grpcio-tools")))')
    "$venv/bin/pip" install -q "$grpcio"
    generate_pb "$venv"
    "$venv/bin/pip" uninstall -q -y grpcio-tools
    "$venv/bin/pip" install -q --no-cache-dir "$HERE"
    link_bcc "$venv"
    merge_headers "$(ls -d /usr/src/linux-headers-*-"$ARCH" 2>/dev/null | sort -V | tail -n 1)"
    apt-get clean && rm -rf /var/lib/apt/lists/* ;;
  ebpf-host)
    if [ "$(id -u)" = 0 ]; then link_headers; mount_trace; fi ;;
  image-tools)
    # shellcheck disable=SC2086
    apt_install $IMAGE_TOOLS ;;
  *)
    sed -n '2,12p' "$0" >&2; exit 2 ;;
esac
