"""Leader election with a coordination.k8s.io/v1 Lease, as kube-scheduler's (client-go leaderelection) does it.

The holder renews `spec.renewTime` every retry period; another candidate takes the Lease over once
`renewTime + leaseDurationSeconds` has passed, with an update conditioned on the resourceVersion it read (a 409
means somebody else won). A leader that cannot renew within the renew deadline stops leading; a leader stopping
cleanly gives the Lease up (holder cleared) so a standby takes over without waiting out the duration.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from apis.client.kubeapi import KubeClient
from apis.core.errors import Conflict, KoordletError, NotFound
from apis.core.metatime import micro_time, parse_time
from apis.core.objects import JSON

log = logging.getLogger(__name__)

LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"


def identity() -> str:
    """client-go's default: the hostname and a random suffix."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


@dataclass
class LeaseConfig:
    namespace: str = "kube-system"
    name: str = "kube-scheduler"
    lease_duration: float = 15.0  # kube-scheduler's defaults
    renew_deadline: float = 10.0
    retry_period: float = 2.0


class LeaderElector:
    def __init__(self, client: KubeClient, config: LeaseConfig, ident: str | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.config = config
        self.identity = ident or identity()
        self.clock = clock
        self.leading = False
        self.renewed_at = 0.0

    @property
    def _collection(self) -> str:
        return LEASES.format(namespace=self.config.namespace)

    def try_acquire_or_renew(self) -> bool:
        """One attempt (client-go tryAcquireOrRenew); True while this candidate holds the Lease."""
        now = self.clock()
        path = f"{self._collection}/{self.config.name}"
        try:
            lease = self.client.get(path)
        except NotFound:
            return self._write(None, now, transitions=0, acquired=now)
        spec: JSON = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        renewed = parse_time(spec.get("renewTime")) or 0.0
        duration = float(spec.get("leaseDurationSeconds") or self.config.lease_duration)
        if holder and holder != self.identity and renewed + duration > now:
            self.leading = False
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder != self.identity:
            return self._write(lease, now, transitions=transitions + 1 if holder else transitions, acquired=now)
        return self._write(lease, now, transitions=transitions,
                           acquired=parse_time(spec.get("acquireTime")) or now)

    def _write(self, lease: JSON | None, now: float, *, transitions: int, acquired: float) -> bool:
        spec = {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.config.lease_duration),
                "acquireTime": micro_time(acquired), "renewTime": micro_time(now), "leaseTransitions": transitions}
        try:
            if lease is None:
                self.client.post(self._collection, {
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.config.name, "namespace": self.config.namespace}, "spec": spec})
            else:
                meta = lease.get("metadata") or {}
                self.client.put(f"{self._collection}/{self.config.name}", {
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.config.name, "namespace": self.config.namespace,
                                 "resourceVersion": meta.get("resourceVersion")}, "spec": spec})
        except Conflict:
            self.leading = False
            return False
        if not self.leading:
            log.info("became the leader: Lease %s/%s (%s)", self.config.namespace, self.config.name, self.identity)
        self.leading, self.renewed_at = True, now
        return True

    def acquire(self, stop: threading.Event) -> bool:
        """Block until this candidate leads (True) or `stop` is set (False)."""
        log.info("attempting to acquire the Lease %s/%s as %s", self.config.namespace, self.config.name,
                 self.identity)
        while not stop.is_set():
            try:
                if self.try_acquire_or_renew():
                    return True
            except KoordletError as e:
                log.warning("leader election: %s", e)
            stop.wait(self.config.retry_period)
        return False

    def renew_until_lost(self, stop: threading.Event, lost: Callable[[], None]) -> None:
        """Renew every retry period until `stop`; `lost` is called (once) when the renew deadline passes without a
        renewal, or somebody else holds the Lease."""
        while not stop.wait(self.config.retry_period):
            try:
                if self.try_acquire_or_renew():
                    continue
            except KoordletError as e:
                log.warning("leader election: renewing: %s", e)
                if self.clock() - self.renewed_at < self.config.renew_deadline:
                    continue
            self.leading = False
            log.error("leader election lost: Lease %s/%s", self.config.namespace, self.config.name)
            lost()
            return

    def release(self) -> None:
        """Give the Lease up (holder cleared) when this candidate holds it; best effort."""
        if not self.leading:
            return
        path = f"{self._collection}/{self.config.name}"
        try:
            lease = self.client.get(path)
            spec = dict(lease.get("spec") or {})
            if spec.get("holderIdentity") != self.identity:
                return
            spec.update(holderIdentity=None, leaseDurationSeconds=1, renewTime=micro_time(self.clock()))
            self.client.put(path, {**lease, "spec": spec})
            log.info("released the Lease %s/%s", self.config.namespace, self.config.name)
        except KoordletError as e:
            log.warning("leader election: releasing: %s", e)
        self.leading = False
