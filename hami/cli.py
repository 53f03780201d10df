"""The `hami` command: simulate (offline replay), serve (the scheduler process), explain,
status and migrate check (a live cluster, read-only), bench."""

import argparse
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import orjson

from hami.runtime.logs import one_line


class _Parser(argparse.ArgumentParser):
    """Usage mistakes as one line on stderr, exit 2, like every other error of the command."""

    _given: Sequence[str] = ()

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        # argparse reports a missing positional before an unknown flag, so `hami simulate -x`
        # would read as a missing scenario: the flag is the mistake.
        unknown = [
            a
            for a in self._given
            if a.startswith("-") and a != "-" and a.split("=")[0] not in self._option_string_actions
        ]
        if message.startswith("the following arguments are required") and unknown:
            message = f"unrecognized arguments: {' '.join(unknown)}"
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _simulate(args: argparse.Namespace) -> int:
    from hami.runtime.choices import of_flags
    from hami.sim.run import Simulation, render_json, render_text, unexpected
    from hami.sim.scenario import load

    try:
        choices = of_flags(args, "simulate")
        scenario = load(Path(args.scenario), choices.families)
    except ValueError as e:  # ScenarioError, ConfigError
        print(f"hami simulate: {one_line(e)}", file=sys.stderr)
        return 2
    results = Simulation(scenario, choices).run()
    if args.json:
        sys.stdout.write(
            orjson.dumps(render_json(results), option=orjson.OPT_INDENT_2).decode() + "\n"
        )
    else:
        sys.stdout.write(render_text(results, args.verbose))
    surprises = unexpected(scenario, results)
    if surprises:
        print(
            f"hami simulate: {'; '.join(surprises)} (a step's 'expect: {{denied: [names]}}' "
            "says which refusals are meant)",
            file=sys.stderr,
        )
        return 1
    return 0


T = TypeVar("T")


def _listed(item: Callable[[str], T], name: str) -> Callable[[str], list[T]]:
    """An argparse type: comma-separated values, each read by `item` (a ValueError: argparse
    says `invalid <name> value`)."""

    def read(text: str) -> list[T]:
        return [item(part.strip()) for part in text.split(",")]

    read.__name__ = name
    return read


def _node_policy(text: str) -> str:
    if text not in ("", "spread", "binpack"):
        raise ValueError(text)
    return text


def _candidates(text: str) -> str:
    if text not in ("all", "share"):
        raise ValueError(text)
    return text


def _bench_problem(args: argparse.Namespace) -> str:
    """What is wrong with the bench's numbers, or ""."""
    counts = (("nodes", 1), ("cards", 1), ("pods", 0), ("runs", 1), ("in-flight", 0))
    for name, least in counts:
        if getattr(args, name.replace("-", "_")) < least:
            return f"--{name} must be at least {least}"
    if min(args.memory) < 1:
        return "--memory must be at least 1"
    return ""


def _bench(args: argparse.Namespace) -> int:
    problem = _bench_problem(args)
    if problem:
        print(f"hami bench: {problem}", file=sys.stderr)
        return 2
    if args.http:
        from hami.bench.http import HttpBenchConfig, Series, run_http_bench

        cfg = HttpBenchConfig(
            nodes=args.nodes,
            cards=args.cards,
            pods=args.pods,
            requests=args.runs,
            series=tuple(
                Series(memory, node_policy, kind)
                for memory in args.memory
                for node_policy in args.node_policy
                for kind in args.candidates
            ),
            policy=args.policy,
            keep_reservations=args.keep_reservations,
            in_flight=args.in_flight,
            log=args.server_log,
            profile=args.profile,
            dra=args.dra,
        )
        result = run_http_bench(cfg)
        print(result.text)
        if args.json:
            Path(args.json).write_bytes(orjson.dumps(result.figures, option=orjson.OPT_INDENT_2))
        return 0
    from hami.bench.engine import run_engine_bench

    print(run_engine_bench(nodes=args.nodes, cards=args.cards, pods=args.pods, runs=args.runs))
    return 0


def _explain(args: argparse.Namespace) -> int:
    from hami.runtime.explain import explain_pod

    return explain_pod(args)


def _status(args: argparse.Namespace) -> int:
    from hami.runtime.status import show_status

    return show_status(args)


def _migrate_check(args: argparse.Namespace) -> int:
    from hami.runtime.migrate import check

    return check(args)


def _serve(args: argparse.Namespace) -> int:
    from hami.runtime.main import serve

    return serve(args)


# Flags `hami explain` and `hami status` share (and `hami simulate`, device_arguments): (names,
# keyword arguments of add_argument).
KUBECONFIG: tuple[tuple[str, ...], dict[str, Any]] = (
    ("--kubeconfig",),
    {"default": "", "help": "kubeconfig file; in-cluster credentials when empty"},
)
REQUEST_TIMEOUT: tuple[tuple[str, ...], dict[str, Any]] = (
    ("--request-timeout",),
    {
        "type": float,
        "default": 10.0,
        "help": "seconds each API call (a read, a page of a list) may take before the command "
        "gives up naming the server",
    },
)
GFD_SPLIT: tuple[tuple[str, ...], dict[str, Any]] = (
    ("--gfd-split-count",),
    {
        "type": int,
        "default": 0,
        "help": "as hami serve's: nodes without HAMi's plugin are read from their GFD labels "
        "(0: off)",
    },
)


def device_arguments(p: argparse.ArgumentParser) -> None:
    from hami.runtime.deviceconfig import add_device_arguments
    from hami.runtime.settingsload import parse_bool

    add_device_arguments(p, parse_bool)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="hami", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    sim = sub.add_parser(
        "simulate", help="replay a scenario file offline through the scheduler's engine"
    )
    sim.add_argument("scenario", help="scenario YAML (see examples/lab14/scenario.yaml)")
    sim.add_argument("-v", "--verbose", action="store_true", help="print every card score computed")
    sim.add_argument("--json", action="store_true", help="machine-readable output")
    device_arguments(sim)
    sim.set_defaults(func=_simulate)

    bench = sub.add_parser("bench", help="measure the engine's decision time")
    bench.add_argument("--nodes", type=int, default=1000)
    bench.add_argument("--cards", type=int, default=8)
    bench.add_argument("--pods", type=int, default=8000)
    bench.add_argument("--runs", type=int, default=2000, help="decisions (or requests) timed")
    http = bench.add_argument_group("--http: POST /filter over HTTPS to the real routes")
    http.add_argument(
        "--http", action="store_true", help="time /filter end to end instead of the engine alone"
    )
    # Lists: every combination is a series of --runs requests, timed in turn on one server.
    http.add_argument(
        "--memory",
        type=_listed(int, "MiB list"),
        default=[100],
        help="MiB the pod asks for, or several, comma-separated (--http)",
    )
    http.add_argument("--policy", default="", help="the pod's hami.io/gpu-scheduler-policy")
    http.add_argument(
        "--node-policy",
        type=_listed(_node_policy, "node policy list (spread, binpack)"),
        default=[""],
        help="the pod's hami.io/node-scheduler-policy (spread, binpack; default: none, the "
        "scheduler's), or several, comma-separated",
    )
    http.add_argument(
        "--candidates",
        type=_listed(_candidates, "candidates list (all, share)"),
        default=["all"],
        help="the node names of each request: all, or share (kube-scheduler's default share: "
        "500 of 5,000), or all,share",
    )
    http.add_argument(
        "--keep-reservations",
        action="store_true",
        help="let every decision's reservation pile up (default: release it after the answer)",
    )
    http.add_argument(
        "--in-flight",
        type=int,
        default=0,
        help="hold the reservations of the last N decisions, as binds under way (default 0)",
    )
    http.add_argument(
        "--server-log",
        choices=("json", "off"),
        default="json",
        help="server logging: json at info as `hami serve` (to /dev/null), or off",
    )
    http.add_argument(
        "--dra",
        action="store_true",
        help="the cards also published as DRA ResourceSlices, and allocated ResourceClaims of "
        "1000 MiB in place of the --pods pods",
    )
    http.add_argument("--profile", action="store_true", help="cProfile the server, print top")
    http.add_argument("--json", help="also write the figures (ms) to this file")
    bench.set_defaults(func=_bench)

    exp = sub.add_parser(
        "explain", help="why a GPU pod is pending (or where it went), from the cluster's state"
    )
    exp.add_argument("pod", help="NAMESPACE/NAME")
    exp.add_argument(*KUBECONFIG[0], **KUBECONFIG[1])
    exp.add_argument(*REQUEST_TIMEOUT[0], **REQUEST_TIMEOUT[1])
    exp.add_argument(
        "--gpu-scheduler-policy", default="spread", help="the scheduler's default card policy"
    )
    exp.add_argument(
        "--node-scheduler-policy", default="binpack", help="the scheduler's default node policy"
    )
    exp.add_argument(*GFD_SPLIT[0], **GFD_SPLIT[1])
    device_arguments(exp)
    exp.add_argument(
        "--preemption",
        action="store_true",
        help="the scheduler runs with --preemption=true (GPU preemption); without it, "
        "kube-scheduler's own preemption is shown in its words, then what GPU preemption would do",
    )
    exp.add_argument("-v", "--verbose", action="store_true", help="print every card score computed")
    exp.set_defaults(func=_explain)

    st = sub.add_parser(
        "status",
        help="every node's cards (memory, cores, slots, pods) and the GPU pods still waiting",
    )
    st.add_argument(*KUBECONFIG[0], **KUBECONFIG[1])
    st.add_argument(*REQUEST_TIMEOUT[0], **REQUEST_TIMEOUT[1])
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.add_argument(
        "-w", "--watch", action="store_true", help="read again and redraw in place until Ctrl-C"
    )
    st.add_argument(
        "--interval", type=float, default=2.0, help="seconds between reads with --watch"
    )
    st.add_argument(*GFD_SPLIT[0], **GFD_SPLIT[1])
    device_arguments(st)
    st.set_defaults(func=_status)

    mig = sub.add_parser("migrate", help="taking over from a running HAMi release")
    mig_sub = mig.add_subparsers(dest="migrate_command", required=True, metavar="check")
    mig_check = mig_sub.add_parser(
        "check",
        help="read HAMi's release as deployed; say whether the hand-over is safe and with "
        "which values (rc 0 safe, 1 not safe, 2 error); changes nothing",
    )
    from hami.runtime.migrate import add_arguments

    add_arguments(mig_check)
    mig_check.set_defaults(func=_migrate_check)

    from hami.runtime.settingsload import add_serve_arguments

    srv = sub.add_parser("serve", help="run the webhook, the extender and metrics")
    add_serve_arguments(srv)
    srv.set_defaults(func=_serve)
    return p


def _end_at_once(signum: int, _frame: object) -> None:
    os._exit(128 + signum)  # as a shell reports a command ended by the signal


def main(argv: Sequence[str] | None = None) -> int:
    # Ctrl-C ends a command from its first instant, also where the shell that started it left
    # SIGINT ignored (a script's background job). `hami serve` has nothing to undo until its
    # event loop takes the signal over (then it stops gracefully), and a KeyboardInterrupt
    # raised in its seconds of imports can be swallowed on the way: it simply ends. Once the
    # command is over, the caller's handling is back.
    words = list(sys.argv[1:] if argv is None else argv)
    given = signal.getsignal(signal.SIGINT)
    try:
        early = _end_at_once if words[:1] == ["serve"] else signal.default_int_handler
        signal.signal(signal.SIGINT, early)
        args = parser().parse_args(words)
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    finally:
        if given is not None:
            signal.signal(signal.SIGINT, given)
