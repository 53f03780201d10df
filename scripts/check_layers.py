"""Fails when an import breaks the layer rules: the import-linter contracts in pyproject.toml
([tool.importlinter]), stated in docs/architecture.md.

cli -> bench -> runtime -> adapters (webhook, scheduler) / sim -> services -> certs -> cache /
kube -> engine; the engine pure (no I/O, asyncio, threads, clock or dates, logging or
randomness); inside the engine, the glue that decides over the families -> the families -> the
shared walk and model, and each family independent of the others (registry -> families ->
basic -> common -> base); nothing at run time imports the benchmarks; no import cycle between
the modules of a package, TYPE_CHECKING imports included. The same as
`.venv/bin/lint-imports`, kept under this name for the commands that call it.
"""

import os
import sys
from pathlib import Path

from importlinter.cli import lint_imports

if __name__ == "__main__":
    os.chdir(Path(__file__).resolve().parent.parent)  # where pyproject.toml is
    sys.path.insert(0, os.getcwd())
    sys.exit(lint_imports(no_logo=True, no_cache=True))
