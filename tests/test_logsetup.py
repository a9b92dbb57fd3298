"""klog's flags on Python logging: verbosity, files, the stderr threshold."""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from apis.core.errors import InvalidInput
from koordlet import logsetup
from koordlet.cli import parse_args


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        if h not in handlers:
            root.removeHandler(h)
            h.close()
    root.setLevel(level)
    logging.getLogger("koordlet").setLevel(logging.NOTSET)


def _stderr_of(fn: object) -> str:
    old, sys.stderr = sys.stderr, io.StringIO()
    try:
        fn()  # type: ignore[operator]
        return str(sys.stderr.getvalue())
    finally:
        sys.stderr = old


def test_v4_turns_on_our_debug_lines_only() -> None:
    logsetup.setup(vars(parse_args(["--v=4"])))
    out = _stderr_of(lambda: (logging.getLogger("koordlet.x").debug("ours"), logging.getLogger("other").debug("no")))
    assert "ours" in out and "no" not in out
    logsetup.setup(vars(parse_args(["-v", "3"])))
    assert "ours" not in _stderr_of(lambda: logging.getLogger("koordlet.x").debug("ours"))


def test_log_file_with_a_stderr_threshold(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "k.log"
    logsetup.setup(vars(parse_args(["-logtostderr=false", f"-log_file={path}", "-stderrthreshold=ERROR"])))
    log = logging.getLogger("koordlet.t")
    out = _stderr_of(lambda: (log.warning("a warning"), log.error("an error")))
    text = path.read_text()
    assert "a warning" in text and "an error" in text
    assert "an error" in out and "a warning" not in out


def test_log_dir_and_alsologtostderr(tmp_path: Path) -> None:
    logsetup.setup(vars(parse_args(["--logtostderr=false", "--alsologtostderr", f"--log_dir={tmp_path}",
                                    "--skip_headers"])))
    out = _stderr_of(lambda: logging.getLogger("koordlet.t").info("both"))
    assert out == "both\n" and (tmp_path / "koordlet.log").read_text() == "both\n"


def test_logtostderr_ignores_log_file(tmp_path: Path) -> None:
    logsetup.setup(vars(parse_args([f"-log_file={tmp_path / 'k.log'}"])))
    assert "x" in _stderr_of(lambda: logging.getLogger("koordlet.t").info("x"))
    assert not (tmp_path / "k.log").exists()


def test_an_unopenable_log_file_is_invalid_input(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(InvalidInput, match="cannot open the log file"):
        logsetup.setup(vars(parse_args(["-logtostderr=false", f"-log_file={tmp_path / 'f' / 'k.log'}"])))
