"""`--config`: a KubeSchedulerConfiguration (v1) read as kube-scheduler reads it.

`load_config` parses (profile.py: extension points, weights, merge onto our defaults; args.py: typed pluginConfig
args; repair.py: the release texts' unambiguous mistakes); scheduler.registry instantiates the enabled plugins.
Every refusal is a `ConfigError` whose message is one line naming the field (the CLI exits 2 with it).
"""

from __future__ import annotations

import logging

from scheduler.config.fields import ConfigError
from scheduler.config.profile import SchedulerConfig, parse_config
from scheduler.config.repair import load_text

__all__ = ["ConfigError", "SchedulerConfig", "load_config", "parse_config"]

log = logging.getLogger("koord-sched.config")


def load_config(path: str | None, scheduler_name: str | None = None) -> SchedulerConfig:
    """The profile of a config file (`scheduler_name`'s, else the first); None means our defaults."""
    if path is None:
        return SchedulerConfig()
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as e:
        raise ConfigError(f"{path}: {e.strerror or e}") from None
    return parse_config(load_text(text, path), scheduler_name)
