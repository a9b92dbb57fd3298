"""The Grafana dashboards of deploy/monitoring/dashboards/ as data: each panel a title, its PromQL and a unit;
`python -m demo.dashboards --write` writes the JSON (tests/test_deploy_dashboards.py fails when it is stale and
checks that every query names families the agent, koord-sched or koord-descheduler export, or our recording rules).

A new panel is one `Panel(...)` in a row below; a new dashboard one `Dashboard(...)` in DASHBOARDS (and its file in
deploy/monitoring/kustomization.yaml's configMapGenerator). Queries filter koordlet's own families by their `node`
label and the agent-health and process families, which carry none, by `instance` (the node's name after the shipped
relabelling); both through the `$node` variable.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "deploy" / "monitoring" / "dashboards"
RATE = "$__rate_interval"
N = 'node=~"$node"'  # koordlet's families with a `node` label
T = 'instance=~"$node"'  # the families without one: by target (the node's name)
S = 'instance=~"$instance"'  # koord-sched's families: by target
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""


@dataclass(frozen=True)
class Panel:
    title: str
    queries: tuple[Query, ...]
    unit: str = "short"
    description: str = ""
    kind: str = "timeseries"  # or "table" (instant values), "stat"
    width: int = 12


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True)
class Dashboard:
    file: str
    uid: str
    title: str
    rows: tuple[Row, ...]
    variable: tuple[str, str] = ("node", "label_values(koordlet_start_time, node)")  # name, Grafana query


def q(expr: str, legend: str = "") -> Query:
    return Query(expr, legend)


def p(title: str, *queries: Query, unit: str = "short", description: str = "", kind: str = "timeseries",
      width: int = 12) -> Panel:
    return Panel(title, queries, unit, description, kind, width)


POD = "{{pod_namespace}}/{{pod_name}}"  # upstream koordlet's families (requests/limits, PSI, evictions, CPU burst)
OURS = "{{namespace}}/{{pod}}"  # our own pod series, labelled as cAdvisor's

NODE_AND_PODS = Dashboard("koordlet-node-pods.json", "koordlet-node-pods", "Koordinator / Node and pods", (
    Row("Node", (
        p("Node CPU used", q(f"koordlet_node_used_cpu_cores{{{N}}}", "{{node}}"), unit="short",
          description="CPU cores in use on the node (koordlet's collection, each second)."),
        p("Node memory used", q(f"koordlet_node_used_memory_bytes{{{N}}}", "{{node}}"), unit="bytes",
          description="Memory in use on the node without page cache."),
        p("Host applications: CPU", q(f'koordlet_host_application_resource_usage{{{N}, resource="cpu"}}',
                                      "{{node}} {{host_application_name}}")),
        p("Host applications: memory", q(f'koordlet_host_application_resource_usage{{{N}, resource="memory"}}',
                                         "{{node}} {{host_application_name}}"), unit="bytes"),
    )),
    Row("Pods", (
        p("CPU by pod (top 20)", q(f"topk(20, rate(koordlet_pod_cpu_usage_seconds_total{{{N}}}[{RATE}]))", OURS),
          description="Cores: the rate of the pod cgroup's CPU time counter."),
        p("Memory by pod (top 20)", q(f"topk(20, koordlet_pod_memory_working_set_bytes{{{N}}})", OURS),
          unit="bytes", description="Working set: usage minus inactive page cache, as kubectl top shows it."),
        p("CPU by namespace", q(f"namespace:koordlet_pod_cpu_usage_seconds:sum_rate{{{N}}}", "{{node}} {{namespace}}"),
          description="Recording rule namespace:koordlet_pod_cpu_usage_seconds:sum_rate."),
        p("CFS throttled share by pod (top 20)",
          q(f"topk(20, rate(koordlet_pod_cpu_cfs_throttled_periods_total{{{N}}}[{RATE}]) / "
            f"rate(koordlet_pod_cpu_cfs_periods_total{{{N}}}[{RATE}]))", OURS), unit="percentunit",
          description="Pods with a CPU limit: the share of CFS periods that were throttled."),
        p("CPU pressure by pod (some, avg10)",
          q(f'topk(20, koordlet_pod_psi{{{N}, psi_resource_type="cpu", psi_degree="some", psi_precision="avg10"}})',
            POD), unit="percent", description="Gate PSICollector."),
        p("Memory pressure by pod (full, avg10)",
          q(f'topk(20, koordlet_pod_psi{{{N}, psi_resource_type="mem", psi_degree="full", psi_precision="avg10"}})',
            POD), unit="percent", description="Gate PSICollector."),
    )),
    Row("Allocatable", (
        p("Batch and mid CPU allocatable", q(f'koordlet_node_resource_allocatable{{{N}, resource=~".*-cpu"}} / 1000',
                                             "{{node}} {{resource}}"),
          description="kubernetes.io/batch-cpu and mid-cpu (millicores in the Node, shown in cores)."),
        p("Batch and mid memory allocatable", q(f'koordlet_node_resource_allocatable{{{N}, resource=~".*-memory"}}',
                                                "{{node}} {{resource}}"), unit="bytes"),
        p("Batch CPU requested by pods", q(f'sum by (node, pod_namespace, pod_name) (koordlet_container_resource_'
                                           f'requests{{{N}, resource="kubernetes.io/batch-cpu"}}) / 1000', POD),
          description="The pods' kubernetes.io/batch-cpu requests (millicores in the spec, shown in cores)."),
        p("Batch memory limits of pods", q(f'sum by (node, pod_namespace, pod_name) (koordlet_container_resource_'
                                           f'limits{{{N}, resource="kubernetes.io/batch-memory"}})', POD),
          unit="bytes"),
    )),
))

COLOCATION = Dashboard("koordlet-colocation.json", "koordlet-colocation", "Koordinator / Colocation", (
    Row("Reclaimed resources", (
        p("Batch allocatable CPU", q(f'koordlet_node_resource_allocatable{{{N}, resource="kubernetes.io/batch-cpu"}}'
                                     " / 1000", "{{node}}"),
          description="What koord-manager gave BE pods on the node, in cores."),
        p("Batch allocatable memory",
          q(f'koordlet_node_resource_allocatable{{{N}, resource="kubernetes.io/batch-memory"}}', "{{node}}"),
          unit="bytes"),
        p("Prod reclaimable (prediction)",
          q(f'koordlet_node_priority_resource_reclaimable{{{N}, resource="cpu"}}', "{{node}} {{priority}} cpu"),
          q(f'koordlet_node_predicted_resource_reclaimable{{{N}, resource="cpu"}}', "{{node}} {{predictor}} cpu"),
          description="CPU cores the peak predictor judges reclaimable from Prod pods."),
        p("Predicted peak", q(f'koordlet_node_predicted_resource_peak{{{N}, resource="cpu"}}',
                              "{{node}} {{predictor}}"), description="CPU cores, per predictor."),
    )),
    Row("BE CPU suppress", (
        p("CPU cores BE may use", q(f"koordlet_be_suppress_cpu_cores{{{N}}}", "{{node}} {{type}}"),
          description="Gate BECPUSuppress: the cores (cpuset) or quota left to BE pods."),
        p("CPU used by LS and BE", q(f"koordlet_be_suppress_ls_used_cpu_cores{{{N}}}", "{{node}} LS"),
          q(f"koordlet_be_suppress_be_used_cpu_cores{{{N}}}", "{{node}} BE")),
        p("Share pools", q(f"koordlet_cpuset_share_pool_cpu_cores{{{N}}}", "{{node}} LS share pool"),
          q(f"koordlet_cpuset_be_share_pool_cpu_cores{{{N}}}", "{{node}} BE share pool"),
          description="Gate CPUSetAllocator: CPUs in the share pools."),
    )),
    Row("Evictions", (
        p("Pods evicted by koordlet", q(f"sum by (node, reason) (increase(koordlet_pod_eviction{{{N}}}[{RATE}]))",
                                        "{{node}} {{reason}}"),
          description="Gates BEMemoryEvict/BECPUEvict; alert KoordletEvictionStorm."),
        p("Pods evicted (last 5 minutes)", q(f"koordlet_pod_eviction_detail{{{N}}}", POD + " {{reason}}"),
          kind="table"),
        p("Pods evicted by koord-descheduler",
          q(f"sum by (strategy, result) (increase(descheduler_pods_evicted[{RATE}]))", "{{strategy}} {{result}}"),
          width=24),
    )),
))

QOS = Dashboard("koordlet-qos.json", "koordlet-qos", "Koordinator / QoS and run-queue wait", (
    Row("Run-queue wait", (
        p("Mean run-queue wait by QoS class",
          q(f"sum by (qos) (rate(koordlet_pod_cpu_schedule_latency_seconds_sum{{{N}}}[{RATE}])) / "
            f"sum by (qos) (rate(koordlet_pod_cpu_schedule_latency_seconds_count{{{N}}}[{RATE}]))", "{{qos}}"),
          unit="s", description="Gate CPUSchedLatency: runnable to running, eBPF or schedstat."),
        p("Run-queue wait p99 by QoS class",
          q(f"histogram_quantile(0.99, sum by (qos, le) "
            f"(rate(koordlet_pod_cpu_schedule_latency_seconds_bucket{{{N}}}[{RATE}])))", "{{qos}}"),
          unit="s", description="Buckets only with eBPF (source=\"ebpf\")."),
        p("Mean run-queue wait by pod (top 20)",
          q(f"topk(20, sum by (namespace, pod) "
            f"(rate(koordlet_pod_cpu_schedule_latency_seconds_sum{{{N}}}[{RATE}])) / "
            f"sum by (namespace, pod) "
            f"(rate(koordlet_pod_cpu_schedule_latency_seconds_count{{{N}}}[{RATE}])))", OURS), unit="s", width=24),
    )),
    Row("Pressure and throttling", (
        p("CPU pressure by container (some, avg10)",
          q(f'topk(20, koordlet_container_psi{{{N}, psi_resource_type="cpu", psi_degree="some", '
            f'psi_precision="avg10"}})', POD + " {{container_name}}"), unit="percent"),
        p("CFS throttled share by container (top 20)",
          q(f"topk(20, rate(koordlet_container_cpu_cfs_throttled_periods_total{{{N}}}[{RATE}]) / "
            f"rate(koordlet_container_cpu_cfs_periods_total{{{N}}}[{RATE}]))", OURS + " {{container}}"),
          unit="percentunit"),
        p("CPU burst: scaled CFS quota", q(f"koordlet_container_scaled_cfs_quota_us{{{N}}}",
                                           POD + " {{container_name}}"),
          unit="µs", description="Gate CPUBurst."),
        p("resctrl groups refused", q(f"koordlet_resctrl_group_refused{{{N}}}", POD), kind="table",
          description="Gate Resctrl: pods whose resctrl annotation got no group of its own."),
    )),
    Row("Applying QoS", (
        p("QoS writes by result", q(f"sum by (result) (rate(koordlet_agent_resource_writes_total{{{T}}}[{RATE}]))",
                                    "{{result}}"), unit="ops"),
        p("Reconciler p99 by resource",
          q(f"histogram_quantile(0.99, sum by (resource_type, le) "
            f"(rate(koordlet_runtime_hook_reconciler_invoked_duration_milliseconds_bucket{{{N}}}[{RATE}])))",
            "{{resource_type}}"), unit="ms"),
        p("Resource update p99", q(f"histogram_quantile(0.99, sum by (type, le) "
                                   f"(rate(koordlet_resource_update_duration_milliseconds_bucket{{{T}}}[{RATE}])))",
                                   "{{type}}"), unit="ms"),
        p("NRI calls by outcome", q(f"sum by (method, outcome) (rate(koordlet_nri_calls_total{{{T}}}[{RATE}]))",
                                    "{{method}} {{outcome}}"), unit="ops",
          description="--enable-nri-runtime-hook; koordlet_nri_connected is on the health dashboard."),
    )),
))

DEVICES = Dashboard("koordlet-devices.json", "koordlet-devices", "Koordinator / Devices", (
    Row("Devices", (
        p("Unhealthy devices", q(f"node:koordlet_device_unhealthy:count{{{N}}}", "{{node}} {{type}}"),
          description="Recording rule node:koordlet_device_unhealthy:count; alert KoordletDeviceUnhealthy."),
        p("Device health", q(f"koordlet_device_healthy{{{N}}}", "{{node}} {{type}} {{minor}}"), kind="table"),
        p("GPU memory allocatable", q(f'koordlet_device_allocatable{{{N}, resource="koordinator.sh/gpu-memory"}}',
                                      "{{node}} gpu {{minor}}"), unit="bytes"),
        p("RDMA allocatable", q(f'koordlet_device_allocatable{{{N}, resource="koordinator.sh/rdma"}}',
                                "{{node}} rdma {{minor}}"),
          description="koordinator.sh/rdma of each NIC (100 a NIC); its VFs are on the RDMA dashboard."),
    )),
))

GPU = "{{node}} gpu {{gpu}}"  # dcgm-exporter's `gpu` label: the NVML index
GPUS = Dashboard("koordlet-gpus.json", "koordlet-gpus", "Koordinator / GPUs", (
    Row("GPUs per node", (
        p("GPU utilisation", q(f"koordlet_gpu_utilization_percent{{{N}}}", GPU), unit="percent",
          description="NVML's busy share of the last sample period (DCGM_FI_DEV_GPU_UTIL)."),
        p("Framebuffer used", q(f"koordlet_gpu_framebuffer_used_bytes{{{N}}}", GPU + " {{GPU_I_PROFILE}}"),
          unit="bytes", description="Device memory in use, MIG instances by profile (DCGM_FI_DEV_FB_USED)."),
        p("Framebuffer used share",
          q(f"koordlet_gpu_framebuffer_used_bytes{{{N}}} / (koordlet_gpu_framebuffer_used_bytes{{{N}}} + "
            f"koordlet_gpu_framebuffer_free_bytes{{{N}}} + koordlet_gpu_framebuffer_reserved_bytes{{{N}}})", GPU),
          unit="percentunit", description="Used over used + free + reserved, whole GPUs."),
        p("GPU memory used by processes", q(f"gpu:koordlet_gpu_memory_used:ratio{{{N}}}", GPU),
          unit="percentunit", description="Recording rule gpu:koordlet_gpu_memory_used:ratio (NVML's processes)."),
        p("Temperature", q(f"koordlet_gpu_temperature_celsius{{{N}}}", GPU),
          q(f"koordlet_gpu_memory_temperature_celsius{{{N}}}", GPU + " memory"), unit="celsius",
          description="Alert KoordletGPUHot when the driver slows a GPU down for heat."),
        p("Power", q(f"koordlet_gpu_power_usage_watts{{{N}}}", GPU), unit="watt"),
        p("Energy used (from the counter)",
          q(f"rate(koordlet_gpu_energy_joules_total{{{N}}}[{RATE}])", GPU), unit="watt",
          description="Mean power over the interval from NVML's energy counter (Volta and newer)."),
        p("Clocks", q(f"koordlet_gpu_sm_clock_hertz{{{N}}}", GPU + " SM"),
          q(f"koordlet_gpu_memory_clock_hertz{{{N}}}", GPU + " memory"), unit="hertz"),
        p("Clock slowdown reasons active",
          q(f'koordlet_gpu_clocks_event_reason_active{{{N}, reason!="gpu_idle"}} == 1', GPU + " {{reason}}"),
          kind="table", description="Why the driver holds the clocks down (power cap, thermal, power brake, ...)."),
        p("PCIe throughput", q(f"koordlet_gpu_pcie_throughput_bytes_per_second{{{N}}}", GPU + " {{direction}}"),
          unit="Bps", description="NVML's 20 ms sample, each GPU's read every 30 s or so."),
        p("NVLink traffic", q(f"sum by (node, gpu, direction) "
                              f"(rate(koordlet_gpu_nvlink_data_bytes_total{{{N}}}[{RATE}]))", GPU + " {{direction}}"),
          unit="Bps"),
        p("Encoder and decoder", q(f"koordlet_gpu_encoder_utilization_percent{{{N}}}", GPU + " encoder"),
          q(f"koordlet_gpu_decoder_utilization_percent{{{N}}}", GPU + " decoder"), unit="percent"),
    )),
    Row("GPU errors", (
        p("XID errors by code", q(f"sum by (node, gpu, xid) (increase(koordlet_gpu_xid_errors_total{{{N}}}"
                                  f"[{RATE}]))", GPU + " XID {{xid}}"),
          description="Every code NVML reported; alert KoordletGPUXidError for the hardware ones."),
        p("Last XID", q(f"koordlet_gpu_last_xid{{{N}}}", GPU), kind="table",
          description="The latest XID code since the agent started (0: none; DCGM_FI_DEV_XID_ERRORS)."),
        p("ECC errors", q(f"sum by (node, gpu, scope, error) "
                          f"(increase(koordlet_gpu_ecc_errors_total{{{N}}}[{RATE}]))", GPU + " {{scope}} {{error}}"),
          description="Alert KoordletGPUUncorrectableECCErrors for volatile uncorrectable ones."),
        p("Row remapping and retired pages",
          q(f"koordlet_gpu_remapped_rows_total{{{N}}}", GPU + " remapped {{error}}"),
          q(f"koordlet_gpu_row_remap_pending{{{N}}} == 1", GPU + " remap pending"),
          q(f"koordlet_gpu_row_remap_failure{{{N}}} == 1", GPU + " remap failed"),
          q(f"koordlet_gpu_retired_pages_total{{{N}}}", GPU + " retired {{cause}}"),
          q(f"koordlet_gpu_retired_pages_pending{{{N}}} == 1", GPU + " retirement pending"), kind="table",
          description="Alerts KoordletGPURowRemapFailed, KoordletGPURowRemapPending."),
        p("PCIe replays", q(f"rate(koordlet_gpu_pcie_replays_total{{{N}}}[{RATE}])", GPU), unit="ops"),
        p("NVLink errors", q(f"sum by (node, gpu, error) (increase(koordlet_gpu_nvlink_errors_total{{{N}}}"
                             f"[{RATE}]))", GPU + " {{error}}")),
    )),
    Row("Pods on GPUs", (
        p("GPU memory by pod", q(f"koordlet_pod_gpu_memory_used_bytes{{{N}}}", OURS + " gpu {{gpu}}"), unit="bytes",
          description="From NVML's processes: pods sharing a GPU (koordinator.sh/gpu-memory) each show their own."),
        p("GPU SM utilisation by pod", q(f"koordlet_pod_gpu_core_usage_percent{{{N}}}", OURS + " gpu {{gpu}}"),
          unit="percent", description="NVML's per-process SM utilisation, summed over the pod's processes."),
        p("GPU memory by container", q(f"koordlet_container_gpu_memory_used_bytes{{{N}}}",
                                       OURS + "/{{container}} gpu {{gpu}}"), unit="bytes"),
        p("Pods per GPU", q(f"count by (node, gpu) (koordlet_pod_gpu_memory_used_bytes{{{N}}})", GPU),
          description="Pods with processes on each GPU: more than one is a shared GPU."),
        p("GPU SM utilisation (all processes)", q(f"koordlet_gpu_core_usage_percent{{{N}}}", GPU), unit="percent",
          description="NVML's per-process utilisation summed per GPU."),
        p("GPUs held by one pod: utilisation and power",
          q(f'koordlet_gpu_utilization_percent{{{N}, pod!=""}}', OURS + " gpu {{gpu}} %"),
          q(f'koordlet_gpu_power_usage_watts{{{N}, pod!=""}}', OURS + " gpu {{gpu}} W"),
          description="Device series carry the pod koord-scheduler allocated the whole GPU to (device-allocated)."),
    )),
))

RDMA_PORT = "{{node}} {{device}}/{{port}}"
RDMA = Dashboard("koordlet-rdma.json", "koordlet-rdma", "Koordinator / RDMA", (
    Row("Ports", (
        p("Port traffic", q(f"rate(koordlet_rdma_port_data_received_bytes_total{{{N}}}[{RATE}])",
                            RDMA_PORT + " rx"),
          q(f"rate(koordlet_rdma_port_data_transmitted_bytes_total{{{N}}}[{RATE}])", RDMA_PORT + " tx"),
          unit="Bps", description="PFs and VFs alike (node_exporter's infiniband port_data counters)."),
        p("Port packets", q(f"rate(koordlet_rdma_port_packets_received_total{{{N}}}[{RATE}])", RDMA_PORT + " rx"),
          q(f"rate(koordlet_rdma_port_packets_transmitted_total{{{N}}}[{RATE}])", RDMA_PORT + " tx"), unit="pps"),
        p("Port errors", q(f"rate(koordlet_rdma_port_errors_received_total{{{N}}}[{RATE}])",
                           RDMA_PORT + " receive errors"),
          q(f"rate(koordlet_rdma_port_discards_transmitted_total{{{N}}}[{RATE}])", RDMA_PORT + " transmit discards"),
          q(f"rate(koordlet_rdma_symbol_error_total{{{N}}}[{RATE}])", RDMA_PORT + " symbol errors"),
          q(f"increase(koordlet_rdma_link_downed_total{{{N}}}[{RATE}])", RDMA_PORT + " link down"), unit="ops"),
        p("Congestion (RoCE)", q(f'rate(koordlet_rdma_hw_counter_total{{{N}, counter=~"np_cnp_sent|rp_cnp_handled|'
                                 f'np_ecn_marked_roce_packets|out_of_buffer"}}[{RATE}])', RDMA_PORT + " {{counter}}"),
          unit="ops", description="mlx5 hw_counters: CNPs sent and handled, ECN-marked packets, receive buffer "
          "exhaustion."),
        p("Port state", q(f"koordlet_rdma_state_id{{{N}}}", RDMA_PORT), kind="table",
          description="4: active, 1: down (and physical_state_id 5: link up)."),
        p("Link rate", q(f"koordlet_rdma_rate_bytes_per_second{{{N}}}", RDMA_PORT), unit="Bps", kind="table"),
        p("Devices", q(f"koordlet_rdma_device_info{{{N}}}", "{{node}} {{device}} {{model}}"), kind="table",
          description="PCI function, PF of a VF, model, firmware.", width=24),
    )),
    Row("Pods' VFs", (
        p("VF traffic by pod", q(f"sum by (node, namespace, pod) "
                                 f"(rate(koordlet_pod_rdma_port_data_received_bytes_total{{{N}}}[{RATE}]))",
                                 OURS + " rx"),
          q(f"sum by (node, namespace, pod) "
            f"(rate(koordlet_pod_rdma_port_data_transmitted_bytes_total{{{N}}}[{RATE}]))", OURS + " tx"),
          unit="Bps", description="The VFs koord-scheduler allocated to the pod (device-allocated rdma vfs)."),
        p("VF packets by pod", q(f"sum by (node, namespace, pod) "
                                 f"(rate(koordlet_pod_rdma_port_packets_received_total{{{N}}}[{RATE}]))",
                                 OURS + " rx"),
          q(f"sum by (node, namespace, pod) "
            f"(rate(koordlet_pod_rdma_port_packets_transmitted_total{{{N}}}[{RATE}]))", OURS + " tx"), unit="pps"),
        p("VF errors by pod", q(f"sum by (node, namespace, pod) "
                                f"(rate(koordlet_pod_rdma_port_errors_received_total{{{N}}}[{RATE}]))",
                                OURS + " receive errors"),
          q(f"sum by (node, namespace, pod) "
            f"(rate(koordlet_pod_rdma_port_discards_transmitted_total{{{N}}}[{RATE}]))", OURS + " transmit discards"),
          unit="ops"),
        p("Pods' VFs", q(f"koordlet_pod_rdma_device_info{{{N}}}", OURS + " {{device}} {{pci_bus_id}}"), kind="table"),
    )),
))

AGENT = Dashboard("koordlet-agent.json", "koordlet-agent", "Koordinator / koordlet health", (
    Row("Agent", (
        p("Agents up", q(f'up{{job="koordlet", {T}}}', "{{instance}}"), description="Alert KoordletDown."),
        p("Agent CPU", q(f'rate(process_cpu_seconds_total{{job="koordlet", {T}}}[{RATE}])', "{{instance}}"),
          unit="percentunit", description="Share of one core."),
        p("Agent memory", q(f'process_resident_memory_bytes{{job="koordlet", {T}}}', "{{instance}}"),
          unit="bytes"),
        p("Agent restarts", q(f"changes(koordlet_start_time{{{N}}}[1h])", "{{node}}"),
          description="Starts in the last hour."),
    )),
    Row("Loops", (
        p("Loop duration p99", q(f"histogram_quantile(0.99, sum by (instance, loop, le) "
                                 f"(rate(koordlet_agent_loop_duration_seconds_bucket{{{T}}}[{RATE}])))",
                                 "{{instance}} {{loop}}"), unit="s"),
        p("Loop CPU", q(f"sum by (instance, loop) (rate(koordlet_agent_loop_cpu_seconds_total{{{T}}}[{RATE}]))",
                        "{{instance}} {{loop}}"), unit="percentunit", description="Share of one core per loop."),
        p("Seconds since each loop last completed",
          q(f"time() - koordlet_agent_loop_last_success_timestamp_seconds{{{T}}}", "{{instance}} {{loop}}"),
          unit="s"),
        p("Metric cache series", q(f"koordlet_agent_metric_cache_series{{{T}}}", "{{instance}}")),
    )),
    Row("Input and errors", (
        p("Items skipped", q(f"sum by (instance, kind, reason) "
                             f"(rate(koordlet_agent_skipped_items_total{{{T}}}[{RATE}]))",
                             "{{instance}} {{kind}} {{reason}}"), unit="ops",
          description="Bad or missing input, logged once per object; alert KoordletSkippingItems."),
        p("cgroup reads and errors", q(f"sum by (instance) (rate(koordlet_agent_cgroup_reads_total{{{T}}}[{RATE}]))",
                                       "{{instance}} reads"),
          q(f"sum by (instance, scope) (rate(koordlet_agent_cgroup_read_errors_total{{{T}}}[{RATE}]))",
            "{{instance}} read errors {{scope}}"),
          q(f"sum by (instance, reason) (rate(koordlet_agent_cgroup_write_errors_total{{{T}}}[{RATE}]))",
            "{{instance}} write errors {{reason}}"), unit="ops"),
        p("Kernel interfaces", q(f"koordlet_agent_kernel_capability{{{T}}}", "{{instance}} {{capability}}"),
          kind="table", description="0: the interface is missing and its feature idle."),
        p("Settings without effect", q(f"koordlet_agent_setting_without_effect{{{T}}}",
                                       "{{instance}} {{kind}} {{name}}"), kind="table"),
    )),
    Row("Reports and calls", (
        p("NodeMetric report age", q(f"time() - koordlet_agent_nodemetric_last_report_timestamp_seconds{{{T}}}",
                                     "{{instance}}"), unit="s",
          description="Alert KoordletNodeMetricStale past 180 s (the scheduler's nodeMetricExpirationSeconds)."),
        p("NodeMetric report failures", q(f"sum by (instance, reason) "
                                          f"(increase(koordlet_agent_nodemetric_report_failures_total{{{T}}}[{RATE}]))",
                                          "{{instance}} {{reason}}")),
        p("kubelet requests p99", q(f"histogram_quantile(0.99, sum by (instance, path, le) "
                                    f"(rate(koordlet_kubelet_request_duration_seconds_bucket{{{T}}}[{RATE}])))",
                                    "{{instance}} {{path}}"), unit="s"),
        p("NRI connected", q(f"koordlet_nri_connected{{{T}}}", "{{instance}}")),
        p("PodResources proxy requests",
          q(f"sum by (instance, method, code) (rate(koordlet_pod_resources_proxy_requests_total{{{T}}}[{RATE}]))",
            "{{instance}} {{method}} {{code}}"), unit="ops"),
        p("eBPF programs' CPU", q(f"sum by (instance, program) "
                                  f"(rate(koordlet_agent_bpf_program_run_seconds_total{{{T}}}[{RATE}]))",
                                  "{{instance}} {{program}}"), unit="percentunit"),
    )),
))

SCHEDULER = Dashboard("koord-scheduler.json", "koord-scheduler", "Koordinator / koord-scheduler", (
    Row("Scheduling", (
        p("Schedule attempts by result", q(f"sum by (result) (rate(scheduler_schedule_attempts_total{{{S}}}[{RATE}]))",
                                           "{{result}}"), unit="ops"),
        p("Pending pods by queue", q(f"sum by (queue) (scheduler_pending_pods{{{S}}})", "{{queue}}")),
        p("Scheduling attempt p99", q(f"histogram_quantile(0.99, sum by (result, le) "
                                      f"(rate(scheduler_scheduling_attempt_duration_seconds_bucket{{{S}}}[{RATE}])))",
                                      "{{result}}"), unit="s"),
        p("Extension points p99", q(f"histogram_quantile(0.99, sum by (extension_point, le) "
                                    f"(rate(scheduler_framework_extension_point_duration_seconds_bucket{{{S}}}"
                                    f"[{RATE}])))", "{{extension_point}}"), unit="s"),
        p("Slowest plugins p99", q(f"topk(10, histogram_quantile(0.99, sum by (plugin, extension_point, le) "
                                   f"(rate(scheduler_plugin_execution_duration_seconds_bucket{{{S}}}[{RATE}]))))",
                                   "{{plugin}} {{extension_point}}"), unit="s", width=24),
    )),
    Row("Koordinator", (
        p("Gang groups waiting", q(f"scheduler_waiting_gang_group_number{{{S}}}", "{{instance}}")),
        p("Gang groups decided", q(f"sum by (result) (rate(scheduler_gang_groups_total{{{S}}}[{RATE}]))",
                                   "{{result}}"), unit="ops"),
        p("Devices allocated", q(f"sum by (device_type) (rate(scheduler_device_allocations_total{{{S}}}[{RATE}]))",
                                 "{{device_type}}"), unit="ops"),
        p("Malformed API objects", q(f"sum by (kind) (increase(scheduler_malformed_objects_total{{{S}}}[{RATE}]))",
                                     "{{kind}}"), description="Object versions skipped or counted conservatively."),
    )),
), variable=("instance", "label_values(scheduler_pending_pods, instance)"))

DASHBOARDS = (NODE_AND_PODS, COLOCATION, QOS, DEVICES, GPUS, RDMA, AGENT, SCHEDULER)


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": panel_id, "type": panel.kind, "title": panel.title, "datasource": DATASOURCE,
        "gridPos": {"h": 8, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "targets": [{"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": t.expr,
                     "legendFormat": t.legend or "__auto", "instant": panel.kind == "table",
                     "range": panel.kind != "table", **({"format": "table"} if panel.kind == "table" else {})}
                    for i, t in enumerate(panel.queries)],
    }
    if panel.description:
        out["description"] = panel.description
    if panel.kind == "timeseries":
        out["options"] = {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}}
    return out


def render(d: Dashboard) -> dict[str, Any]:
    """The dashboard as Grafana's JSON model: a row panel per Row, panels two to a line."""
    panels: list[dict[str, Any]] = []
    y, next_id = 0, 1
    for row in d.rows:
        panels.append({"id": next_id, "type": "row", "title": row.title, "collapsed": False, "panels": [],
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}})
        next_id, y, x = next_id + 1, y + 1, 0
        for panel in row.panels:
            if x + panel.width > 24:
                x, y = 0, y + 8
            panels.append(_panel_json(panel, next_id, x, y))
            next_id, x = next_id + 1, x + panel.width
        y += 8
    name, query = d.variable
    return {
        "uid": d.uid, "title": d.title, "tags": ["koordinator"], "editable": True, "schemaVersion": 39,
        "time": {"from": "now-1h", "to": "now"}, "refresh": "30s", "timezone": "", "graphTooltip": 1,
        "templating": {"list": [
            {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
             "current": {}, "hide": 0},
            {"name": name, "label": name, "type": "query", "datasource": DATASOURCE, "query": {"query": query,
             "refId": "variable"}, "definition": query, "refresh": 2, "includeAll": True, "multi": True,
             "allValue": ".*", "current": {}, "hide": 0, "sort": 1},
        ]},
        "annotations": {"list": []},
        "panels": panels,
    }


def text(d: Dashboard) -> str:
    return json.dumps(render(d), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    if argv != ["--write"]:
        sys.stderr.write("usage: python -m demo.dashboards --write\n")
        return 2
    OUT.mkdir(parents=True, exist_ok=True)
    for d in DASHBOARDS:
        (OUT / d.file).write_text(text(d))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
