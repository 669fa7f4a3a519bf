"""The ``supervisor`` command line."""

from __future__ import annotations

import argparse
import gc
import math
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NoReturn, TypeVar

import trio
from loguru import logger

from . import __version__
from .base.errors import leaves
from .base.loopback import is_loopback
from .core.config import LOG_FORMATS, LOG_LEVELS

if TYPE_CHECKING:
    from .core.config import Settings

__all__ = ["build_parser", "main", "parse_listen"]

T = TypeVar("T")

# The names the command line is installed under: the short one, and the project's.
PROGRAMS: Final = ("supervisor", "nomad-runner-supervisor")
# A usage error's exit code: 2, as argparse's; 3 (UNKNOWN) for the probe, as monitoring plugins do.
USAGE: Final = 2
PROBE_USAGE: Final = 3


class UsageError(Exception):
    """A command-line value is wrong; the message says which and why."""


class _CommandParser(argparse.ArgumentParser):
    """A command's parser, whose usage errors exit with the command's own code."""

    def __init__(self, *args: Any, usage_exit_code: int = USAGE, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.usage_exit_code = usage_exit_code

    def error(self, message: str) -> NoReturn:
        """Usage and the message on stderr (and ``UNKNOWN:`` on stdout, for a probe), then exit."""
        self.print_usage(sys.stderr)
        if self.usage_exit_code == PROBE_USAGE:
            print(f"UNKNOWN: {message}")
        self.exit(self.usage_exit_code, f"{self.prog}: error: {message}\n")


def program_name() -> str:
    """The name the command line was started by, if it is one of ours; else ``supervisor``."""
    name = Path(sys.argv[0]).name if sys.argv else ""
    return name if name in PROGRAMS else PROGRAMS[0]


def parse_listen(value: str, *, default_port: int) -> tuple[str, int]:
    """``HOST:PORT``, ``HOST``, ``:PORT`` or a bare ``PORT`` (on 127.0.0.1); IPv6 as ``[::1]:PORT``."""
    host, sep, port_text = value.rpartition(":")
    if not sep and value.isdigit():
        host, port_text = "", value
    elif not sep or "]" in port_text:
        host, port_text = value, ""
    host = host.strip("[]") or "127.0.0.1"
    try:
        port = int(port_text) if port_text else default_port
    except ValueError:
        raise UsageError(f"--listen: port {port_text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise UsageError(f"--listen: port {port} is outside 0-65535")
    return host, port


def _embedded_cluster_refusal(address: str) -> str:
    """Why ``supervisor run`` on ``address`` (off loopback) without a Nomad address does not start."""
    return (
        f"serving on {address} needs a Nomad cluster: set NOMAD_ADDR or [nomad] address (the embedded "
        "simulated cluster runs students' code as local processes of this user, so it serves loopback only)"
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``supervisor`` command line: run, check, simulate, health."""
    parser = argparse.ArgumentParser(
        prog=program_name(),
        description="Supervisor of prewarmed code-execution runners on HashiCorp Nomad.",
    )
    parser.add_argument("--version", action="version", version=f"supervisor {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_CommandParser)

    run = commands.add_parser(
        "run",
        help="run the daemon",
        description="Run the daemon: Poseidon's API on --listen, runners on Nomad. Without a Nomad address "
        "(nomad.address in the config file, or NOMAD_ADDR) it starts the embedded simulated cluster, "
        "on loopback only: off loopback that is a configuration error (exit 2).",
    )
    run.add_argument("--config", metavar="FILE", help="TOML configuration file (default: $SUPERVISOR_CONFIG)")
    run.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="overrides server.address and server.port (also HOST, :PORT, or a bare PORT on 127.0.0.1)",
    )
    run.add_argument("--log-level", metavar="LEVEL", help="overrides log.level (DEBUG, INFO, WARNING, ...)")
    run.add_argument("--log-format", choices=LOG_FORMATS, help="overrides log.format")

    check = commands.add_parser(
        "check",
        help="check the configuration and the Nomad cluster (exit 0 all pass, 1 one fails, 2 bad config)",
        description="Check the configuration and the Nomad cluster before the first student: every "
        "key and its source, Nomad's servers, leader and version, the token's capabilities, the event "
        "stream, the client agents' ports for direct exec, the scheduler and the nodes. One line per "
        "check; exit 0 when none fails, 1 when one does, 2 when the configuration does not load. "
        "Nothing is written to Nomad.",
    )
    check.add_argument(
        "--config", metavar="FILE", help="TOML configuration file (default: $SUPERVISOR_CONFIG)"
    )

    config = commands.add_parser(
        "config",
        help="the configuration file: `config example` prints one, `config import-poseidon` "
        "translates Poseidon's",
        description="`supervisor config example` prints a complete configuration file: every key at its "
        "default, with what it takes. `supervisor config import-poseidon FILE` translates Poseidon's.",
    )
    config_commands = config.add_subparsers(dest="config_command", metavar="SUBCOMMAND", required=True)
    config_commands.add_parser("example", help="print every key at its default, commented")
    imported = config_commands.add_parser(
        "import-poseidon",
        help="translate Poseidon's configuration.yaml into ours, on stdout",
        description="Print Poseidon's configuration (its YAML file and, with --env, its POSEIDON_* "
        "variables) as this daemon's configuration file: each key with a counterpart, each without one "
        "as a comment saying what to do instead. Keys and variables Poseidon ignores are named on "
        "stderr. A file Poseidon would not start with (not YAML, a value of the wrong type) is one line "
        "on stderr and exit 2.",
    )
    imported.add_argument("file", metavar="FILE", help="Poseidon's configuration.yaml")
    imported.add_argument(
        "--env",
        action="store_true",
        help="apply this environment's POSEIDON_* variables over the file, as Poseidon applies them",
    )

    health = commands.add_parser(
        "health",
        usage_exit_code=PROBE_USAGE,
        help="probe a running daemon (exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN)",
        description="Probe a running daemon through /api/v1/health/details and exit like a monitoring "
        "plugin: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (a usage error included).",
    )
    health.add_argument("--url", default="http://127.0.0.1:7200", help="the daemon [%(default)s]")
    token = health.add_mutually_exclusive_group()
    token.add_argument(
        "--token", default="", help="Poseidon-Token (default: $SUPERVISOR_SERVER_TOKEN); see --token-file"
    )
    token.add_argument(
        "--token-file", metavar="PATH", help="read the token from PATH, off the command line that ps shows"
    )
    health.add_argument(
        "--ca-file",
        metavar="PATH",
        help="verify an https:// daemon's certificate against the CA certificates in PATH (PEM), a "
        "private CA's (default: $SSL_CERT_FILE, else the public CAs of certifi)",
    )
    health.add_argument("--json", action="store_true", help="print the whole health document")
    health.add_argument("--timeout", default="5", help="seconds to wait for an answer [%(default)s]")

    simulate = commands.add_parser(
        "simulate",
        help="serve a simulated Nomad cluster (for development and tests)",
        description="Serve a simulated Nomad cluster on loopback: Nomad's HTTP API on one port per "
        "server, plus the fault-injection API under /sim/v1. Its exec runs local processes: it is a "
        "development driver, not isolation.",
    )
    simulate.add_argument(
        "--listen",
        default="127.0.0.1:4646",
        metavar="HOST:PORT",
        help="address of the first server; the others take the next ports (port 0: any free "
        "ports) [%(default)s]",
    )
    simulate.add_argument("--nodes", type=int, default=3, help="client nodes [%(default)s]")
    simulate.add_argument("--servers", type=int, default=3, help="servers [%(default)s]")
    simulate.add_argument("--seed", type=int, default=0, help="seed of every random choice [%(default)s]")
    simulate.add_argument("--nomad-version", default="1.10.5", help="Nomad version to imitate [%(default)s]")
    simulate.add_argument(
        "--token", default="", help="ACL token every request must carry (required off loopback)"
    )
    simulate.add_argument(
        "--scheduler-algorithm",
        default="spread",
        metavar="NAME",
        help="the operator's scheduler_algorithm: spread, as Poseidon requires, or Nomad's default "
        "binpack [%(default)s]",
    )
    simulate.add_argument(
        "--history-allocations",
        type=int,
        default=0,
        metavar="N",
        help="start with N terminal allocations of purged runner jobs, as a busy Nomad keeps them "
        "for hours [%(default)s]",
    )
    simulate.add_argument(
        "--node-cpu", type=int, default=4000, metavar="MHZ", help="each node's CPU [%(default)s]"
    )
    simulate.add_argument(
        "--node-memory", type=int, default=8192, metavar="MIB", help="each node's memory [%(default)s]"
    )
    simulate.add_argument(
        "--node-disk", type=int, default=20480, metavar="MIB", help="each node's free disk [%(default)s]"
    )
    simulate.add_argument(
        "--cni",
        nargs="*",
        default=["secure-bridge"],
        metavar="NAME",
        help="the CNI networks configured on each node, for group networks cni/NAME [secure-bridge]",
    )
    return parser


async def _serve_until_signalled(cluster: object) -> None:
    from .simulator import SimulatedCluster

    assert isinstance(cluster, SimulatedCluster)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(cluster.run)
            print("Simulated Nomad cluster ready.", flush=True)
            for server in cluster.servers:
                print(f"  {server.name}: {server.address}", flush=True)
            print(f"export NOMAD_ADDR={','.join(cluster.addresses)}", flush=True)
            async for received in signals:
                logger.info("received {}, stopping", signal.Signals(received).name)
                nursery.cancel_scope.cancel("signalled")
                break


def _simulate(args: argparse.Namespace) -> int:
    from .simulator import SimConfig, SimulatedCluster
    from .simulator.config import SCHEDULER_ALGORITHMS

    if args.scheduler_algorithm not in SCHEDULER_ALGORITHMS:
        raise UsageError(f"--scheduler-algorithm must be one of {', '.join(SCHEDULER_ALGORITHMS)}")
    host, port = parse_listen(args.listen, default_port=4646)
    if args.nodes < 1 or args.servers < 1:
        raise UsageError("--nodes and --servers must be at least 1")
    if args.history_allocations < 0:
        raise UsageError("--history-allocations must not be negative")
    if min(args.node_cpu, args.node_memory, args.node_disk) < 1:
        raise UsageError("--node-cpu, --node-memory and --node-disk must be at least 1")
    if not is_loopback(host) and not args.token:
        raise UsageError(
            f"--listen {host}: the simulated cluster runs commands as local processes; serving it off "
            "loopback needs --token"
        )
    ports = [port + i if port else 0 for i in range(args.servers)]
    try:
        config = SimConfig(
            servers=args.servers,
            nodes=args.nodes,
            seed=args.seed,
            nomad_version=args.nomad_version,
            acl_token=args.token,
            history_allocations=args.history_allocations,
            scheduler_algorithm=args.scheduler_algorithm,
            node_cpu_mhz=args.node_cpu,
            node_memory_mb=args.node_memory,
            node_disk_mb=args.node_disk,
            cni_networks=tuple(args.cni),
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return _run_trio(
        _serve_until_signalled,
        SimulatedCluster(config, host=host, ports=ports),
        what=f"supervisor simulate: cannot listen on {host}:{port}",
    )


def _settings(args: argparse.Namespace) -> Settings:
    """The configuration ``supervisor run`` runs with: the file and the environment (ConfigError),
    then the command line's overrides (checked when the command starts)."""
    import attrs

    from .core.config import load_settings

    settings = load_settings(args.config, os.environ)
    settings.nomad_settings(os.environ)
    if args.listen:
        host, port = parse_listen(args.listen, default_port=settings.server.port)
        settings = attrs.evolve(settings, server=attrs.evolve(settings.server, address=host, port=port))
    if args.log_level:
        if args.log_level.upper() not in LOG_LEVELS:
            raise UsageError(f"--log-level: {args.log_level!r} is not one of {', '.join(LOG_LEVELS)}")
        settings = attrs.evolve(settings, log=attrs.evolve(settings.log, level=args.log_level))
    if args.log_format:
        settings = attrs.evolve(settings, log=attrs.evolve(settings.log, format=args.log_format))
    return settings


def _options_set(args: argparse.Namespace) -> dict[str, str]:
    """The keys ``supervisor run``'s options set, and the option that set each."""
    options = {
        "--listen": (args.listen, ("server.address", "server.port")),
        "--log-level": (args.log_level, ("log.level",)),
        "--log-format": (args.log_format, ("log.format",)),
    }
    return {key: option for option, (given, keys) in options.items() if given for key in keys}


def _run(args: argparse.Namespace) -> int:
    from .base.descriptors import raise_open_file_limit
    from .base.errors import ConfigError
    from .core.config import config_path
    from .ops.logs import configure_logging
    from .ops.reload import Reloader, startup_line
    from .ops.sentry import init_sentry, sentry_options
    from .ops.signals import run_until_signalled
    from .tree.api_serving import ApiEndpoint
    from .tree.daemon import Daemon

    try:
        settings = _settings(args)
        endpoint = ApiEndpoint.of(settings, activated=True)
        sentry_options(os.environ)  # a wrong SENTRY_* value stops the start, as a wrong key does
    except ConfigError as error:
        raise UsageError(f"configuration: {error}") from None
    nomad = settings.nomad_settings(os.environ)
    secrets = [settings.server.token, settings.nomad.token, nomad.token if nomad else ""]
    stream = configure_logging(settings.log, secrets)
    init_sentry(os.environ, secrets)
    served = endpoint.passed_host or settings.server.address  # a socket systemd passed: its own
    if nomad is None and not is_loopback(served):
        raise UsageError(_embedded_cluster_refusal(served))
    path = config_path(args.config, os.environ)
    line = startup_line(settings, path, os.environ, nomad, _options_set(args))
    logger.info("{}", line, version=__version__)
    raise_open_file_limit()  # as Go does: the API's connections and Nomad's share this budget
    reloader = Reloader(partial(_settings, args), settings, stream, tls=endpoint.tls)
    where = f"{settings.server.address}:{settings.server.port}"
    daemon = Daemon(settings, endpoint=endpoint)
    code = _run_trio(
        partial(run_until_signalled, reload=reloader.reload),
        daemon,
        what=f"supervisor run: cannot serve on {where}",
    )
    if code == 0 and daemon.configuration_error is not None:
        print(f"supervisor run: configuration: {daemon.configuration_error}", file=sys.stderr)
        return USAGE
    if code == 0 and daemon.failure is not None:
        print(f"supervisor run: stopped: {daemon.failure}", file=sys.stderr)
        return 1
    if code == 0:
        logger.info("stopped")
    return code


def _check(args: argparse.Namespace) -> int:
    import attrs

    from .base.errors import ConfigError
    from .core.config import config_path, load_settings
    from .ops.check import check, exit_code, format_result, summary
    from .ops.check_result import CheckResult
    from .ops.logs import configure_logging

    try:
        settings = load_settings(args.config, os.environ)
        nomad = settings.nomad_settings(os.environ)
        if nomad is not None:
            nomad.ssl_context()
    except ConfigError as error:
        raise UsageError(f"configuration: {error}") from None
    secrets = [settings.server.token, settings.nomad.token, nomad.token if nomad else ""]
    configure_logging(attrs.evolve(settings.log, level="WARNING"), secrets)
    path = config_path(args.config, os.environ)
    results: list[CheckResult] = []

    def report(result: CheckResult) -> None:
        for line in format_result(result):
            print(line, flush=True)

    async def check_all(_: object) -> None:
        results.extend(await check(settings, nomad, path=path, environ=os.environ, report=report))

    code = _run_trio(check_all, None, what="supervisor check")
    print(summary(results), flush=True)
    return code or exit_code(results)


def _import_poseidon(args: argparse.Namespace) -> int:
    """Poseidon's configuration as ours on stdout, checked by our loader; notes on stderr."""
    import tempfile

    from .base.errors import ConfigError
    from .core.config import load_settings
    from .core.poseidon_config import translate
    from .core.poseidon_settings import read_poseidon_settings

    try:
        text = Path(args.file).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"import-poseidon: {args.file}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        settings = read_poseidon_settings(text, source=args.file, environ=os.environ if args.env else None)
        translation = translate(settings, source=args.file)
    except ConfigError as error:
        raise UsageError(f"import-poseidon: {error}") from None
    with tempfile.NamedTemporaryFile("w", suffix=".toml") as written:
        written.write(translation.text)
        written.flush()
        try:
            load_settings(written.name, {})
        except ConfigError as error:
            refusal = str(error).replace(f"config file {written.name}", "the translation")
            raise UsageError(f"import-poseidon: {args.file}: this daemon refuses {refusal}") from None
    for note in (*settings.notes, *translation.notes):
        print(f"{program_name()} config import-poseidon: {note}", file=sys.stderr)
    print(translation.text, end="")
    return 0


# Both services keep a large, long-lived heap (tens of thousands of jobs and allocations): with
# Python's default thresholds the collector traverses it every few hundred allocations, which tripled
# the time of a 10,000-allocation list. Collect the young generation less often, but keep the older
# generations' default multipliers: every Nomad request leaves cyclic garbage (httpx's responses),
# which only those collections free; at (50_000, 50, 100) a full one came every half hour under
# load, and the daemon's RSS grew by 40% in ten minutes of soak. Python itself skips a full
# collection until a quarter of the long-lived heap is new, so its cost stays in proportion. A young
# generation of 50,000 let each burst's garbage spread over new arenas, which the few objects that
# outlived the burst then held: the soak's RSS was 4 MiB higher and drifted 10% to 11%.
GC_THRESHOLDS: Final = (10_000, 10, 10)


def _run_trio(main: Callable[[T], Awaitable[None]], argument: T, *, what: str) -> int:
    """Run ``main``; an OS error (an address in use, say) is one line and exit code 1, not a trace."""
    gc.set_threshold(*GC_THRESHOLDS)
    failure = ""
    try:
        trio.run(main, argument)
    except* OSError as group:
        first = leaves(group)[0]
        failure = f"{what}: {getattr(first, 'strerror', None) or first}"
    if failure:
        print(failure, file=sys.stderr)
        return 1
    return 0


def _health(args: argparse.Namespace) -> int:
    from .ops.probe import ca_context, probe, url_problem

    try:
        timeout = float(args.timeout)
    except ValueError:
        timeout = math.nan
    if not (math.isfinite(timeout) and timeout > 0):
        raise UsageError(f"--timeout {args.timeout!r}: must be a positive number of seconds")
    if problem := url_problem(args.url):
        raise UsageError(f"--url {args.url!r}: {problem}")
    token = args.token or os.environ.get("SUPERVISOR_SERVER_TOKEN", "")
    if args.token_file:
        try:
            token = Path(args.token_file).read_text().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(
                f"--token-file {args.token_file}: {getattr(exc, 'strerror', None) or exc}"
            ) from None
        if not token:
            raise UsageError(f"--token-file {args.token_file}: the file is empty")
    verify = None
    if args.ca_file:
        if not args.url.lower().startswith("https://"):
            raise UsageError(f"--ca-file {args.ca_file}: it is for an https:// --url, not {args.url}")
        try:
            verify = ca_context(args.ca_file)
        except ValueError as exc:
            raise UsageError(f"--ca-file {args.ca_file}: {exc}") from None
    code, text = probe(args.url, token=token, timeout=timeout, as_json=args.json, verify=verify)
    print(text)
    return code


def _probe_usage_error(args: argparse.Namespace, message: str) -> int:
    """A usage error of the probe, as a monitoring plugin reports it: UNKNOWN, exit 3."""
    from .ops.probe import unknown

    code, text = unknown(message, as_json=args.json)
    print(text)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        message = f"unrecognized arguments: {' '.join(extra)}"
        if args.command != "health":
            parser.error(message)
        print(f"{parser.prog} health: error: {message}", file=sys.stderr)
        return _probe_usage_error(args, message)
    if args.command is None:
        parser.print_help()
        return USAGE
    try:
        if args.command == "simulate":
            return _simulate(args)
        if args.command == "run":
            return _run(args)
        if args.command == "check":
            return _check(args)
        if args.command == "config" and args.config_command == "import-poseidon":
            return _import_poseidon(args)
        if args.command == "config":
            from .core.config_example import example_config

            print(example_config(), end="")
            return 0
        if args.command == "health":
            return _health(args)
    except UsageError as error:
        if args.command == "health":
            return _probe_usage_error(args, str(error))
        print(f"{parser.prog} {args.command}: {error}", file=sys.stderr)
        return USAGE
    parser.error(f"unknown command {args.command!r}")  # pragma: no cover - argparse rejects it first
