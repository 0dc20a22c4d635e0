"""``multiserver completion bash|zsh|fish``, run in the real shells: each
script completes commands, flags and session names (a live local one, and
a saved session of a host as ``HOST:NAME``, looked up with ``ls --names``,
which asks no host). bash is driven through its completion function with
the words bash would give it; fish through ``complete -C``; zsh at a real
prompt in tmux, with a Tab. A shell that is not installed skips, saying
so (``make test-deps`` installs them as root).

Every process a test starts is stopped by pid (``ms_dirs`` stops the
daemons of its dirs and their children; the tmux server is killed by its
own socket, which only this test uses)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from multiserver_cli.commands.completion import specs
from multiserver_cli.main import build_parser
from restore import ArrangementStore, SessionLeaf
from tests.cli.conftest import MULTISERVER, person_env
from tests.conftest import MsDirs, wait_until_sync


def _need(shell: str) -> str:
    path = shutil.which(shell)
    if path is None:
        pytest.skip(f"{shell} is not installed (make test-deps installs it as root)")
    return path


@pytest.fixture
def sessions(ms_dirs: MsDirs) -> dict[str, str]:
    """A live session ``build`` and a saved one of host db1, ``db1:web``;
    the person's environment to complete in."""
    env = person_env(ms_dirs)
    made = subprocess.run(
        [MULTISERVER, "new", "-d", "-n", "build", "--", "sleep", "1000"],
        env=env,
        cwd=ms_dirs.root,
        capture_output=True,
        timeout=30,
    )
    assert made.returncode == 0, made.stderr
    with ArrangementStore.open() as store:
        store.add_session(SessionLeaf(name="db1:web", argv=["sh"], cwd="/", host="db1"))
    return env


def test_ls_names_lists_local_and_saved_host_sessions(sessions: dict[str, str]) -> None:
    out = subprocess.run(
        [MULTISERVER, "ls", "--names"], env=sessions, capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["build", "db1:web"]


def _bash(env: dict[str, str], line: str) -> list[str]:
    """What bash's completion offers for ``line`` (the cursor at its end),
    with COMP_WORDS split as bash splits them (at spaces and at ':')."""
    bash = _need("bash")
    words = line.replace(":", " : ").split()
    if line.endswith(" "):
        words.append("")
    # bash keeps "db1:" as "db1" ":" and the empty word after the colon.
    if line.endswith(":"):
        words.append("")
    quoted = " ".join(f"'{w}'" for w in words)
    script = (
        'eval "$(multiserver completion bash)"\n'
        f"COMP_LINE='{line}'; COMP_POINT=${{#COMP_LINE}}\n"
        f"COMP_WORDS=({quoted}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1))\n"
        '_multiserver; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    out = subprocess.run(
        [bash, "--norc", "--noprofile", "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    return [w for w in out.stdout.splitlines() if w]


def test_bash_completes_commands_flags_and_names(sessions: dict[str, str]) -> None:
    assert _bash(sessions, "multiserver at") == ["attach"]
    assert set(_bash(sessions, "multiserver ")) == {c.name for c in specs(build_parser())[1]}
    assert _bash(sessions, "multiserver --daemon 2 pe") == ["peek"]
    assert _bash(sessions, "multiserver restore --no-") == ["--no-relaunch"]
    assert "--relay" not in _bash(sessions, "multiserver attach --")  # internal
    assert _bash(sessions, "multiserver attach ") == ["build", "db1:web"]
    assert _bash(sessions, "multiserver kill bu") == ["build"]
    # bash replaces what follows the colon: the rest of the name only.
    assert _bash(sessions, "multiserver peek db1:") == ["web"]
    assert _bash(sessions, "multiserver host ") == ["add", "ls", "rm"]


def _fish(env: dict[str, str], line: str) -> list[str]:
    fish = _need("fish")
    script = f'multiserver completion fish | source; complete -C "{line}"'
    out = subprocess.run(
        [fish, "--no-config", "-c", script], env=env, capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    return [w.split("\t")[0] for w in out.stdout.splitlines() if w]


def test_fish_completes_commands_flags_and_names(sessions: dict[str, str]) -> None:
    assert _fish(sessions, "multiserver at") == ["attach"]
    assert _fish(sessions, "multiserver --daemon 2 pe") == ["peek"]
    assert "--no-relaunch" in _fish(sessions, "multiserver restore --no-")
    assert sorted(_fish(sessions, "multiserver attach ")) == ["build", "db1:web"]
    assert _fish(sessions, "multiserver peek db1:") == ["db1:web"]
    assert sorted(_fish(sessions, "multiserver completion ")) == ["bash", "fish", "zsh"]


def test_zsh_completes_at_a_real_prompt(sessions: dict[str, str], tmp_path: Path) -> None:
    zsh, tmux = _need("zsh"), _need("tmux")
    rc = tmp_path / "zdot"
    rc.mkdir()
    (rc / ".zshrc").write_text(
        "PS1='zsh> '\nautoload -Uz compinit && compinit -u\nsource <(multiserver completion zsh)\n"
    )
    sock = str(tmp_path / "tmux.sock")
    env = {**sessions, "ZDOTDIR": str(rc), "TERM": "xterm"}
    base = [tmux, "-S", sock, "-f", "/dev/null"]
    subprocess.run(
        [*base, "new-session", "-d", "-x", "120", "-y", "20", zsh, "-i"], env=env, check=True
    )

    def screen() -> str:
        return subprocess.run(
            [*base, "capture-pane", "-p"], capture_output=True, text=True, check=True
        ).stdout

    def tab_after(text: str, expect: str) -> str:
        subprocess.run([*base, "send-keys", "C-u", text, "Tab"], check=True)
        wait_until_sync(lambda: expect in screen(), 15)
        return screen()

    try:
        assert wait_until_sync(lambda: "zsh>" in screen(), 15), screen()
        # (capture-pane drops the space a completed word is followed by.)
        assert "zsh> multiserver attach" in tab_after("multiserver att", "multiserver attach")
        assert "zsh> multiserver peek build" in tab_after("multiserver peek bu", "peek build")
        assert "zsh> multiserver kill db1:web" in tab_after("multiserver kill db1:", "db1:web")
        assert "zsh> multiserver ls --json" in tab_after("multiserver ls --j", "--json")
    finally:
        subprocess.run([*base, "kill-server"], check=False)
