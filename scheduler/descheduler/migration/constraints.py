"""Which pods the MigrationController may ever migrate: the pod constraints of its args.

Upstream: pkg/descheduler/evictions/evictions.go (NewEvictorFilter as the MigrationController builds it). Always
refused: DaemonSet pods, mirror and static pods, terminating pods. Then, as the args say: bare pods, system-critical
priority and the priorityThreshold value, local storage, PVCs, nodeFit on another ready node matching
nodeSelector, the labelSelector. The `descheduler.alpha.kubernetes.io/evict` annotation overrides every refusal.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from apis.core import podmeta
from apis.core.labelselector import parse_selector_string
from apis.core.objects import JSON, as_object
from apis.extension.descheduling import ANNOTATION_DESCHEDULER_EVICT
from apis.extension.qos import pod_labels
from scheduler.cluster import NodeInfo
from scheduler.descheduler import nodeutil, podutil
from scheduler.descheduler.config.migration_args import MigrationControllerArgs

Constraint = Callable[[JSON], str | None]  # why the pod may not be migrated, or None


class PodConstraints:
    """The constraints built once from the args; `nodes` gives the round's nodes for nodeFit."""

    def __init__(self, args: MigrationControllerArgs, nodes: Callable[[], Sequence[NodeInfo]]) -> None:
        self.args = args
        self.nodes = nodes
        # the args' nodeSelector is a selector string; validation refused one that does not parse
        self.node_selector = parse_selector_string(args.node_selector) if args.node_selector else None
        self.constraints = self._build()

    def reasons(self, pod: JSON) -> list[str]:
        """Every refusal, [] when the pod may be migrated (always [] with the evict annotation)."""
        if ANNOTATION_DESCHEDULER_EVICT in podmeta.pod_annotations(pod):
            return []
        out = ["pod is a DaemonSet pod"] if podmeta.is_daemonset_pod(pod) else []
        return out + podutil.never_moved(pod) + [why for c in self.constraints if (why := c(pod)) is not None]

    def node_fits(self, pod: JSON) -> bool:
        """Another ready node, matching the args' nodeSelector, fits the pod."""
        nodes = [n for n in self.nodes() if nodeutil.is_ready(n.obj)
                 and (self.node_selector is None or self.node_selector.matches(n.labels))]
        return nodeutil.pod_fits_any_other_node(pod, nodes)

    def _build(self) -> list[Constraint]:
        a = self.args
        cs: list[Constraint] = []
        if not a.evict_all_bare_pods:
            if a.evict_failed_bare_pods:
                cs.append(lambda p: "pod does not have any ownerRefs and is not in failed phase"
                          if not podmeta.owner_references(p) and as_object(p.get("status")).get("phase") != "Failed"
                          else None)
            else:
                cs.append(lambda p: None if podmeta.owner_references(p) else "pod does not have any ownerRefs")
        if not a.evict_system_critical_pods:
            cs.append(lambda p: "pod has system critical priority" if podmeta.is_critical_priority(p) else None)
            threshold = a.priority_threshold.value if a.priority_threshold is not None else None
            if threshold is not None:  # [quirk] a threshold given by PriorityClass name is not resolved here
                cs.append(lambda p: None if (v := podmeta.priority(p)) is None or v < threshold
                          else "pod has higher priority than specified priority class threshold")
        if not a.evict_local_storage_pods:
            cs.append(lambda p: "pod has local storage and descheduler is not configured with evictLocalStoragePods"
                      if podmeta.has_local_storage(p) else None)
        if a.ignore_pvc_pods:
            cs.append(lambda p: "pod has a PVC and descheduler is configured to ignore PVC pods"
                      if podmeta.has_pvc(p) else None)
        if a.node_fit:
            cs.append(lambda p: None if self.node_fits(p) else "pod does not fit on any other node")
        selector = a.label_selector
        if selector is not None and not selector.empty:
            cs.append(lambda p: None if selector.matches({str(k): str(v) for k, v in pod_labels(p).items()})
                      else "pod labels do not match the labelSelector filter in the policy parameter")
        return cs
