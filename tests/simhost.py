"""Simulated node directories (cgroup v1/v2, systemd/cgroupfs) that the agent reads exactly like `/`.

File formats follow the kernel's: /proc/stat, /proc/meminfo, sysfs NUMA meminfo and cpulist, cgroup v1
cpuacct.usage / memory.stat (total_* keys) / cpu.stat, cgroup v2 cpu.stat (usage_usec) / memory.stat.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from apis.extension.resource_status import format_cpuset
from koordlet.host.driver import CgroupDriver, K8sQoS, container_dir, pod_dir
from koordlet.host.paths import HostPaths


@dataclass
class SimCgroup:
    cpu_ns: int = 0
    anon: int = 0
    file: int = 0
    nr_periods: int = 0
    nr_throttled: int = 0
    throttled_ns: int = 0
    kernel: int = 0  # kernel memory charged to the cgroup: in its usage file, in no memory.stat LRU line
    numa_anon: dict[int, int] | None = None  # bytes of anon memory per NUMA node: writes memory.numa_stat


@dataclass
class SimHost:
    root: Path
    version: int
    driver: CgroupDriver
    numa_cpus: dict[int, list[int]] = field(default_factory=lambda: {0: [0, 1], 1: [2, 3]})
    cpu_ticks: dict[int, int] = field(default_factory=dict)
    mem_total_kb: int = 16 * 1024 * 1024
    mem_available_kb: int = 12 * 1024 * 1024
    threads: int = 1  # hyper-threads per core in the simulated CPU topology

    @property
    def paths(self) -> HostPaths:
        return HostPaths.under(str(self.root))

    def cgroup_root(self) -> Path:
        return self.root / "sys/fs/cgroup"

    def setup(self) -> SimHost:
        cg = self.cgroup_root()
        if self.version == 2:
            cg.mkdir(parents=True, exist_ok=True)
            (cg / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
            (cg / "cpu.pressure").write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
        else:
            for sub in ("cpu", "cpuacct", "memory", "cpuset"):
                (cg / sub).mkdir(parents=True, exist_ok=True)
        for qos in K8sQoS:
            self._mkdir(_qos_dir(self.driver, qos))
        # the cpuset controller at the kubepods root, as kubelet leaves it: every CPU
        every = format_cpuset(sorted(c for cpus in self.numa_cpus.values() for c in cpus)) + "\n"
        kubepods = _qos_dir(self.driver, K8sQoS.GUARANTEED)
        (cg / kubepods / "cpuset.cpus" if self.version == 2 else cg / "cpuset" / kubepods / "cpuset.cpus").write_text(
            every)
        for node, cpus in self.numa_cpus.items():
            d = self.root / f"sys/devices/system/node/node{node}"
            d.mkdir(parents=True, exist_ok=True)
            (d / "cpulist").write_text(format_cpuset(cpus) + "\n")
            link = self.root / f"sys/bus/node/devices/node{node}"
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.exists():
                os.symlink(d, link)
        for cpus in self.numa_cpus.values():
            for c in cpus:
                self.cpu_ticks.setdefault(c, 0)
        self.write_cpu_topology()
        self.write_proc()
        return self

    def write_cpu_topology(self) -> None:
        """sysfs cpu/online and cpuN/topology/{core_id,physical_package_id}: NUMA node N is socket N, and each
        `threads` consecutive CPUs of a node share a core (sysfs core_id restarts at 0 on each socket)."""
        base = self.root / "sys/devices/system/cpu"
        all_cpus: list[int] = []
        for node, cpus in sorted(self.numa_cpus.items()):
            for i, c in enumerate(sorted(cpus)):
                topo = base / f"cpu{c}" / "topology"
                topo.mkdir(parents=True, exist_ok=True)
                (topo / "core_id").write_text(f"{i // self.threads}\n")
                (topo / "physical_package_id").write_text(f"{node}\n")
                all_cpus.append(c)
        base.mkdir(parents=True, exist_ok=True)
        (base / "online").write_text(format_cpuset(all_cpus) + "\n")

    def _mkdir(self, rel: str) -> None:
        cg = self.cgroup_root()
        if self.version == 2:
            (cg / rel).mkdir(parents=True, exist_ok=True)
        else:
            for sub in ("cpu", "cpuacct", "memory", "cpuset"):
                (cg / sub / rel).mkdir(parents=True, exist_ok=True)

    def write_proc(self) -> None:
        proc = self.root / "proc"
        proc.mkdir(parents=True, exist_ok=True)
        # columns: user nice system idle iowait irq softirq steal guest guest_nice
        lines = [f"cpu  {sum(self.cpu_ticks.values())} 0 0 999999 0 0 0 0 0 0"]
        lines += [f"cpu{c} {t} 0 0 99999 0 0 0 0 0 0" for c, t in sorted(self.cpu_ticks.items())]
        lines.append("intr 1 0")
        (proc / "stat").write_text("\n".join(lines) + "\n")
        (proc / "meminfo").write_text(
            f"MemTotal:       {self.mem_total_kb} kB\nMemFree:        {self.mem_available_kb - 1024} kB\n"
            f"MemAvailable:   {self.mem_available_kb} kB\nBuffers:            1024 kB\n"
        )
        per_node = self.mem_total_kb // max(len(self.numa_cpus), 1)
        for node in self.numa_cpus:
            (self.root / f"sys/devices/system/node/node{node}/meminfo").write_text(
                f"Node {node} MemTotal:       {per_node} kB\nNode {node} MemFree:        {per_node // 2} kB\n"
                f"Node {node} Active(file):     1024 kB\nNode {node} Inactive(file):   1024 kB\n"
                f"Node {node} SReclaimable:     0 kB\n"
            )

    def busy(self, ticks_per_cpu: dict[int, int]) -> None:
        for c, t in ticks_per_cpu.items():
            self.cpu_ticks[c] += t
        self.write_proc()

    def write_cgroup(self, rel: str, cg: SimCgroup) -> None:
        self._mkdir(rel)
        root = self.cgroup_root()
        if self.version == 2:
            (root / rel / "cpu.stat").write_text(
                f"usage_usec {cg.cpu_ns // 1000}\nuser_usec 0\nsystem_usec 0\n"
                f"nr_periods {cg.nr_periods}\nnr_throttled {cg.nr_throttled}\n"
                f"throttled_usec {cg.throttled_ns // 1000}\nnr_bursts 0\nburst_usec 0\n")
            (root / rel / "memory.current").write_text(f"{cg.anon + cg.file + cg.kernel}\n")
            (root / rel / "memory.stat").write_text(
                f"anon {cg.anon}\nfile {cg.file}\ninactive_anon {cg.anon // 2}\nactive_anon {cg.anon - cg.anon // 2}\n"
                f"inactive_file {cg.file // 2}\nactive_file {cg.file - cg.file // 2}\nunevictable 0\n")
            for res in ("cpu", "memory", "io"):
                (root / rel / f"{res}.pressure").write_text(
                    "some avg10=1.50 avg60=0.75 avg300=0.25 total=12345\n"
                    "full avg10=0.50 avg60=0.10 avg300=0.05 total=2345\n")
        else:
            (root / "cpuacct" / rel / "cpuacct.usage").write_text(f"{cg.cpu_ns}\n")
            (root / "memory" / rel / "memory.stat").write_text(
                f"cache {cg.file}\nrss {cg.anon}\ntotal_cache {cg.file}\ntotal_rss {cg.anon}\n"
                f"total_inactive_anon {cg.anon // 2}\ntotal_active_anon {cg.anon - cg.anon // 2}\n"
                f"total_inactive_file {cg.file // 2}\ntotal_active_file {cg.file - cg.file // 2}\n"
                f"total_unevictable 0\n")
            (root / "cpu" / rel / "cpu.stat").write_text(
                f"nr_periods {cg.nr_periods}\nnr_throttled {cg.nr_throttled}\nthrottled_time {cg.throttled_ns}\n"
                "nr_bursts 0\nburst_time 0\n")
            (root / "memory" / rel / "memory.usage_in_bytes").write_text(f"{cg.anon + cg.file + cg.kernel}\n")
        if cg.numa_anon is not None:
            self._write_numa_stat(rel, cg.numa_anon)

    def _write_numa_stat(self, rel: str, anon: dict[int, int]) -> None:
        """memory.numa_stat as the kernel lays it out: v1 in pages, own lines then `hierarchical_` ones (own pages
        left 0: a pod's pages are its containers'); v2 in bytes, one line per counter."""
        root = self.cgroup_root()
        nodes = sorted(anon)
        if self.version == 2:
            def line(name: str, values: dict[int, int]) -> str:
                return name + "".join(f" N{n}={values.get(n, 0)}" for n in nodes)
            text = "\n".join([line("anon", anon), line("file", {n: 4096 for n in nodes}),
                              line("kernel_stack", {}), line("unevictable", {})]) + "\n"
            (root / rel / "memory.numa_stat").write_text(text)
            return
        page = os.sysconf("SC_PAGE_SIZE")
        pages = {n: v // page for n, v in anon.items()}

        def v1(name: str, values: dict[int, int]) -> str:
            return f"{name}={sum(values.values())}" + "".join(f" N{n}={values.get(n, 0)}" for n in nodes)
        own = {n: 0 for n in nodes}
        text = "\n".join([v1("total", own), v1("file", own), v1("anon", own), v1("unevictable", own),
                          v1("hierarchical_total", {n: pages[n] + 1 for n in nodes}),
                          v1("hierarchical_file", {n: 1 for n in nodes}), v1("hierarchical_anon", pages),
                          v1("hierarchical_unevictable", own)]) + "\n"
        (root / "memory" / rel / "memory.numa_stat").write_text(text)

    def pod_dir(self, qos: K8sQoS, uid: str) -> str:
        return pod_dir(self.driver, qos, uid)

    def container_dir(self, pod_rel: str, container_id: str) -> str:
        return container_dir(self.driver, pod_rel, container_id)

    def remove_cgroup(self, rel: str) -> None:
        import shutil

        root = self.cgroup_root()
        targets = [root / rel] if self.version == 2 else [root / s / rel for s in ("cpu", "cpuacct", "memory",
                                                                                       "cpuset")]
        for t in targets:
            shutil.rmtree(t, ignore_errors=True)


def _qos_dir(driver: CgroupDriver, qos: K8sQoS) -> str:
    from koordlet.host.driver import qos_dir

    return qos_dir(driver, qos)


def make_pod(name: str, uid: str, qos_class: str = "Burstable", containers: int = 1, runtime: str = "containerd",
             namespace: str = "default", labels: dict[str, str] | None = None, phase: str = "Running",
             priority: int | None = None) -> dict[str, object]:
    statuses = [
        {"name": f"c{i}", "containerID": f"{runtime}://{uid.replace('-', '')}{i:02d}",
         "state": {"running": {"startedAt": "2026-11-22T00:00:00Z"}}}
        for i in range(containers)
    ]
    spec: dict[str, object] = {"containers": [{"name": f"c{i}", "image": "busybox"} for i in range(containers)]}
    if priority is not None:
        spec["priority"] = priority
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "labels": labels or {}},
        "spec": spec,
        "status": {"phase": phase, "qosClass": qos_class, "containerStatuses": statuses},
    }


def cpu_qos_node(base: Path, pods: list[tuple[dict[str, object], K8sQoS]]) -> tuple[SimHost, list[str]]:
    """A cgroup v1 node with cpu.idle (mainline CPU QoS), these pods' cgroups (with some usage) and manifests, and a
    NodeSLO enabling CPU QoS for BE and LS: the CLI arguments that run `koordlet` against it."""
    import yaml

    host = SimHost(base / "host", 1, CgroupDriver.CGROUPFS).setup()
    pods_dir = base / "pods"
    pods_dir.mkdir()
    for pod, qos in pods:
        meta, status = pod["metadata"], pod["status"]
        assert isinstance(meta, dict) and isinstance(status, dict)
        rel = host.pod_dir(qos, meta["uid"])
        host.write_cgroup(rel, SimCgroup(cpu_ns=10**9, anon=1 << 20))
        for cs in status["containerStatuses"]:
            host.write_cgroup(host.container_dir(rel, cs["containerID"]), SimCgroup(anon=1 << 19))
        (host.cgroup_root() / "cpu" / rel / "cpu.idle").write_text("0\n")
        (host.cgroup_root() / "cpu" / rel / "cpu.shares").write_text("2\n" if qos == K8sQoS.BESTEFFORT else "1024\n")
        (pods_dir / f"{meta['name']}.yaml").write_text(yaml.safe_dump(pod))
    (host.cgroup_root() / "cpu/kubepods/cpu.idle").write_text("0\n")
    slo = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": "sim"},
           "spec": {"resourceQOSStrategy": {"beClass": {"cpuQOS": {"enable": True}},
                                            "lsClass": {"cpuQOS": {"enable": True}}}}}
    (base / "nodeslo.yaml").write_text(yaml.safe_dump(slo))
    return host, ["--host-root", str(host.root), "--pods-dir", str(pods_dir), "--nodeslo", str(base / "nodeslo.yaml"),
                  "--node-name", "sim", "--state-dir", str(base / "state")]
