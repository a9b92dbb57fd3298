"""The shape of a Kubernetes object as both programs hold it (decoded JSON), and typed reads of its metadata."""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]
