"""Fails when an import crosses the project's layers the wrong way (DESIGN.md).

adapters (hami.webhook, hami.extender) -> services -> cache / kube -> engine. The engine
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
        "hami.webhook",
        "hami.extender",
        "hami.certs",
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
        "hami.webhook",
        "hami.extender",
        "aiohttp",
        "hami.bench",
    ),
    "hami.kube": (
        "hami.cache",
        "hami.service",
        "hami.runtime",
        "hami.webhook",
        "hami.extender",
        "hami.bench",
    ),
    "hami.service": ("hami.runtime", "hami.webhook", "hami.extender", "hami.bench"),
    "hami.runtime": ("hami.bench",),
    "hami.webhook": ("hami.extender", "hami.runtime", "hami.bench"),
    "hami.extender": ("hami.webhook", "hami.runtime", "hami.bench"),
    "hami.certs": ("hami.bench",),
}


# Folders that install under another name (pyproject.toml's package-dir).
INSTALLED_AS = {"webhook": "hami.webhook", "scheduler": "hami.extender", "certs": "hami.certs"}


def module_of(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    top, *rest = rel.parts
    parts = [*INSTALLED_AS.get(top, top).split("."), *rest]
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
    for top in ("hami", *INSTALLED_AS):
        # hami/'s links to the other folders are read once, under the folders' own names.
        paths = (ROOT / top).rglob("*.py")
        for path in sorted(p for p in paths if p.resolve().is_relative_to(ROOT / top)):
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
