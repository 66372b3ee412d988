"""When the CLI shows its progress bar: on a terminal only, never with --json or --quiet, never for a
command that shows its own (the demo)."""

from __future__ import annotations

import argparse
import io

import pytest

from airflow_provider_iceberg_exec.cli import _parser
from airflow_provider_iceberg_exec.cli.progress import wants_display


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (["compact", "ns.t"], True),
        (["compact", "ns.t", "--json"], False),
        (["compact", "ns.t", "--quiet"], False),
        (["delete", "ns.t", "--where", "id = 1", "-q"], False),
        (["merge", "ns.t", "--on", "id", "--source-table", "ns.s", "--when-matched", "delete"], True),
        (["demo"], False),
    ],
)
def test_the_bar_is_shown_on_a_terminal_unless_asked_not_to(argv: list[str], shown: bool) -> None:
    args = _parser().parse_args(argv)
    assert wants_display(args, Terminal()) is shown
    assert wants_display(args, io.StringIO()) is False  # never off a terminal


def test_a_stream_without_isatty_gets_no_bar() -> None:
    assert wants_display(argparse.Namespace(), object()) is False  # type: ignore[arg-type]
