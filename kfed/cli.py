"""The ``kfed`` command line: one table of command groups, each a module with ``add_arguments(parser)`` (fill
the group's parser: its description, flags and actions) and ``run(args)`` (do it; return the exit status).

The table names each group's module rather than importing it: a group's module is imported when its command
line is parsed, so ``kfed topic ...`` loads neither the gateway nor the controller, and ``kfed --help`` lists
the groups from the table alone.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, cast

from metadata_log.errors import InvalidSetting


class CommandGroup(Protocol):
    """What the module of a ``kfed`` command group provides."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


@dataclass(frozen=True, slots=True)
class Group:
    """A ``kfed`` command: its name, the module that parses and runs it, and its line in ``kfed --help``."""

    name: str
    module: str
    help: str

    def load(self) -> CommandGroup:
        return cast(CommandGroup, importlib.import_module(self.module))


GROUPS: Final = (
    Group("controller", "kfed.controller", "run one node of the controller quorum"),
    Group("agent", "kfed.agent", "run the agent of one physical Kafka cluster"),
    Group("cluster", "kfed.cluster", "add, inspect and decommission physical clusters"),
    Group("topic", "kfed.topic", "create, expand (scale up) and shrink (lossless scale-down) logical topics"),
    Group("quorum", "kfed.quorum", "inspect the controller quorum and change its voters"),
    Group("pipeline", "kfed.pipeline", "run a Spark warehouse job (ODS -> DWD -> DWS, audit) over a logical topic"),
    Group(
        "gateway",
        "gateway.cli",
        "serve the Kafka wire protocol: unmodified Kafka clients use logical topics (kfed gateway --help)",
    ),
    Group("local", "kfed.local", "the embedded local federation"),
)
_BY_NAME: Final = {group.name: group for group in GROUPS}


class _GroupParser(argparse.ArgumentParser):
    """The parser of one group, filled by its module's ``add_arguments`` the first time it parses (its own
    actions' parsers are of this class too, with no group: plain parsers)."""

    def __init__(self, *args: Any, group: Group | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._unfilled = group

    def parse_known_args(  # type: ignore[override]  # typeshed's overloads only narrow the namespace type
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[Any, list[str]]:
        if self._unfilled is not None:
            group, self._unfilled = self._unfilled, None
            group.load().add_arguments(self)
        return super().parse_known_args(args, namespace)


def build_parser() -> argparse.ArgumentParser:
    """The ``kfed`` parser: a subcommand per entry of ``GROUPS``."""
    parser = argparse.ArgumentParser(
        prog="kfed",
        description="kfed: the control plane of a federated Kafka (a Raft-replicated metadata log).",
    )
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_GroupParser)
    for group in GROUPS:
        sub.add_parser(group.name, help=group.help, group=group)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("pysyncobj").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        return _BY_NAME[args.command].load().run(args)
    except InvalidSetting as e:  # a config, token or CA file, a source option, jars not installed: say which
        print(f"kfed: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `kfed topic status … | head`: the reader has gone; leave without a traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
