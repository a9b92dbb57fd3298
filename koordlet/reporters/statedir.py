"""Standalone reports: CR-shaped JSON files under the state dir, laid out like API paths, written atomically."""

from __future__ import annotations

import json
import os
import tempfile

from apis.core.objects import JSON


class StateDirWriter:
    def __init__(self, state_dir: str) -> None:
        self.state_dir = state_dir

    def path(self, group: str, plural: str, name: str) -> str:
        return os.path.join(self.state_dir, group, plural, f"{name}.json")

    def write(self, group: str, plural: str, obj: JSON) -> str:
        path = self.path(group, plural, obj["metadata"]["name"])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(obj, f, indent=2, sort_keys=True)
                f.write("\n")
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
        return path
