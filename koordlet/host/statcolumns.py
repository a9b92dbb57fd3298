"""Many cgroups' stat files parsed at once into one int64 column per counter (the collection tick's parse)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from apis.core.errors import HostReadError

Int64s = npt.NDArray[np.int64]
_join = b" ".join
# Files that each hold one number (cpuacct.usage), joined by commas: one match checks them all, digits and an
# optional newline each (a comma cannot hide in them), at most 18 digits (within int64).
_PLAIN = re.compile(rb"(?:\d{1,18}\n?,)*").fullmatch


class Layout(NamedTuple):
    """A stat file in the kernel's own layout: `find` is a regex's search, match or fullmatch whose groups are all
    `\\d+`; `limit` is the largest value a group may hold for the sums made of it to stay within int64. A file in
    another layout, or with a larger value, sends its row to the backend's parse_stats."""

    find: Callable[[bytes], re.Match[bytes] | None]
    width: int  # the regex's groups
    limit: int
    plain: bool  # the file is one number: all files are checked and converted at once first

    @classmethod
    def of(cls, find: Callable[[bytes], re.Match[bytes] | None], limit: int, plain: bool = False) -> Layout:
        pattern: re.Pattern[bytes] = find.__self__  # type: ignore[attr-defined]
        return cls(find, pattern.groups, limit, plain)


class StatColumns(NamedTuple):
    """CgroupStats of many cgroups, a column per counter (row i: the i-th cgroup given); rows in `failed`
    (row → why) did not parse and hold 0."""

    cpu_usage_ns: Int64s
    memory_usage: Int64s
    memory_with_cache: Int64s
    nr_periods: Int64s
    nr_throttled: Int64s
    throttled_ns: Int64s
    failed: dict[int, HostReadError]


def _digits(found: list[re.Match[bytes]], width: int) -> Int64s:
    """The digit groups of the matches as a (matches × width) array: one join and one C parse for all of them."""
    groups: Any = map(re.Match.groups, found)  # each a tuple of digit strings: every group is `\d+`
    text = _join(map(_join, groups))
    return np.fromstring(text, dtype=np.int64, sep=" ").reshape(len(found), width)


def _plain(data: list[bytes]) -> Int64s | None:
    """The numbers of one-number files, or None unless every file is digits and an optional newline."""
    text = b",".join(data) + b","
    if _PLAIN(text) is None:
        return None
    return np.fromstring(text, dtype=np.int64, sep=",")


def parse_columns(files: Sequence[list[bytes]], stat_paths: Sequence[tuple[str, ...]], layouts: Sequence[Layout],
                  counters: Callable[..., tuple[Int64s, ...]],
                  parse_row: Callable[[Sequence[bytes], tuple[str, ...]], tuple[int, ...]]) -> StatColumns:
    """`files[j][i]`: the content of `stat_paths[i][j]`. Rows whose files all match their layout are converted
    together, `counters(*per-file digit arrays)` giving the six columns; any other row goes through
    `parse_row` (the backend's parse_stats), so each row has exactly the values parse_stats gives it."""
    n = len(stat_paths)
    plain = [_plain(data) if layout.plain else None for layout, data in zip(layouts, files, strict=True)]
    found: list[list[Any] | None] = [None if p is not None else list(map(layout.find, data))
                                     for p, layout, data in zip(plain, layouts, files, strict=True)]
    odd = sorted({i for f in found if f is not None and not all(f) for i, m in enumerate(f) if m is None})
    fast = np.delete(np.arange(n), odd) if odd else np.arange(n)
    keep = fast.tolist() if odd else None
    digits = []
    for p, f, layout in zip(plain, found, layouts, strict=True):
        if p is not None:
            digits.append((p[fast] if odd else p).reshape(len(fast), 1))
        elif f is not None:
            digits.append(_digits(f if keep is None else [f[i] for i in keep], layout.width))
    over = np.zeros(len(fast), dtype=bool)
    for d, layout in zip(digits, layouts, strict=True):
        if d.max(initial=0) > layout.limit:
            over |= (d > layout.limit).any(axis=1)
    cols = [np.zeros(n, dtype=np.int64) for _ in range(6)]
    for col, values in zip(cols, counters(*digits), strict=True):
        col[fast] = values
    if over.any():
        odd = sorted([*odd, *fast[over].tolist()])
    failed: dict[int, HostReadError] = {}
    for i in odd:
        try:
            for col, v in zip(cols, parse_row([f[i] for f in files], stat_paths[i]), strict=True):
                col[i] = v
        except HostReadError as e:
            failed[i] = e
        except OverflowError:
            failed[i] = HostReadError(f"{stat_paths[i][0]}: a counter beyond 64 bits")
    if failed:
        for col in cols:
            col[list(failed)] = 0
    return StatColumns(cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], failed)
