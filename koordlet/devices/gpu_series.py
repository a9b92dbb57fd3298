"""GPU device telemetry families (`koordlet_gpu_*`), labelled as dcgm-exporter labels its series so that the
recording rules of deploy/prometheus/dcgm-rules.yaml can republish them under dcgm-exporter's `DCGM_FI_*` names.

Built per scrape from the telemetry collector's last readings and the XID counts: no NVML call is made here. Names
and units: docs/gpu-telemetry.md; choices: docs/decisions.md "GPU telemetry".
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from apis.extension.errors import AnnotationError
from apis.extension.pod import device_allocations
from apis.scheduling.device import DEVICE_TYPE_GPU
from koordlet.devices.nvidia.backend import GpuInfo
from koordlet.devices.nvidia.telemetry import CLOCK_EVENT_REASONS, XidCounts
from koordlet.states.model import PodMeta

# dcgm-exporter's labels of a GPU series (rendermetrics/render_metrics.go; `Hostname` as released up to 4.x),
# after our `node`; DCGM_FI_DRIVER_VERSION is the label its default counters add
GPU_LABELS = ["node", "gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"]
# a device series: MIG instance (empty on the whole GPU) and the pod the GPU is allocated to (empty when none, or
# when several pods share it), as dcgm-exporter's Kubernetes mapping adds them
DEVICE_LABELS = [*GPU_LABELS, "GPU_I_PROFILE", "GPU_I_ID", "namespace", "pod", "container"]
KIB = 1024
MHZ = 1_000_000
_PHASES_DONE = ("Succeeded", "Failed")

# (family, help, read, key or None, scale) of the plain one-value gauges
_GAUGES: tuple[tuple[str, str, str, str | None, float], ...] = (
    ("koordlet_gpu_utilization_percent", "Percent of time a kernel ran on the GPU over NVML's sample period",
     "utilization", "gpu", 1.0),
    ("koordlet_gpu_memory_copy_utilization_percent", "Percent of time device memory was read or written over "
     "NVML's sample period", "utilization", "memory", 1.0),
    ("koordlet_gpu_encoder_utilization_percent", "Video encoder utilisation, percent", "encoderUtilization", None,
     1.0),
    ("koordlet_gpu_decoder_utilization_percent", "Video decoder utilisation, percent", "decoderUtilization", None,
     1.0),
    ("koordlet_gpu_temperature_celsius", "GPU die temperature", "temperature", None, 1.0),
    ("koordlet_gpu_memory_temperature_celsius", "GPU memory (HBM) temperature", "memoryTemperature", None, 1.0),
    ("koordlet_gpu_power_usage_watts", "Power drawn by the GPU board", "powerUsage", None, 1e-3),
    ("koordlet_gpu_sm_clock_hertz", "Current SM clock", "clocks", "sm", MHZ),
    ("koordlet_gpu_memory_clock_hertz", "Current memory clock", "clocks", "memory", MHZ),
    ("koordlet_gpu_clocks_event_reasons", "Bit mask of the reasons the clocks are held down "
     "(nvmlClocksEventReason*)", "clocksEventReasons", None, 1.0),
    ("koordlet_gpu_retired_pages_pending", "1 while a page awaits retirement (takes effect on reset)",
     "retiredPages", "pending", 1.0),
    ("koordlet_gpu_row_remap_pending", "1 while a row remapping awaits a GPU reset", "remappedRows", "pending", 1.0),
    ("koordlet_gpu_row_remap_failure", "1 when a row remapping failed", "remappedRows", "failure", 1.0),
)
# (family without _total, help, read, key, scale) of the plain one-value counters
_COUNTERS: tuple[tuple[str, str, str, str | None, float], ...] = (
    ("koordlet_gpu_energy_joules", "Energy the GPU consumed since the driver loaded", "totalEnergyConsumption",
     None, 1e-3),
    ("koordlet_gpu_pcie_replays", "PCIe replays (link-level retries) since the GPU reset", "pcieReplayCounter",
     None, 1.0),
)


def nvml_bus_id(bus_id: str) -> str:
    """`0000:19:00.0` → `00000000:19:00.0`, NVML's busId form (the one dcgm-exporter's pci_bus_id carries)."""
    domain, rest = bus_id.split(":", 1)
    return f"{int(domain, 16):08X}:{rest.upper()}"


def gpu_label_values(node: str, gpu: GpuInfo, driver: str) -> list[str]:
    """GPU_LABELS' values: dcgm-exporter's `gpu` and `device` use the GPU's index (DCGM's GPU id), not its minor."""
    return [node, str(gpu.index), gpu.uuid, nvml_bus_id(gpu.bus_id), f"nvidia{gpu.index}", gpu.name, node, driver]


def gpu_owners(pods: Iterable[PodMeta]) -> dict[int, tuple[str, str, str]]:
    """GPU minor → (namespace, pod, container) of the one pod koord-scheduler allocated it to (device-allocated);
    the container is the pod's first, where koordlet's PodResources answer lists the GPU (podresources/merge.py). A
    GPU shared by several pods is left out: its per-pod use is in koordlet_pod_gpu_* instead."""
    holders: dict[int, list[tuple[str, str, str]]] = {}
    for pod in pods:
        if pod.phase in _PHASES_DONE:
            continue
        try:
            allocs = device_allocations(pod)
        except AnnotationError:
            continue  # reported by the runtime hooks and PodResources, which act on it
        if not allocs:
            continue
        containers = ((pod.raw.get("spec") or {}).get("containers") or [{}])
        first = str(containers[0].get("name", "")) if isinstance(containers[0], dict) else ""
        for a in allocs.get(DEVICE_TYPE_GPU, ()):
            holders.setdefault(a.minor, []).append((pod.namespace, pod.name, first))
    return {minor: h[0] for minor, h in holders.items() if len({(ns, n) for ns, n, _ in h}) == 1}


def telemetry_families(node: str, gpus: Sequence[GpuInfo], driver: str, readings: Mapping[str, Mapping[str, Any]],
                       xid: XidCounts | None, pods: Iterable[PodMeta]) -> Iterator[Metric]:
    owners = gpu_owners(pods)
    gauges = {name: GaugeMetricFamily(name, doc, labels=DEVICE_LABELS) for name, doc, *_ in _GAUGES}
    counters = {name: CounterMetricFamily(name, doc, labels=DEVICE_LABELS) for name, doc, *_ in _COUNTERS}
    fb = {k: GaugeMetricFamily(f"koordlet_gpu_framebuffer_{k}_bytes", f"Framebuffer memory {k} (a MIG instance's "
                               "where GPU_I_ID is set)", labels=DEVICE_LABELS) for k in ("used", "free", "reserved")}
    reason = GaugeMetricFamily("koordlet_gpu_clocks_event_reason_active", "1 while this reason holds the clocks "
                               "down", labels=[*DEVICE_LABELS, "reason"])
    ecc = CounterMetricFamily("koordlet_gpu_ecc_errors", "ECC errors: `scope` volatile (since the driver loaded) or "
                              "aggregate (lifetime), `error` correctable (single-bit) or uncorrectable (double-bit)",
                              labels=[*DEVICE_LABELS, "scope", "error"])
    retired = CounterMetricFamily("koordlet_gpu_retired_pages", "Framebuffer pages retired, by cause",
                                  labels=[*DEVICE_LABELS, "cause"])
    remapped = CounterMetricFamily("koordlet_gpu_remapped_rows", "Memory rows remapped, by the error that caused it",
                                   labels=[*DEVICE_LABELS, "error"])
    pcie = GaugeMetricFamily("koordlet_gpu_pcie_throughput_bytes_per_second", "PCIe throughput over NVML's 20 ms "
                             "sample", labels=[*DEVICE_LABELS, "direction"])
    nvlink_data = CounterMetricFamily("koordlet_gpu_nvlink_data_bytes", "NVLink payload bytes over all links",
                                      labels=[*DEVICE_LABELS, "direction"])
    nvlink_errors = CounterMetricFamily("koordlet_gpu_nvlink_errors", "NVLink errors over all links",
                                        labels=[*DEVICE_LABELS, "error"])
    xid_total = CounterMetricFamily("koordlet_gpu_xid_errors", "XID errors NVML reported, by code",
                                    labels=[*DEVICE_LABELS, "xid"])
    last_xid = GaugeMetricFamily("koordlet_gpu_last_xid", "Code of the latest XID error (0: none since the agent "
                                 "started)", labels=DEVICE_LABELS)
    for g in sorted(gpus, key=lambda x: x.index):
        base = gpu_label_values(node, g, driver)
        owner = list(owners.get(g.minor, ("", "", "")))
        labels = [*base, "", "", *owner]
        r = readings.get(g.bus_id, {})
        for name, _, read, key, scale in _GAUGES:
            value = _value(r, read, key, scale)
            if value is not None:
                gauges[name].add_metric(labels, value)
        for name, _, read, key, scale in _COUNTERS:
            value = _value(r, read, key, scale)
            if value is not None:
                counters[name].add_metric(labels, value)
        mem = r.get("memory")
        if mem is not None:
            for k in fb:
                fb[k].add_metric(labels, float(mem[k]))
        for mig in r.get("migDevices", ()):
            mig_labels = [*base, mig["profile"], str(mig["gpuInstanceId"]), *owner]
            fb["used"].add_metric(mig_labels, float(mig["memoryUsed"]))
            fb["free"].add_metric(mig_labels, float(mig["memoryFree"]))
        mask = r.get("clocksEventReasons")
        if mask is not None:
            for name, bit in CLOCK_EVENT_REASONS.items():
                reason.add_metric([*labels, name], 1.0 if mask & bit else 0.0)
        if (e := r.get("eccErrors")) is not None:
            for scope in ("volatile", "aggregate"):
                for err in ("Correctable", "Uncorrectable"):
                    ecc.add_metric([*labels, scope, err.lower()], float(e[scope + err]))
        if (p := r.get("retiredPages")) is not None:
            retired.add_metric([*labels, "single_bit_ecc"], float(p["singleBitEcc"]))
            retired.add_metric([*labels, "double_bit_ecc"], float(p["doubleBitEcc"]))
        if (rows := r.get("remappedRows")) is not None:
            remapped.add_metric([*labels, "correctable"], float(rows["correctable"]))
            remapped.add_metric([*labels, "uncorrectable"], float(rows["uncorrectable"]))
        if (t := r.get("pcieThroughput")) is not None:
            pcie.add_metric([*labels, "tx"], float(t["txKBps"] * KIB))
            pcie.add_metric([*labels, "rx"], float(t["rxKBps"] * KIB))
        if (n := r.get("nvlinkThroughput")) is not None:
            nvlink_data.add_metric([*labels, "tx"], float(n["txKiB"] * KIB))
            nvlink_data.add_metric([*labels, "rx"], float(n["rxKiB"] * KIB))
        if (n := r.get("nvlinkErrors")) is not None:
            for key, err in (("replay", "replay"), ("recovery", "recovery"), ("crcFlit", "crc_flit"),
                             ("crcData", "crc_data")):
                nvlink_errors.add_metric([*labels, err], float(n[key]))
        if xid is not None:
            tally = xid.tally(g.bus_id)
            last_xid.add_metric(labels, float(tally.last))
            for code, count in sorted(tally.counts.items()):
                xid_total.add_metric([*labels, str(code)], float(count))
    yield from gauges.values()
    yield from counters.values()
    yield from fb.values()
    yield from (reason, ecc, retired, remapped, pcie, nvlink_data, nvlink_errors, xid_total, last_xid)


def _value(r: Mapping[str, Any], read: str, key: str | None, scale: float) -> float | None:
    """The read's value in the family's unit; a scale below 1 divides (67740 mW / 1000 is 67.74, × 1e-3 is not)."""
    v = r.get(read)
    if v is None:
        return None
    raw = float(v[key] if key is not None else v)
    return raw * scale if scale >= 1 else raw / round(1 / scale)
