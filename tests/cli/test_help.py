"""The help a person reads: every flag and positional of every command says what it is, no help cites sections of
design documents outside this repository or shows reStructuredText backticks, each method's command group ends
with example command lines that parse, and ``agentmill list --papers`` prints one row per paper."""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Iterator

import pytest

from agentmill.cli.main import build_parser, main

CORE_COMMANDS = ("list", "run", "reproduce", "report")
"""The experiment commands of ``cli.main``; every other top-level command is a method's group and needs examples."""
FORBIDDEN = ("spec §", "``")


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ("agentmill",)
             ) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(command path, parser) for the parser and every subcommand below it."""
    yield " ".join(path), parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def _texts(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str]]:
    """(where, text) of everything ``-h`` shows: description, epilog, each action's help, each subcommand's help."""
    for where, text in (("description", parser.description), ("epilog", parser.epilog)):
        if text:
            yield where, text
    for action in parser._actions:
        if action.help and action.help != argparse.SUPPRESS:
            yield "/".join(action.option_strings) or action.dest, action.help
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                if choice.help:
                    yield f"subcommand {choice.dest}", choice.help


def _examples(epilog: str | None) -> list[str]:
    return [line.strip() for line in (epilog or "").splitlines() if line.strip().startswith("agentmill ")]


PARSERS = list(_parsers(build_parser()))
GROUPS = [(name, sub) for name, sub in PARSERS if name.count(" ") == 1 and name.split()[1] not in CORE_COMMANDS]


def test_the_walk_sees_every_command() -> None:
    names = {name for name, _ in PARSERS}
    assert {"agentmill list", "agentmill autocog serve", "agentmill constraint-rot attack optimise",
            "agentmill dspark train", "agentmill collapse table"} <= names
    assert len(GROUPS) >= 10


def test_every_action_has_a_help_line() -> None:
    missing = [f"{name}: {'/'.join(a.option_strings) or a.dest}" for name, parser in PARSERS for a in parser._actions
               if not isinstance(a, argparse._HelpAction) and (not a.help or a.help == argparse.SUPPRESS)]
    assert not missing, "actions without help:\n" + "\n".join(missing)


def test_no_spec_citations_or_rst_backticks() -> None:
    bad = [f"{name} [{where}]: {text[:80]}" for name, parser in PARSERS for where, text in _texts(parser)
           if any(f in text for f in FORBIDDEN)]
    assert not bad, "help texts citing 'spec §' or with ``:\n" + "\n".join(bad)


@pytest.mark.parametrize("name,parser", PARSERS, ids=[name for name, _ in PARSERS])
def test_help_renders(name: str, parser: argparse.ArgumentParser) -> None:
    text = parser.format_help()  # a stray % in a help string fails here, as it would on -h
    assert text.startswith(f"usage: {name}")


def test_top_level_description_is_plain_text() -> None:
    parser = build_parser()
    assert parser.description and "`" not in parser.description
    assert _examples(parser.epilog), "the top-level help ends with examples"


@pytest.mark.parametrize("name,parser", GROUPS, ids=[name for name, _ in GROUPS])
def test_each_method_group_has_examples(name: str, parser: argparse.ArgumentParser) -> None:
    examples = _examples(parser.epilog)
    assert 1 <= len(examples) <= 3, f"{name}: expected 1-3 example lines in the epilog, got {examples}"
    assert all(e.startswith(f"{name} ") or e == name for e in examples), examples
    assert parser.formatter_class is argparse.RawDescriptionHelpFormatter  # the lines keep their breaks
    assert "\n  " + examples[0] in parser.format_help()


@pytest.mark.parametrize("line", [e for _, p in [PARSERS[0], *GROUPS] for e in _examples(p.epilog)])
def test_example_commands_parse(line: str) -> None:
    args = build_parser().parse_args(shlex.split(line, comments=True)[1:])  # SystemExit(2) on a bad flag
    assert callable(args.fn)


def test_list_papers_prints_one_row_per_paper(capsys: pytest.CaptureFixture[str]) -> None:
    from agentmill.experiments import registry, unavailable
    from agentmill.report.papers import group_by_paper

    assert main(["list", "--papers"]) == 0
    out = capsys.readouterr().out
    rows = [[c.strip() for c in line.strip().strip("│").split("│")] for line in out.splitlines()
            if re.match(r"^│ \S", line)]  # a row's first line (a wrapped citation continues on blank-label lines)
    papers = group_by_paper(registry())
    assert len(rows) == len(papers) + len(unavailable())
    for paper, row in zip(papers, rows):
        assert row[:3] == [paper.label, str(len(paper.experiments)),
                           str(sum(len(e.claims) for e in paper.experiments))]
        assert paper.citation.startswith(row[3])
    assert f"{len(papers)} papers" in out
