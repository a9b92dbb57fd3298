"""koordlet/schedlat/hostprep.py: bcc's kernel headers and tracefs/debugfs readied at the agent's start, idempotently,
whatever `command` the manifest runs (the chart's `/koordlet` bypasses any image entrypoint)."""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from koordlet.schedlat import hostprep

from conftest import require


@pytest.fixture(autouse=True)
def _fresh_log_memory() -> Iterator[None]:
    hostprep._logged.clear()
    yield
    hostprep._logged.clear()


def _headers(tmp_path: Path) -> Path:
    image = tmp_path / "image-headers"
    (image / "include").mkdir(parents=True)
    return image


def test_image_headers_are_used_when_the_node_has_none(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    image = _headers(tmp_path)
    (tmp_path / "modules" / "6.1.0-x").mkdir(parents=True)  # the node's modules, no build link
    env: dict[str, str] = {}
    caplog.set_level(logging.INFO, "koordlet.schedlat.hostprep")
    for _ in range(2):
        hostprep.kernel_source(env, "6.1.0-x", str(tmp_path / "modules"), str(image))
    assert env == {"BCC_KERNEL_SOURCE": str(image)}
    assert len([r for r in caplog.records if "bcc compiles against the image's" in r.message]) == 1


def test_the_nodes_own_headers_win(tmp_path: Path) -> None:
    image = _headers(tmp_path)
    node_src = tmp_path / "usr-src" / "linux-headers-6.1.0-x"
    (node_src / "include").mkdir(parents=True)
    (tmp_path / "modules" / "6.1.0-x").mkdir(parents=True)
    (tmp_path / "modules" / "6.1.0-x" / "build").symlink_to(node_src)  # as Debian links it, absolute
    env: dict[str, str] = {}
    assert hostprep.kernel_source(env, "6.1.0-x", str(tmp_path / "modules"), str(image)) is None
    assert env == {}
    # a dangling build link (the node's /usr/src not mounted) falls back to the image's
    node_src.rename(tmp_path / "gone")
    assert hostprep.kernel_source(env, "6.1.0-x", str(tmp_path / "modules"), str(image)) == str(image)


def test_an_explicit_kernel_source_and_a_headerless_image_are_left_alone(tmp_path: Path) -> None:
    image = _headers(tmp_path)
    env = {"BCC_KERNEL_SOURCE": "/elsewhere"}
    assert hostprep.kernel_source(env, "6.1.0-x", str(tmp_path / "modules"), str(image)) is None
    assert env == {"BCC_KERNEL_SOURCE": "/elsewhere"}
    env = {}
    assert hostprep.kernel_source(env, "6.1.0-x", str(tmp_path / "modules"), str(tmp_path / "no-headers")) is None
    assert env == {}


def _mount_lines(target: Path) -> list[str]:
    esc = str(target).replace(" ", "\\040")
    return [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if line.split()[4] == esc]


@pytest.fixture
def targets(tmp_path: Path) -> Iterator[tuple[tuple[str, str], ...]]:
    require(os.geteuid() == 0, "mounting tracefs and debugfs needs root")
    dirs = (tmp_path / "trace fs", tmp_path / "debug")  # a space: mountinfo escapes it as \040
    for d in dirs:
        d.mkdir()
    yield (("tracefs", str(dirs[0])), ("debugfs", str(dirs[1])))
    for d in dirs:
        while _mount_lines(d):
            subprocess.run(["umount", str(d)], check=True)


def test_trace_filesystems_are_mounted_once(targets: tuple[tuple[str, str], ...]) -> None:
    assert [hostprep.mounted_type(t) for _, t in targets] == [None, None]
    assert hostprep.trace_mounts(targets) == [t for _, t in targets]
    assert [hostprep.mounted_type(t) for _, t in targets] == ["tracefs", "debugfs"]
    assert (Path(targets[0][1]) / "events").is_dir()  # a real tracefs: bcc finds the tracepoint formats here
    # again (a second `koordlet run` in the same mount namespace): nothing is stacked
    assert hostprep.trace_mounts(targets) == []
    assert [len(_mount_lines(Path(t))) for _, t in targets] == [1, 1]


def test_a_mount_that_is_there_already_is_used_as_it_is(targets: tuple[tuple[str, str], ...]) -> None:
    fstype, target = targets[0]
    subprocess.run(["mount", "-t", fstype, "nodev", target], check=True)  # the node's, bound in by the manifest
    assert hostprep.trace_mounts(targets[:1]) == []
    assert len(_mount_lines(Path(target))) == 1


def test_a_failed_mount_is_logged_once_and_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    require(os.geteuid() == 0, "mounting tracefs needs root")
    missing = str(tmp_path / "no-such-dir")
    caplog.set_level(logging.WARNING, "koordlet.schedlat.hostprep")
    for _ in range(3):
        assert hostprep.trace_mounts((("tracefs", missing),)) == []
    [record] = caplog.records
    assert "tracefs is not mounted at" in record.message and "ENOENT" in record.message
    assert "falls back to schedstat" in record.message


def test_prepare_host_never_raises(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A bug in the preparation (here: the mountinfo parser) is a warning, not a failed start."""
    def broken(*_: object, **__: object) -> str:
        raise ValueError("bad mountinfo line")

    monkeypatch.setattr(hostprep, "mounted_type", broken)
    monkeypatch.setattr(hostprep, "kernel_source", lambda environ: None)
    hostprep.prepare_host()
    assert any("host preparation for bcc failed: ValueError" in r.message for r in caplog.records)
