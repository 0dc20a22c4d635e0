"""What a session's program inherits, read from the real child's
``/proc/PID/environ``: the command run from inside tmux and GNU screen, with
credentials in its environment, as ``new`` and as ``restore``'s relaunch."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping

from tests.cli.conftest import MULTISERVER, listed, person_env
from tests.conftest import MsDirs, is_dead, wait_until

# A person's shell inside tmux inside screen, with credentials exported.
INSIDE = {
    "TMUX": "/tmp/tmux-1000/default,4242,0",
    "TMUX_PANE": "%7",
    "STY": "4242.pts-3.host",
    "WINDOW": "1",
    "MULTISERVER_SOMETHING": "for the client",
    "ANTHROPIC_API_KEY": "sk-ant-secret",
    "GITHUB_TOKEN": "ghp_secret",
    "OPENAI_API_KEY": "sk-kept",
    "DB_PASSWORD": "hunter2",
    "MY_SECRET": "s",
    "ANTHROPIC_BASE_URL": "https://example.invalid",
    "PLAIN": "plain",
}
NEVER = {"TMUX", "TMUX_PANE", "STY", "WINDOW", "MULTISERVER_SOMETHING"}


def run(ms_dirs: MsDirs, extra: Mapping[str, str], *args: str) -> str:
    env = {**person_env(ms_dirs), **extra}
    result = subprocess.run(
        [MULTISERVER, *args],
        env=env,
        cwd=ms_dirs.root,
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.decode()


def environ(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        pairs = [p.split(b"=", 1) for p in f.read().split(b"\0") if p]
    return {k.decode(): v.decode() for k, v in pairs}


async def test_new_strips_the_multiplexer_and_credentials(ms_dirs: MsDirs) -> None:
    extra = {**INSIDE, "MULTISERVER_STRIP_ENV": "DB_*:NOTHING_*"}
    run(ms_dirs, extra, "new", "-d", "-n", "bare", "--", "sleep", "100")
    run(
        ms_dirs,
        extra,
        "new",
        "-d",
        "-n",
        "opts",
        "--strip-env",
        "MY_*",
        "--keep-env",
        "OPENAI_API_KEY",
        "--",
        "sleep",
        "100",
    )
    children = await listed(ms_dirs)
    bare, opts = environ(children["bare"].pid), environ(children["opts"].pid)
    for env in (bare, opts):
        assert not env.keys() & NEVER, env
        assert not env.keys() & {"ANTHROPIC_API_KEY", "GITHUB_TOKEN", "DB_PASSWORD"}
        assert env["PLAIN"] == "plain"
        assert env["ANTHROPIC_BASE_URL"] == "https://example.invalid"
        assert env["TERM"] == "xterm"
    assert "OPENAI_API_KEY" not in bare and bare["MY_SECRET"] == "s"
    assert opts["OPENAI_API_KEY"] == "sk-kept" and "MY_SECRET" not in opts


async def test_restore_relaunches_without_them(ms_dirs: MsDirs) -> None:
    run(ms_dirs, {}, "new", "-d", "-n", "r", "--", "sleep", "100")
    old = (await listed(ms_dirs))["r"].pid
    run(ms_dirs, {}, "stop", "--force")
    await wait_until(lambda: is_dead(old), 10.0, "the session's program gone")
    report = json.loads(
        run(ms_dirs, INSIDE, "restore", "--json", "--strip-env", "PLAIN", "--keep-env", "GITHUB_*")
    )
    assert [(s["name"], s["outcome"]) for s in report["sessions"]] == [("r", "relaunched")]
    env = environ((await listed(ms_dirs))["r"].pid)
    assert not env.keys() & NEVER, env
    assert not env.keys() & {"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "PLAIN"}
    assert env["GITHUB_TOKEN"] == "ghp_secret" and env["MY_SECRET"] == "s"
