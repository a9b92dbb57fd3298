"""One cluster cache fed by list + watch per kind: objects kept by kind and key, a private copy per scheduling cycle.

Both `koord-sched run` (a snapshot per cycle: no API request once synced) and the extender (a listener applying
each change to its live scheduler) read the cluster through it. Every list and watch event passes the same
malformed-object gate (scheduler.malformed): one bad object is reported and skipped, the rest are kept.
"""

from __future__ import annotations

import logging
import pickle
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from apis.client.backoff import REFLECTOR, BackoffPolicy
from apis.client.kubeapi import Gone, KubeClient
from apis.client.listwatch import REAL_CLOCK, Clock, list_and_watch
from apis.core.errors import NotFound
from apis.core.objects import JSON, annotate
from scheduler import malformed

log = logging.getLogger(__name__)

LIST_PAGE = 500
WATCH_TIMEOUT = 300  # seconds per watch request; the server ends it and we re-watch from the last resourceVersion
SYNC_TIMEOUT = 60.0  # seconds `run`'s first cycle waits for every source's first list

# A listener hears ("REPLACE", kind, [objects]) after each list and ("ADDED"|"MODIFIED"|"DELETED", kind, object)
# for each watch event, after the store has it.
Listener = Callable[[str, str, object], None]


@dataclass(frozen=True)
class Source:
    """One collection: `kind` fills in the items' kind (list items come without it); `name` keys the store (two
    sources of one kind, e.g. assigned and pending pods, keep apart); `assigned_only` keeps pods with a node."""

    path: str
    kind: str
    field_selector: str | None = None
    optional: bool = False  # a CRD that may not be installed: not served means empty, logged once
    name: str = ""
    assigned_only: bool = False

    @property
    def store(self) -> str:
        return self.name or self.kind


def object_key(obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


def _kept(source: Source, obj: JSON) -> bool:
    return not source.assigned_only or bool((obj.get("spec") or {}).get("nodeName"))


def list_pages(client: KubeClient, path: str, field_selector: str | None) -> tuple[list[Any], str]:
    """Every item of a paged list and the resourceVersion of its last page."""
    items: list[Any] = []
    cont = ""
    while True:
        params = {"limit": str(LIST_PAGE), **({"continue": cont} if cont else {})}
        page = client.list(path, field_selector=field_selector, params=params)
        items.extend(page.get("items") or [])
        meta = page.get("metadata") or {}
        cont = str(meta.get("continue") or "")
        if not cont:
            return items, str(meta.get("resourceVersion") or "")


def admit(kind: str, obj: Any) -> JSON | None:
    """`obj` with its kind filled in, or None when it is malformed (reported once per version)."""
    why = malformed.problem(kind, obj)
    if why is not None:
        malformed.report(kind, obj, why)
        return None
    obj.setdefault("kind", kind)
    return obj  # type: ignore[no-any-return]


def list_source(client: KubeClient, source: Source) -> tuple[list[JSON], str]:
    """The well-formed objects of one source (kind filled in) and the list's resourceVersion."""
    items, rv = list_pages(client, source.path, source.field_selector)
    out = []
    for item in items:
        obj = admit(source.kind, item)
        if obj is not None and _kept(source, obj):
            out.append(obj)
    return out, rv


class ClusterCache:
    """Objects by source and key, kept by one list + watch thread per source (`start`) or by `relist`; `snapshot`
    hands a cycle its own copy. Pods this process bound stay `assumed` on their node until the store shows them
    bound (kube-scheduler's assumed pods), so a cycle never meets a pod it bound as pending or on no node."""

    def __init__(self, client: KubeClient, sources: tuple[Source, ...]) -> None:
        self.client = client
        self.sources = sources
        self.lock = threading.Lock()
        self.store: dict[str, dict[str, JSON]] = {s.store: {} for s in sources}
        self.version = 0  # counts changes to the store
        self.listeners: list[Listener] = []
        self.assumed: dict[str, JSON] = {}  # pod key → the pod as this process bound it
        self.stop_event = threading.Event()
        self.clock: Clock = REAL_CLOCK
        self.backoff: BackoffPolicy = REFLECTOR
        self._synced: dict[str, threading.Event] = {s.store: threading.Event() for s in sources}
        self._missing: set[str] = set()
        self.threads: list[threading.Thread] = []

    # -- writes -------------------------------------------------------------------------------------------------
    def replace(self, source: Source, items: list[JSON]) -> None:
        """A list's objects become the whole truth for `source`."""
        with self.lock:
            self.store[source.store] = {object_key(o): o for o in items}
            self.version += 1
            if source.kind == "Pod":
                for k in [k for k in self.assumed if k in self.store[source.store]
                          and (self.store[source.store][k].get("spec") or {}).get("nodeName")]:
                    del self.assumed[k]  # the list shows it bound: no longer assumed
        self._synced[source.store].set()
        self._tell("REPLACE", source.kind, items)

    def apply(self, source: Source, op: str, obj: object) -> None:
        """One watch event (ADDED, MODIFIED, DELETED)."""
        kept = admit(source.kind, obj)
        if kept is None:
            return
        k = object_key(kept)
        with self.lock:
            objects = self.store[source.store]
            if op == "DELETED" or not _kept(source, kept):
                objects.pop(k, None)
            else:
                objects[k] = kept
            if source.kind == "Pod" and k in self.assumed and (
                    op == "DELETED" or (kept.get("spec") or {}).get("nodeName")):
                del self.assumed[k]  # seen bound (or gone): the store has the truth now
            self.version += 1
        self._tell(op, source.kind, kept)

    def assume(self, pod: JSON, node: str, annotations: dict[str, str]) -> None:
        """`pod` was bound to `node` with `annotations` patched on: count it there until the store shows it."""
        bound = pickle.loads(pickle.dumps(pod))
        bound.setdefault("spec", {})["nodeName"] = node
        annotate(bound, annotations)
        bound.setdefault("kind", "Pod")
        with self.lock:
            self.assumed[object_key(bound)] = bound
            self.version += 1

    def _tell(self, op: str, kind: str, payload: object) -> None:
        for listener in self.listeners:
            listener(op, kind, payload)

    # -- reads --------------------------------------------------------------------------------------------------
    def snapshot(self) -> tuple[list[JSON], dict[str, list[JSON]]]:
        """A private copy of every object (assumed pods in place of what the store says of them), and the same
        objects by store name; the cycle may change them freely."""
        with self.lock:
            by_store = {name: list(objects.values()) for name, objects in self.store.items()}
            assumed = dict(self.assumed)
        assigned = next((s.store for s in self.sources if s.assigned_only), None)
        for source in self.sources:
            if source.kind == "Pod" and assumed:
                objects = by_store[source.store]
                objects[:] = [o for o in objects if object_key(o) not in assumed]
                if source.store == assigned:
                    objects.extend(assumed.values())
        copied: dict[str, list[JSON]] = pickle.loads(pickle.dumps(by_store))
        return [o for objects in copied.values() for o in objects], copied

    # -- list, watch --------------------------------------------------------------------------------------------
    def list_one(self, source: Source) -> str | None:
        """List `source` into the store; a CRD not served counts as empty (logged once). Its resourceVersion."""
        try:
            items, rv = list_source(self.client, source)
        except NotFound:
            if not source.optional:
                raise
            if source.store not in self._missing:
                self._missing.add(source.store)
                log.warning("%s is not served (CRD not installed?); continuing without %s objects", source.path,
                            source.kind)
            self.replace(source, [])
            return None
        self._missing.discard(source.store)
        self.replace(source, items)
        return rv or None

    def relist(self) -> None:
        """List every source now (a resync, or a cycle without watches)."""
        for source in self.sources:
            self.list_one(source)

    def start(self, timeout_seconds: int = WATCH_TIMEOUT) -> list[threading.Thread]:
        """One daemon thread per source (never joined: a blocked watch must not delay shutdown); `stop` ends them."""
        self.threads = [threading.Thread(target=self._watch_forever, args=(s, timeout_seconds),
                                         name=f"watch-{s.store}", daemon=True) for s in self.sources]
        for t in self.threads:
            t.start()
        return self.threads

    @property
    def started(self) -> bool:
        return bool(self.threads)

    def wait_synced(self, timeout: float = SYNC_TIMEOUT) -> bool:
        """Whether every source was listed once (waiting up to `timeout` seconds in all)."""
        deadline = time.monotonic() + timeout
        return all(event.wait(max(0.0, deadline - time.monotonic())) for event in self._synced.values())

    def stop(self) -> None:
        self.stop_event.set()
        self.client.close()  # aborts the open watch streams

    def _watch_forever(self, source: Source, timeout_seconds: int) -> None:
        """List (the whole truth for this source), then watch from the list's resourceVersion, backing off as
        client-go's reflector (apis.client.listwatch)."""

        def watch(rv: str | None) -> Iterator[JSON]:
            return self.client.watch(source.path, field_selector=source.field_selector, resource_version=rv,
                                     timeout_seconds=timeout_seconds)

        def on_event(event: JSON) -> None:
            if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                self.apply(source, str(event["type"]), event.get("object"))

        def on_error(error: Exception, wait: float) -> None:
            if isinstance(error, Gone):
                log.info("watch %s: resourceVersion expired, re-listing in %.1fs", source.path, wait)
            elif isinstance(error, NotFound):
                if not source.optional:  # an optional CRD not installed (yet) is no news
                    log.warning("watch %s: not found; retrying in %.1fs", source.path, wait)
            else:
                log.warning("watch %s: %s; retrying in %.1fs", source.path, error, wait)

        list_and_watch(self.stop_event, lambda: self.list_one(source), watch, on_event, backoff=self.backoff,
                       clock=self.clock, on_error=on_error)
