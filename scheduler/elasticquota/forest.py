"""Quota trees by the tree-id label: one GroupQuotaManager per tree, each quota's tree and each tree's total.

(pkg/scheduler/plugins/elasticquota/quota_handler.go, GetOrCreateGroupQuotaManagerForTree / handlerQuotaWhenRoot)
Quotas without a tree id, the system and the default quota are the default tree's. A tree's root quota (is-root
"true") carries the tree's total in its total-resource annotation; that total is taken out of the default tree's
(the nodes' allocatable) unless the root quota is labelled ignore-default-tree "true". Runtime is computed per
tree from its own total, so quotas of different trees never lend to one another.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from scheduler.elasticquota.manager import GroupQuotaManager, QuotaInfo
from scheduler.elasticquota.model import QuotaSpec, Resources, add, non_negative, sub


class QuotaForest:
    def __init__(self, enable_min_scale: bool = True, system_max: Mapping[str, int] | None = None,
                 default_max: Mapping[str, int] | None = None, guarantee_usage: bool = False) -> None:
        self._enable_min_scale = enable_min_scale
        self._guarantee_usage = guarantee_usage
        self.default = GroupQuotaManager(enable_min_scale, system_max, default_max, guarantee_usage=guarantee_usage)
        self.trees: dict[str, GroupQuotaManager] = {"": self.default}
        self.tree_of: dict[str, str] = {}  # quota name → tree id (quota names are cluster-wide)
        self.taken_from_default: Resources = {}  # Σ the totals of the trees that take theirs from the default tree
        self.nodes_total: Resources = {}

    def set_quotas(self, specs: Iterable[QuotaSpec]) -> None:
        """Load validated quotas (parents before children), each into its tree's manager."""
        by_tree: dict[str, list[QuotaSpec]] = {}
        for s in specs:
            by_tree.setdefault(s.tree_id, []).append(s)
            self.tree_of[s.name] = s.tree_id
        for tree, group in by_tree.items():
            mgr = self.trees.get(tree)
            if mgr is None:
                mgr = self.trees[tree] = GroupQuotaManager(self._enable_min_scale, tree_id=tree,
                                                           guarantee_usage=self._guarantee_usage)
            mgr.set_quotas(group)
            for s in group:
                if tree and s.tree_root and s.total is not None:
                    mgr.set_cluster_total(s.total)
                    if not s.ignore_default_tree:
                        self.taken_from_default = add(self.taken_from_default, s.total)
        self._set_default_total()

    def set_nodes_total(self, total: Mapping[str, int]) -> None:
        """The nodes' allocatable: the default tree's total, less what the other trees take."""
        self.nodes_total = dict(total)
        self._set_default_total()

    def _set_default_total(self) -> None:
        self.default.set_cluster_total(non_negative(sub(self.nodes_total, self.taken_from_default)))

    def manager_of(self, quota: str) -> GroupQuotaManager:
        """The manager of the quota's tree (the default tree's for a quota it does not know, as upstream)."""
        return self.trees.get(self.tree_of.get(quota, ""), self.default)

    def info(self, quota: str) -> QuotaInfo | None:
        return self.manager_of(quota).quotas.get(quota)

    def knows(self, quota: str) -> bool:
        return quota in self.tree_of or self.default.has(quota)

    def refresh_all(self) -> None:
        for mgr in self.trees.values():
            mgr.refresh_all()
