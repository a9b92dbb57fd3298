"""The live telemetry reads through pynvml: one function per read of telemetry.READS, each taking the pynvml module,
a kept device handle and the GPU's active NVLinks, returning the read's shape (pynvml's NVMLError propagates).

Constants are nvml.h's; field ids from `NVML_FI_*`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

_TEMPERATURE_GPU = 0  # NVML_TEMPERATURE_GPU
_CLOCK_SM, _CLOCK_MEM = 1, 2  # NVML_CLOCK_SM, NVML_CLOCK_MEM
_CORRECTED, _UNCORRECTED = 0, 1  # NVML_MEMORY_ERROR_TYPE_*
_VOLATILE, _AGGREGATE = 0, 1  # NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC
_RETIRE_SBE, _RETIRE_DBE = 0, 1  # NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS, _DOUBLE_BIT_ECC_ERROR
_PCIE_TX, _PCIE_RX = 0, 1  # NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES
_FI_MEMORY_TEMP = 82  # NVML_FI_DEV_MEMORY_TEMP
_FI_NVLINK_TX, _FI_NVLINK_RX = 138, 139  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX (KiB, scope = link)
# NVML_FI_DEV_NVLINK_{REPLAY,RECOVERY,CRC_FLIT,CRC_DATA}_ERROR_COUNT_TOTAL
_FI_NVLINK_ERRORS = (("replay", 52), ("recovery", 59), ("crcFlit", 38), ("crcData", 45))
_NVML_SUCCESS = 0
_FUNCTION_NOT_FOUND = 13  # NVML_ERROR_FUNCTION_NOT_FOUND: the driver's library predates the call

Reader = Callable[[Any, Any, Sequence[int]], Any]


def _field_int(value: Any) -> int:
    """An nvmlFieldValue_t's integer, whichever member its valueType says (double, uint, ulong, ulonglong, sll)."""
    member = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal"}.get(int(value.valueType), "ullVal")
    return int(getattr(value.value, member))


def _fields(nvml: Any, h: Any, ids: Sequence[int | tuple[int, int]]) -> list[int]:
    """Field values in order; the first failing one raises its own NVML error."""
    values = nvml.nvmlDeviceGetFieldValues(h, list(ids))
    out = []
    for v in values:
        if int(v.nvmlReturn) != _NVML_SUCCESS:
            raise nvml.NVMLError(int(v.nvmlReturn))
        out.append(_field_int(v))
    return out


def utilization(nvml: Any, h: Any, _links: Sequence[int]) -> dict[str, int]:
    u = nvml.nvmlDeviceGetUtilizationRates(h)
    return {"gpu": int(u.gpu), "memory": int(u.memory)}


def encoder_utilization(nvml: Any, h: Any, _links: Sequence[int]) -> int:
    return int(nvml.nvmlDeviceGetEncoderUtilization(h)[0])


def decoder_utilization(nvml: Any, h: Any, _links: Sequence[int]) -> int:
    return int(nvml.nvmlDeviceGetDecoderUtilization(h)[0])


def memory(nvml: Any, h: Any, _links: Sequence[int]) -> dict[str, int]:
    try:
        m = nvml.nvmlDeviceGetMemoryInfo(h, version=nvml.nvmlMemory_v2)
        reserved = int(m.reserved)
    except (nvml.NVMLError, AttributeError, TypeError):  # drivers before R510 have no v2: reserved unknown
        m = nvml.nvmlDeviceGetMemoryInfo(h)
        reserved = max(int(m.total) - int(m.used) - int(m.free), 0)
    return {"used": int(m.used), "free": int(m.free), "reserved": reserved}


def temperature(nvml: Any, h: Any, _links: Sequence[int]) -> int:
    return int(nvml.nvmlDeviceGetTemperature(h, _TEMPERATURE_GPU))


def memory_temperature(nvml: Any, h: Any, _links: Sequence[int]) -> int:
    return _fields(nvml, h, [_FI_MEMORY_TEMP])[0]


def power_usage(nvml: Any, h: Any, _links: Sequence[int]) -> int:
    return int(nvml.nvmlDeviceGetPowerUsage(h))


def total_energy(nvml: Any, h: Any, _links: Sequence[int]) -> int:
    return int(nvml.nvmlDeviceGetTotalEnergyConsumption(h))


def clocks(nvml: Any, h: Any, _links: Sequence[int]) -> dict[str, int]:
    return {"sm": int(nvml.nvmlDeviceGetClockInfo(h, _CLOCK_SM)),
            "memory": int(nvml.nvmlDeviceGetClockInfo(h, _CLOCK_MEM))}


def clocks_event_reasons(nvml: Any, h: Any, _links: Sequence[int]) -> int:
    """nvmlDeviceGetCurrentClocksEventReasons, or its name before R535 where the driver's library (or pynvml) lacks
    the new one."""
    get = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    if get is not None:
        try:
            return int(get(h))
        except nvml.NVMLError as e:
            if int(getattr(e, "value", 0)) != _FUNCTION_NOT_FOUND:
                raise
    return int(nvml.nvmlDeviceGetCurrentClocksThrottleReasons(h))


def ecc_errors(nvml: Any, h: Any, _links: Sequence[int]) -> dict[str, int]:
    get = nvml.nvmlDeviceGetTotalEccErrors
    return {"volatileCorrectable": int(get(h, _CORRECTED, _VOLATILE)),
            "volatileUncorrectable": int(get(h, _UNCORRECTED, _VOLATILE)),
            "aggregateCorrectable": int(get(h, _CORRECTED, _AGGREGATE)),
            "aggregateUncorrectable": int(get(h, _UNCORRECTED, _AGGREGATE))}


def retired_pages(nvml: Any, h: Any, _links: Sequence[int]) -> dict[str, int | bool]:
    return {"singleBitEcc": len(nvml.nvmlDeviceGetRetiredPages(h, _RETIRE_SBE)),
            "doubleBitEcc": len(nvml.nvmlDeviceGetRetiredPages(h, _RETIRE_DBE)),
            "pending": bool(int(nvml.nvmlDeviceGetRetiredPagesPendingStatus(h)))}


def remapped_rows(nvml: Any, h: Any, _links: Sequence[int]) -> dict[str, int | bool]:
    corr, unc, pending, failure = nvml.nvmlDeviceGetRemappedRows(h)
    return {"correctable": int(corr), "uncorrectable": int(unc), "pending": bool(pending), "failure": bool(failure)}


def pcie_throughput(nvml: Any, h: Any, _links: Sequence[int]) -> dict[str, int]:
    return {"txKBps": int(nvml.nvmlDeviceGetPcieThroughput(h, _PCIE_TX)),
            "rxKBps": int(nvml.nvmlDeviceGetPcieThroughput(h, _PCIE_RX))}


def pcie_replay_counter(nvml: Any, h: Any, _links: Sequence[int]) -> int:
    return int(nvml.nvmlDeviceGetPcieReplayCounter(h))


def nvlink_throughput(nvml: Any, h: Any, links: Sequence[int]) -> dict[str, int]:
    """One field-values call for the data counters of every active link."""
    if not links:
        raise nvml.NVMLError(3)  # NVML_ERROR_NOT_SUPPORTED: a GPU without active NVLinks has nothing to count
    values = _fields(nvml, h, [(fid, link) for link in links for fid in (_FI_NVLINK_TX, _FI_NVLINK_RX)])
    return {"txKiB": sum(values[0::2]), "rxKiB": sum(values[1::2])}


def nvlink_errors(nvml: Any, h: Any, links: Sequence[int]) -> dict[str, int]:
    """One field-values call for the four error totals over all links."""
    if not links:
        raise nvml.NVMLError(3)
    values = _fields(nvml, h, [fid for _, fid in _FI_NVLINK_ERRORS])
    return dict(zip([k for k, _ in _FI_NVLINK_ERRORS], values, strict=True))


def mig_devices(nvml: Any, h: Any, _links: Sequence[int]) -> list[dict[str, Any]]:
    current, _pending = nvml.nvmlDeviceGetMigMode(h)
    if not int(current):
        return []
    out = []
    for i in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(h))):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
        except nvml.NVMLError:  # an empty slot (NOT_FOUND)
            continue
        name = nvml.nvmlDeviceGetName(mig)
        name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
        uuid = nvml.nvmlDeviceGetUUID(mig)
        mem = nvml.nvmlDeviceGetMemoryInfo(mig)
        out.append({"gpuInstanceId": int(nvml.nvmlDeviceGetGpuInstanceId(mig)),
                    "computeInstanceId": int(nvml.nvmlDeviceGetComputeInstanceId(mig)),
                    "profile": mig_profile(name),
                    "uuid": uuid.decode(errors="replace") if isinstance(uuid, bytes) else str(uuid),
                    "memoryUsed": int(mem.used), "memoryFree": int(mem.free), "memoryTotal": int(mem.total)})
    return out


def mig_profile(name: str) -> str:
    """`NVIDIA A100-SXM4-80GB MIG 1g.20gb` → `1g.20gb` (the profile dcgm-exporter labels GPU_I_PROFILE)."""
    return name.rsplit("MIG ", 1)[-1].strip() if "MIG " in name else name


READERS: dict[str, Reader] = {
    "utilization": utilization, "encoderUtilization": encoder_utilization,
    "decoderUtilization": decoder_utilization, "memory": memory, "temperature": temperature,
    "memoryTemperature": memory_temperature, "powerUsage": power_usage, "totalEnergyConsumption": total_energy,
    "clocks": clocks, "clocksEventReasons": clocks_event_reasons, "eccErrors": ecc_errors,
    "retiredPages": retired_pages, "remappedRows": remapped_rows, "pcieThroughput": pcie_throughput,
    "pcieReplayCounter": pcie_replay_counter, "nvlinkThroughput": nvlink_throughput,
    "nvlinkErrors": nvlink_errors, "migDevices": mig_devices,
}
