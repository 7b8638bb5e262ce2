"""Every option says what it does, and the global -v works after the subcommand too."""

from __future__ import annotations

import argparse

from noetl.cli.main import build_parser


def _options(parser: argparse.ArgumentParser, name: str) -> list[tuple[str, argparse.Action]]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                out.extend(_options(sub, f"{name} {sub_name}"))
        elif action.option_strings and action.dest != "help":
            out.append((name, action))
    return out


def test_every_option_has_help_text() -> None:
    silent = [(cmd, a.option_strings) for cmd, a in _options(build_parser(), "noetl") if not a.help]
    assert not silent, f"options without help: {silent}"


def test_verbose_before_or_after_the_subcommand() -> None:
    parser = build_parser()
    assert parser.parse_args(["-v", "run", "f.yaml"]).verbose is True
    assert parser.parse_args(["run", "f.yaml", "-v"]).verbose is True
    assert parser.parse_args(["run", "f.yaml"]).verbose is False
    assert parser.parse_args(["credentials", "list", "-v"]).verbose is True
