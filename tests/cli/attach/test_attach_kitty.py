"""The detach key pressed for real, in kitty (headless under Xvfb, keys
pressed with xdotool), while the program attached has turned on the kitty
keyboard protocol: kitty then sends Ctrl-\\ as ``ESC[92;5u``, not 0x1c."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable

import pytest

from tests.cli.conftest import SCREEN_TIMEOUT, run_ms
from tests.cli.test_layout_kitty import KittyRun, display, kittys  # noqa: F401 - fixtures
from tests.conftest import MsDirs, wait_until_sync

XDOTOOL = shutil.which("xdotool")
pytestmark = pytest.mark.skipif(
    XDOTOOL is None or shutil.which("kitty") is None or shutil.which("Xvfb") is None,
    reason="kitty, Xvfb or xdotool is not installed",
)

# The program: turns the protocol on with ``flags``, then shows each byte
# it reads, as it reads it.
PROGRAM = (
    "stty raw -echo opost onlcr; printf '\\033[>{flags}upushed\\r\\n'; exec od -An -tx1 -w1 -v"
)


def press(k: KittyRun, keys: str) -> None:
    assert XDOTOOL is not None
    subprocess.run([XDOTOOL, "key", "--clearmodifiers", keys], env=k.env, check=True, timeout=10)


def shown(k: KittyRun) -> str:
    return k.at_check("get-text") or ""


@pytest.mark.parametrize("flags", [1, 31])
def test_ctrl_backslash_detaches_under_the_kitty_keyboard_protocol(
    ms_dirs: MsDirs,
    kittys: Callable[[str], KittyRun],  # noqa: F811 - the fixture
    flags: int,
) -> None:
    k = kittys("keys")
    program = PROGRAM.format(flags=flags)
    k.start("sh", "-c", f'multiserver new -n k -- sh -c "{program}"; echo "st=$?"; exec sleep 1000')
    assert wait_until_sync(lambda: "pushed" in shown(k), SCREEN_TIMEOUT), shown(k)
    # The protocol is on: Ctrl-A reaches the program as ESC [ 9 7 ; 5 u
    # (flag 8 adds Ctrl's own press and release).
    press(k, "ctrl+a")
    press(k, "ctrl+backslash")
    assert wait_until_sync(lambda: "st=0" in shown(k), SCREEN_TIMEOUT), shown(k)
    assert "[detached from k]" in shown(k)
    (listed,) = json.loads(run_ms(ms_dirs, "ls", "--json").stdout)
    assert (listed["name"], listed["state"], listed["held"]) == ("k", "running", False)
    read = run_ms(ms_dirs, "peek", "k").stdout.decode().replace("\r", "")
    assert " 1b\n 5b\n 39\n 37\n 3b\n 35\n" in read, read
    assert " 39\n 32\n" not in read  # nothing of ^\ (92) reached the program
