#!/bin/sh
# The image's entrypoint: gets bcc ready the way scripts/install.sh ebpf-host does on a developer machine, without
# writing to the node's read-only /lib/modules and /usr/src mounts, then runs the command.
# - kernel headers: the node's (/lib/modules/$(uname -r)/build, mounted from the node) when they resolve, else the
#   Debian headers merged into the image (bcc's BCC_KERNEL_SOURCE takes that single directory)
# - tracefs/debugfs: the node's mounts (DaemonSet hostPath), else mounted here (privileged) when absent
if [ -z "${BCC_KERNEL_SOURCE:-}" ] && [ ! -e "/lib/modules/$(uname -r)/build/include" ] \
    && [ -d /usr/lib/koordlet/kernel-headers ]; then
  export BCC_KERNEL_SOURCE=/usr/lib/koordlet/kernel-headers
fi
if [ "$(id -u)" = 0 ]; then
  mountpoint -q /sys/kernel/tracing 2>/dev/null || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
  mountpoint -q /sys/kernel/debug 2>/dev/null || mount -t debugfs nodev /sys/kernel/debug 2>/dev/null || true
fi
exec "$@"
