"""DefaultEvictor: which pods may be evicted, and the eviction itself (kubernetes-sigs/descheduler v0.35.1
pkg/framework/plugins/defaultevictor, wrapped by Koordinator's framework/plugins/kubernetes/defaultevictor).

Filter: the evict annotation passes everything; Mandatory no-eviction refuses annotated pods; mirror, static and
terminating pods never pass; then the effective pod protections (local storage, DaemonSet, system-critical priority
with priorityThreshold, bare pods unless failed and allowed, PVCs, pods without a PDB, resource claims), the
labelSelector, minReplicas and minPodAge. PreEvictionFilter: nodeFit (another ready node fits the pod) and the
namespaceLabelSelector. Evict: in `run` a policy/v1 Eviction (scheduler.descheduler.kube); in a simulation the
Eviction API's PodDisruptionBudget check is played (a pod whose PDB allows no more disruptions is not evicted; more
than one PDB is an error, as the API server answers).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from apis.core import podmeta
from apis.core.metatime import parse_time
from apis.core.objects import JSON
from apis.extension.descheduling import ANNOTATION_DESCHEDULER_EVICT, ANNOTATION_PREFER_NO_EVICTION
from apis.extension.qos import pod_labels
from scheduler.descheduler import nodeutil, podutil
from scheduler.descheduler.config.common import ConfigError
from scheduler.descheduler.config.defaultevictor_args import (
    DAEMONSET_PODS,
    FAILED_BARE_PODS,
    PODS_WITH_LOCAL_STORAGE,
    PODS_WITH_PVC,
    PODS_WITH_RESOURCE_CLAIMS,
    PODS_WITHOUT_PDB,
    SYSTEM_CRITICAL_PODS,
    DefaultEvictorArgs,
    decode_defaultevictor_args,
)
from scheduler.descheduler.interfaces import EVICT, FILTER, EvictOptions, Handle, PluginSpec

NAME = "DefaultEvictor"
log = logging.getLogger("koord-descheduler.defaultevictor")

Constraint = Callable[[JSON], str | None]  # a reason the pod is protected, or None


class DefaultEvictor:
    """Implements interfaces.FilterPlugin and interfaces.EvictorPlugin."""

    name = NAME

    def __init__(self, args: DefaultEvictorArgs, handle: Handle) -> None:
        self.args = args
        self.handle = handle
        self.constraints = self._constraints()
        self.disruptions: dict[str, int] = {}  # PDB ns/name → evictions this run took from disruptionsAllowed

    # ---- FilterPlugin ----

    def filter(self, pod: JSON) -> bool:
        if ANNOTATION_DESCHEDULER_EVICT in podmeta.pod_annotations(pod):
            return True
        if self.args.no_eviction_policy == "Mandatory" and ANNOTATION_PREFER_NO_EVICTION in podmeta.pod_annotations(
                pod):
            return False
        reasons = self.reasons(pod)
        if reasons:
            log.debug("pod %s/%s fails: %s", podutil.namespace(pod), podutil.name(pod), "; ".join(reasons))
        return not reasons

    def reasons(self, pod: JSON) -> list[str]:
        """Every check the pod fails (upstream's aggregated error)."""
        return podutil.never_moved(pod) + [why for c in self.constraints if (why := c(pod)) is not None]

    def pre_eviction_filter(self, pod: JSON) -> bool:
        if self.args.node_fit:
            nodes = [n for n in self.handle.snapshot.nodes()
                     if nodeutil.is_ready(n.obj) and (self.args.node_selector is None
                                                      or self.args.node_selector.matches(n.labels))]
            if not nodeutil.pod_fits_any_other_node(pod, nodes):
                return False
        ns_selector = self.args.namespace_label_selector
        if ns_selector is None or ns_selector.empty:
            return True
        for ns in self.handle.snapshot.of_kind("Namespace"):
            if podutil.name(ns) == podutil.namespace(pod):
                labels = ((ns.get("metadata") or {}).get("labels") or {})
                return ns_selector.matches({str(k): str(v) for k, v in labels.items()})
        return False

    # ---- EvictorPlugin ----

    def evict(self, pod: JSON, options: EvictOptions) -> bool:
        kube = self.handle.kube
        if kube is not None:  # `run`: the Eviction API, which enforces the PodDisruptionBudgets itself
            return kube.evictor.evict(pod, options.plugin, options.reason, options.delete_options)
        pdbs = podutil.covering_pdbs(pod, self.handle.snapshot.cluster.pdbs)
        ident = f"{podutil.namespace(pod)}/{podutil.name(pod)}"
        if len(pdbs) > 1:
            log.info("pod %s not evicted: this pod has more than one PodDisruptionBudget, which the eviction "
                     "subresource does not support", ident)
            return False
        if pdbs:
            pdb_key = f"{podutil.namespace(pdbs[0])}/{podutil.name(pdbs[0])}"
            allowed = (pdbs[0].get("status") or {}).get("disruptionsAllowed")
            allowed = allowed if isinstance(allowed, int) and not isinstance(allowed, bool) else 0
            if self.disruptions.get(pdb_key, 0) >= allowed:
                log.info("pod %s not evicted: Cannot evict pod as it would violate the pod's disruption budget %s",
                         ident, pdb_key)
                return False
            self.disruptions[pdb_key] = self.disruptions.get(pdb_key, 0) + 1
        log.info("pod %s evicted by %s: %s", ident, options.plugin, options.reason)
        return True

    # ---- the constraints (addAllConstraints) ----

    def _constraints(self) -> list[Constraint]:
        a = self.args
        on = set(a.protections())
        cs: list[Constraint] = []
        if SYSTEM_CRITICAL_PODS in on:
            cs.append(lambda p: "pod has system critical priority and is protected against eviction"
                      if podmeta.is_critical_priority(p) else None)
            pt = a.priority_threshold
            if pt is not None and (pt.value is not None or pt.name):
                if pt.value is not None and pt.value > podmeta.SYSTEM_CRITICAL_PRIORITY:
                    raise ConfigError(f"DefaultEvictor args.priorityThreshold.value: priority threshold can't be "
                                      f"greater than {podmeta.SYSTEM_CRITICAL_PRIORITY}")
                cs.append(self._below_threshold)
        if FAILED_BARE_PODS in on:
            cs.append(lambda p: None if podmeta.owner_references(p) else "pod does not have any ownerRefs")
        else:
            cs.append(lambda p: "pod does not have any ownerRefs and is not in failed phase"
                      if not podmeta.owner_references(p) and (p.get("status") or {}).get("phase") != "Failed"
                      else None)
        if PODS_WITH_LOCAL_STORAGE in on:
            cs.append(lambda p: "pod has local storage and is protected against eviction"
                      if podmeta.has_local_storage(p) else None)
        if DAEMONSET_PODS in on:
            cs.append(lambda p: "daemonset pods are protected against eviction"
                      if podmeta.is_daemonset_pod(p) else None)
        if PODS_WITH_PVC in on:
            cs.append(self._pvc)
        if PODS_WITHOUT_PDB in on:
            cs.append(lambda p: None if podutil.covering_pdbs(p, self.handle.snapshot.cluster.pdbs) else
                      "pod does not have a PodDisruptionBudget and is protected against eviction")
        if PODS_WITH_RESOURCE_CLAIMS in on:
            cs.append(lambda p: "pod has ResourceClaims and descheduler is configured to protect ResourceClaims pods"
                      if podmeta.has_resource_claims(p) else None)
        if a.label_selector is not None and not a.label_selector.empty:
            selector = a.label_selector
            cs.append(lambda p: None if selector.matches({str(k): str(v) for k, v in pod_labels(p).items()}) else
                      "pod labels do not match the labelSelector filter in the policy parameter")
        if a.min_replicas > 1:
            cs.append(self._min_replicas)
        if a.min_pod_age is not None:
            cs.append(self._min_pod_age)
        return cs

    def _below_threshold(self, pod: JSON) -> str | None:
        pt = self.args.priority_threshold
        assert pt is not None
        threshold = pt.value
        if threshold is None:
            threshold = self.handle.snapshot.cluster.priority_classes.get(pt.name)
            if threshold is None:
                return f"unable to get priority value from the priority class {pt.name!r}: not found"
        p = podmeta.priority(pod)
        return None if p is None or p < threshold else "pod has higher priority than specified priority class threshold"

    def _pvc(self, pod: JSON) -> str | None:
        if not podmeta.has_pvc(pod):
            return None
        protected = set(self.args.protected_storage_classes)
        if not protected:
            return "pod with PVC is protected against eviction"
        claims = {podutil.name(c): c for c in self.handle.snapshot.of_kind("PersistentVolumeClaim")
                  if podutil.namespace(c) == podutil.namespace(pod)}
        for v in podmeta.volumes(pod):
            ref = v.get("persistentVolumeClaim")
            if not isinstance(ref, dict):
                continue
            claim = claims.get(str(ref.get("claimName")))
            if claim is None:
                return f"failed to get persistent volume claim {podutil.namespace(pod)}/{ref.get('claimName')}"
            cls = (claim.get("spec") or {}).get("storageClassName")
            if not cls:
                return f"failed to resolve storage class for pod {podutil.namespace(pod)}/{podutil.name(claim)}"
            if cls in protected:
                return f"pod using protected storage class {cls!r}"
        return None

    def _min_replicas(self, pod: JSON) -> str | None:
        refs = podmeta.owner_references(pod)
        if len(refs) != 1:
            return None  # none, or several (not supported upstream: passes)
        uid = refs[0].get("uid")
        count = sum(1 for p in self.handle.snapshot.all_pods()
                    if any(r.get("uid") == uid for r in podmeta.owner_references(p)))
        if count < self.args.min_replicas:
            return f"owner has {count} replicas which is less than minReplicas of {self.args.min_replicas}"
        return None

    def _min_pod_age(self, pod: JSON) -> str | None:
        started = parse_time((pod.get("status") or {}).get("startTime"))
        assert self.args.min_pod_age is not None
        if started is None or self.handle.snapshot.now - started < self.args.min_pod_age:
            return f"pod age is not older than MinPodAge: {self.args.min_pod_age:g} seconds"
        return None


def new(args: object, handle: Handle) -> DefaultEvictor:
    if args is None:
        args = decode_defaultevictor_args({}, "DefaultEvictor args")
    elif not isinstance(args, DefaultEvictorArgs):
        raise ConfigError(f"got args of type {type(args).__name__}, want *DefaultEvictorArgs")
    return DefaultEvictor(args, handle)


SPEC = PluginSpec(NAME, new, frozenset({EVICT, FILTER}))
