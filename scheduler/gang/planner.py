"""Job-level planning: all-or-nothing gang placement, topology-aware plans and job-level preemption."""

from __future__ import annotations

import logging
import time

from apis.core.objects import JSON, annotate
from apis.scheduling.gang import (
    ANNOTATION_BIND_GANG_GROUP_ID,
    ANNOTATION_GANG_MIN_AVAILABLE,
    ANNOTATION_NETWORK_TOPOLOGY_SELECTOR,
    BIND_GANG_ANNOTATIONS,
    GANG_MODE_NON_STRICT,
    LABEL_JOB_KEY,
    MATCH_POLICY_ONCE_SATISFIED,
    MATCH_POLICY_ONLY_WAITING,
    bind_gang_annotations,
)
from apis.scheduling.quota import LABEL_QUOTA_PREEMPTIBLE
from apis.scheduling.reservation import LABEL_POD_PREEMPTIBLE
from scheduler.cluster import Cluster, NodeInfo, key
from scheduler.elasticquota.plugin import NAME as ELASTIC_QUOTA
from scheduler.elasticquota.plugin import ElasticQuota
from scheduler.framework import Assumed, Scheduler, invalid_pod
from scheduler.gang.disruption import Budgets
from scheduler.gang.model import (
    DEFAULT_TIMEOUT_SECONDS,
    Gang,
    GangGroup,
    collect_gangs,
    gang_groups,
    gang_id_of,
    pod_priority,
    topology_order,
)
from scheduler.gang.plugin import NAME as COSCHEDULING
from scheduler.gang.plugin import Coscheduling
from scheduler.gang.topology import (
    NO_CLUSTER_NETWORK_TOPOLOGY,
    NO_PLANNED_PODS,
    NetworkTopologySpec,
    NoCandidate,
    TopologyTree,
    cluster_tree,
    place_pods,
)
from scheduler.interfaces import Placement, Unschedulable

log = logging.getLogger(__name__)

GANG_PLUGINS = frozenset((COSCHEDULING,))  # a gang check failed (admission, Permit): Coscheduling is to blame


def _offer_slots(sched: Scheduler, pods: list[JSON], nodes: list[str]) -> tuple[dict[str, int], str]:
    """OfferSlot per node: how many of the pods (in order) pass every Filter on that node alone (step 1)."""
    slots: dict[str, int] = {}
    first_failure = ""
    for name in nodes:
        node = sched.cluster.nodes[name]
        added: list[str] = []
        for pod in pods:
            why = sched.filter(pod, node)
            if why is not None:
                first_failure = first_failure or f"node {name}: {why}"
                break
            node.add_pod(pod)
            added.append(key(pod))
        for k in added:
            node.remove_pod(k)
        slots[name] = len(added)
    return slots, first_failure


def _existing(cluster: Cluster, pods: list[JSON], nodes: list[str]) -> dict[str, int]:
    selector = ((pods[0].get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_NETWORK_TOPOLOGY_SELECTOR)
    if not selector:
        return {}
    def same(p: JSON) -> bool:
        annotations = (p.get("metadata") or {}).get("annotations") or {}
        return bool(annotations.get(ANNOTATION_NETWORK_TOPOLOGY_SELECTOR) == selector)
    return {n: sum(1 for p in cluster.nodes[n].pods.values() if same(p)) for n in nodes}


def _topology_plan(sched: Scheduler, tree: TopologyTree, spec: NetworkTopologySpec, pods: list[JSON],
                   scores: dict[str, int] | None = None) -> list[tuple[JSON, str]]:
    """pod → node for all pending members at once (FindOneNode); raises NoCandidate."""
    ordered = topology_order(pods)
    nodes = [n for n in tree.leaves if n in sched.cluster.nodes]
    slots, fit_error = _offer_slots(sched, ordered, nodes)
    _, allotted = place_pods(tree, spec, len(ordered), slots, _existing(sched.cluster, ordered, nodes), scores,
                             fit_error if not any(slots.values()) else "")
    # **[quirk]** upstream (network_topology_solver.go) re-sorts the pods by name before pouring them into the
    # node list, overriding the index order of the offer-slot step; we keep the index order (evident intent).
    plan: list[tuple[JSON, str]] = []
    it = iter(ordered)
    for node, count in allotted:
        for _ in range(count):
            plan.append((next(it), node))
    return plan


def _once_satisfied(group: GangGroup) -> bool:
    """GangGroupInfo.OnceResourceSatisfied as gang_cache.go recovers it: set as soon as any member of any gang of
    the group is bound (a bound member means the group passed Permit once)."""
    return any(g.bound > 0 for g in group.gangs)


def _satisfied(gang: Gang, waiting: int, once: bool) -> bool:
    if gang.match_policy == MATCH_POLICY_ONLY_WAITING:
        return waiting >= gang.min_member
    if gang.match_policy == MATCH_POLICY_ONCE_SATISFIED:
        return waiting >= gang.min_member or once
    return waiting + gang.bound >= gang.min_member


def binding_members(group: GangGroup, held: list[Assumed], once: bool) -> list[Assumed]:
    """The pods waiting at Permit when the group first passed it (AllowGangGroup's snapshot in upstream
    coscheduling/core/core.go): the shortest prefix of the assumed members that satisfies every gang; members
    assumed after it are placed with the group but are not binding members."""
    waiting = dict.fromkeys((g.id for g in group.gangs), 0)
    for i, h in enumerate(held, 1):
        gid = gang_id_of(h.pod)
        if gid in waiting:
            waiting[gid] += 1
        if all(_satisfied(g, waiting[g.id], once) for g in group.gangs):
            return held[:i]
    return held


class Planner:
    def __init__(self, sched: Scheduler, enable_preemption: bool) -> None:
        self.sched = sched
        self.cluster = sched.cluster
        # the profile's Coscheduling switches (a Scheduler built without it: everything on)
        self.cos: Coscheduling = sched.plugin(COSCHEDULING, Coscheduling) or Coscheduling()
        self.quota = sched.plugin(ELASTIC_QUOTA, ElasticQuota)
        self.enable_preemption = enable_preemption and self.cos.preemption
        # the network topology manager's snapshot: only with --enable-network-topology-manager and a `default` CNT
        self.tree = cluster_tree(sched.cluster) if self.cos.topology_manager else None
        self.results: dict[str, Placement] = {}
        self.preemptions: list[JSON] = []
        self.preemptors: list[tuple[str, str]] = []  # (GangGroup id, trigger pod) per entry of `preemptions`
        self.victims: dict[str, tuple[JSON, str]] = {}  # victim key → (pod, node) of every preemption planned
        self.rejected_groups = 0  # GangGroups left waiting this plan
        self.blame: frozenset[str] = frozenset()  # the plugins the last rejected group's failure is put down to
        self.units: dict[str, str] = {}  # pod key → the GangGroup it passed Permit with (bound as one unit)

    def fail_all(self, pods: list[JSON], reason: str, plugins: frozenset[str] = frozenset()) -> None:
        for p in pods:
            self.results.setdefault(key(p), Placement(key(p), None, reason=reason, plugins=plugins))

    def admit(self, group: GangGroup, once: bool) -> str | None:
        """PreFilter's basic gang check; skipped for once-satisfied gangs of a group that was satisfied once."""
        for g in group.gangs:
            if not g.exists:
                return f'GangGroup "{group.id}": gang "{g.id}" not found'
            if once and g.match_policy == MATCH_POLICY_ONCE_SATISFIED:
                continue
            if g.children < g.min_member:
                return (f'GangGroup "{group.id}": gang "{g.id}" child pod not collect enough, '
                        f"minMember {g.min_member}, children {g.children}")
        return None

    def attempted(self, pods: list[JSON], started: float) -> None:
        """One scheduling attempt per pod, by its outcome once Permit decided for its group (kube-scheduler counts
        a pod rejected at PreFilter or Permit as unschedulable)."""
        metrics = self.sched.metrics
        if metrics is None:
            return
        seconds = time.perf_counter() - started
        for p in pods:
            placed = self.results.get(key(p))
            metrics.attempt("scheduled" if placed is not None and placed.node is not None else "unschedulable",
                            seconds)

    def run_group(self, group: GangGroup) -> None:
        pending = group.pending
        once = _once_satisfied(group)
        if not self.cos.permit or (once and all(g.match_policy == MATCH_POLICY_ONCE_SATISFIED for g in group.gangs)):
            for p in pending:  # once satisfied (or no Permit): members pass every gang check one by one
                self.results[key(p)] = self.sched.schedule(p)
            return
        started = time.perf_counter()
        self.decide(group, once)
        self.attempted(pending, started)

    def decide(self, group: GangGroup, once: bool) -> None:
        """PreFilter's gang check, every member assumed, then Permit: all of them stamped, or all released."""
        pending = group.pending
        if self.cos.admission and (why := self.admit(group, once)) is not None:
            self.fail_all(pending, why, GANG_PLUGINS)
            return
        self.blame = frozenset()
        raw_spec = next((g.topology_spec for g in group.gangs if g.topology_spec), None)
        if raw_spec is not None and self.cos.admission and (why := self.topology_refusal(group)) is not None:
            self.fail_all(pending, why, GANG_PLUGINS)  # UnschedulableAndUnresolvable: no preemption either
            return
        topo = self.tree is not None and raw_spec is not None and self.cos.aware_network_topology
        held: list[Assumed] = []
        failure = self.place_topology(group, raw_spec, held) if topo else self.place_members(group, held)
        if failure is None:
            waiting = {g.id: sum(1 for h in held if gang_id_of(h.pod) == g.id) for g in group.gangs}
            short = [g for g in group.gangs if not _satisfied(g, waiting[g.id], once)]
            if not short:
                self.commit(group, held, once)
                if self.sched.metrics is not None:
                    self.sched.metrics.gang_groups.labels("permitted").inc()
                return
            g = short[0]
            self.blame = GANG_PLUGINS
            failure = (f'GangGroup "{group.id}" gets rejected: gang "{g.id}" has {waiting[g.id]} waiting pod(s) '
                       f"and {g.bound} running, minMember {g.min_member} ({g.match_policy}), "
                       f"timed out after {g.wait_seconds:g}s")
        self.sched.release(held)
        held.clear()
        if self.sched.metrics is not None:
            self.sched.metrics.gang_groups.labels("rejected").inc()
        self.rejected_groups += 1
        for p in pending:
            if (placed := self.results.get(key(p))) is not None and placed.node is not None:
                del self.results[key(p)]
        if self.enable_preemption and all(g.mode != GANG_MODE_NON_STRICT for g in group.gangs):
            note = self.preempt(group, raw_spec if topo else None)
            failure = f"{failure.rstrip('.')}. preemption: {note}"
        self.fail_all(pending, failure, self.blame)

    def topology_refusal(self, group: GangGroup) -> str | None:
        """Why a gang carrying a network-topology-spec cannot be planned, as upstream refuses it.

        BeforePreFilter (coscheduling/core/core.go) needs the tree manager's snapshot: none without
        --enable-network-topology-manager or without ClusterNetworkTopology `default`. FindOneNode (the plan of
        all members) is offered only with awareNetworkTopology (coscheduling.go FindOneNodePlugin); without it the
        first member goes its own way and the next one finds no planned node (network_topology_workflow.go)."""
        if self.tree is None:
            return NO_CLUSTER_NETWORK_TOPOLOGY
        if not self.cos.aware_network_topology and len(group.pending) > 1:
            return NO_PLANNED_PODS
        return None

    def place_members(self, group: GangGroup, held: list[Assumed]) -> str | None:
        """Members back to back; Strict: the first failure rejects the group, NonStrict: later members go on."""
        for g in group.gangs:
            for pod in g.pending:
                p = self.sched.schedule(pod, attempt=False)
                if p.node is not None:
                    held.append(Assumed(pod, p.node, p.annotations))
                    self.results[key(pod)] = p
                    continue
                reason = (f'GangGroup "{group.id}" gets rejected due to member Pod "{key(pod)}" is unschedulable '
                          f'with reason "{p.reason}", alreadyWaitForBound: {len(held)}')
                if g.mode != GANG_MODE_NON_STRICT:
                    self.blame = p.plugins  # the member's own rejection is the group's
                    return reason
                self.results[key(pod)] = Placement(key(pod), None, reason=p.reason,  # NonStrict keeps the waiting
                                                   plugins=p.plugins)
        return None

    def place_topology(self, group: GangGroup, raw_spec: str | None, held: list[Assumed]) -> str | None:
        assert self.tree is not None
        spec = NetworkTopologySpec.parse(raw_spec, self.tree.layers)
        pods = group.pending
        try:
            plan = _topology_plan(self.sched, self.tree, spec, pods)
        except NoCandidate as e:
            return f"0/{len(self.cluster.nodes)} nodes are available: {e}."
        for pod, node in plan:
            try:  # inside the cycle hooks: an owner is served from its reservation on that node
                with self.sched.cycle(pod) as cycle:
                    placed = cycle.place_on(self.cluster.nodes[node])
            except Unschedulable as e:
                return (f'GangGroup "{group.id}" gets rejected due to member Pod "{key(pod)}" is unschedulable '
                        f'on its planned node {node} with reason "{e}", alreadyWaitForBound: {len(held)}')
            held.append(Assumed(pod, node, placed.annotations))
            self.results[key(pod)] = Placement(key(pod), node, placed.annotations)
        return None

    def commit(self, group: GangGroup, held: list[Assumed], once: bool) -> None:
        """Permit passed for every gang: the members bind as one unit. With Coscheduling at PreBind, the binding
        members get the bind-gang annotations (GetGangBindingInfo: none when they are a single pod)."""
        for h in held:
            self.units[key(h.pod)] = group.id
        members = binding_members(group, held, once) if self.cos.prebind else []
        if len(members) <= 1:
            return
        stamp = bind_gang_annotations(group.id, len(members))
        for h in members:
            annotate(h.pod, stamp)
            placed = self.results[key(h.pod)]
            placed.annotations = {**placed.annotations, **stamp}

    def drop_stale_stamps(self, pods: list[JSON]) -> None:
        """Coscheduling's PreBind on a placed pod it gave no binding info (no gang, not a binding member, a
        member placed alone once its group was satisfied): both bind-gang pairs the pod carries are deleted."""
        if not self.cos.prebind:
            return
        for pod in pods:
            placed = self.results.get(key(pod))
            if placed is None or placed.node is None or ANNOTATION_BIND_GANG_GROUP_ID in placed.annotations:
                continue
            annotations = (pod.get("metadata") or {}).get("annotations") or {}
            stale = tuple(k for k in BIND_GANG_ANNOTATIONS if k in annotations)
            for k in stale:
                del annotations[k]
            placed.removed = stale

    # job-level preemption (preemption.go)
    def preempt(self, group: GangGroup, raw_spec: str | None) -> str:
        pods = group.pending
        trigger = pods[0]
        if (trigger.get("spec") or {}).get("preemptionPolicy") == "Never":
            return "not eligible due to preemptionPolicy=Never."
        priority = pod_priority(trigger, self.cluster)
        if self.terminating_on_nominated(pods, priority):
            return "not eligible due to terminating pod on the nominated node."
        quota = self.quota
        if quota is not None and any(key(p) in quota.refused for p in pods):
            # **[decision]** a quota refusal is not helped by evicting pods on nodes (upstream's job preemption
            # would dry-run with Filter only and evict although PreFilter still refuses the job)
            return "not eligible: the job is refused by ElasticQuota"
        job = quota.job_quota(pods) if quota is not None else None
        budgets = Budgets(self.cluster.pdbs)
        excluded: set[str] = set()
        blocked_by: list[str] = []
        for _ in range(len(budgets.items) + 1):
            outcome = self.plan_preemption(pods, raw_spec, priority, quota, job, excluded)
            if isinstance(outcome, str):
                return outcome + (f" (PodDisruptionBudget {', '.join(blocked_by)} allows no more disruptions)"
                                  if blocked_by else "")
            plan, victims_chosen = outcome
            blocked, pdbs = budgets.blocked(v for vs in victims_chosen.values() for v in vs)
            if not blocked:
                break
            excluded |= blocked  # the Eviction API would refuse them: plan again without them
            blocked_by += [p for p in pdbs if p not in blocked_by]
        else:
            return "preemption not helpful"
        for name, victims in victims_chosen.items():
            for v in victims:
                self.cluster.nodes[name].remove_pod(key(v))
                self.sched.forget(v)
                self.victims[key(v)] = (v, name)
        nominated: dict[str, str] = {}
        for pod, target in plan:
            pod.setdefault("status", {})["nominatedNodeName"] = target
            self.cluster.nodes[target].add_pod(pod)  # the nomination holds the resources for later pods
            nominated[key(pod)] = target
        victim_keys = sorted(key(v) for vs in victims_chosen.values() for v in vs)
        self.preemptions.append({"pods": [key(p) for p in pods], "victims": victim_keys,
                                 "nominatedNodes": nominated})
        self.preemptors.append((group.id, key(trigger)))
        return (f"preempting {len(victim_keys)} pod(s), nominated node {nominated[key(trigger)]} "
                f"for {key(trigger)}")

    def terminating_on_nominated(self, pods: list[JSON], priority: int) -> bool:
        """A member is already nominated to a node where a lower-priority victim of a scheduler preemption is
        still terminating (podEligibleToPreemptOthers): wait for it instead of preempting again."""
        for pod in pods:
            node = self.cluster.nodes.get(str((pod.get("status") or {}).get("nominatedNodeName") or ""))
            if node is None:
                continue
            for p in node.pods.values():
                if pod_priority(p, self.cluster) < priority and terminating_by_preemption(p):
                    return True
        return False

    def plan_preemption(self, pods: list[JSON], raw_spec: str | None, priority: int, quota: ElasticQuota | None,
                        job: tuple[str, dict[str, int]] | None, excluded: set[str]
                        ) -> tuple[list[tuple[JSON, str]], dict[str, list[JSON]]] | str:
        """Remove every eligible victim, plan the whole job on that view, pick the victims that must go."""
        possible: dict[str, list[JSON]] = {}
        for name, node in self.cluster.nodes.items():
            victims = [p for p in node.pods.values()
                       if pod_priority(p, self.cluster) < priority and not (p.get("metadata") or {}).get(
                           "deletionTimestamp") and key(p) not in excluded and _preemptible(p)
                       and (quota is None or job is None or quota.can_preempt(job[0], job[1], p))]
            if victims:
                possible[name] = victims
        if not possible:
            return "no potential victims"
        costs = _preemption_costs(possible, self.cluster)
        for name, victims in possible.items():
            for v in victims:
                self.cluster.nodes[name].remove_pod(key(v))
        try:
            plan = self.plan_without_victims(pods, raw_spec, costs, possible)
            if plan is None:
                return "preemption not helpful"
            return plan, self.select_victims(plan, possible)
        finally:
            for name, victims in possible.items():
                for v in victims:
                    self.cluster.nodes[name].add_pod(v)

    def plan_without_victims(self, pods: list[JSON], raw_spec: str | None,
                             costs: dict[str, int], possible: dict[str, list[JSON]]) -> list[tuple[JSON, str]] | None:
        if raw_spec is not None and self.tree is not None:
            spec = NetworkTopologySpec.parse(raw_spec, self.tree.layers)
            try:
                return _topology_plan(self.sched, self.tree, spec, pods,
                                      {n: -costs.get(n, 0) for n in self.tree.leaves})
            except NoCandidate:
                return None
        plan: list[tuple[JSON, str]] = []
        try:
            for pod in pods:
                feasible = [n for n in sorted(self.cluster.nodes)
                            if self.sched.filter(pod, self.cluster.nodes[n]) is None]
                if not feasible:
                    return None
                # **[quirk]** upstream breaks cost ties by node order, so a node whose only victims have the
                # lowest priority (cost 0) ties with an idle node and may evict needlessly; we prefer fewer
                # possible victims before the name.
                best = min(feasible, key=lambda n: (costs.get(n, 0), len(possible.get(n, [])), n))
                self.cluster.nodes[best].add_pod(pod)
                plan.append((pod, best))
            return plan
        finally:
            for pod, node in plan:
                self.cluster.nodes[node].remove_pod(key(pod))

    def select_victims(self, plan: list[tuple[JSON, str]],
                       possible: dict[str, list[JSON]]) -> dict[str, list[JSON]]:
        """Per planned node: re-add possible victims (priority desc, job, name); keep a reprieve when every planned
        pod still passes Filter, otherwise the pod becomes a victim."""
        by_node: dict[str, list[JSON]] = {}
        for pod, node in plan:
            by_node.setdefault(node, []).append(pod)
        chosen: dict[str, list[JSON]] = {}
        for name, planned in by_node.items():
            info = self.cluster.nodes[name]
            order = sorted(possible.get(name, []), key=lambda v: (-pod_priority(v, self.cluster), _job_key(v), key(v)))
            reprieved: list[str] = []
            for v in order:
                info.add_pod(v)
                if self.fits_all(planned, info):
                    reprieved.append(key(v))
                else:
                    info.remove_pod(key(v))
                    chosen.setdefault(name, []).append(v)
            for k in reprieved:
                info.remove_pod(k)
        return chosen

    def fits_all(self, pods: list[JSON], node: NodeInfo) -> bool:
        added: list[str] = []
        ok = True
        for pod in pods:
            if self.sched.filter(pod, node) is not None:
                ok = False
                break
            node.add_pod(pod)
            added.append(key(pod))
        for k in added:
            node.remove_pod(k)
        return ok


def _preemptible(pod: JSON) -> bool:
    """IsEligiblePod: neither scheduling.koordinator.sh/preemptible nor the quota label says "false"."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return labels.get(LABEL_POD_PREEMPTIBLE) != "false" and labels.get(LABEL_QUOTA_PREEMPTIBLE) != "false"


def terminating_by_preemption(pod: JSON) -> bool:
    """Deleting, with DisruptionTarget=True reason PreemptionByScheduler (podTerminatingByPreemption)."""
    if not (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    for c in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "DisruptionTarget":
            return bool(c.get("status") == "True" and c.get("reason") == "PreemptionByScheduler")
    return False


def _job_key(pod: JSON) -> str:
    return str(((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_JOB_KEY) or key(pod))


def _preemption_costs(possible: dict[str, list[JSON]], cluster: Cluster) -> dict[str, int]:
    """Job-aware cost: rank of each distinct victim priority (0 for the lowest); a node costs the sum over its
    distinct victim jobs (preemption.go estimatePreemptionCost). Kept as upstream: the documented 12-node example
    (pod i nominated to node-(5+i)) depends on lowest-priority victims costing 0 in the topology Score."""
    priorities = sorted({pod_priority(v, cluster) for vs in possible.values() for v in vs})
    rank = {p: i for i, p in enumerate(priorities)}
    out: dict[str, int] = {}
    for name, victims in possible.items():
        seen: set[str] = set()
        cost = 0
        for v in victims:
            job = _job_key(v)
            if job not in seen:
                seen.add(job)
                cost += rank[pod_priority(v, cluster)]
        out[name] = cost
    return out


def plan_jobs(scheduler: Scheduler, pods: list[JSON], *, enable_preemption: bool = True,
              default_timeout: float = DEFAULT_TIMEOUT_SECONDS) -> tuple[list[Placement], list[JSON]]:
    """Place pods in input order; each gang's GangGroup is placed all-or-nothing when its first pod comes up.

    Returns one Placement per input pod (same order) and the job-level preemptions in the `simulate` shape."""
    placements, planner = plan_jobs_detail(scheduler, pods, enable_preemption=enable_preemption,
                                           default_timeout=default_timeout)
    return placements, planner.preemptions


def plan_jobs_detail(scheduler: Scheduler, pods: list[JSON], *, enable_preemption: bool = True,
                     default_timeout: float = DEFAULT_TIMEOUT_SECONDS) -> tuple[list[Placement], Planner]:
    """plan_jobs, and the planner itself: its `victims` are what a live scheduler evicts."""
    planner = Planner(scheduler, enable_preemption)
    valid = []
    for pod in pods:  # a pod whose requests do not parse gets a reason; it never reaches a plugin
        problem = invalid_pod(pod)
        if problem:
            planner.results[key(pod)] = Placement(key(pod), None, reason=problem)
        else:
            valid.append(pod)
    pods_in_order, pods = pods, valid
    scheduler.admit_pending(pods)
    gangs = collect_gangs(pods, scheduler.cluster, default_timeout, planner.cos.match_policy)
    groups = gang_groups(gangs)
    done: set[str] = set()
    for pod in pods:
        k = key(pod)
        if k in planner.results:
            continue
        gid = gang_id_of(pod)
        if gid is None or not planner.cos.permit:  # Coscheduling off: gang members are lone pods
            planner.results[k] = scheduler.schedule(pod)
            continue
        if gid not in gangs:
            planner.results[k] = Placement(k, None, reason=f'gang "{gid}" not found: no PodGroup and no valid '
                                                          f'{ANNOTATION_GANG_MIN_AVAILABLE}', plugins=GANG_PLUGINS)
            planner.attempted([pod], time.perf_counter())
            continue
        group = groups[gid]
        if group.id in done:
            continue
        done.add(group.id)
        planner.run_group(group)
    planner.drop_stale_stamps(pods)
    return [planner.results.get(key(p)) or Placement(key(p), None, reason="not scheduled") for p in pods_in_order], \
        planner
