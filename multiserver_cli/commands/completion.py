"""``multiserver completion bash|zsh|fish``: a script that completes the
commands, their flags, and session names (this machine's, and ``HOST:NAME``
of the saved sessions of other hosts).

The commands and flags are written into the script from the parser, the
one definition (a test runs each script in its shell against it). Session
names are looked up when completing, with ``multiserver ls --names``: one
round trip per daemon on the light path, and no host is asked over ssh (a
host's sessions this machine saved are named from its store)."""

from __future__ import annotations

import argparse
from argparse import ArgumentParser, Namespace

NAME = "completion"
HELP = "print a script that completes commands, flags and session names in bash, zsh or fish"
# One way, as the README says it: evaluated at each shell's start, so that
# it follows an upgrade (a copy appended to ~/.bashrc would go stale).
EXAMPLE = 'multiserver completion bash   # in ~/.bashrc: eval "$(multiserver completion bash)"'

# main hands this command the whole parser (args.whole_parser): the
# commands are main's table, which no command imports.
WHOLE_PARSER = True

SHELLS = ("bash", "zsh", "fish")
# The lookup a script runs for session names.
NAMES = "command multiserver ls --names 2>/dev/null"


def add_arguments(p: ArgumentParser) -> None:
    p.add_argument("shell", choices=SHELLS, help="the shell to complete in")


class Spec:
    """What completes after one command: its flags, the words its first
    argument takes (a subcommand, a choice), whether it takes a session."""

    __slots__ = ("flags", "help", "name", "sessions", "words")

    def __init__(self, name: str, help: str, parser: ArgumentParser) -> None:
        self.name, self.help = name, help
        self.flags: list[tuple[str, str]] = []  # (option string, help)
        self.words: list[str] = []
        self.sessions = False
        for action in parser._actions:
            if action.help == argparse.SUPPRESS:  # internal (attach --relay)
                continue
            text = str(action.help or "")
            if action.option_strings:
                self.flags += [(o, text) for o in action.option_strings]
            elif isinstance(action, argparse._SubParsersAction):
                self.words += list(action.choices)
            elif action.choices is not None:
                self.words += [str(c) for c in action.choices]
            elif action.dest == "name":  # attach, peek, kill NAME
                self.sessions = True


def specs(parser: ArgumentParser) -> tuple[list[tuple[str, str]], list[Spec]]:
    """The top level's flags, and every command's spec, from the whole
    parser."""
    top = [(o, str(a.help or "")) for a in parser._actions for o in a.option_strings]
    (subs,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {c.dest: str(c.help or "") for c in subs._choices_actions}
    return top, [Spec(name, helps.get(name, ""), p) for name, p in subs.choices.items()]


def run(args: Namespace) -> int:
    top, commands = specs(args.whole_parser)
    script = {"bash": bash_script, "zsh": zsh_script, "fish": fish_script}[args.shell]
    print(script(top, commands), end="")
    return 0


def _words(items: list[str]) -> str:
    return " ".join(items)


def bash_script(top: list[tuple[str, str]], commands: list[Spec]) -> str:
    cases = "".join(
        f"        {c.name}) flags='{_words([f for f, _ in c.flags])}'; words='{_words(c.words)}';"
        f" sessions={int(c.sessions)} ;;\n"
        for c in commands
    )
    return f"""# multiserver completion for bash: eval "$(multiserver completion bash)"
_multiserver() {{
    local line=${{COMP_LINE:0:COMP_POINT}}
    # The word being completed, whole (bash splits HOST:NAME at the colon).
    local word=${{line##*[[:space:]]}}
    local cmd="" i w flags="" words="" sessions=0
    for ((i = 1; i < COMP_CWORD; i++)); do
        w=${{COMP_WORDS[i]}}
        case $w in
            --daemon) ((i++)); continue ;;
            -*) continue ;;
        esac
        cmd=$w
        break
    done
    case $cmd in
        "") flags='{_words([f for f, _ in top])}'; words='{_words([c.name for c in commands])}' ;;
{cases}    esac
    if [[ $word == -* ]]; then
        words=$flags
    elif [[ $sessions == 1 && -n $cmd ]]; then
        words="$words $({NAMES})"
    fi
    local IFS=$' \\t\\n'
    COMPREPLY=($(compgen -W "$words" -- "$word"))
    if [[ $word == *:* ]]; then  # bash replaces only what follows the last colon
        local colon=${{word%"${{word##*:}}"}}
        COMPREPLY=("${{COMPREPLY[@]#"$colon"}}")
    fi
}}
complete -F _multiserver multiserver
"""


def zsh_script(top: list[tuple[str, str]], commands: list[Spec]) -> str:
    cases = "".join(
        f"        {c.name}) flags=({_words([f for f, _ in c.flags])}); choices=({_words(c.words)});"
        f" sessions={int(c.sessions)} ;;\n"
        for c in commands
    )
    return f"""#compdef multiserver
# multiserver completion for zsh: source <(multiserver completion zsh), after compinit
_multiserver() {{
    local cmd="" i=2
    local -a flags choices  # not "words": zsh's own, the line's words
    local sessions=0
    while (( i < CURRENT )); do
        case ${{words[i]}} in
            --daemon) (( i += 2 )); continue ;;
            -*) (( i++ )); continue ;;
        esac
        cmd=${{words[i]}}
        break
    done
    local cur=${{words[CURRENT]}}
    case $cmd in
        "") flags=({_words([f for f, _ in top])}); choices=({_words([c.name for c in commands])}) ;;
{cases}    esac
    if [[ $cur == -* ]]; then
        compadd -- $flags
        return
    fi
    if (( sessions )); then
        choices+=(${{(f)"$({NAMES})"}})
    fi
    compadd -- $choices
}}
if (( $+functions[compdef] )); then
    compdef _multiserver multiserver
fi
"""


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def fish_script(top: list[tuple[str, str]], commands: list[Spec]) -> str:
    lines = [
        "# multiserver completion for fish: multiserver completion fish | source",
        "function __multiserver_command",
        "    set -l tokens (commandline -opc)",
        "    set -e tokens[1]",
        "    while set -q tokens[1]",
        "        switch $tokens[1]",
        "            case --daemon",
        "                set -e tokens[1]",
        "                set -q tokens[1]; and set -e tokens[1]",
        "            case '-*'",
        "                set -e tokens[1]",
        "            case '*'",
        "                echo $tokens[1]",
        "                return 0",
        "        end",
        "    end",
        "    return 1",
        "end",
        "complete -c multiserver -f",
    ]

    def flag(condition: str, option: str, text: str) -> str:
        how = f"-l {option[2:]}" if option.startswith("--") else f"-s {option[1:]}"
        return f"complete -c multiserver -n {condition} {how} -d {_fish_quote(text)}"

    none = "'not __multiserver_command'"
    for option, text in top:
        lines.append(flag(none, option, text))
    for c in commands:
        lines.append(f"complete -c multiserver -n {none} -a {c.name} -d {_fish_quote(c.help)}")
        this = f"'test (__multiserver_command) = {c.name}'"
        lines += [flag(this, option, text) for option, text in c.flags]
        if c.words:
            lines.append(f"complete -c multiserver -n {this} -a {_fish_quote(_words(c.words))}")
        if c.sessions:
            lines.append(f"complete -c multiserver -n {this} -a '({NAMES})'")
    return "\n".join(lines) + "\n"
