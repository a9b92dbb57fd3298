"""`koordlet device-daemon`: writes the xPU device-info file koordlet reads, from the vendor CLIs (npu-smi, cnmon)."""

# Upstream: cmd/koord-device-daemon/main.go (loop, oneshot, remove on exit), pkg/device-daemon/printer/{printer.go,
# writer.go} (all vendors' entries concatenated, json.MarshalIndent, renameio atomic write), resource/*.go (vendors).

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping

from apis.core.gojson import marshal
from apis.core.objects import JSON
from koordlet.devices import pci
from koordlet.devices.vendors import CommandError, Runner, VendorError, ascend, cambricon
from koordlet.host.paths import HostPaths

log = logging.getLogger(__name__)

DEFAULT_OUTPUT = "/var/run/koordlet/xpu-device-infos/ic-device"
DEFAULT_INTERVAL = 900.0
DEFAULT_TIMEOUT = 60.0

# vendor -> (PCI match on (vendor id, device id), probe). Upstream also registers Kunlun and MetaX managers.
Probe = Callable[[Runner, HostPaths, str], list[JSON]]
VENDORS: dict[str, tuple[Callable[[str, str], bool], Probe]] = {
    ascend.VENDOR: (ascend.is_npu, ascend.collect),
    cambricon.VENDOR: (cambricon.is_mlu, lambda run, paths, dev: cambricon.collect(run, paths)),
}


def subprocess_runner(host_root: str = "/", timeout: float = DEFAULT_TIMEOUT) -> Runner:
    """Run a vendor CLI, inside `chroot <host_root>` when the host is mounted elsewhere (upstream always runs
    `chroot /hostfs ...`); stdout and stderr combined, as Go's CombinedOutput."""
    prefix = [] if host_root in ("", "/") else ["chroot", host_root]

    def run(argv: list[str]) -> str:
        try:
            done = subprocess.run([*prefix, *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired as e:
            partial = e.output.decode("utf-8", "replace") if isinstance(e.output, bytes) else ""
            raise CommandError(argv, f"timed out after {timeout:g}s", partial) from e
        except OSError as e:
            raise CommandError(argv, str(e)) from e
        output = done.stdout.decode("utf-8", "replace")
        if done.returncode != 0:
            raise CommandError(argv, f"exit status {done.returncode}", output)
        return output

    return run


class ReplayRunner:
    """A Runner answering from recorded outputs keyed by argv; an unrecorded command fails like a missing tool.
    A value that is a CommandError is raised (a recorded failure, e.g. `Invalid card id.`)."""

    def __init__(self, outputs: Mapping[tuple[str, ...], str | CommandError]) -> None:
        self.outputs = dict(outputs)
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str]) -> str:
        self.calls.append(list(argv))
        out = self.outputs.get(tuple(argv))
        if out is None:
            raise CommandError(argv, "not recorded")
        if isinstance(out, CommandError):
            raise out
        return out


def dev_root_for(paths: HostPaths) -> str:
    """Where /dev/davinci* live: beside the sys root when that is a `<root>/sys` of a mounted host tree
    (`--host-root`), else /dev (the DaemonSet mounts the host's /dev at /dev, as upstream's)."""
    sys_root = os.path.normpath(paths.sys_root)
    parent = os.path.dirname(sys_root)
    if os.path.basename(sys_root) == "sys" and parent not in ("", "/"):
        return os.path.join(parent, "dev")
    return "/dev"


def detect_vendors(paths: HostPaths) -> list[str]:
    """Vendors with at least one matching PCI function under the sys root (upstream asks ghw the same)."""
    ids = [pci.vendor_device(paths, bdf) for bdf in pci.list_devices(paths)]
    return [name for name, (match, _) in VENDORS.items() if any(match(v, d) for v, d in ids)]


class Collector:
    """One round = every detected vendor's entries, concatenated in VENDORS order.

    **[quirk]** upstream aborts the whole round on any vendor error — and then the daemon exits quietly, deleting
    its output file. Here a failing vendor is logged and contributes the entries of its last successful round
    (none before the first), so a transient npu-smi failure neither stops the daemon nor makes devices vanish.
    """

    def __init__(self, paths: HostPaths, runner: Runner, dev_root: str | None = None) -> None:
        self.paths = paths
        self.runner = runner
        self.dev_root = dev_root or dev_root_for(paths)
        self.last_good: dict[str, list[JSON]] = {}

    def collect(self) -> list[JSON]:
        out: list[JSON] = []
        for vendor in detect_vendors(self.paths):
            _, probe = VENDORS[vendor]
            try:
                entries = probe(self.runner, self.paths, self.dev_root)
            except (CommandError, VendorError) as e:
                log.warning("%s devices not collected this round: %s", vendor, e)
                entries = self.last_good.get(vendor, [])
            except Exception:  # a parser bug must not kill the daemon
                log.exception("%s devices not collected this round", vendor)
                entries = self.last_good.get(vendor, [])
            else:
                self.last_good[vendor] = entries
            out.extend(entries)
        return out


def collect(paths: HostPaths, runner: Runner, dev_root: str | None = None) -> list[JSON]:
    """One collection round (no memory of earlier rounds)."""
    return Collector(paths, runner, dev_root).collect()


def encode_device_infos(infos: list[JSON]) -> str:
    """The file content: Go's json.MarshalIndent(devices, "", "  ") of []XPUDeviceInfo — struct field order,
    `omitempty` fields dropped, map keys sorted, `<>&` and U+2028/9 escaped, no trailing newline."""
    return marshal([_go_order(i) for i in infos], indent=2)


def _go_order(info: JSON) -> JSON:
    out: JSON = {k: str(info.get(k) or "") for k in ("vendor", "model", "uuid", "minor")}
    resources = info.get("resources") or {}
    if resources:
        out["resources"] = {k: str(resources[k]) for k in sorted(resources)}
    topo = info.get("topology")
    if topo is not None:
        t: JSON = {}
        if topo.get("p2pLinks"):
            t["p2pLinks"] = [{"peerMinor": str(link.get("peerMinor") or ""), "type": str(link.get("type") or "")}
                             for link in topo["p2pLinks"]]
        if topo.get("mustHonorPartition"):
            t["mustHonorPartition"] = True
        for key in ("socketID", "nodeID", "pcieID", "busID"):
            if topo.get(key):
                t[key] = str(topo[key])
        out["topology"] = t
    status = info.get("status")
    if status is not None:
        s: JSON = {"healthy": bool(status.get("healthy"))}
        for key in ("errCode", "errMessage"):
            if status.get(key):
                s[key] = str(status[key])
        out["status"] = s
    return out


def write_device_infos(output: str, infos: list[JSON]) -> None:
    """Atomically replace `output` (temp file in the same directory, fsync, rename; mode 0644 as renameio);
    "" or "-" prints to stdout instead. Raises OSError."""
    data = encode_device_infos(infos)
    if output in ("", "-"):
        sys.stdout.write(data + "\n")
        sys.stdout.flush()
        return
    directory = os.path.dirname(os.path.abspath(output))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(output) + ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, output)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename durable; not every filesystem can fsync a directory
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def run_device_daemon(paths: HostPaths, output: str = DEFAULT_OUTPUT, *, oneshot: bool = False,
                      interval: float = DEFAULT_INTERVAL, runner: Runner | None = None,
                      stop: threading.Event | None = None, dev_root: str | None = None) -> int:
    """Write the device-info file once (`oneshot`) or every `interval` seconds until `stop` is set (or SIGTERM/
    SIGINT when run in the main thread without a `stop`); on exit a looping daemon removes its file, so koordlet
    stops reporting devices nobody maintains. Returns the exit code (1 when a oneshot write failed)."""
    runner = runner or subprocess_runner()
    restore = None
    if stop is None:
        stop = threading.Event()
        if threading.current_thread() is threading.main_thread():
            restore = _stop_on_signals(stop)
    collector = Collector(paths, runner, dev_root)
    try:
        while True:
            infos = collector.collect()
            if not infos:
                log.warning("no xPU device infos generated from any vendor")
            try:
                write_device_infos(output, infos)
                log.info("wrote %d xPU device infos to %s", len(infos), output or "stdout")
            except OSError as e:
                log.error("writing %s failed: %s", output, e)
                if oneshot:
                    return 1
            if oneshot or stop.wait(interval):
                return 0
    finally:
        if restore is not None:
            restore()
        if not oneshot and output not in ("", "-"):
            try:
                os.remove(output)
            except FileNotFoundError:
                pass
            except OSError as e:
                log.warning("removing %s failed: %s", output, e)


def _stop_on_signals(stop: threading.Event) -> Callable[[], None]:
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    for sig in previous:
        signal.signal(sig, lambda signum, frame: stop.set())

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore
