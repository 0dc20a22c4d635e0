"""What a person sees at a terminal fits it (issue 36): ``ls``'s rows stay
one line each at 80 columns, saved sessions with a short STATE and why on a
line under the table; ``restore`` says each session once. Run in a real PTY
of a given width, as a person's terminal."""

from __future__ import annotations

from tests.cli.conftest import MULTISERVER, ms, on_a_terminal, person_env
from tests.cli.test_names import save_not_running
from tests.conftest import MsDirs


def at_a_terminal(ms_dirs: MsDirs, *args: str, cols: int = 80) -> list[str]:
    """``multiserver ARGS`` with stdout and stderr a terminal of ``cols``
    columns: the lines it showed."""
    env = {k: v for k, v in person_env(ms_dirs).items() if k not in ("COLUMNS", "LINES")}
    seen = on_a_terminal([MULTISERVER, *args], env, cols=cols)
    return seen.decode().replace("\r\n", "\n").splitlines()


async def test_ls_rows_fit_the_terminal_and_say_why_under_the_table(ms_dirs: MsDirs) -> None:
    long = "x" * 70
    await ms(ms_dirs, "new", "-d", "-n", "live", "--", "sh", "-c", f"exec sleep 300 # {long}")
    save_not_running(ms_dirs, "saved", ["sh", "-c", long], ms_dirs.root)
    lines = at_a_terminal(ms_dirs, "ls", cols=80)
    table = [line for line in lines if not line.startswith("  ")]
    assert all(len(line) <= 80 for line in table), lines
    assert [line.split()[0] for line in table] == ["NAME", "live", "saved"], lines
    assert "…" in table[1]  # the command, cut to fit
    assert lines[-1] == (
        "  saved: saved, not running: daemon 7 is not running; restore starts it again"
    )
    # To a pipe the same table, uncut by any width: the command at its
    # 40 characters, wider than the 80 columns above allowed.
    piped = (await ms(ms_dirs, "ls")).stdout.decode().splitlines()
    assert len(piped[1].split("  ")) > 1 and len(piped[1]) > len(table[1])


async def test_restore_at_a_terminal_says_each_session_once(ms_dirs: MsDirs) -> None:
    for name in ("one", "two"):
        save_not_running(ms_dirs, name, ["sleep", "300"], ms_dirs.root)
    lines = at_a_terminal(ms_dirs, "restore", "--no-relaunch")
    for name in ("one", "two"):
        said = [line for line in lines if line.lstrip().startswith(f"{name}")]
        assert len(said) == 1, lines
    # Piped, the table is there for a script, and each row is whole.
    piped = await ms(ms_dirs, "restore", "--no-relaunch")
    rows = piped.stdout.decode().splitlines()
    assert rows[0].split() == ["NAME", "OUTCOME", "DAEMON", "DETAIL", "TIME"]
    assert [r.split()[0] for r in rows[1:]] == ["one", "two"]
