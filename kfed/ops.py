"""What the operator commands over the HTTP API (``kfed cluster``, ``kfed topic``, ``kfed quorum``) share: the
flags that reach the controllers, running an action with its client, and the live status of a long operation.

Each command is one request to start the operation, then (for the long ones) a live status until it is
done. Every one is safe to re-run: a re-run of a finished step changes nothing and goes on watching.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any, Final, TextIO

from metadata_client.access import access_from, add_access_arguments
from metadata_client.client import ControllerClient
from metadata_log.errors import KfedError

DEFAULT_CONTROLLERS: Final = "http://127.0.0.1:8001,http://127.0.0.1:8002,http://127.0.0.1:8003"
POLL_S: Final = 0.5
RAW: Final = argparse.RawDescriptionHelpFormatter

# An action: the request(s) of one operator command, given the client, the parsed flags and where to print.
Action = Callable[[ControllerClient, argparse.Namespace, TextIO], int]


# -- parsers -----------------------------------------------------------------------------------------
def actions(parser: argparse.ArgumentParser, help_text: str, dest: str) -> Any:
    """Fill an operator group's parser: ``help_text`` below its options, and the subparsers of its actions
    (one required, its name in ``args.<dest>``), which are returned."""
    parser.epilog = help_text
    parser.formatter_class = RAW
    return parser.add_subparsers(dest=dest, required=True, metavar="ACTION")


def controller_flags() -> argparse.ArgumentParser:
    """A parent parser with the flags that reach the controllers: ``--controller``, ``--token-file``, ``--tls-ca``."""
    client = argparse.ArgumentParser(add_help=False)
    client.add_argument(
        "--controller",
        default=DEFAULT_CONTROLLERS,
        help="controller URLs, comma-separated (default: the local federation, 8001-8003)",
    )
    add_access_arguments(client)
    return client


def wait_flags() -> argparse.ArgumentParser:
    """A parent parser with the flags of a long operation's live status: ``--no-wait``, ``--timeout-s``."""
    waits = argparse.ArgumentParser(add_help=False)
    waits.add_argument("--no-wait", action="store_true", help="start the operation and return at once")
    waits.add_argument(
        "--timeout-s", type=float, default=0, help="stop watching after this long (default 0: until done)"
    )
    return waits


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run the action an operator command line chose (its parser's ``func``, an ``Action``); a refused request
    prints the controller's reason and exits 1."""
    action: Action = args.func
    with ControllerClient(args.controller, access=access_from(args)) as client:
        try:
            return action(client, args, out or sys.stdout)
        except KfedError as e:
            print(f"kfed: {e.detail}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print(
                "\nkfed: stopped watching; the operation goes on. Re-run the command to watch again.", file=sys.stderr
            )
            return 130


# -- output helpers ----------------------------------------------------------------------------------
class _Progress:
    """One status line: rewritten in place on a terminal, printed when it changes otherwise."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.tty = out.isatty()
        self.last = ""

    def show(self, line: str) -> None:
        if line == self.last:
            return
        self.last = line
        if self.tty:
            self.out.write("\r\x1b[2K" + line)
        else:
            self.out.write(line + "\n")
        self.out.flush()

    def done(self, line: str) -> None:
        if self.tty and self.last:
            self.out.write("\n")
        if line:
            self.out.write(line + "\n")
        self.out.flush()


def watch(step: Callable[[Callable[[str], None]], bool], timeout_s: float, out: TextIO, done: str, not_yet: str) -> int:
    """Call ``step`` (which shows a status line) every POLL_S until it returns True, then print ``done``
    and return 0. After ``timeout_s`` (when above 0) say what is ``not_yet`` done and return 3: the
    operation goes on, and re-running the command watches it again."""
    progress = _Progress(out)
    deadline = time.monotonic() + timeout_s if timeout_s > 0 else None
    while not step(progress.show):
        if deadline is not None and time.monotonic() >= deadline:
            progress.done("")
            print(f"kfed: {not_yet}; re-run to keep watching", file=sys.stderr)
            return 3
        time.sleep(POLL_S)
    progress.done(done)
    return 0


def drain_line(prefix: str, rows: list[dict[str, Any]]) -> str:
    """A status line of partitions draining (rows of ``GET /v1/drain``): how many are drained, the lag left and
    what the worst one waits for."""
    drained = sum(1 for r in rows if r["drained"])
    lags = [r["lag"] for r in rows if r["lag"] is not None]
    line = f"{prefix}; draining {drained}/{len(rows)} drained, lag {sum(lags)}"
    waiting = [r for r in rows if not r["drained"]]
    if waiting:
        worst = max(waiting, key=lambda r: r["lag"] or 0)
        line += f" — {worst['topic']}/{worst['partition']} waits for {worst['waiting_for']}"
    return line


def table(rows: list[list[str]], out: TextIO) -> None:
    """Print ``rows`` (the first one the header) in columns."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip(), file=out)
