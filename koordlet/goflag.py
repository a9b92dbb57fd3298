"""Go's `flag` package command-line syntax (`-f=v`, `--f v`, bare booleans) and its value types, parsed as Go does."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from apis.core import godur
from apis.core.errors import InvalidInput
from apis.core.objects import JSON


class FlagError(InvalidInput):
    """A command-line mistake: the message is the one line the user sees."""


@dataclass(frozen=True)
class Flag:
    """One flag: its name without dashes, its Go type, the default as Go prints it (DefValue), and its help."""

    name: str
    kind: str  # a key of PARSERS
    default: str
    help: str = ""
    check: Callable[[object], str | None] | None = None  # extra validation: an error text, or None when fine

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"


# strconv.ParseBool
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def parse_bool(text: str) -> bool:
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError("parse error")


_PREFIXED = re.compile(r"0[xX][0-9a-fA-F_]+|0[oO][0-7_]+|0[bB][01_]+")
_OCTAL = re.compile(r"0[0-7_]+")
_DECIMAL = re.compile(r"[0-9]+")


def _go_int(text: str, bits: int, signed: bool) -> int:
    """strconv.ParseInt/ParseUint with base 0: 0x, 0o, 0b and a leading 0 (octal) prefixes; underscores only
    after a prefix; out of range is an error."""
    s = text
    neg = False
    if signed and s[:1] in "+-" and s:
        neg, s = s[0] == "-", s[1:]
    if _PREFIXED.fullmatch(s):
        try:
            value = int(s, 0)
        except ValueError:
            raise ValueError("invalid syntax") from None
    elif _OCTAL.fullmatch(s) and len(s) > 1:
        if "__" in s or s.endswith("_"):
            raise ValueError("invalid syntax")
        value = int(s.replace("_", ""), 8)
    elif _DECIMAL.fullmatch(s):
        value = int(s)
    else:
        raise ValueError("invalid syntax")
    value = -value if neg else value
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    if not low <= value <= high:
        raise ValueError("value out of range")
    return value


def _go_float(text: str) -> float:
    """strconv.ParseFloat(s, 64): decimal or hex mantissa, inf/infinity/nan in any case."""
    s = text.strip()
    if s != text or not s or "_" in s:
        raise ValueError("invalid syntax")
    body = s.lstrip("+-")
    try:
        value = float.fromhex(s) if body[:2].lower() == "0x" else float(s)
    except ValueError:
        raise ValueError("invalid syntax") from None
    return value


def _duration(text: str) -> float:
    """time.ParseDuration, plus bare numbers as seconds (our older flags took seconds)."""
    try:
        return float(text) if re.fullmatch(r"[+-]?(\d+(\.\d*)?|\.\d+)", text) else godur.parse(text)
    except InvalidInput:
        raise ValueError(f"time: invalid duration {text!r}") from None


_SEVERITIES = {"INFO": 0, "WARNING": 1, "ERROR": 2, "FATAL": 3}


def _severity(text: str) -> int:
    """klog's severity flag (stderrthreshold): a name or its number."""
    if text.upper() in _SEVERITIES:
        return _SEVERITIES[text.upper()]
    value = _go_int(text, 32, False)
    if value > 3:
        raise ValueError("unknown severity")
    return value


def _module_spec(text: str) -> list[tuple[str, int]]:
    """klog's -vmodule: `pattern=N` pairs separated by commas."""
    out = []
    for part in filter(None, text.split(",")):
        pattern, sep, level = part.partition("=")
        if not sep or not pattern:
            raise ValueError("expect comma-separated list of filename=N")
        out.append((pattern, _go_int(level, 32, True)))
    return out


def _trace_location(text: str) -> str:
    """klog's -log_backtrace_at: `file.go:line`, or empty."""
    if text in ("", ":0"):
        return text
    file, sep, line = text.rpartition(":")
    if not sep or not file or not line.isdigit():
        raise ValueError("syntax error: expect file.go:234")
    return text


PARSERS: dict[str, Callable[[str], Any]] = {
    "bool": parse_bool,
    "int": lambda s: _go_int(s, 64, True),
    "int64": lambda s: _go_int(s, 64, True),
    "uint": lambda s: _go_int(s, 64, False),
    "uint64": lambda s: _go_int(s, 64, False),
    "float64": _go_float,
    "string": str,
    "duration": _duration,
    "level": lambda s: _go_int(s, 32, False),
    "severity": _severity,
    "moduleSpec": _module_spec,
    "traceLocation": _trace_location,
}


def parse_map_string_bool(text: str, into: dict[str, bool]) -> None:
    """component-base's MapStringBool.Set: `k=v` pairs split on commas, trimmed; empty segments skipped."""
    for segment in text.split(","):
        segment = segment.strip()
        if not segment:
            continue
        key, sep, value = segment.partition("=")
        if not sep:
            raise ValueError(f"malformed pair, expect string=bool: {segment!r}")
        into[key.strip()] = parse_bool(value.strip())


def default_value(flag: Flag) -> Any:
    """The typed value of a flag's default."""
    if flag.kind == "mapStringBool":
        return {}
    if flag.kind == "stringSlice":
        return []
    return PARSERS[flag.kind](flag.default)


@dataclass
class Parsed:
    values: JSON  # every flag of the set, at its default unless given
    given: dict[str, str] = field(default_factory=dict)  # flags set on the command line -> the last raw text
    rest: list[str] = field(default_factory=list)  # arguments after the flags (Go stops at the first non-flag)
    help: bool = False  # -h / -help / --help


def parse(flags: Mapping[str, Flag], args: Sequence[str]) -> Parsed:
    """FlagSet.Parse with ContinueOnError: FlagError (one line) on an unknown flag, a missing or bad value."""
    out = Parsed({name: default_value(f) for name, f in flags.items()})
    args = list(args)
    while args:
        arg = args[0]
        if len(arg) < 2 or arg[0] != "-":
            break
        args.pop(0)
        if arg == "--":
            break
        name = arg[2:] if arg.startswith("--") else arg[1:]
        if not name or name[0] in "-=":
            raise FlagError(f"bad flag syntax: {arg}")
        name, has_value, value = name.partition("=")
        flag = flags.get(name)
        if flag is None:
            if name in ("h", "help"):
                out.help = True
                continue
            raise FlagError(f"flag provided but not defined: -{name}")
        if flag.is_bool:
            if has_value:
                try:
                    parsed: Any = parse_bool(value)
                except ValueError:
                    raise FlagError(f"invalid boolean value {value!r} for -{name}: parse error") from None
            else:
                value, parsed = "true", True
        else:
            if not has_value:
                if not args:
                    raise FlagError(f"flag needs an argument: -{name}")
                value = args.pop(0)
            parsed = _set(flag, value, out, name)
        if flag.check is not None and (problem := flag.check(parsed)):
            raise FlagError(f"invalid value {value!r} for flag -{name}: {problem}")
        out.values[name] = parsed
        out.given[name] = value
    out.rest = args
    return out


def _set(flag: Flag, value: str, out: Parsed, name: str) -> Any:
    """The flag's new value; map and slice flags start from empty on their first use, then accumulate."""
    first = name not in out.given
    try:
        if flag.kind == "mapStringBool":
            merged: dict[str, bool] = {} if first else dict(out.values[name])
            parse_map_string_bool(value, merged)
            return merged
        if flag.kind == "stringSlice":
            items = value.split(",")
            return items if first else [*out.values[name], *items]
        return PARSERS[flag.kind](value)
    except ValueError as e:
        raise FlagError(f"invalid value {value!r} for flag -{name}: {e}") from None


def usage(flags: Sequence[Flag]) -> str:
    """Go's PrintDefaults layout: `  -name type` then the indented help with its default."""
    lines = []
    for f in flags:
        head = f"  -{f.name}" + ("" if f.is_bool else f" {_type_word(f.kind)}")
        help_text = f.help
        if f.default not in ("", "false", "0", "0s", "[]"):  # Go leaves zero values unsaid
            shown = f'"{f.default}"' if f.kind == "string" else f.default
            help_text += f" (default {shown})"
        lines.append(head)
        lines.append("    \t" + help_text.replace("\n", "\n    \t"))
    return "\n".join(lines) + "\n"


def _type_word(kind: str) -> str:
    return {"float64": "float", "mapStringBool": "mapStringBool", "stringSlice": "strings"}.get(kind, kind)
