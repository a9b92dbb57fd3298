"""RDMA series for Prometheus: each InfiniBand port's state, rate and counters named as node_exporter's infiniband
collector names them (after our `koordlet_rdma_` prefix), each device's PCI function and model, and the counters of
the VFs koord-scheduler allocated to pods, labelled with those pods (docs/decisions.md "RDMA series").

The sysfs files are read when a scrape renders, at most once per `min_interval` seconds (a port has ~50 files: an
8-PF node with 16 VFs each is thousands of reads), never on the collection tick.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from apis.extension.device_allocated import ANNOTATION_DEVICE_ALLOCATED, decode_device_allocations
from apis.extension.errors import AnnotationError
from apis.scheduling.device import DEVICE_TYPE_RDMA
from koordlet.devices.rdma_stats import IBDevice, read_infiniband
from koordlet.exposition import GoCounterFamily
from koordlet.host.paths import HostPaths
from koordlet.states.model import PodMeta

PORT_LABELS = ["node", "device", "port"]  # node_exporter's `device`, `port`, after our `node`
POD_PORT_LABELS = ["node", "namespace", "pod", "uid", "device", "port"]
INFO_LABELS = ["node", "device", "pci_bus_id", "physical_function", "model", "firmware_version", "board_id",
               "hca_type"]

# counters/ (and pre-4.5 counters_ext/) file → node_exporter's name and help; data counters are in bytes already
COUNTERS: dict[str, tuple[str, str]] = {
    "excessive_buffer_overrun_errors": ("excessive_buffer_overrun_errors_total", "Number of times that "
                                        "OverrunErrors consecutive flow control update periods occurred"),
    "link_downed": ("link_downed_total", "Number of times the link failed to recover from an error state and went "
                    "down"),
    "link_error_recovery": ("link_error_recovery_total", "Number of times the link recovered from an error state"),
    "local_link_integrity_errors": ("local_link_integrity_errors_total", "Number of times the count of local "
                                    "physical errors exceeded the LocalPhyErrors threshold"),
    "multicast_rcv_packets": ("multicast_packets_received_total", "Number of multicast packets received (including "
                              "errors)"),
    "multicast_xmit_packets": ("multicast_packets_transmitted_total", "Number of multicast packets transmitted "
                               "(including errors)"),
    "port_rcv_constraint_errors": ("port_constraint_errors_received_total", "Number of packets received on the "
                                   "switch physical port that are discarded"),
    "port_xmit_constraint_errors": ("port_constraint_errors_transmitted_total", "Number of packets not transmitted "
                                    "from the switch physical port"),
    "port_rcv_data": ("port_data_received_bytes_total", "Number of data octets received on all links"),
    "port_xmit_data": ("port_data_transmitted_bytes_total", "Number of data octets transmitted on all links"),
    "port_rcv_discards": ("port_discards_received_total", "Number of inbound packets discarded by the port because "
                          "the port is down or congested"),
    "port_xmit_discards": ("port_discards_transmitted_total", "Number of outbound packets discarded by the port "
                           "because the port is down or congested"),
    "port_rcv_errors": ("port_errors_received_total", "Number of packets containing an error that were received "
                        "on this port"),
    "port_rcv_packets": ("port_packets_received_total", "Number of packets received on all VLs by this port "
                         "(including errors)"),
    "port_xmit_packets": ("port_packets_transmitted_total", "Number of packets transmitted on all VLs from this "
                          "port (including errors)"),
    "port_xmit_wait": ("port_transmit_wait_total", "Number of ticks during which the port had data to transmit "
                       "but no data was sent during the entire tick"),
    "unicast_rcv_packets": ("unicast_packets_received_total", "Number of unicast packets received (including "
                            "errors)"),
    "unicast_xmit_packets": ("unicast_packets_transmitted_total", "Number of unicast packets transmitted "
                             "(including errors)"),
    "port_rcv_remote_physical_errors": ("port_receive_remote_physical_errors_total", "Number of packets marked "
                                        "with the EBP (End of Bad Packet) delimiter received on the port"),
    "port_rcv_switch_relay_errors": ("port_receive_switch_relay_errors_total", "Number of packets that could not "
                                     "be forwarded by the switch"),
    "symbol_error": ("symbol_error_total", "Number of minor link errors detected on one or more physical lanes"),
    "VL15_dropped": ("vl15_dropped_total", "Number of incoming VL15 packets dropped due to resource limitations"),
    "port_multicast_rcv_packets": ("legacy_multicast_packets_received_total", "Number of multicast packets "
                                   "received"),
    "port_multicast_xmit_packets": ("legacy_multicast_packets_transmitted_total", "Number of multicast packets "
                                    "transmitted"),
    "port_rcv_data_64": ("legacy_data_received_bytes_total", "Number of data octets received on all links"),
    "port_rcv_packets_64": ("legacy_packets_received_total", "Number of data packets received on all links"),
    "port_unicast_rcv_packets": ("legacy_unicast_packets_received_total", "Number of unicast packets received"),
    "port_unicast_xmit_packets": ("legacy_unicast_packets_transmitted_total", "Number of unicast packets "
                                  "transmitted"),
    "port_xmit_data_64": ("legacy_data_transmitted_bytes_total", "Number of data octets transmitted on all links"),
    "port_xmit_packets_64": ("legacy_packets_transmitted_total", "Number of data packets transmitted on all links"),
}
# the counters also shown per pod, for the VFs a pod was allocated
POD_COUNTERS = ("port_rcv_data", "port_xmit_data", "port_rcv_packets", "port_xmit_packets", "port_rcv_errors",
                "port_xmit_discards")


class RDMACollector(Collector):
    """The RDMA families of `<sys>/class/infiniband` under the host root, and the pods of `pods()`."""

    def __init__(self, node: str, paths: HostPaths, pods: Callable[[], Sequence[PodMeta]],
                 min_interval: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.node, self.paths, self.pods = node, paths, pods
        self.min_interval, self.clock = min_interval, clock
        self._lock = threading.Lock()
        self._read: tuple[float, list[IBDevice]] | None = None

    def devices(self) -> list[IBDevice]:
        """The last read, re-read when older than min_interval (concurrent renders share one read)."""
        with self._lock:
            now = self.clock()
            if self._read is None or now - self._read[0] >= self.min_interval:
                self._read = (now, read_infiniband(self.paths))
            return self._read[1]

    def collect(self) -> Iterator[Metric]:
        devices = self.devices()
        yield from port_families(self.node, devices)
        yield from pod_families(self.node, devices, self.pods())


def port_families(node: str, devices: Sequence[IBDevice]) -> Iterator[Metric]:
    info = GaugeMetricFamily("koordlet_rdma_device_info", "An InfiniBand device, its PCI function (and PF for a VF) "
                             "and model; value 1", labels=INFO_LABELS)
    gauges = [GaugeMetricFamily(f"koordlet_rdma_{name}", doc, labels=PORT_LABELS) for name, doc in (
        ("state_id", "State of the InfiniBand port (0: no change, 1: down, 2: init, 3: armed, 4: active, 5: act "
                     "defer)"),
        ("physical_state_id", "Physical state of the InfiniBand port (0: no change, 1: sleep, 2: polling, 3: "
                              "disable, 4: shift, 5: link up, 6: link error recover, 7: phytest)"),
        ("rate_bytes_per_second", "Maximum signal transfer rate"))]
    counters = {f: GoCounterFamily(f"koordlet_rdma_{name}", doc, PORT_LABELS) for f, (name, doc) in COUNTERS.items()}
    hw = GoCounterFamily("koordlet_rdma_hw_counter_total", "The port's driver-specific hw_counters by file name "
                         "(most count events; active_* and watermark_* are levels)", [*PORT_LABELS, "counter"])
    for dev in devices:
        info.add_metric([node, dev.name, dev.bdf, dev.physfn, dev.model, dev.firmware_version, dev.board_id,
                         dev.hca_type], 1.0)
        for p in dev.ports:
            labels = [node, dev.name, str(p.port)]
            for fam, value in zip(gauges, (p.state_id, p.phys_state_id, p.rate_bytes), strict=True):
                if value is not None:
                    fam.add_metric(labels, value)
            for f, value in p.counters.items():
                if f in counters:
                    counters[f].add_metric(labels, value)
            for f, value in p.hw_counters.items():
                hw.add_metric([*labels, f], value)
    yield info
    yield from gauges
    yield from counters.values()
    yield hw


def pod_families(node: str, devices: Sequence[IBDevice], pods: Sequence[PodMeta]) -> Iterator[Metric]:
    """The ports of the VFs in each pod's device-allocated `rdma` entries (a VF is one pod's alone; a PF shared
    by pods cannot be split between them, so it is attributed to none)."""
    by_bdf = {d.bdf: d for d in devices if d.bdf}
    info = GaugeMetricFamily("koordlet_pod_rdma_device_info", "An InfiniBand device (a VF) allocated to the pod; "
                             "value 1, to join with the koordlet_rdma_* series on node and device",
                             labels=["node", "namespace", "pod", "uid", "device", "pci_bus_id"])
    fams = {f: GoCounterFamily(f"koordlet_pod_rdma_{COUNTERS[f][0]}", COUNTERS[f][1] + " by the pod's VF",
                               POD_PORT_LABELS) for f in POD_COUNTERS}
    for pod in pods:
        for dev in _allocated(pod, by_bdf):
            info.add_metric([node, pod.namespace, pod.name, pod.uid, dev.name, dev.bdf], 1.0)
            for p in dev.ports:
                labels = [node, pod.namespace, pod.name, pod.uid, dev.name, str(p.port)]
                for f, fam in fams.items():
                    if f in p.counters:
                        fam.add_metric(labels, p.counters[f])
    yield info
    yield from fams.values()


def _allocated(pod: PodMeta, by_bdf: dict[str, IBDevice]) -> list[IBDevice]:
    text = pod.annotations.get(ANNOTATION_DEVICE_ALLOCATED)
    if not isinstance(text, str):
        return []
    try:
        allocations = decode_device_allocations(text)
    except AnnotationError:  # the scheduler's write; the hooks and the eviction paths report it
        return []
    return [by_bdf[vf.bus_id] for a in allocations.get(DEVICE_TYPE_RDMA, ()) for vf in a.vfs if vf.bus_id in by_bdf]
