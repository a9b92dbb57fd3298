"""The Prometheus text format (0.0.4) written fast: byte for byte what prometheus_client's generate_latest writes.

generate_latest re-validates and escapes every label of every sample (~9 µs a sample), and a family's add_metric
builds a Sample and a label dict per series: at 250 pods × 3 containers that was most of a scrape. Families kept
as rows (RowFamily, GoCounterFamily, HistogramRows: the per-pod ones) hold label-value tuples and values, no Sample,
and are written a column at a time; plain gauge and counter families are written sample by sample; anything else
(timestamps, exemplars, `_created`, names outside the legacy charset, other types) goes to generate_latest. A
TextRenderer keeps each label set's text from one render to the next (pods change rarely) and a histogram row's
text while the row's key (e.g. the pod's wait count and sum) is unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

_LEGACY_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LEGACY_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_NEEDS_ESCAPE = re.compile(r'[\\\n"]')
Buckets = Sequence[tuple[str, float]]


go_float: Callable[[float], str] = floatToGoString  # a value as Go (and generate_latest) writes it


class RowFamily(Metric):
    """A gauge family whose series are kept as rows (label values, value); `samples` builds prometheus_client's
    Samples when asked (generate_latest, tests), the renderer writes the rows directly."""

    def __init__(self, name: str, documentation: str, labels: Sequence[str], typ: str = "gauge") -> None:
        super().__init__(name, documentation, typ)
        self._labelnames = tuple(labels)  # as prometheus_client's families name it (koordlet.reference reads it)
        self.rows: list[tuple[str, ...]] = []
        self.values: list[float] = []

    def add_metric(self, labels: Sequence[str], value: float) -> None:
        row = tuple(labels)
        if len(row) != len(self._labelnames):
            raise ValueError(f"{self.name}: {len(row)} label values for {len(self._labelnames)} labels")
        self.rows.append(row)
        self.values.append(value)

    def add_sample(self, name: str, labels: dict[str, str], value: float, *rest: Any, **kw: Any) -> None:
        if name != self.name or any(rest) or any(kw.values()) or set(labels) != set(self._labelnames):
            raise ValueError(f"{self.name}: only plain series of this family's labels")
        self.add_metric([labels[k] for k in self._labelnames], value)

    @property  # type: ignore[override]
    def samples(self) -> list[Sample]:
        names, name = self._labelnames, self.name
        return [Sample(name, dict(zip(names, row, strict=True)), v, None, None)
                for row, v in zip(self.rows, self.values, strict=True)]

    @samples.setter
    def samples(self, value: list[Sample]) -> None:
        if value:  # Metric.__init__ sets []; series come through add_metric
            raise ValueError(f"{self.name}: samples are rows")


class GoCounterFamily(RowFamily):
    """A counter exposed as a Go client exposes it: samples (and the TYPE line) named exactly as the family, so
    upstream's `_total`-less names stay as they are (prometheus_client would add the suffix, and generate_latest
    would write `_total` on the HELP and TYPE lines)."""

    def __init__(self, name: str, documentation: str, labels: Sequence[str]) -> None:
        super().__init__(name, documentation, labels, "counter")


class HistogramRows(Metric):
    """A histogram family of rows (label values, cumulative buckets ending with +Inf, sum), as
    HistogramMetricFamily's series; `buckets` may be a callable, called only when the row's text is not cached
    under its `key` (a value that changes whenever the row's buckets or sum do; None: never cached)."""

    def __init__(self, name: str, documentation: str, labels: Sequence[str]) -> None:
        super().__init__(name, documentation, "histogram")
        self._labelnames = tuple(labels)
        self.rows: list[tuple[tuple[str, ...], Buckets | Callable[[], Buckets], float | None, Hashable]] = []

    def add_metric(self, labels: Sequence[str], buckets: Buckets | Callable[[], Buckets], sum_value: float | None,
                   key: Hashable = None) -> None:
        row = tuple(labels)
        if len(row) != len(self._labelnames):
            raise ValueError(f"{self.name}: {len(row)} label values for {len(self._labelnames)} labels")
        self.rows.append((row, buckets, sum_value, key))

    @property  # type: ignore[override]
    def samples(self) -> list[Sample]:
        out: list[Sample] = []
        name, names = self.name, self._labelnames
        for row, buckets, sum_value, _ in self.rows:
            pairs = buckets() if callable(buckets) else buckets
            labels = dict(zip(names, row, strict=True))
            out += [Sample(f"{name}_bucket", {**labels, "le": le}, v, None, None) for le, v in pairs]
            if float(pairs[0][0]) >= 0 and sum_value is not None:  # as HistogramMetricFamily.add_metric
                out.append(Sample(f"{name}_count", labels, pairs[-1][1], None, None))
                out.append(Sample(f"{name}_sum", dict(labels), sum_value, None, None))
        return out

    @samples.setter
    def samples(self, value: list[Sample]) -> None:
        if value:
            raise ValueError(f"{self.name}: samples are rows")


class _Families(Collector):
    """Already collected families, handed to generate_latest as a collector."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


def _escape(v: str) -> str:
    if _NEEDS_ESCAPE.search(v) is None:
        return v
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _header(name: str, doc: str, typ: str) -> str:
    escaped = doc.replace("\\", "\\\\").replace("\n", "\\n")
    return f"# HELP {name} {escaped}\n# TYPE {name} {typ}\n"


def _labels_ok(names: Iterable[str]) -> bool:
    return all(_LEGACY_LABEL.match(k) and not k.startswith("__") for k in names)


class TextRenderer:
    """Renders registries as generate_latest would, keeping label and histogram-row texts between renders (only
    those the last render used: the caches never outgrow one exposition). One renderer per view; renders of one
    view may overlap (each fills its own new caches and the last to finish keeps them)."""

    def __init__(self) -> None:
        self._labels: dict[tuple[tuple[str, ...], tuple[str, ...]], str] = {}
        self._rows: dict[tuple[str, tuple[str, ...], Hashable], str] = {}

    def render(self, *registries: CollectorRegistry | Collector) -> bytes:
        new_labels: dict[tuple[tuple[str, ...], tuple[str, ...]], str] = {}
        new_rows: dict[tuple[str, tuple[str, ...], Hashable], str] = {}
        run = _Render(self._labels, new_labels, self._rows, new_rows)
        out: list[str] = []
        pending: list[Metric] = []  # consecutive families left to generate_latest, rendered in order
        for registry in registries:
            for fam in registry.collect():
                text = run.family(fam)
                if text is None:
                    pending.append(fam)
                    continue
                if pending:
                    out.append(generate_latest(_Families(pending)).decode())
                    pending = []
                out.append(text)
        if pending:
            out.append(generate_latest(_Families(pending)).decode())
        self._labels, self._rows = new_labels, new_rows
        return "".join(out).encode()


def render_text(registry: CollectorRegistry | Collector) -> bytes:
    """One render with no kept texts: what generate_latest(registry) returns, byte for byte."""
    return TextRenderer().render(registry)


class _Render:
    """One render's lookups: a text from this render, else from the last one (carried over), else made."""

    def __init__(self, old_labels: dict[Any, str], labels: dict[Any, str], old_rows: dict[Any, str],
                 rows: dict[Any, str]) -> None:
        self.old_labels, self.labels, self.old_rows, self.rows = old_labels, labels, old_rows, rows

    def family(self, fam: Metric) -> str | None:
        """The family's text, or None when generate_latest must write it."""
        if not _LEGACY_NAME.match(fam.name):
            return None
        if isinstance(fam, RowFamily):
            return self._rows_text(fam)
        if isinstance(fam, HistogramRows):
            return self._histogram_text(fam)
        if fam.type in ("gauge", "counter"):
            return self._samples_text(fam)
        return None

    def _label_text(self, names: tuple[str, ...], order: list[int], row: tuple[str, ...]) -> str:
        key = (names, row)
        text = self.labels.get(key)
        if text is None:
            text = self.old_labels.get(key)
            if text is None:
                text = ",".join([f'{names[i]}="{_escape(row[i])}"' for i in order])
            self.labels[key] = text
        return text

    def _rows_text(self, fam: RowFamily) -> str | None:
        names, name = fam._labelnames, fam.name
        if not _labels_ok(names):
            return None
        head = _header(name, fam.documentation, fam.type)
        values = list(map(go_float, fam.values))
        if not names:
            return head + "".join([f"{name} {v}\n" for v in values])
        order = sorted(range(len(names)), key=names.__getitem__)  # generate_latest sorts label names
        label = self._label_text
        return head + "".join([f"{name}{{{label(names, order, row)}}} {v}\n"
                               for row, v in zip(fam.rows, values, strict=True)])

    def _histogram_text(self, fam: HistogramRows) -> str | None:
        names, name = fam._labelnames, fam.name
        if not _labels_ok(names) or "le" in names:
            return None
        order = sorted(range(len(names)), key=names.__getitem__)
        before = [i for i in order if names[i] < "le"]  # the bucket lines' labels sort `le` among them
        after = [i for i in order if names[i] > "le"]
        lines = [_header(name, fam.documentation, "histogram")]
        for row, buckets, sum_value, key in fam.rows:
            cache_key = (name, row, key)
            text = None if key is None else self.rows.get(cache_key) or self.old_rows.get(cache_key)
            if text is None:
                text = self._histogram_row(name, names, order, before, after, row, buckets, sum_value)
            if key is not None:
                self.rows[cache_key] = text
            lines.append(text)
        return "".join(lines)

    def _histogram_row(self, name: str, names: tuple[str, ...], order: list[int], before: list[int],
                       after: list[int], row: tuple[str, ...], buckets: Buckets | Callable[[], Buckets],
                       sum_value: float | None) -> str:
        pairs = buckets() if callable(buckets) else buckets
        pre = "".join([f'{names[i]}="{_escape(row[i])}",' for i in before])
        post = "".join([f',{names[i]}="{_escape(row[i])}"' for i in after])
        out = [f'{name}_bucket{{{pre}le="{_escape(le)}"{post}}} {go_float(v)}\n' for le, v in pairs]
        if float(pairs[0][0]) >= 0 and sum_value is not None:
            labels = self._label_text(names, order, row)
            braces = f"{{{labels}}}" if labels else ""
            out.append(f"{name}_count{braces} {go_float(pairs[-1][1])}\n")
            out.append(f"{name}_sum{braces} {go_float(sum_value)}\n")
        return "".join(out)

    def _samples_text(self, fam: Metric) -> str | None:
        """A gauge or counter family of plain Samples; a counter's samples must all be `<name>_total` (a
        `_created` sample, which generate_latest moves to a gauge of its own, leaves the family to it)."""
        name = fam.name if fam.type == "gauge" else f"{fam.name}_total"
        lines = [_header(name, fam.documentation, fam.type)]
        keys: tuple[str, ...] = ()
        order: list[int] = []
        for sample in fam.samples:
            labels = sample.labels
            if sample.name != name or sample.timestamp is not None or sample.exemplar is not None:
                return None
            if not labels:
                lines.append(f"{name} {go_float(sample.value)}\n")
                continue
            if keys != tuple(labels):
                keys = tuple(labels)
                if not _labels_ok(keys):
                    return None
                order = sorted(range(len(keys)), key=keys.__getitem__)
            body = self._label_text(keys, order, tuple(labels.values()))
            lines.append(f"{name}{{{body}}} {go_float(sample.value)}\n")
        return "".join(lines)
