"""`hami serve`: settings, logging, signals, run until SIGTERM."""

import argparse
import asyncio
import logging
import signal
import sys

from hami.kube.errors import BadKubeconfig
from hami.runtime import logs
from hami.runtime.app import build
from hami.runtime.config import ConfigError
from hami.runtime.serving import run
from hami.runtime.settingsload import load_settings
from hami.runtime.sockets import raise_open_file_limit

log = logging.getLogger(__name__)


def serve(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args)
    except ConfigError as e:
        print(f"hami serve: {logs.one_line(e)}", file=sys.stderr)
        return 2
    logs.setup(settings.log_level, settings.logging_format)
    before, after = raise_open_file_limit()
    if after != before:
        log.info("open-file limit raised", extra={"from": before, "to": after})

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        starting = asyncio.ensure_future(build(settings))

        def on_signal() -> None:
            # During start-up (waiting for the API server, the admission policy, the
            # certificate Secret) nothing serves yet: give up at once. After, stop drains.
            starting.cancel()
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        try:
            rt = await starting
        except asyncio.CancelledError:
            log.info("stopped during start-up")
            return
        await run(rt, stop)

    try:
        asyncio.run(main())
    except (OSError, BadKubeconfig, ConfigError) as e:
        # Start-up failures (no credentials, a port taken): one line, as for a bad flag.
        print(f"hami serve: {logs.one_line(e)}", file=sys.stderr)
        return 2
    return 0
