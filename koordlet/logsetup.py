"""klog's flags (-v, -logtostderr, -log_file, -log_dir, -stderrthreshold, ...) as Python logging handlers."""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
from typing import Any

from apis.core.errors import InvalidInput
from apis.core.objects import JSONMapping

_FORMAT = "%(asctime)s %(levelname).1s %(name)s: %(message)s"
_DIR_FORMAT = "%(asctime)s %(levelname).1s %(pathname)s:%(lineno)d %(name)s: %(message)s"
# klog severities 0..3 (INFO, WARNING, ERROR, FATAL) as logging levels
_SEVERITY_LEVEL = (logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL)
_OURS = ("apis", "koordlet", "scheduler")


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever sys.stderr is when a line is logged (as logging's last-resort handler does), so a thread
    that outlives a redirected stderr (a test's capture) never writes to a closed stream."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: object) -> None:
        pass


def log_file_path(values: JSONMapping) -> str | None:
    """Where klog would write: -log_file, else <log_dir>/koordlet.log, else nowhere (None)."""
    if values.get("log_file"):
        return str(values["log_file"])
    if values.get("log_dir"):
        return os.path.join(str(values["log_dir"]), "koordlet.log")
    return None


def setup(values: JSONMapping) -> None:
    """Configure the root logger from klog's flag values. -v 4 and above log our debug lines (other libraries
    stay at INFO). With -logtostderr=false a file given by -log_file/-log_dir gets every line, rotated at
    -log_file_max_size MB, and standard error the lines at or above -stderrthreshold (all of them with
    -alsologtostderr). InvalidInput when the log file cannot be opened."""
    fmt = logging.Formatter("%(message)s" if values.get("skip_headers") else
                            _DIR_FORMAT if values.get("add_dir_header") else _FORMAT)
    handlers: list[logging.Handler] = []
    path = None if values.get("logtostderr", True) else log_file_path(values)
    if path is not None:
        max_mb = int(values.get("log_file_max_size", 1800))
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            handlers.append(logging.handlers.RotatingFileHandler(path, maxBytes=max_mb << 20,
                                                                 backupCount=1 if max_mb else 0))
        except OSError as e:
            raise InvalidInput(f"cannot open the log file {path}: {e.strerror or e}") from None
        err = _Stderr()
        if not values.get("alsologtostderr"):
            err.setLevel(_SEVERITY_LEVEL[int(values.get("stderrthreshold", 2))])
        handlers.append(err)
    else:
        handlers.append(_Stderr())
    root = logging.getLogger()
    for old in list(root.handlers):  # ours from an earlier call; others' (a test's log capture) stay
        if getattr(old, "_koordlet", False):
            root.removeHandler(old)
            old.close()
    for h in handlers:
        h.setFormatter(fmt)
        h._koordlet = True  # type: ignore[attr-defined]
        root.addHandler(h)
    if root.level > logging.INFO:
        root.setLevel(logging.INFO)
    # urllib3 warns on each retried connection; our API client logs what failed, once per failure kind
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    debug = int(values.get("verbosity", 0)) >= 4
    for name in _OURS:
        logging.getLogger(name).setLevel(logging.DEBUG if debug else logging.NOTSET)
