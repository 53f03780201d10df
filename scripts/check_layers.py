"""Fails when an import crosses the project's layers the wrong way (DESIGN.md).

adapters (webhook, scheduler) -> services -> cache / kube -> engine. The engine
must stay pure: no I/O, asyncio, clock or logging, so it is checked against a
list of forbidden modules as well. Nothing at run time imports the benchmarks (hami.bench);
only the `hami bench` command does.
"""

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# package prefix -> prefixes it must not import
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "hami.engine": (
        "hami.cache",
        "hami.kube",
        "hami.service",
        "hami.runtime",
        "hami.sim",
        "webhook",
        "scheduler",
        "certs",
        "asyncio",
        "aiohttp",
        "kubernetes_asyncio",
        "prometheus_client",
        "logging",
        "time",
        "socket",
        "subprocess",
        "os",
        "random",
        "hami.bench",
    ),
    "hami.cache": (
        "hami.kube",
        "hami.service",
        "hami.runtime",
        "webhook",
        "scheduler",
        "aiohttp",
        "hami.bench",
    ),
    "hami.kube": (
        "hami.cache",
        "hami.service",
        "hami.runtime",
        "webhook",
        "scheduler",
        "hami.bench",
    ),
    "hami.service": ("hami.runtime", "webhook", "scheduler", "hami.bench"),
    "hami.runtime": ("hami.bench",),
    "webhook": ("scheduler", "hami.runtime", "hami.bench"),
    "scheduler": ("webhook", "hami.runtime", "hami.bench"),
    "certs": ("hami.bench",),
}


def module_of(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(tree: ast.AST) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
    return out


def main() -> int:
    errors = []
    for top in ("hami", "webhook", "scheduler", "certs"):
        for path in sorted((ROOT / top).rglob("*.py")):
            mod = module_of(path)
            for layer, banned in FORBIDDEN.items():
                if mod != layer and not mod.startswith(layer + "."):
                    continue
                for line, name in imports(ast.parse(path.read_text(), str(path))):
                    for b in banned:
                        if name == b or name.startswith(b + "."):
                            errors.append(
                                f"{path.relative_to(ROOT)}:{line}: {mod} must not import {name}"
                            )
    print("\n".join(errors) or "layers: ok")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
