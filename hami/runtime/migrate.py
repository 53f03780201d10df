"""`hami migrate check`: HAMi's release as deployed, read once, and whether hami-py's migration
mode can take over from it (hami.service.migration), with the values to install it with.
Read-only: nothing is changed."""

import argparse
import asyncio
import shlex
import sys
from typing import TextIO

from hami.kube.client import Kube
from hami.kube.connect import connect
from hami.kube.errors import KubeError, Unavailable
from hami.runtime.logs import one_line
from hami.service.migration import Deployed, Verdict, election, fullname, judge


async def read(kube: Kube, namespace: str, release: str) -> Deployed:
    sched = f"{fullname(release)}-scheduler"
    configmap = await kube.get_configmap(namespace, sched)
    le = election(configmap) if configmap is not None else None
    lease_ns, lease_name = (le.namespace, le.name) if le else (namespace, sched)
    return Deployed(
        namespace=namespace,
        release=release,
        deployment=await kube.get_deployment(namespace, sched),
        configmap=configmap,
        lease=await kube.get_lease(lease_ns, lease_name),
        webhook=await kube.get_mutating_webhook_configuration(f"{fullname(release)}-webhook"),
    )


def render(v: Verdict, found: Deployed, args: argparse.Namespace) -> list[str]:
    lines = [f"HAMi's release {found.release} in {found.namespace}, as deployed:"]
    lines += [f"  {line}" for line in v.seen]
    if not v.safe:
        lines.append("Not safe to hand over yet:")
        lines += [f"  - {p}" for p in v.problems]
        return lines
    sets = " ".join(f"--set {shlex.quote(value)}" for value in v.values)
    lines += [
        "Safe to hand over: ours campaigns for HAMi's Lease, so one scheduler binds at a time.",
        "Install with (then docs/migrate-from-hami.md, Forward, step 3):",
        f"  helm install {args.release} ./helm/hami --namespace {args.namespace} "
        f"--create-namespace --set image.repository=<registry>/hami-py {sets}",
        f"and the device values HAMi's release has (helm get values {found.release} "
        f"-n {found.namespace}).",
    ]
    return lines


async def _run(args: argparse.Namespace, out: TextIO) -> bool:
    api = await connect(args.kubeconfig or None)
    kube = Kube(api, timeout=args.timeout)
    try:
        found = await read(kube, args.hami_namespace, args.hami_release)
    except Unavailable as e:
        raise Unavailable(
            f"the API server {api.configuration.host} did not answer within {args.timeout:g} s "
            f"({one_line(e)})"
        ) from e
    finally:
        await kube.close()
    verdict = judge(found, args.release)
    out.write("\n".join(render(verdict, found, args)) + "\n")
    return verdict.safe


def check(args: argparse.Namespace) -> int:
    if args.timeout <= 0:
        print("hami migrate check: --timeout must be more than 0 seconds", file=sys.stderr)
        return 2
    try:
        return 0 if asyncio.run(_run(args, sys.stdout)) else 1
    except KeyboardInterrupt:
        return 130
    except (ValueError, KubeError, OSError) as e:
        print(f"hami migrate check: {one_line(e)}", file=sys.stderr)
        return 2


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", default="", help="kubeconfig file; in-cluster when empty")
    p.add_argument(
        "--hami-namespace", default="kube-system", help="HAMi's release's namespace (kube-system)"
    )
    p.add_argument("--hami-release", default="hami", help="HAMi's release's name (hami)")
    p.add_argument("--release", default="hami-py", help="the name ours will be installed under")
    p.add_argument("--namespace", default="hami-system", help="the namespace ours will go to")
    p.add_argument(
        "--timeout", type=float, default=10.0, help="seconds each API call may take (10)"
    )
