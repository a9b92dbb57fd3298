"""Builds the NRI plugin from the agent: its executor and Event recorder, node facts, options and metrics."""

from __future__ import annotations

from koordlet.agent import Agent
from koordlet.nri.connection import Backoff, NriConnection
from koordlet.nri.hooks.facts import NodeFactsReader
from koordlet.nri.hooks.options import HookOptions
from koordlet.nri.metrics import NriMetrics
from koordlet.nri.plugin import NriPlugin
from koordlet.nri.runner import StageRunner
from koordlet.qos.evictor import Post


def nri_connection(agent: Agent, post_event: Post | None = None) -> NriConnection:
    """The plugin and its connection; writes go through the QoS manager's executor (the agent's one writer)."""
    cfg = agent.config
    qos = agent.qos_manager(post_event=post_event)
    metrics = NriMetrics(cfg.node_name, agent.metrics.internal)
    state = agent.state
    facts = NodeFactsReader(cfg.paths, agent.backend.version, state.driver, state.nodeslo_spec_in_force,
                            agent.health, cpuset_rule=state.cpuset_rule,
                            cpu_normalization_ratio=state.cpu_normalization_ratio)
    options = HookOptions(gates=dict(cfg.feature_gates), gpu_env_uuid=cfg.nri.gpu_env_uuid,
                          xpu_device_inject=cfg.nri.xpu_device_inject,
                          disable_unset_cpu_quota=cfg.disable_unset_cpu_quota,
                          hami_core_library_path=cfg.nri.hami_core_library_path)
    runner = StageRunner(facts, options, qos.executor, qos.events, metrics)
    nri = cfg.nri
    return NriConnection(nri.socket(cfg.paths), NriPlugin(runner, metrics), metrics, name=nri.plugin_name,
                         index=nri.plugin_index, connect_timeout=nri.connect_timeout,
                         backoff=Backoff(nri.backoff_duration, nri.backoff_factor, 0.1, nri.backoff_cap))
