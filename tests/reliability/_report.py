"""Figures a reliability test measured: printed (``pytest -s`` shows them)
and, when ``RELIABILITY_REPORT`` names a file, appended to it as one JSON
line per test. docs/reliability.md is written from that file."""

from __future__ import annotations

import json
import os
import time


def record(test: str, **figures: object) -> None:
    line = json.dumps({"test": test, "at": time.strftime("%Y-%m-%d %H:%M:%S"), **figures})
    print(f"\n[reliability] {line}")
    path = os.environ.get("RELIABILITY_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")
