"""GPU shared resource templates (Ascend vNPU): the ConfigMap upstream's gpuSharedResourceTemplatesCache reads, and
the strict match of a pod's per-GPU request against it (upstream gpu_shared_resource_templates_cache.go, utils.go
parseGPURequirements, allocator_gpu.go allocateByTemplate)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import yaml

from apis.core.errors import InvalidInput
from apis.core.objects import JSON
from apis.core.quantity import canonical_quantity, format_bytes
from apis.extension.resources import RESOURCE_GPU_MEMORY, RESOURCE_NPU_CORE
from scheduler.cluster import quantity_value, renamed_deprecated

log = logging.getLogger(__name__)

# DeviceShareArgs.gpuSharedResourceTemplatesConfig defaults (pkg/scheduler/apis/config/v1/defaults.go).
DEFAULT_NAMESPACE = "koordinator-system"
DEFAULT_NAME = "gpu-shared-resource-templates"
DEFAULT_MATCHED_RESOURCES = (RESOURCE_NPU_CORE,)
DATA_KEY = "data.yaml"
ERR_NO_TEMPLATE = "no matched GPU shared resource template"

# "<vendor>-<model>" (node labels) → template name → per-GPU resources.
Catalog = dict[str, dict[str, dict[str, int]]]


@dataclass(frozen=True)
class TemplatesConfig:
    """GPUSharedResourceTemplatesConfig: where the templates live and which requested resources enforce them."""

    namespace: str = DEFAULT_NAMESPACE
    name: str = DEFAULT_NAME
    matched_resources: tuple[str, ...] = DEFAULT_MATCHED_RESOURCES

    @classmethod
    def from_dict(cls, args: Mapping[str, object] | None) -> TemplatesConfig:
        """The `gpuSharedResourceTemplatesConfig` object of DeviceShareArgs (missing fields defaulted as upstream
        defaults the whole object: an object given without matchedResources matches nothing)."""
        if args is None:
            return cls()
        if not isinstance(args, Mapping):
            raise InvalidInput("DeviceShareArgs.gpuSharedResourceTemplatesConfig must be a mapping")
        matched = args.get("matchedResources") or []
        if not isinstance(matched, list) or not all(isinstance(r, str) for r in matched):
            raise InvalidInput("DeviceShareArgs.gpuSharedResourceTemplatesConfig.matchedResources must be a list of "
                               "resource names")
        return cls(str(args.get("configMapNamespace") or ""), str(args.get("configMapName") or ""), tuple(matched))

    @property
    def key(self) -> str:
        return f"{self.namespace or 'default'}/{self.name}"


def gpu_model_key(vendor: str, model: str) -> str:
    return f"{vendor}-{model}"  # buildGPUSharedResourceTemplatesKey


def parse_catalog(configmap: JSON | None) -> Catalog:
    """The ConfigMap's `data.yaml`; raises ValueError when it is not a map of maps of resource lists."""
    if configmap is None:
        return {}
    raw = (configmap.get("data") or {}).get(DATA_KEY)
    if raw is None:
        return {}
    try:
        doc = yaml.safe_load(str(raw))
    except yaml.YAMLError as e:
        raise ValueError(f"{DATA_KEY} is not YAML: {e}") from e
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ValueError(f"{DATA_KEY} is not a map of GPU models")
    out: Catalog = {}
    for model, templates in doc.items():
        if not isinstance(templates, dict):
            raise ValueError(f"{DATA_KEY}: {model} is not a map of templates")
        parsed: dict[str, dict[str, int]] = {}
        for name, resources in templates.items():
            if not isinstance(resources, dict):
                raise ValueError(f"{DATA_KEY}: {model}/{name} is not a resource list")
            try:
                parsed[str(name)] = {str(r): quantity_value(str(r), v)
                                     for r, v in renamed_deprecated(resources).items()}
            except InvalidInput as e:
                raise ValueError(f"{DATA_KEY}: {model}/{name}: {e}") from e
        out[str(model)] = parsed
    return out


def enforced(config: TemplatesConfig, per_gpu: Mapping[str, int], shared: bool) -> bool:
    """Whether the pod must match a template: a shared GPU request naming any matched resource."""
    return shared and any(r in per_gpu for r in config.matched_resources)


def match(catalog: Catalog, per_gpu: Mapping[str, int]) -> dict[str, list[str]]:
    """GPU model key → names of the templates equal to the per-GPU request (strict: same names, same amounts)."""
    want = {r: v for r, v in per_gpu.items() if v}
    out: dict[str, list[str]] = {}
    for model, templates in catalog.items():
        names = sorted(n for n, res in templates.items() if {r: v for r, v in res.items() if v} == want)
        if names:
            out[model] = names
    return out


def _amount(resource: str, value: int) -> str:
    return format_bytes(value) if resource == RESOURCE_GPU_MEMORY else canonical_quantity(str(value))


def describe_resources(resources: Mapping[str, int]) -> str:
    return ", ".join(f"{r}: {_amount(r, resources[r])}" for r in sorted(resources))


def describe(catalog: Catalog, models: Iterable[str] | None = None) -> str:
    """`model: name {resources}; …` for the reasons of a refused shape."""
    keys = sorted(catalog) if models is None else [m for m in models if m in catalog]
    parts = [f"{m}: " + ", ".join(f"{n} {{{describe_resources(catalog[m][n])}}}" for n in sorted(catalog[m]))
             for m in keys if catalog[m]]
    return "; ".join(parts) if parts else "none"
