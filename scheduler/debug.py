"""Debug flags a running scheduler takes over HTTP (PUT /debug/flags/<flag>), as koord-scheduler's frameworkext."""

from __future__ import annotations

import logging
from collections.abc import Sequence

log = logging.getLogger("koord-sched")

top_n_scores = 0  # debugTopNScores: log the per-plugin score table of the best N nodes of every scheduled pod
filter_failure = False  # debugFilterFailure: log each node a Filter refuses, with the plugin and its reason
_GO_TRUE, _GO_FALSE = ("1", "t", "T", "TRUE", "true", "True"), ("0", "f", "F", "FALSE", "false", "False")


def set_scores(value: str) -> str:
    """DebugScoresSetter; raises ValueError with upstream's message."""
    global top_n_scores
    try:
        n = int(value.strip())
    except ValueError:
        raise ValueError(f'failed set debugTopNScores {value}: strconv.Atoi: parsing "{value}": invalid syntax'
                         ) from None
    top_n_scores = n
    return f"successfully set debugTopNScores to {value}"


def set_filters(value: str) -> str:
    """DebugFiltersSetter: a Go ParseBool value; raises ValueError with upstream's message."""
    global filter_failure
    text = value.strip()
    if text not in _GO_TRUE + _GO_FALSE:
        raise ValueError(f'failed set debugFilterFailure {value}: strconv.ParseBool: parsing "{value}": '
                         f"invalid syntax")
    filter_failure = text in _GO_TRUE
    return f"successfully set debugFilterFailure to {value}"


def set_verbosity(value: str) -> str:
    """GlogSetter: klog verbosity ≥ 4 turns on debug logging here."""
    try:
        v = int(value.strip())
    except ValueError:
        raise ValueError(f'failed set klog.logging.verbosity {value}: strconv.Atoi: parsing "{value}": '
                         f"invalid syntax") from None
    logging.getLogger().setLevel(logging.DEBUG if v >= 4 else logging.INFO)
    return f"successfully set klog.logging.verbosity to {value}"


SETTERS = {"f": set_filters, "s": set_scores, "v": set_verbosity}


def score_table(pod: str, top_n: int, plugins: Sequence[str], rows: Sequence[tuple[str, int, Sequence[int]]],
                feasible: int) -> str:
    """debugScores: "Top<N> scores for Pod: ..." and a markdown table (#, Pod, Node, Score, one column per
    plugin, weighted), best first."""
    ranked = sorted(rows, key=lambda r: (-r[1], r[0]))[:top_n]
    head = ["#", "Pod", "Node", "Score", *plugins]
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join(["---"] * 3 + ["---:"] * (1 + len(plugins))) + " |"]
    for i, (node, total, scores) in enumerate(ranked):
        lines.append("| " + " | ".join([str(i), pod, node, str(total), *(str(s) for s in scores)]) + " |")
    return (f"Top{top_n} scores for Pod: {pod}, feasibleNodes: {feasible}, plugins:[{' '.join(plugins)}]\n"
            + "\n".join(lines))
