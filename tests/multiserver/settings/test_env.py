"""What a session inherits: the daemon's rule (``child_env``) and the
command's credential stripping (``launch_env``). The real children's
environments are checked in test_daemon.py and tests/cli/test_env_real.py."""

from __future__ import annotations

from multiserver import launch_env
from multiserver.internal import DEFAULT_STRIP_ENV, strip_env
from multiserver.settings._env import NEVER_INHERITED, child_env, env_patterns


def test_the_daemon_never_passes_the_clients_multiplexer_or_settings() -> None:
    env = {
        "TMUX": "/tmp/tmux-0/default,1,0",
        "TMUX_PANE": "%3",
        "STY": "123.pts-0.host",
        "WINDOW": "2",
        "MULTISERVER_DAEMON": "3",
        "MULTISERVER_STRIP_ENV": "X",
        "TMUX_TMPDIR": "/run/tmux",  # tmux's own setting, not the client's server
        "WINDOWID": "1234",
        "HOME": "/home/u",
    }
    assert child_env(env) == {
        "TMUX_TMPDIR": "/run/tmux",
        "WINDOWID": "1234",
        "HOME": "/home/u",
        "TERM": "xterm-256color",
    }
    assert {"TMUX", "TMUX_PANE", "STY", "WINDOW"} == NEVER_INHERITED
    assert child_env({"TERM": "vt100"}) == {"TERM": "vt100"}
    assert child_env({"TERM": ""})["TERM"] == "xterm-256color"


CREDENTIALS = {
    "ANTHROPIC_API_KEY": "a",
    "CLAUDE_API_KEY": "b",
    "OPENAI_API_KEY": "c",
    "ANTHROPIC_AUTH_TOKEN": "d",
    "CLAUDE_CODE_OAUTH_TOKEN": "e",
    "GITHUB_TOKEN": "f",
    "GH_TOKEN": "g",
    "AWS_SECRET_ACCESS_KEY": "h",
    "AWS_SESSION_TOKEN": "i",
    "HF_API_TOKEN": "j",
    "SLACK_ACCESS_TOKEN": "k",
}
# Configuration, not secrets: the default keeps them.
CONFIGURATION = {
    "ANTHROPIC_BASE_URL": "https://example.invalid",
    "ANTHROPIC_MODEL": "m",
    "AWS_PROFILE": "dev",
    "AWS_ACCESS_KEY_ID": "AKIA",  # an id; its secret is AWS_SECRET_ACCESS_KEY
    "SSH_AUTH_SOCK": "/run/agent",
    "API_KEY_FILE": "/etc/key",
    "TOKENIZERS_PARALLELISM": "false",
    "PATH": "/bin",
    "api_key": "lower case: not matched",
}


def test_the_default_strips_credentials_and_keeps_configuration() -> None:
    assert launch_env({**CREDENTIALS, **CONFIGURATION}) == CONFIGURATION
    assert DEFAULT_STRIP_ENV[0] == "*_API_KEY"


def test_strip_and_keep_add_patterns_from_the_environment_and_the_options() -> None:
    environ = {
        **CREDENTIALS,
        **CONFIGURATION,
        "MULTISERVER_STRIP_ENV": "AWS_*::SSH_AUTH_SOCK",
        "MULTISERVER_KEEP_ENV": "GITHUB_TOKEN",
        "DB_PASSWORD": "p",
    }
    got = launch_env(environ, strip=["*_PASSWORD", "PATH"], keep=["OPENAI_*", "AWS_PROFILE"])
    assert got == {
        "OPENAI_API_KEY": "c",  # kept by --keep-env
        "GITHUB_TOKEN": "f",  # kept by $MULTISERVER_KEEP_ENV
        "AWS_PROFILE": "dev",  # kept though AWS_* strips it
        "ANTHROPIC_BASE_URL": "https://example.invalid",
        "ANTHROPIC_MODEL": "m",
        "API_KEY_FILE": "/etc/key",
        "TOKENIZERS_PARALLELISM": "false",
        "api_key": "lower case: not matched",
        # The command's own settings are the daemon's to drop (child_env).
        "MULTISERVER_STRIP_ENV": "AWS_*::SSH_AUTH_SOCK",
        "MULTISERVER_KEEP_ENV": "GITHUB_TOKEN",
    }
    # --keep-env '*' turns the stripping off.
    assert launch_env(CREDENTIALS, keep=["*"]) == CREDENTIALS


def test_patterns_are_whole_name_case_sensitive_globs() -> None:
    env = {"AB": "1", "XAB": "2", "ab": "3", "A1": "4"}
    assert strip_env(env, ["AB"]) == {"XAB": "2", "ab": "3", "A1": "4"}
    assert strip_env(env, ["A?"]) == {"XAB": "2", "ab": "3"}
    assert strip_env(env, ["[A-Z]*"], keep=["A1"]) == {"ab": "3", "A1": "4"}
    assert env_patterns(None) == [] and env_patterns("A:B*::") == ["A", "B*"]
