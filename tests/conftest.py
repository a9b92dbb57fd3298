"""Shared fixtures: simulated hosts, the CRD schemas, and the real-kernel marker policy."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import shutil
import ssl
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from koordlet.host.cgtree import remove_cgroup_tree
from koordlet.host.driver import CgroupDriver

from apirecord import Call, calls_of
from simhost import SimHost

CRD_DIR = Path(__file__).resolve().parents[2] / "shared" / "crds"
if not CRD_DIR.is_dir():  # a clone elsewhere: shared/ sits beside the checkout
    CRD_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "crds"

IN_CI = os.environ.get("CI", "").lower() == "true"


def require(condition: bool, why: str) -> None:
    """Skip a real-kernel test on a laptop without the feature; fail it in CI, where the feature exists."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"CI=true but {why}")
    pytest.skip(why)


def crd_schema(filename: str) -> dict[str, Any]:
    path = CRD_DIR / filename
    require(path.is_file(), f"CRD schema {path} not found (shared/ must sit beside the checkout)")
    doc = yaml.safe_load(path.read_text())
    schema: dict[str, Any] = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def strict_schema(schema: Any) -> Any:
    """The CRD schema with unknown fields rejected: the API server would silently prune them, so an object we
    produce must not carry any."""
    if isinstance(schema, dict):
        out = {k: strict_schema(v) for k, v in schema.items()}
        if ("properties" in schema and "additionalProperties" not in schema
                and not schema.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict_schema(v) for v in schema]
    return schema


@pytest.fixture
def validate_crd() -> Callable[[str, dict[str, Any]], None]:
    """Validate a whole object (apiVersion, kind, metadata, spec, status) against a shared/crds schema, strictly."""
    import jsonschema

    def validate(filename: str, obj: dict[str, Any]) -> None:
        schema = strict_schema(crd_schema(filename))
        schema["properties"]["metadata"] = {"type": "object"}
        jsonschema.validate(obj, schema)

    return validate


@pytest.fixture(params=[(1, CgroupDriver.CGROUPFS), (1, CgroupDriver.SYSTEMD), (2, CgroupDriver.CGROUPFS),
                        (2, CgroupDriver.SYSTEMD)],
                ids=["cgroupv1-cgroupfs", "cgroupv1-systemd", "cgroupv2-cgroupfs", "cgroupv2-systemd"])
def simhost(request: pytest.FixtureRequest, tmp_path: Path) -> SimHost:
    version, driver = request.param
    return SimHost(tmp_path / "host", version, driver).setup()


@pytest.fixture(scope="session")
def tls_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (the openssl CLI is installed by the Makefile)."""
    require(shutil.which("openssl") is not None, "the openssl CLI is needed to make a test certificate")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "tls.crt", d / "tls.key"
    argv = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
    argv += ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
    argv += ["-keyout", str(key), "-out", str(cert)]
    subprocess.run(argv, check=True, capture_output=True)
    return cert, key


@pytest.fixture
async def tls_server(kmock: Any, tls_pair: tuple[Path, Path]) -> AsyncIterator[Any]:
    """An HTTPS listener serving the same kmock handler (kmock itself only listens on plain HTTP)."""
    import aiohttp.test_utils

    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(tls_pair[0]), str(tls_pair[1]))
    server = aiohttp.test_utils.RawTestServer(kmock, host="127.0.0.1")
    await server.start_server(ssl=ctx)
    try:
        yield server
    finally:
        await server.close()


# test file (relative to tests/) -> the (verb, resource) calls the API double saw there; tests/test_rbac.py holds the
# ClusterRole to them. KOORDLET_API_RECORD=FILE also writes them to FILE as JSON at the end of the session.
API_CALLS: dict[str, set[Call]] = {}
TESTS_DIR = Path(__file__).resolve().parent


@pytest.fixture
async def kmock(kmock: Any, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """kmock's API double (the plugin's fixture), with every request it served recorded for tests/test_rbac.py."""
    yield kmock
    rel = str(Path(str(request.path)).resolve().relative_to(TESTS_DIR))
    API_CALLS.setdefault(rel, set()).update(calls_of(kmock._requests))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The least-privilege test runs last: it reads what every API test before it recorded."""
    last = [i for i in items if i.get_closest_marker("after_api_tests")]
    items[:] = [i for i in items if not i.get_closest_marker("after_api_tests")] + last


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "after_api_tests: runs after every other test of the session")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    out = os.environ.get("KOORDLET_API_RECORD")
    if out:
        Path(out).write_text(json.dumps({k: sorted(v) for k, v in API_CALLS.items()}))


V1_ROOT = Path("/sys/fs/cgroup")


def rmtree_cgroup(path: Path) -> None:
    """Remove a cgroup subtree bottom-up (cgroupfs refuses to remove a dir that still has children)."""
    remove_cgroup_tree(path)


@contextmanager
def real_v1_root(tmp_path: Path, subsystems: tuple[str, ...]) -> Iterator[tuple[Path, str]]:
    """An agent cgroup root whose `<subsystem>/` entries are symlinks to a uniquely named parent in each real v1
    hierarchy: real cgroupfs files, without touching the host's own cgroups. Yields (root, parent name); the
    parents are removed afterwards (processes must be gone by then)."""
    require(os.geteuid() == 0, "real cgroup tests need root")
    for sub in subsystems:
        base = V1_ROOT / sub
        require((base / "cgroup.procs").exists() and not (base / "cgroup.controllers").exists(),
                f"the cgroup v1 {sub} hierarchy is not mounted at {base}")
    name = f"koordlet-test-{uuid.uuid4().hex[:8]}"
    root = tmp_path / "cgroup"
    root.mkdir()
    made = []
    try:
        for sub in subsystems:
            (V1_ROOT / sub / name).mkdir()
            made.append(V1_ROOT / sub / name)
            (root / sub).symlink_to(V1_ROOT / sub / name)
        yield root, name
    finally:
        for path in made:
            rmtree_cgroup(path)


@functools.cache
def _agent_device_text(example: str) -> str:
    node = Path(__file__).resolve().parents[1] / "examples" / "nodes" / example
    args = [sys.executable, "-m", "koordlet", "devices", "--host-root", str(node), "--node-name", example]
    if (node / "nvml-snapshot.json").exists():
        args += ["--nvml-snapshot", str(node / "nvml-snapshot.json")]
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout


def agent_device(example: str, name: str | None = None) -> dict[str, Any]:
    """The Device CR our agent reports for examples/nodes/<example> (a fresh copy), optionally renamed."""
    doc: dict[str, Any] = json.loads(_agent_device_text(example))
    if name is not None:
        doc["metadata"]["name"] = name
    return doc


@pytest.fixture
async def watching(ext: Any) -> AsyncIterator[Any]:
    """The test module's extender (its `ext` fixture) listed once, then kept by its watches until the test ends."""
    await asyncio.to_thread(ext.refresh)
    ext.start_watches(timeout_seconds=5)
    try:
        yield ext
    finally:
        ext.stop_watches()
