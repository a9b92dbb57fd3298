"""The hooks' switches and tunables (feature gates and flags), apart from the hooks so every hook can name them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from koordlet.config import FEATURE_GATES

HAMI_CORE_LIBRARY_PATH = "/usr/local/vgpu/libvgpu.so"  # upstream --hami-core-library-directory-path default


@dataclass(frozen=True)
class HookOptions:
    """What enables and tunes the hooks: upstream's feature gates and flags, plus our options.

    - `gates`: feature gates by name; a gate not listed takes its default (koordlet.config.FEATURE_GATES).
    - `gpu_env_uuid` (ours, `--runtime-hooks-gpu-env-uuid`): NVIDIA_VISIBLE_DEVICES by GPU UUID when every
      allocated GPU carries one.
    - `xpu_device_inject` (ours): Ascend/Cambricon device nodes and visible-devices env (koordlet.nri.hooks.xpu).
    - `hami_core_library_path`: upstream `--hami-core-library-directory-path`."""

    gates: Mapping[str, bool] = field(default_factory=lambda: dict(FEATURE_GATES))
    gpu_env_uuid: bool = False
    xpu_device_inject: bool = False
    hami_core_library_path: str = HAMI_CORE_LIBRARY_PATH
    disable_unset_cpu_quota: bool = False  # upstream --disable-unset-cpu-quota (CPUSetAllocator)

    def gate(self, name: str) -> bool:
        return bool(self.gates.get(name, FEATURE_GATES.get(name, False)))
