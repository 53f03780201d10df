"""`hami status`: the cluster's cards read once from the API server, or redrawn in place every
`--interval` seconds (`--watch`), as text or JSON."""

import argparse
import asyncio
import sys
import time
from datetime import UTC, datetime
from typing import TextIO

import orjson

from hami.cache.store import ClusterCache
from hami.kube.client import Kube
from hami.kube.connect import connect
from hami.kube.errors import KubeError
from hami.runtime.choices import Choices, of_flags
from hami.runtime.logs import one_line
from hami.service.status import Status, render_json, render_text, status

# Cursor home, then each line cleared to its end, then the rest of the screen: a redraw
# overwrites the last frame without scrolling or flicker.
HOME, CLEAR_LINE, CLEAR_BELOW, CLEAR_SCREEN = "\x1b[H", "\x1b[K", "\x1b[J", "\x1b[2J"


async def read(kube: Kube, choices: Choices) -> Status:
    nodes, _ = await kube.list_objects("nodes")
    pods, _ = await kube.list_objects("pods")
    # A read of the cluster as it is: no decision of this command's is held, none expires.
    cache = choices.cache(time.monotonic, locks=choices.locks(), reservation_ttl=float("inf"))
    cache.replace_nodes(nodes)
    cache.replace_pods(pods)
    await read_dra(kube, cache)
    return status(cache, pods, choices.resources)


async def read_dra(kube: Kube, cache: ClusterCache) -> None:
    """The DRA drivers' cards and the claims on them, where the cluster serves
    resource.k8s.io/v1 and lets us list them (otherwise the device plugin's world alone)."""
    try:
        slices, _ = await kube.list_objects("resourceslices")
        claims, _ = await kube.list_objects("resourceclaims")
    except KubeError:
        return
    cache.dra.replace_slices(slices)
    cache.dra.replace_claims(claims)


def _json(s: Status, indent: bool) -> str:
    option = orjson.OPT_INDENT_2 if indent else 0
    return orjson.dumps(render_json(s), option=option).decode() + "\n"


def frame(lines: list[str]) -> str:
    return HOME + "".join(f"{line}{CLEAR_LINE}\n" for line in lines) + CLEAR_BELOW


async def _watch(kube: Kube, args: argparse.Namespace, out: TextIO, choices: Choices) -> None:
    if not args.json:
        out.write(CLEAR_SCREEN)
    while True:
        stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        try:
            s = await read(kube, choices)
        except KubeError as e:  # the API server may come back: keep watching
            lines = [f"hami status, every {args.interval:g}s, {stamp}: {one_line(e)}"]
            out.write(frame(lines) if not args.json else "")
        else:
            if args.json:
                out.write(_json(s, indent=False))
            else:
                header = f"hami status, every {args.interval:g}s, {stamp}"
                out.write(frame([header, "", *render_text(s)]))
        out.flush()
        await asyncio.sleep(args.interval)


async def _run(args: argparse.Namespace, out: TextIO) -> None:
    choices = of_flags(args, "status")
    wait = args.request_timeout
    kube = Kube(await connect(args.kubeconfig or None), timeout=wait, list_timeout=wait)
    try:
        if args.watch:
            await _watch(kube, args, out, choices)
        else:
            s = await read(kube, choices)
            out.write(_json(s, indent=True) if args.json else "\n".join(render_text(s)) + "\n")
    finally:
        await kube.close()


def show_status(args: argparse.Namespace) -> int:
    if args.interval <= 0:
        print("hami status: --interval must be more than 0 seconds", file=sys.stderr)
        return 2
    if args.gfd_split_count < 0:
        print("hami status: --gfd-split-count must not be negative (0: off)", file=sys.stderr)
        return 2
    if not args.request_timeout > 0:
        print("hami status: --request-timeout must be more than 0 seconds", file=sys.stderr)
        return 2
    try:
        asyncio.run(_run(args, sys.stdout))
    except KeyboardInterrupt:
        return 0
    except (ValueError, KubeError, OSError) as e:
        print(f"hami status: {one_line(e)}", file=sys.stderr)
        return 2
    return 0
