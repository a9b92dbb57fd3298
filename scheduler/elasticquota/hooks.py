"""ElasticQuota hook plugins (v1.7): a registry of factories and the points the plugin calls them at.

(pkg/scheduler/plugins/elasticquota/core/hook_plugin.go) ElasticQuotaArgs.hookPlugins names instances as
`{key, factoryKey, factoryArgs}`; each quota tree gets its own instances, made by the factory registered under
factoryKey with a read-only view of that tree. The points:
- `pre_quota_update` / `post_quota_update`: around each quota taken into the tree (old None: a create);
- `on_pod_updated`: an assigned pod of the quota appears, is reserved, unreserved or goes (old/new None);
- `check_pod`: at PreFilter, after the quota checks; a reason refuses the pod;
- `update_quota_status`: on the status write-back (`run`), given the object and the merge patch about to be sent
  (None: nothing changed); returns the patch to send instead, or None to keep it.
koord-sched registers no factory of its own (nor does upstream): a configured factory key that is not registered
refuses the configuration, as upstream's plugin fails to start.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from apis.core.errors import InvalidInput
from apis.core.objects import JSON
from scheduler.elasticquota.manager import GroupQuotaManager, QuotaInfo


@dataclass
class QuotaReader:
    """QuotaInfoReader: read-only access to one tree's quotas."""

    manager: GroupQuotaManager

    def quota_info(self, name: str) -> QuotaInfo | None:
        return self.manager.quotas.get(name)

    def child_quota_infos(self, name: str) -> dict[str, QuotaInfo]:
        quotas = self.manager.quotas
        return {c: quotas[c] for c in sorted(self.manager.children.get(name, ())) if c in quotas}


class QuotaHook:
    """A hook plugin; every point does nothing unless overridden."""

    def __init__(self, key: str) -> None:
        self.key = key

    def pre_quota_update(self, old: QuotaInfo | None, new: QuotaInfo | None, quota: JSON,
                         state: dict[str, Any]) -> None:
        return None

    def post_quota_update(self, old: QuotaInfo | None, new: QuotaInfo | None, quota: JSON,
                          state: dict[str, Any]) -> None:
        return None

    def on_pod_updated(self, quota: str, old: JSON | None, new: JSON | None) -> None:
        return None

    def check_pod(self, quota: str, pod: JSON) -> str | None:
        return None

    def update_quota_status(self, quota: JSON, patch: JSON | None) -> JSON | None:
        return None


HookFactory = Callable[[QuotaReader, str, str], QuotaHook]  # (reader, key, factoryArgs)


@dataclass
class HookRegistry:
    factories: dict[str, HookFactory] = field(default_factory=dict)

    def register(self, factory_key: str, factory: HookFactory) -> None:
        self.factories[factory_key] = factory

    def check(self, confs: Sequence[Mapping[str, object]]) -> None:
        """InvalidInput naming each entry initHookPlugins would refuse (all of them, in one line)."""
        errs = []
        for i, conf in enumerate(confs):
            key, factory_key = str(conf.get("key") or ""), str(conf.get("factoryKey") or "")
            if not key:
                errs.append(f"failed to initialize index-{i} hook plugin: key is empty")
            elif not factory_key:
                errs.append(f"failed to initialize hook plugin {key}: factory key is empty")
            elif factory_key not in self.factories:
                errs.append(f"failed to initialize hook plugin {key}: factory {factory_key} not found")
        if errs:
            raise InvalidInput("; ".join(errs))

    def build(self, confs: Sequence[Mapping[str, object]], reader: QuotaReader) -> list[QuotaHook]:
        self.check(confs)
        return [self.factories[str(c["factoryKey"])](reader, str(c["key"]), str(c.get("factoryArgs") or ""))
                for c in confs]


REGISTRY = HookRegistry()  # the factories a build of koord-sched brings (none by default)
