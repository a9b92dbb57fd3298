"""PodDisruptionBudgets as the preemption planner sees them: which victims the Eviction API would refuse."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from apis.core.labelselector import LabelSelector, SelectorError, decoded_label_selector
from apis.core.objects import JSON
from scheduler.cluster import key

log = logging.getLogger(__name__)


class Budgets:
    """status.disruptionsAllowed per PDB, spent as victims are chosen (kube's filterPodsWithPDBViolation counts
    the same way: a PDB with a nil or empty selector matches nothing; pods already in status.disruptedPods are
    not counted again)."""

    def __init__(self, pdbs: Iterable[JSON]) -> None:
        self.items: list[tuple[str, str, LabelSelector, int, set[str]]] = []
        for pdb in pdbs:
            meta, spec, status = pdb.get("metadata") or {}, pdb.get("spec") or {}, pdb.get("status") or {}
            sel = spec.get("selector")
            if not isinstance(sel, dict) or not (sel.get("matchLabels") or sel.get("matchExpressions")):
                continue
            try:
                selector = decoded_label_selector(sel, "spec.selector")
            except SelectorError as e:
                log.warning("PodDisruptionBudget %s ignored: %s", key(pdb), e)
                continue
            allowed = status.get("disruptionsAllowed")
            self.items.append((key(pdb), str(meta.get("namespace") or "default"), selector,
                               int(allowed) if isinstance(allowed, int) else 0,
                               set((status.get("disruptedPods") or {}).keys())))

    def covering(self, pod: JSON) -> list[int]:
        meta = pod.get("metadata") or {}
        labels = dict(meta.get("labels") or {})
        if not labels:
            return []
        ns, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
        return [i for i, (_, pns, sel, _, disrupted) in enumerate(self.items)
                if pns == ns and name not in disrupted and sel.matches(labels)]

    def blocked(self, victims: Iterable[JSON]) -> tuple[set[str], list[str]]:
        """Victims (keys) that would exceed a budget if all were evicted, and the PDBs that refuse them."""
        spent = [0] * len(self.items)
        out: set[str] = set()
        pdbs: list[str] = []
        for v in victims:
            for i in self.covering(v):
                spent[i] += 1
                if spent[i] > self.items[i][3]:
                    out.add(key(v))
                    if self.items[i][0] not in pdbs:
                        pdbs.append(self.items[i][0])
        return out, pdbs
