"""How a daemon was started, as its lock file says (``multiserver/daemon/_origin.py``):
what is written reads back; anything else in the file is no origin (None),
never an error, since ``multiserver daemon`` then only says less."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from multiserver.daemon._origin import MAX_SIZE, DaemonOrigin, read_origin, write_origin

ORIGINS = [
    DaemonOrigin(42, "ab" * 16, "service", None),
    DaemonOrigin(43, "cd" * 16, "on-demand", 5.0),
    DaemonOrigin(44, "ef" * 16, "foreground", 0.25),
    DaemonOrigin(45, "01" * 16, "service", None, started_at=1.8e9, upgraded_at=1.8e9 + 5),
]


@pytest.mark.parametrize("origin", ORIGINS)
def test_what_is_written_reads_back(tmp_path: Path, origin: DaemonOrigin) -> None:
    lock = tmp_path / "lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        write_origin(fd, DaemonOrigin(1, "00", "service", None))  # a longer line first
        write_origin(fd, origin)
    finally:
        os.close(fd)
    assert read_origin(lock) == origin


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"{",
        b"null",
        b"[42]",
        b"\xff\xfe",
        b'{"pid": "42", "instance_id": "ab", "started": "service", "idle_exit": null}',
        b'{"pid": true, "instance_id": "ab", "started": "service", "idle_exit": null}',
        b'{"pid": 42, "instance_id": "ab", "started": "by-hand", "idle_exit": null}',
        b'{"pid": 42, "instance_id": "ab", "started": "service", "idle_exit": "5"}',
        b'{"pid": 42, "instance_id": "ab", "started": "service"}',
        b'{"pid": 42, "instance_id": "ab", "started": "service", "idle_exit": null,'
        b' "started_at": "yesterday"}',
    ],
)
def test_anything_else_is_no_origin(data: bytes) -> None:
    assert DaemonOrigin.from_bytes(data) is None


def test_unknown_fields_are_ignored_and_an_int_is_seconds() -> None:
    data = b'{"pid": 42, "instance_id": "ab", "started": "on-demand", "idle_exit": 5, "x": []}'
    assert DaemonOrigin.from_bytes(data) == DaemonOrigin(42, "ab", "on-demand", 5.0)


def test_a_line_of_an_older_daemon_has_no_times() -> None:
    """A lock file written before started_at existed: read, its times None."""
    data = b'{"pid": 42, "instance_id": "ab", "started": "service", "idle_exit": null}'
    origin = DaemonOrigin.from_bytes(data)
    assert origin == DaemonOrigin(42, "ab", "service", None)
    assert origin is not None and origin.started_at is None and origin.upgraded_at is None


def test_no_file_a_huge_file_or_a_symlink_is_no_origin(tmp_path: Path) -> None:
    assert read_origin(tmp_path / "missing") is None
    huge = tmp_path / "huge"
    huge.write_bytes(ORIGINS[0].to_bytes().rstrip() + b" " * MAX_SIZE)
    assert read_origin(huge) is None
    real = tmp_path / "real"
    real.write_bytes(ORIGINS[0].to_bytes())
    (tmp_path / "link").symlink_to(real)
    assert read_origin(tmp_path / "link") is None
    assert read_origin(real) == ORIGINS[0]


def test_lifetime_says_how_it_started_and_when_it_ends() -> None:
    assert [o.lifetime() for o in ORIGINS] == [
        "started by the service (stays up)",
        "started on demand (exits when idle for 5 s)",
        "started in the foreground (exits when idle for 0.25 s)",
        "started by the service (stays up)",
    ]
