"""Runtime hook `gpu env inject` (feature gate GPUEnvInject): NVIDIA_VISIBLE_DEVICES, and HAMi-core's envs and mounts.

Upstream: pkg/koordlet/runtimehooks/hooks/gpu/gpu.go (spec §5.5).

- `NVIDIA_VISIBLE_DEVICES` = the `gpu` entries' minors in annotation order, joined by ",". Our extension, option
  `gpu_env_uuid` (flag `--runtime-hooks-gpu-env-uuid`, off by default): the entries' `id`s (GPU UUIDs) instead,
  when every entry carries one, because the NVIDIA toolkit reads numbers as NVML indices, which need not equal the
  device minors (the RTX 4090 `nvidia-smi -q` fixture: bus 01:00.0 is minor 3).
- HAMi-core, when the pod label `koordinator.sh/gpu-isolation-provider` is `HAMi-core` (any casing): the first GPU's
  resources decide. A missing `koordinator.sh/gpu-memory-ratio` is bad input; below 100: CUDA_DEVICE_MEMORY_LIMIT
  (bytes of `koordinator.sh/gpu-memory`, required), CUDA_DEVICE_SM_LIMIT (`koordinator.sh/gpu-core`, when present),
  LD_PRELOAD of the library and rbind mounts of the library and `/tmp/vgpulock`. With gate HamiCoreVGPUMonitor
  also CUDA_DEVICE_MEMORY_SHARED_CACHE, and the per-container host directory `<lib dir>/containers/<uid>_<name>`
  bind-mounted at the library's directory; that directory is a HostDir in the result (the caller removes and
  recreates it with mode 0777, as upstream does in the hook itself).

A hook that gives up adds nothing, NVIDIA_VISIBLE_DEVICES included (**[quirk]** upstream has set it before a
HAMi-core error and the Ignore policy keeps it, so a pod meant to be limited got the whole GPU unlimited).
"""

from __future__ import annotations

import os

from apis.extension.device_share import LABEL_GPU_ISOLATION_PROVIDER
from apis.extension.resources import RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY, RESOURCE_GPU_MEMORY_RATIO
from apis.scheduling.device import DEVICE_TYPE_GPU
from koordlet.nri.hooks.context import SAFE_NAME, HookCall, HookInputError
from koordlet.nri.hooks.model import Adjustment, HookResult, HostDir, Mount

HOOK_NAME = "gpu env inject"
GATE = "GPUEnvInject"
GATE_VGPU_MONITOR = "HamiCoreVGPUMonitor"
ENV_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
ENV_MEMORY_LIMIT = "CUDA_DEVICE_MEMORY_LIMIT"
ENV_SM_LIMIT = "CUDA_DEVICE_SM_LIMIT"
ENV_PRELOAD = "LD_PRELOAD"
ENV_SHARED_CACHE = "CUDA_DEVICE_MEMORY_SHARED_CACHE"
# **[decision]** upstream compares case-sensitively; the v1.6 release text labels its pods `hami-core`, so any
# casing counts (koord-sched's DeviceShare matches node and pod labels the same way).
PROVIDER_HAMI_CORE = "HAMi-core"
VGPU_LOCK_DIR = "/tmp/vgpulock"  # HAMi issue 696: the lock dir is shared with the host
_FULL_RATIO = 100


def inject(call: HookCall) -> HookResult:
    gpus = call.allocations().get(DEVICE_TYPE_GPU, ())
    if not gpus:
        return HookResult()
    for i, gpu in enumerate(gpus):
        if gpu.minor < 0:  # upstream would print it; no device has a negative minor
            raise HookInputError(call.allocation_field(f"{DEVICE_TYPE_GPU}[{i}].minor"),
                                 f"{gpu.minor} is not a GPU minor")
    if call.options.gpu_env_uuid and all(g.id for g in gpus):
        visible = ",".join(g.id for g in gpus)
    else:
        visible = ",".join(str(g.minor) for g in gpus)
    adj = Adjustment(env={ENV_VISIBLE_DEVICES: visible})
    out = HookResult(adjustment=adj)
    if (call.pod.labels.get(LABEL_GPU_ISOLATION_PROVIDER) or "").lower() != PROVIDER_HAMI_CORE.lower():
        return out
    first = gpus[0]
    ratio = first.value(RESOURCE_GPU_MEMORY_RATIO)
    if ratio is None:
        raise HookInputError(call.allocation_field(f"{DEVICE_TYPE_GPU}[0].resources[{RESOURCE_GPU_MEMORY_RATIO}]"),
                             "missing: HAMi-core needs the first GPU's memory ratio")
    if ratio >= _FULL_RATIO:
        return out
    memory = first.value(RESOURCE_GPU_MEMORY)
    if memory is None or memory < 0:
        raise HookInputError(call.allocation_field(f"{DEVICE_TYPE_GPU}[0].resources[{RESOURCE_GPU_MEMORY}]"),
                             "missing or negative: HAMi-core limits a shared GPU's memory to it")
    adj.env[ENV_MEMORY_LIMIT] = str(memory)
    core = first.value(RESOURCE_GPU_CORE)
    if core is not None:
        adj.env[ENV_SM_LIMIT] = str(core)
    lib = call.options.hami_core_library_path
    adj.env[ENV_PRELOAD] = lib
    adj.mounts += [Mount(lib, lib), Mount(VGPU_LOCK_DIR, VGPU_LOCK_DIR)]
    if call.options.gate(GATE_VGPU_MONITOR):
        container = call.container.name if call.container is not None else ""
        if not SAFE_NAME.fullmatch(call.pod.uid):
            raise HookInputError("metadata.uid", f"{call.pod.uid!r} cannot name a host directory")
        if not SAFE_NAME.fullmatch(container):
            raise HookInputError("container.name", f"{container!r} cannot name a host directory")
        lib_dir = os.path.dirname(lib)
        host_dir = f"{lib_dir}/containers/{call.pod.uid}_{container}"
        adj.env[ENV_SHARED_CACHE] = f"{lib_dir}/{call.pod.uid}_{container}.cache"
        adj.mounts.append(Mount(lib_dir, host_dir))
        out.host_dirs.append(HostDir(host_dir, 0o777, True,
                                     f"HAMi-core vGPU monitor dir of {call.pod.key}/{container}"))
    return out

