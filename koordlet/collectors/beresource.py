"""BE CPU resource per collection tick: the besteffort QoS cgroup's usage, BE pods' batch-cpu requests, BE real limit.

Upstream: pkg/koordlet/metricsadvisor/collectors/beresource/be_resource_collector.go (NodeBEMetric with
be_resource=cpu and be_allocation usage/request/realLimit). BECPUEvict reads these three series (avg over its window,
and "last"); all values are milli-cores.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from apis.core.errors import HostReadError, InvalidInput
from apis.core.objects import as_objects
from apis.core.quantity import parse_quantity
from apis.extension.qos import QOS_BE
from apis.extension.resource_status import parse_cpuset
from apis.extension.resources import BATCH_CPU
from koordlet.health import Health
from koordlet.host.cgroup import CgroupBackend
from koordlet.host.driver import CgroupDriver, K8sQoS, qos_dir
from koordlet.host.files import read_bytes
from koordlet.host.resources import parse_cpu_max, resource_path
from koordlet.metriccache import MetricCache
from koordlet.states.model import PodMeta

KIND_USAGE, KIND_REQUEST, KIND_REAL_LIMIT = "be_cpu_usage", "be_cpu_request", "be_cpu_real_limit"


def container_batch_milli_cpu(container: Mapping[str, object]) -> int:
    """util.GetContainerBatchMilliCPURequest: requests[batch-cpu] (already milli-cores; Quantity.Value rounds up),
    0 when absent or unreadable (a malformed quantity never reaches upstream: the API server refuses it)."""
    resources = container.get("resources")
    requests = resources.get("requests") if isinstance(resources, dict) else None
    value = requests.get(BATCH_CPU) if isinstance(requests, dict) else None
    if value is None or isinstance(value, bool) or not isinstance(value, str | int | float):
        return 0
    try:
        return max(math.ceil(parse_quantity(value)), 0)
    except InvalidInput:
        return 0


def pod_batch_milli_cpu(pod: Mapping[str, object]) -> int:
    """The sum of a pod's containers' batch-cpu requests, sidecar init containers (restartPolicy Always) included
    as upstream HEAD does (they run beside the others; v1.7 counted the main containers only)."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return 0
    total = sum(container_batch_milli_cpu(c) for c in as_objects(spec.get("containers")))
    return total + sum(container_batch_milli_cpu(c) for c in as_objects(spec.get("initContainers"))
                       if c.get("restartPolicy") == "Always")


class BEResourceCollector:
    """One sample of each series per tick; a tick whose cgroup reads fail stores nothing (as upstream)."""

    def __init__(self, backend: CgroupBackend, driver: CgroupDriver, health: Health) -> None:
        self.backend = backend
        self.driver = driver
        self.health = health
        self._last: tuple[int, int] | None = None  # (monotonic ns, besteffort cpuacct usage ns)
        self._request: tuple[Sequence[PodMeta], int] | None = None  # the pod list the sum is of (replaced on change)

    def collect(self, pods: Sequence[PodMeta], cache: MetricCache, now_ms: int, now_mono_ns: int) -> None:
        rel = qos_dir(self.driver, K8sQoS.BESTEFFORT)
        try:
            limit = self._real_limit(rel)
            usage_ns = self.backend.stats(rel).cpu_usage_ns
        except (HostReadError, OSError, ValueError, InvalidInput) as e:
            self.health.skip("be-resource", "unreadable", rel, str(e))
            self._last = None
            return
        self.health.recovered("be-resource", "unreadable", rel)
        request = self._batch_request(pods)
        last, self._last = self._last, (now_mono_ns, usage_ns)
        cache.append(MetricCache.key(KIND_REAL_LIMIT), now_ms, float(limit))
        cache.append(MetricCache.key(KIND_REQUEST), now_ms, float(request))
        # upstream stores 0 on the first tick (no rate yet); we store no usage sample until there is a rate
        if last is not None and now_mono_ns > last[0]:
            milli = max(usage_ns - last[1], 0) / 1e6 / ((now_mono_ns - last[0]) / 1e6) * 1000
            cache.append(MetricCache.key(KIND_USAGE), now_ms, float(int(milli)))

    def _batch_request(self, pods: Sequence[PodMeta]) -> int:
        """The BE pods' batch-cpu requests, summed again only when the pod list is replaced (a pods sync that
        changed something)."""
        kept = self._request
        if kept is None or kept[0] is not pods:
            kept = self._request = (pods, sum(pod_batch_milli_cpu(p.raw) for p in pods if p.koord_qos == QOS_BE))
        return kept[1]

    def _real_limit(self, rel: str) -> int:
        """getBECPURealMilliLimit: min(#besteffort cpuset × 1000, quota × 1000 / period), the quota only when set."""
        version, paths = self.backend.version, self.backend.paths
        cpuset_file = "cpuset.cpus" if version == 1 else "cpuset.cpus.effective"
        limit = len(parse_cpuset(read_bytes(resource_path(version, paths, cpuset_file, rel)).decode())) * 1000
        if version == 2:
            quota, period = parse_cpu_max(read_bytes(resource_path(2, paths, "cpu.cfs_quota_us", rel)).decode())
        else:
            quota = int(read_bytes(resource_path(1, paths, "cpu.cfs_quota_us", rel)))
            period = int(read_bytes(resource_path(1, paths, "cpu.cfs_period_us", rel))) if quota != -1 else 1
        if quota == -1 or period <= 0:
            return limit
        return min(limit, quota * 1000 // period)
