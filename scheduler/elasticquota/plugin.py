"""The ElasticQuota plugin for the slim framework: PreFilter against runtime quota, Reserve/Unreserve into used.

Quotas come from the cluster's ElasticQuota objects (validated as koord-manager's webhook would; a bad one is
reported and left out), the cluster total from the nodes' allocatable, and requests from every known pod: the
assigned pods of the cluster plus the pending ones handed to `add_pending` (the informer's view upstream).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from apis.core.errors import InvalidInput
from apis.core.objects import JSON
from apis.scheduling.quota import DEFAULT_QUOTA, LABEL_QUOTA_NAME, LABEL_QUOTA_PREEMPTIBLE, ROOT_QUOTA, SYSTEM_QUOTA
from scheduler.cluster import Cluster, NodeInfo, is_active, key, pod_requests
from scheduler.elasticquota.forest import QuotaForest
from scheduler.elasticquota.hooks import REGISTRY as HOOKS
from scheduler.elasticquota.hooks import QuotaHook, QuotaReader
from scheduler.elasticquota.manager import DEFAULT_GROUP_MAX, GroupQuotaManager, QuotaInfo
from scheduler.elasticquota.model import (
    SPECIAL,
    QuotaSpec,
    Resources,
    add,
    exceeded,
    go_list,
    mask,
    parse_resources,
    print_resources,
    quota_signature,
    validate_quotas,
)
from scheduler.elasticquota.revoke import pods_to_revoke
from scheduler.nodeindex import NodeIndex

log = logging.getLogger(__name__)
NAME = "ElasticQuota"


@dataclass
class ElasticQuotaArgs:
    """ElasticQuotaArgs (pkg/scheduler/apis/config/types.go) with upstream's defaults; queue hints and the
    snapshot interval are accepted and have no effect here."""

    enable_runtime_quota: bool = True
    enable_check_parent_quota: bool = False
    enable_min_quota_scale: bool = True
    disable_default_quota_preemption: bool = True
    quota_group_namespace: str = "koordinator-system"
    default_quota_group_max: Resources = field(default_factory=lambda: dict(DEFAULT_GROUP_MAX))
    system_quota_group_max: Resources = field(default_factory=lambda: dict(DEFAULT_GROUP_MAX))
    # the over-use revoke controller (revoke.py): runs with monitorAllQuotas and enableRuntimeQuota
    delay_evict_time: float = 120.0
    revoke_pod_interval: float = 1.0
    monitor_all_quotas: bool = False
    # the feature gate ElasticQuotaGuaranteeUsage (`--feature-gates`), not a field of the args upstream
    guarantee_usage: bool = False
    # the feature gate MultiQuotaTree: false puts every quota in the default tree, as upstream without it
    multi_quota_tree: bool = True
    # accepted, no effect here
    enable_queue_hint: bool = False
    quota_snapshot_update_interval: float = 120.0
    hook_plugins: list[JSON] = field(default_factory=list)

    @classmethod
    def from_dict(cls, args: Mapping[str, object]) -> ElasticQuotaArgs:
        out = cls()
        for camel, attr in (("enableRuntimeQuota", "enable_runtime_quota"),
                            ("enableCheckParentQuota", "enable_check_parent_quota"),
                            ("enableMinQuotaScale", "enable_min_quota_scale"),
                            ("disableDefaultQuotaPreemption", "disable_default_quota_preemption"),
                            ("monitorAllQuotas", "monitor_all_quotas")):
            if args.get(camel) is not None:
                if not isinstance(args[camel], bool):
                    raise InvalidInput(f"ElasticQuotaArgs.{camel} must be true or false")
                setattr(out, attr, args[camel])
        if args.get("quotaGroupNamespace"):
            out.quota_group_namespace = str(args["quotaGroupNamespace"])
        for camel, attr in (("defaultQuotaGroupMax", "default_quota_group_max"),
                            ("systemQuotaGroupMax", "system_quota_group_max")):
            if args.get(camel):
                setattr(out, attr, parse_resources(args[camel], f"ElasticQuotaArgs.{camel}"))
        return out


class ElasticQuota:
    name = NAME

    def __init__(self, args: ElasticQuotaArgs | None = None, *, check: bool = True, account: bool = True) -> None:
        self.args = args or ElasticQuotaArgs()
        self.check, self.account = check, account  # enabled at preFilter / at reserve (scheduler.config)
        self.forest = QuotaForest()
        self.hooks: dict[str, list[QuotaHook]] = {}  # tree id → its hook plugins (hooks.py)
        self.rejected: list[tuple[str, str]] = []  # ElasticQuota objects left out, with the reason
        self.refused: dict[str, str] = {}  # pod key → the PreFilter reason of its last refusal
        self._cluster: Cluster | None = None
        self._by_namespace: dict[str, str] = {}  # namespace → quota named after it (in that namespace)
        self._by_annotation: dict[str, str] = {}  # namespace → quota listing it in its namespaces annotation
        self._pod_quota: dict[str, str] = {}  # pod key → quota it was accounted to
        self._pod_objs: dict[str, JSON] = {}  # pod key → the pod accounted (over-use revoke orders them)
        self._nodes_version = -1
        self._signature = ""

    # -- state from the cluster ------------------------------------------------------------------------------
    def bind(self, cluster: Cluster) -> None:
        """(Re)build everything from the cluster the first time it is seen."""
        if cluster is self._cluster:
            self._sync_total(cluster)
            return
        self._cluster, self._signature = cluster, quota_signature(cluster.elastic_quotas)
        self.forest = QuotaForest(self.args.enable_min_quota_scale, self.args.system_quota_group_max,
                                  self.args.default_quota_group_max, self.args.guarantee_usage)
        specs, self.rejected = validate_quotas(cluster.elastic_quotas)
        if not self.args.multi_quota_tree:
            specs = [replace(s, tree_id="", total=None) for s in specs]
        self.forest.set_quotas(specs)
        self._reset_hooks(specs)
        self._by_namespace = {s.namespace: s.name for s in specs if s.name == s.namespace}
        self._by_annotation = {}
        for s in specs:
            for ns in s.namespaces:
                self._by_annotation.setdefault(ns, s.name)
        self._pod_quota, self._pod_objs = {}, {}
        self._nodes_version = -1
        self._sync_total(cluster)
        batch: dict[str, list[tuple[str, Mapping[str, int], bool, bool]]] = {}
        seen: dict[tuple[object, ...], tuple[str, bool]] = {}  # the labels and namespace → (quota, non-preemptible)
        for node in cluster.nodes.values():  # _track for every assigned pod, propagated once per quota
            for k, pod in node.pods.items():
                if k in self._pod_quota or not is_active(pod):
                    continue
                requests = node.requests_of(k)  # what the node counted (parsed when the pod was added)
                if requests is None:
                    try:
                        requests = pod_requests(pod)
                    except InvalidInput:
                        continue
                meta = pod.get("metadata") or {}
                labels = meta.get("labels") or {}
                facts = (labels.get(LABEL_QUOTA_NAME), meta.get("namespace"), labels.get(LABEL_QUOTA_PREEMPTIBLE))
                known = seen.get(facts)  # what quota_of and _non_preemptible read, so their answers per pod shape
                if known is None:
                    known = seen[facts] = (self.quota_of(pod), _non_preemptible(pod))
                quota = self._pod_quota[k] = known[0]
                self._pod_objs[k] = pod
                batch.setdefault(quota, []).append((k, requests, True, known[1]))
        for quota, pods in batch.items():
            self.forest.manager_of(quota).on_pods_add(quota, pods)
            if self.hooks:
                for k, _, _, _ in pods:
                    self._pod_updated(quota, None, self._pod_objs[k])
        self.add_pending(cluster.pending, cluster)

    def reload(self, cluster: Cluster) -> None:
        """The cluster's ElasticQuota objects may have changed (the extender's watch). When what defines the tree
        did (not a status write or a re-list of the same objects), the tree is rebuilt and the assigned pods are
        accounted afresh; pending pods count again from their next PreFilter."""
        signature = quota_signature(cluster.elastic_quotas)
        if cluster is self._cluster and signature == self._signature:
            return
        self._cluster = None
        self.bind(cluster)

    def sync(self, index: NodeIndex) -> None:
        """Scheduler.prepare(): build the quota tree and account the cluster's pods now (a cache sync)."""
        self.bind(index.cluster)

    def _sync_total(self, cluster: Cluster) -> None:
        version = getattr(cluster.nodes, "version", -2)
        if version == self._nodes_version:
            return
        total: Resources = {}
        for n in cluster.nodes.values():
            total = add(total, n.allocatable)
        self.forest.set_nodes_total(total)
        self._nodes_version = version

    def add_pending(self, pods: Iterable[JSON], cluster: Cluster) -> None:
        """Pending pods count in their quotas' request (and so in runtime) before any of them is placed."""
        if cluster is not self._cluster:
            self.bind(cluster)
        for pod in pods:
            self._track(pod, assigned=False)

    def _track(self, pod: JSON, assigned: bool) -> str:
        k = key(pod)
        quota = self._pod_quota.get(k)
        if quota is not None:
            return quota
        quota = self.quota_of(pod)
        if not is_active(pod):
            return quota
        try:
            requests = pod_requests(pod)
        except InvalidInput:
            return quota
        self._pod_quota[k] = quota
        self._pod_objs[k] = pod
        mgr = self.forest.manager_of(quota)
        if not assigned and mgr.defers(quota):  # the default quota: propagated when the tree is next read
            mgr.defer_add(quota, k, requests, _non_preemptible(pod))
        else:
            mgr.on_pod_add(quota, k, requests, assigned, _non_preemptible(pod))
        return quota

    def quota_of(self, pod: JSON) -> str:
        """The label quota.scheduling.koordinator.sh/name, else the quota named after the pod's namespace (or
        listing it in its namespaces annotation), else the default quota; an unknown name means the default.
        A quota name is cluster-wide, so it also names the pod's tree."""
        meta = pod.get("metadata") or {}
        name = str((meta.get("labels") or {}).get(LABEL_QUOTA_NAME) or "")
        if not name:
            ns = str(meta.get("namespace") or "default")
            name = self._by_namespace.get(ns) or self._by_annotation.get(ns) or DEFAULT_QUOTA
        return name if self.forest.knows(name) and name != ROOT_QUOTA else DEFAULT_QUOTA

    def forget(self, pod: JSON) -> None:
        """The pod is gone (deleted or evicted): its request and used leave its quota."""
        k = key(pod)
        quota = self._pod_quota.pop(k, None)
        obj = self._pod_objs.pop(k, None)
        if quota is not None:
            assigned = bool(self.hooks) and self._assigned(quota, k)
            self.forest.manager_of(quota).on_pod_delete(quota, k)
            if assigned and obj is not None:
                self._pod_updated(quota, obj, None)

    # -- extension points ------------------------------------------------------------------------------------
    def prefilter(self, pod: JSON, cluster: Cluster) -> str | None:
        if not self.check:
            return None
        self.bind(cluster)
        quota = self._track(pod, assigned=False)
        mgr = self.forest.manager_of(quota)
        if (mgr.defers(quota) and not self.hooks and not _non_preemptible(pod)
                and mgr.within_max(quota, pod_requests(pod), self.args.enable_runtime_quota)):
            # the default quota's whole check: its runtime is its max and its parent the root (no ancestor to
            # check); read without propagating its deferred pods. Over its max: the check below words the refusal.
            self.refused.pop(key(pod), None)
            return None
        if self.args.enable_runtime_quota:
            mgr.refresh_runtime(quota)
        info = mgr.quotas[quota]
        limit = info.runtime if self.args.enable_runtime_quota else info.max
        if quota in SPECIAL:
            limit = info.max
        request = mask(pod_requests(pod), info.max)
        used = add(info.used, request)
        if over := exceeded(used, limit):
            return self._refuse(pod, f"Insufficient quotas, quotaName: {quota}, runtime: {print_resources(limit)}, "
                                     f"used: {print_resources(info.used)}, pod's request: {print_resources(request)}, "
                                     f"exceedDimensions: {go_list(over)}")
        if _non_preemptible(pod):
            np_used = add(info.non_preemptible_used, request)
            if over := exceeded(np_used, info.min):
                return self._refuse(pod, f"Insufficient non-preemptible quotas, quotaName: {quota}, min: "
                                         f"{print_resources(info.min)}, nonPreemptibleUsed: "
                                         f"{print_resources(info.non_preemptible_used)}, pod's request: "
                                         f"{print_resources(request)}, exceedDimensions: {go_list(over)}")
        for hook in self.hooks.get(self.forest.tree_of.get(quota, ""), ()) if self.hooks else ():
            if why := hook.check_pod(quota, pod):
                return self._refuse(pod, f"CheckPod failed for hook plugin {hook.key}, err: {why}")
        if self.args.enable_check_parent_quota:
            why = self._check_parents(mgr, info.parent, [info.parent, quota], request)
            if why:
                return self._refuse(pod, why)
        self.refused.pop(key(pod), None)
        return None

    def _check_parents(self, mgr: GroupQuotaManager, name: str, topo: list[str], request: Resources) -> str | None:
        """checkQuotaRecursive: every ancestor's used + request within its runtime (within the quota's tree)."""
        while name != ROOT_QUOTA:
            info = mgr.quotas.get(name)
            if info is None:
                return f"Could not find the elasticQuota {name}, quotaNameTopo: {go_list(topo)}"
            limit = mgr.refresh_runtime(name) if self.args.enable_runtime_quota else info.max
            used = mask(add(request, info.used), request)
            if over := exceeded(used, limit):
                return (f"Insufficient quotas, quotaNameTopo: {go_list(topo)}, runtime: {print_resources(limit)}, "
                        f"used: {print_resources(info.used)}, pod's request: {print_resources(request)}, "
                        f"exceedDimensions: {go_list(over)}")
            topo = [info.parent, *topo]
            name = info.parent
        return None

    def _refuse(self, pod: JSON, reason: str) -> str:
        self.refused[key(pod)] = reason
        return reason

    def filter(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> str | None:
        return None  # all of ElasticQuota's decision is node-independent (PreFilter)

    def reserve(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> dict[str, str]:
        if not self.account:
            return {}
        self.bind(cluster)
        quota = self._track(pod, assigned=False)
        if not self.hooks:
            mgr = self.forest.manager_of(quota)
            if mgr.defers(quota):
                mgr.defer_reserve(quota, key(pod))
            else:
                mgr.reserve(quota, key(pod))
            return {}
        was = self._assigned(quota, key(pod))
        self.forest.manager_of(quota).reserve(quota, key(pod))
        if not was and self._assigned(quota, key(pod)):
            self._pod_updated(quota, None, pod)
        return {}

    def unreserve(self, pod: JSON, node: NodeInfo, cluster: Cluster) -> None:
        quota = self._pod_quota.get(key(pod))
        if quota is not None:
            was = bool(self.hooks) and self._assigned(quota, key(pod))
            self.forest.manager_of(quota).unreserve(quota, key(pod))
            if was:
                self._pod_updated(quota, pod, None)

    # -- preemption ------------------------------------------------------------------------------------------
    def can_preempt(self, preemptor_quota: str, job_request: Resources, victim: JSON) -> bool:
        """Quota-aware victim eligibility for job-level preemption (on top of the priority rule):
        a victim of the same quota may go (ElasticQuota's own PostFilter rule); a victim of another quota only
        when the preemptor's quota stays within its min with the whole job and the victim's quota uses more than
        its min (it is borrowing) in a resource both need — so a job over its quota's min never evicts pods of
        other quotas within their min. Only the resources the preemptor's min names are guaranteed, so only they
        are compared. Victims in the default quota of another quota's job are spared when
        disableDefaultQuotaPreemption (the default)."""
        vq = self._pod_quota.get(key(victim)) or self.quota_of(victim)
        if vq == preemptor_quota:
            return True
        if vq == DEFAULT_QUOTA and self.args.disable_default_quota_preemption:
            return False
        if self.forest.tree_of.get(vq, "") != self.forest.tree_of.get(preemptor_quota, ""):
            return False  # trees do not lend to one another, so another tree's pods free nothing for this one
        mine = self.forest.info(preemptor_quota)
        theirs = self.forest.info(vq)
        if mine is None or theirs is None or preemptor_quota in SPECIAL:
            return False
        guaranteed = [k for k in mine.min if mine.min[k] > 0]
        if not guaranteed or exceeded(mask(add(mine.used, job_request), guaranteed), mine.auto_min):
            return False
        needs = pod_requests(victim)
        return any(needs.get(k, 0) > 0 and theirs.used.get(k, 0) > theirs.auto_min.get(k, 0) for k in guaranteed)

    def job_quota(self, pods: list[JSON]) -> tuple[str, Resources]:
        total: Resources = {}
        for p in pods:
            total = add(total, pod_requests(p))
        return self.quota_of(pods[0]), total

    # -- hook plugins ---------------------------------------------------------------------------------------------
    def _reset_hooks(self, specs: list[QuotaSpec]) -> None:
        """Each tree's hook plugins, made afresh with the tree, then told of every quota in it as a create
        (ResetQuotasForHookPlugins)."""
        self.hooks = {}
        if not self.args.hook_plugins:
            return
        for tree, mgr in self.forest.trees.items():
            self.hooks[tree] = HOOKS.build(self.args.hook_plugins, QuotaReader(mgr))
        for s in specs:
            info = self.forest.info(s.name)
            for hook in self.hooks.get(s.tree_id, ()):
                state: dict[str, Any] = {}
                hook.pre_quota_update(None, info, s.obj, state)
                hook.post_quota_update(None, info, s.obj, state)

    def _assigned(self, quota: str, pod_key: str) -> bool:
        info = self.forest.info(quota)
        p = info.pods.get(pod_key) if info is not None else None
        return p is not None and p.assigned

    def _pod_updated(self, quota: str, old: JSON | None, new: JSON | None) -> None:
        for hook in self.hooks.get(self.forest.tree_of.get(quota, ""), ()):
            hook.on_pod_updated(quota, old, new)

    def status_patch(self, obj: JSON, patch: JSON | None) -> JSON | None:
        """The status write-back's merge patch after the quota's tree's hook plugins have had their say."""
        name = str((obj.get("metadata") or {}).get("name") or "")
        for hook in self.hooks.get(self.forest.tree_of.get(name, ""), ()):
            changed = hook.update_quota_status(obj, patch)
            if changed is not None:
                patch = changed
        return patch

    # -- over-use revoke ------------------------------------------------------------------------------------------
    @property
    def revokes(self) -> bool:
        """The revoke controller runs (Start: monitorAllQuotas and enableRuntimeQuota)."""
        return self.args.monitor_all_quotas and self.args.enable_runtime_quota

    def usage(self) -> dict[str, tuple[Resources, Resources]]:
        """quota → (used, runtime) for every quota the revoke controller watches: all trees' but the root and the
        system quota. **[decision]** the default quota's runtime is its max (as its PreFilter check)."""
        out: dict[str, tuple[Resources, Resources]] = {}
        for mgr in self.forest.trees.values():
            for name, info in mgr.quotas.items():
                if name in (ROOT_QUOTA, SYSTEM_QUOTA):
                    continue
                runtime = dict(info.max) if name in SPECIAL else mgr.refresh_runtime(name)
                out[name] = (dict(info.used), runtime)
        return out

    def to_revoke(self, quota: str) -> list[JSON]:
        """The quota's assigned pods to evict so its used fits its runtime (getToRevokePodList)."""
        info = self.forest.info(quota)
        if info is None or self._cluster is None:
            return []
        used, runtime = self.usage().get(quota, ({}, {}))
        pods = [self._pod_objs[k] for k, p in info.pods.items() if p.assigned and k in self._pod_objs]
        return pods_to_revoke(used, runtime, pods, self._cluster, _non_preemptible)

    def revocations(self) -> list[JSON]:
        """Per quota over its runtime now, the pods the revoke controller would evict once delayEvictTime has
        passed (simulate's report: a simulation is one instant)."""
        rows: list[JSON] = []
        usage = self.usage()
        for name in sorted(usage):
            pods = self.to_revoke(name)
            if pods:
                used, runtime = usage[name]
                rows.append({"quota": name, "used": print_resources(used), "runtime": print_resources(runtime),
                             "pods": [key(p) for p in pods]})
        return rows

    # -- reporting -------------------------------------------------------------------------------------------
    @property
    def manager(self) -> GroupQuotaManager:
        """The default tree's manager."""
        return self.forest.default

    def info(self, name: str) -> QuotaInfo | None:
        """The quota's state in its tree, None for a quota the scheduler does not know."""
        return self.forest.info(name)

    def summary(self, name: str, include_pods: bool = False) -> JSON | None:
        mgr = self.forest.manager_of(name)
        info = mgr.quotas.get(name)
        if info is None or name == ROOT_QUOTA:
            return None
        if name not in SPECIAL:
            mgr.refresh_runtime(name)
        return info.summary(include_pods, mgr.tree_id)

    def summaries(self, include_pods: bool = False, tree: str | None = None) -> dict[str, JSON]:
        """Every quota's summary, or those of one tree (GetQuotaSummaries; "" is the default tree)."""
        out: dict[str, JSON] = {}
        for tree_id, mgr in self.forest.trees.items():
            if tree is not None and tree_id != tree:
                continue
            mgr.refresh_all()
            out.update({n: q.summary(include_pods, tree_id) for n, q in mgr.quotas.items() if n != ROOT_QUOTA})
        return dict(sorted(out.items()))


def _non_preemptible(pod: JSON) -> bool:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_QUOTA_PREEMPTIBLE) == "false"
