"""The node's device inventory: runs the enabled discovery sources and composes the Device CR content.

Sources follow upstream's gates: `Accelerators` enables xPU device-info files and NVIDIA/NVML, `RDMADevices`
enables RDMA (upstream only reports RDMA inside the Accelerators loop; `koordlet devices` runs every source).
A source that fails keeps its previous contribution, so one bad round never empties the Device CR.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time

from apis.core.objects import JSON
from koordlet.config import Config
from koordlet.devices import rdma, xpu
from koordlet.devices.model import DeviceSet
from koordlet.devices.nvidia.backend import GpuInfo, NvmlBackend, NvmlError
from koordlet.devices.nvidia.health import XidHealth, XidWatcher
from koordlet.devices.nvidia.telemetry import XidCounts
from koordlet.devices.report import compose
from koordlet.health import Health

log = logging.getLogger(__name__)


class DeviceInventory:
    def __init__(self, config: Config, health: Health, *, accelerators: bool | None = None,
                 rdma_devices: bool | None = None, netlink: rdma.NetlinkBackend | None = None) -> None:
        self.config = config
        self.paths = config.paths
        self.health = health
        self.accelerators = config.gate("Accelerators") if accelerators is None else accelerators
        self.rdma_devices = config.gate("RDMADevices") if rdma_devices is None else rdma_devices
        if netlink is None and not config.simulated_host:
            netlink = rdma.PyRoute2Netlink()  # this host's links; a simulated node has none to ask
        self.netlink = netlink
        self.xid = XidHealth(quiet_period=config.gpu_health_recovery_seconds)
        self.xid_counts = XidCounts()  # every XID by GPU and code (the watcher records, the exporter reads)
        self.driver_version = ""  # NVML's, as of the last round
        self._nvml: NvmlBackend | None = None
        self._nvml_ready: bool | None = None  # False: the configured snapshot could not be loaded
        self.gpus: list[GpuInfo] = []  # the NVML inventory of the last round (for usage and XID watching)
        self._watcher: XidWatcher | None = None
        self._xpu_files = xpu.DeviceInfoFiles(self.paths, health, config.xpu_device_infos_dir)
        self._last: dict[str, DeviceSet] = {}
        self.composed = DeviceSet()

    # -- NVML --------------------------------------------------------------------------------------------------
    def nvml(self) -> NvmlBackend | None:
        """The NVML backend, made once: the snapshot when configured, else the real library (initialised by
        discovery; a machine without NVML gets one log line and no GPUs, never a retry storm)."""
        if self._nvml is None and self._nvml_ready is None:
            if self.config.nvml_snapshot:
                from koordlet.devices.nvidia.snapshot import load_snapshot

                try:
                    self._nvml = load_snapshot(self.config.nvml_snapshot)
                except Exception as e:
                    self.health.skip("gpu", "nvml-snapshot-unreadable", self.config.nvml_snapshot, str(e))
                    self._nvml_ready = False
            else:
                from koordlet.devices.nvidia.backend import PynvmlBackend

                self._nvml = PynvmlBackend()
        return self._nvml

    def start_xid_watch(self) -> None:
        """Daemon mode: watch critical XIDs of the GPUs found (a thread; nothing happens without NVML)."""
        backend = self.nvml()
        if backend is None or self._watcher is not None or not self.gpus:
            return
        self._watcher = XidWatcher(backend, self.xid, [g.bus_id for g in self.gpus], self.health,
                                   counts=self.xid_counts)
        self._watcher.start()

    def close(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
        if self._nvml is not None:
            with contextlib.suppress(NvmlError):
                self._nvml.shutdown()

    # -- one round -----------------------------------------------------------------------------------------------
    def refresh(self, now: float | None = None) -> DeviceSet:
        now = time.time() if now is None else now
        if self.accelerators:
            self._last["xpu"] = xpu.build(self._xpu_files.read(), self.health)
            self._refresh_nvidia(now)
        if self.rdma_devices:
            self._last["rdma"] = rdma.discover(self.paths, self.health, self.netlink)
        self.composed = compose(self._last.get("xpu"), self._last.get("nvidia"), self._last.get("rdma"),
                                self.config.xpu_enforce_collect_from_device_infos)
        return self.composed

    def _refresh_nvidia(self, now: float) -> None:
        from koordlet.devices.nvidia.discovery import build_device_set, inventory

        backend = self.nvml()
        if backend is None:
            return
        gpus = inventory(backend, self.paths, self.health)
        if gpus is None:  # NVML unavailable (logged once by discovery)
            return
        try:
            driver: str | None = backend.driver_version()
        except NvmlError as e:
            self.health.skip("gpu", "nvml-driver-version-failed", backend.name, str(e))
            driver = None
        self.gpus = [g.info for g in gpus]
        self.driver_version = driver or self.driver_version
        self._last["nvidia"] = build_device_set(gpus, driver, state=self.xid, now=now,
                                                partition_policy=self.config.gpu_partition_policy)

    def dump_nvml(self) -> JSON | None:
        from koordlet.devices.nvidia.snapshot import dump_snapshot

        backend = self.nvml()
        return None if backend is None else dump_snapshot(backend)


def dump_json(obj: object) -> str:
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"
