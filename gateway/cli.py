"""``kfed gateway``: run one Kafka wire-protocol gateway instance.

``add_arguments(parser)`` and ``run(args)`` are the ``kfed gateway`` command group (``kfed`` imports this
module only when that command is parsed); ``main(argv)`` runs it on its own (``python -m gateway.cli``);
``spawn(...)`` starts one as a child process (``kfed local up``, tests, benchmarks).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from metadata_client.access import Access, read_secret
from metadata_client.arguments import positive_float, positive_int
from metadata_log.errors import InvalidSetting

from .app import Gateway, GatewayConfig
from .followed import FORGET_AFTER_S
from .server import Limits

DESCRIPTION = """\
Serve the Kafka wire protocol in front of the federation: unmodified Kafka clients (Java, librdkafka/kcat,
kafka-python, Go, ...) produce to and consume from logical topics through it. Record batches pass through
to the sub-clusters' brokers; groups are coordinated by the quorum. Run any number of instances: together
they are the brokers of one Kafka cluster (`kcat -b HOST:PORT -L` lists them).
"""

DEFAULT_LIMITS = Limits()

EPILOG = """\
Instances register with the quorum and heartbeat; one that stops drops out of the Metadata answers within
the gateway lease (4 s). With --sasl, clients authenticate with SASL/PLAIN, a kfed token as the password:
the admin token (the one in --token-file) may also create and delete topics; the tokens in
--client-token-file may produce and consume.
"""


def _endpoint(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def _broker_id(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 2**31 - 1:
        raise argparse.ArgumentTypeError("a Kafka broker id is an integer in 0..2147483647")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Fill a ``kfed gateway`` parser: its description and flags. ``--log-level`` has no default here, so that
    under ``kfed`` the one given before ``gateway`` holds."""
    parser.description = DESCRIPTION
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--log-level", default=argparse.SUPPRESS, choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--controller", required=True, help="controller URLs, comma-separated")
    parser.add_argument(
        "--listen",
        type=_endpoint,
        default=("127.0.0.1", 9092),
        help="HOST:PORT to listen on (default 127.0.0.1:9092; port 0 picks a free one)",
    )
    parser.add_argument(
        "--advertise", type=_endpoint, help="HOST:PORT clients reach this instance at (default: --listen)"
    )
    parser.add_argument(
        "--id",
        type=_broker_id,
        dest="gateway_id",
        help="its Kafka broker id (default: assigned by the quorum, kept per address)",
    )
    parser.add_argument("--rack", help="its rack, shown to rack-aware clients")
    parser.add_argument("--region", help="region CreateTopics puts topics in (default: the only one)")
    parser.add_argument(
        "--token-file", type=Path, help="file with the kfed admin token, when the controllers require one"
    )
    parser.add_argument("--tls-ca", type=Path, help="CA bundle to verify the controllers' HTTPS certificates")
    parser.add_argument("--sasl", action="store_true", help="require SASL/PLAIN with kfed tokens on the listener")
    parser.add_argument(
        "--client-token-file",
        type=Path,
        action="append",
        default=[],
        help="a token that may produce and consume through --sasl (repeatable)",
    )
    parser.add_argument("--tls-cert", type=Path, help="PEM certificate: serve the listener over TLS")
    parser.add_argument("--tls-key", type=Path, help="PEM private key of --tls-cert")
    add_limits(parser)
    parser.add_argument(
        "--forget-topics-after-s",
        type=positive_float,
        default=FORGET_AFTER_S,
        help="stop following a topic no request named for this long, in seconds; the gateway follows only "
        f"the topics its clients use (gateway/followed.py; default {FORGET_AFTER_S:.0f})",
    )


def add_limits(parser: argparse.ArgumentParser) -> None:
    """The listener's bounds (``server.Limits``; the memory bound they make is in ``README.md``)."""
    parser.add_argument(
        "--max-frame-bytes",
        type=positive_int,
        default=DEFAULT_LIMITS.max_frame_bytes,
        help=f"largest request, in bytes (default {DEFAULT_LIMITS.max_frame_bytes})",
    )
    parser.add_argument(
        "--max-connections",
        type=positive_int,
        default=DEFAULT_LIMITS.max_connections,
        help=f"client connections open at once (default {DEFAULT_LIMITS.max_connections})",
    )
    parser.add_argument(
        "--max-in-flight",
        type=positive_int,
        default=DEFAULT_LIMITS.max_in_flight,
        help=f"unanswered requests per client (default {DEFAULT_LIMITS.max_in_flight})",
    )
    parser.add_argument(
        "--max-buffered-bytes",
        type=positive_int,
        default=DEFAULT_LIMITS.max_buffered_bytes,
        help="bytes of requests and fetched records one connection may hold before it is read no further "
        f"(default {DEFAULT_LIMITS.max_buffered_bytes})",
    )
    parser.add_argument(
        "--max-total-buffered-bytes",
        type=positive_int,
        default=DEFAULT_LIMITS.max_total_buffered_bytes,
        help="the same across every connection: with --max-buffered-bytes, what bounds the gateway's memory "
        f"(gateway/README.md; default {DEFAULT_LIMITS.max_total_buffered_bytes})",
    )
    parser.add_argument(
        "--frame-timeout-s",
        type=positive_float,
        default=DEFAULT_LIMITS.frame_s,
        help="close a connection whose request frame does not arrive whole within this long, in seconds "
        f"(default {DEFAULT_LIMITS.frame_s:.0f})",
    )


def config_from(args: argparse.Namespace) -> GatewayConfig:
    """The gateway's config from parsed arguments; ``InvalidSetting`` names the flags that cannot be used
    (as given, or together); its subclass ``AccessError`` a file."""
    if (args.tls_cert is None) != (args.tls_key is None):
        raise InvalidSetting("--tls-cert and --tls-key go together")
    if args.sasl and args.token_file is None:
        raise InvalidSetting("--sasl needs --token-file (the admin token is the admin's SASL password)")
    listen_host, listen_port = args.listen
    advertise_host, advertise_port = args.advertise or (None, None)
    if advertise_host is None and listen_host in ("0.0.0.0", "::", ""):
        raise InvalidSetting("listening on every address needs --advertise HOST:PORT (what clients connect to)")
    return GatewayConfig(
        controllers=[u for u in args.controller.split(",") if u.strip()],
        listen_host=listen_host,
        listen_port=listen_port,
        advertise_host=advertise_host,
        advertise_port=advertise_port,
        gateway_id=args.gateway_id,
        rack=args.rack,
        region=args.region,
        access=Access.from_files(args.token_file, args.tls_ca),
        sasl=args.sasl,
        client_tokens=tuple(read_secret(p, "client token file") for p in args.client_token_file),
        tls=(str(args.tls_cert), str(args.tls_key)) if args.tls_cert else None,
        forget_topics_after_s=args.forget_topics_after_s,
        limits=Limits(
            max_frame_bytes=args.max_frame_bytes,
            max_connections=args.max_connections,
            max_in_flight=args.max_in_flight,
            max_buffered_bytes=args.max_buffered_bytes,
            max_total_buffered_bytes=args.max_total_buffered_bytes,
            frame_s=args.frame_timeout_s,
        ),
    )


async def serve(config: GatewayConfig) -> None:
    """Run a gateway until SIGTERM or SIGINT."""
    gateway = Gateway(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    starting = asyncio.ensure_future(gateway.start())
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if starting.done() and starting.exception() is None:
        print(
            f"kfed gateway: serving Kafka clients on {gateway.self_broker.host}:{gateway.self_broker.port} "
            f"as broker {gateway.gateway_id}",
            flush=True,
        )
        await stopping
    starting.cancel()
    await gateway.stop()
    if starting.done() and not starting.cancelled() and starting.exception() is not None:
        raise starting.exception()  # type: ignore[misc]  # checked just above


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m gateway.cli``: the gateway without the rest of ``kfed`` (what ``spawn`` starts)."""
    parser = argparse.ArgumentParser(prog="kfed gateway")
    add_arguments(parser)
    return run(parser.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Run the gateway from parsed arguments (what ``kfed gateway`` calls)."""
    logging.basicConfig(
        level=getattr(args, "log_level", "INFO"), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        import uvloop

        uvloop.run(serve(config_from(args)))
    except KeyboardInterrupt:
        return 130
    except InvalidSetting as e:  # a flag, or a token the controllers refuse once running (RegistrationRefused)
        print(f"kfed gateway: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"kfed gateway: {e}", file=sys.stderr)
        return 1
    return 0


def spawn(
    controllers: Sequence[str], listen: str, log: IO[bytes] | int | None = None, *extra: str
) -> subprocess.Popen[bytes]:
    """Start a gateway as a child process in its own session (for ``kfed local up``, tests and benchmarks):
    ``listen`` is HOST:PORT; ``extra`` are more ``kfed gateway`` flags (``--token-file``, ``--id``, ...)."""
    args = [sys.executable, "-m", "gateway.cli", "--controller", ",".join(controllers), "--listen", listen, *extra]
    return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


if __name__ == "__main__":
    sys.exit(main())
