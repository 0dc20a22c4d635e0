"""What a session showed, kept on disk as it comes (``multiserver._durable``):
the file holds the newest output, what reaches the disk is at most twice the
output (plus a little a flush) whatever its pattern, one thread may append
while another flushes, and a state file is written only when it changes."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from multiserver._durable import instance_dir, output_path
from multiserver.internal import DurableOutput, read_output, read_state

KEEP = 64 * 1024


def kept(tmp_path: Path, keep: int = KEEP) -> DurableOutput:
    tmp_path.chmod(0o700)
    return DurableOutput(tmp_path / "out" / "1.out", keep)


def test_what_is_flushed_is_appended_and_read_back(tmp_path: Path) -> None:
    out = kept(tmp_path)
    out.append(b"one\r\n")
    out.append(b"two\r\n")
    assert not out.path.exists()  # nothing before a flush
    out.flush()
    out.append(b"three\r\n")
    out.flush()
    assert out.path.read_bytes() == b"one\r\ntwo\r\nthree\r\n"
    assert read_output(out.path, KEEP) == b"one\r\ntwo\r\nthree\r\n"
    assert out.written == len(b"one\r\ntwo\r\nthree\r\n")
    assert oct(os.stat(out.path).st_mode & 0o777) == "0o600"
    assert oct(os.stat(out.path.parent).st_mode & 0o777) == "0o700"


def test_the_file_keeps_the_newest_bytes_from_a_line_start(tmp_path: Path) -> None:
    out = kept(tmp_path)
    lines = [b"line %05d\r\n" % i for i in range(30_000)]
    for line in lines:
        out.append(line)
        out.flush()
    data = out.path.read_bytes()
    assert len(data) < 2 * KEEP
    assert b"".join(lines).endswith(data) and data.startswith(b"line ")
    newest = read_output(out.path, KEEP)
    assert newest is not None and len(newest) <= KEEP and newest.startswith(b"line ")
    assert b"".join(lines).endswith(newest)


PATTERNS = {
    "clock": [b"\r\x1b[K12:00:%02d" % (i % 60) for i in range(30_000)],  # 9 bytes a second
    "flood": [os.urandom(3000).hex().encode() + b"\r\n" for _ in range(400)],
    "redraw": [b"\x1b[H" + b"x" * 1900 for _ in range(500)],  # a full screen each time
}


@pytest.mark.parametrize("pattern", sorted(PATTERNS))
@pytest.mark.parametrize("per_flush", [1, 7, 100])
def test_bytes_written_are_at_most_twice_the_output_plus_a_flush_s_metadata(
    tmp_path: Path, pattern: str, per_flush: int
) -> None:
    """Issue 35: the saver rewrote the whole kept tail at each pass (10,000x
    the output of a clock). Appends and amortized compaction: at most 2x."""
    out = kept(tmp_path)
    chunks = PATTERNS[pattern]
    flushes = 0
    for i, chunk in enumerate(chunks, 1):
        out.append(chunk)
        if i % per_flush == 0:
            out.flush()
            flushes += 1
    out.flush()
    output = sum(map(len, chunks))
    assert out.written <= 2 * output, (out.written, output)
    assert b"".join(chunks).endswith(out.path.read_bytes())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=3000), st.booleans()), max_size=60))
def test_any_output_and_any_flushes_keep_the_bound_and_the_tail(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[bytes, bool]]
) -> None:
    out = kept(tmp_path_factory.mktemp("d"), keep=2048)
    for data, flush in steps:
        out.append(data)
        if flush:
            out.flush()
    out.flush()
    output = b"".join(d for d, _ in steps)
    assert out.written <= 2 * len(output)
    on_disk = out.path.read_bytes() if out.path.exists() else b""
    assert output.endswith(on_disk)
    assert len(on_disk) >= min(len(output), 2048) - 4096  # a safe start may skip a little


def test_one_thread_appends_while_another_flushes(tmp_path: Path) -> None:
    out = kept(tmp_path, keep=1 << 20)
    chunks = [b"%07d\n" % i for i in range(50_000)]
    done = threading.Event()

    def appender() -> None:
        for chunk in chunks:
            out.append(chunk)
        done.set()

    thread = threading.Thread(target=appender)
    thread.start()
    while not done.is_set():
        out.flush()
    thread.join()
    out.flush()
    assert out.path.read_bytes() == b"".join(chunks)[-len(out.path.read_bytes()) :]
    assert out.path.read_bytes().endswith(chunks[-1])


def test_a_failed_write_keeps_what_waits_for_the_next(tmp_path: Path) -> None:
    out = kept(tmp_path)
    out.append(b"first ")
    out.flush()
    aside = tmp_path / "aside"
    out.path.rename(aside)
    out.path.mkdir()  # a write there fails, for root too (EISDIR)
    out.append(b"second")
    with pytest.raises(OSError):
        out.flush()
    assert out.pending == len(b"second")
    out.path.rmdir()
    aside.rename(out.path)
    out.flush()
    assert out.path.read_bytes() == b"first second"


def test_the_state_file_is_written_only_when_it_changes(tmp_path: Path) -> None:
    out = kept(tmp_path)
    out.note(cwd="/tmp", argv=["sh"])
    first = out.written
    out.note(cwd="/tmp", argv=["sh"])
    assert out.written == first  # unchanged: not written again
    out.note(exit_code=3)
    assert read_state(out.path) == {"cwd": "/tmp", "argv": ["sh"], "exit_code": 3}
    # Another writer's note (the daemon's exit, while a client held it) is kept.
    other = DurableOutput(out.path, KEEP)
    other.note(exit_code=5)
    out.note(cwd="/var")
    assert read_state(out.path) == {"cwd": "/var", "argv": ["sh"], "exit_code": 5}


def test_a_state_file_that_is_no_json_object_is_none(tmp_path: Path) -> None:
    out = kept(tmp_path)
    out.append(b"x")
    out.flush()
    state = out.path.with_suffix(".json")
    for junk in (b"", b"[1, 2]", b"{", b"\xff\xfe", b"null"):
        state.write_bytes(junk)
        assert read_state(out.path) is None


def test_remove_takes_the_files_and_an_empty_instance_dir(tmp_path: Path) -> None:
    out = kept(tmp_path)
    out.append(b"x")
    out.flush()
    out.note(cwd="/")
    out.remove()
    assert not out.path.parent.exists()


def test_paths_are_named_by_instance_and_child_and_refuse_anything_else(tmp_path: Path) -> None:
    instance = "0123456789abcdef0123456789abcdef"
    assert output_path(tmp_path, instance, 7) == tmp_path / "output" / instance / "7.out"
    for bad in ("../../etc", "", "ABC", "0123456789abcdef/../x", "0" * 65):
        with pytest.raises(ValueError):
            instance_dir(tmp_path, bad)
