"""NVIDIA's wire names are written in its own modules alone (hami.engine.nvidianames, which
the family's wire reads, and hami.engine.families.nvidia); everything else reads them there.

Unlike the other families' check (tests/unit/engine/families/kit.py), comments and docstrings
may name the strings they document: NVIDIA's engine predates the seam and its docs explain
HAMi's NVIDIA rules by the names users write. Code may not."""

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from hami.engine import nvidianames
from hami.engine.families.nvidia.wire import WIRE

ROOT = Path(__file__).resolve().parents[4]
HOMES = (
    ROOT / "hami" / "engine" / "nvidianames.py",
    ROOT / "hami" / "engine" / "families" / "nvidia",
)


def _names() -> list[str]:
    w = WIRE
    return [
        *w.resources.all(),
        w.register_annotation,
        w.handshake_annotation,
        w.to_allocate_annotation,
        w.allocated_annotation,
        *w.pod_annotations(),
        nvidianames.MIG_ALLOCATIONS,
        nvidianames.NODE_LINK_SCORES,
    ]


def _code_strings(tree: ast.AST) -> Iterator[str]:
    """The string constants of a module that are not docstrings."""
    docs: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docs.add(id(body[0].value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield node.value


def _home(path: Path) -> bool:
    return any(path == h or h in path.parents for h in HOMES) or path.name == "registry.py"


def written_outside() -> list[str]:
    # A name inside a longer string counts unless more of a name follows (nvidia.com/gpu in
    # nvidia.com/gpumem is the other name; in nvidia.com/gpu.count it is a GFD label). The
    # type word counts only as a whole string: prose says "the NVIDIA runtime".
    patterns = {n: re.compile(re.escape(n) + r"(?![\w.-])") for n in _names()}
    found = []
    for path in sorted((ROOT / "hami").rglob("*.py")):
        if _home(path) or not path.is_file():
            continue
        rel = str(path.relative_to(ROOT))
        for text in _code_strings(ast.parse(path.read_text())):
            if text == WIRE.type:
                found.append(f"{text} written in {rel}")
            for name, pattern in patterns.items():
                if pattern.search(text):
                    found.append(f"{name} written in {rel}: {text!r}")
    return found


def test_nvidia_names_are_written_in_its_modules_alone() -> None:
    assert written_outside() == []


def test_the_wire_carries_hamis_nvidia_names() -> None:
    assert (WIRE.type, WIRE.vendor) == ("NVIDIA", "NVIDIA")
    assert WIRE.resources.all() == (
        "nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores",
        "nvidia.com/gpumem-percentage", "nvidia.com/priority",
    )  # fmt: skip
    assert (WIRE.register_annotation, WIRE.handshake_annotation) == (
        "hami.io/node-nvidia-register",
        "hami.io/node-handshake",
    )
    assert (WIRE.to_allocate_annotation, WIRE.allocated_annotation, WIRE.lock_name) == (
        "hami.io/vgpu-devices-to-allocate",
        "hami.io/vgpu-devices-allocated",
        "hami.io/mutex.lock",
    )
    assert WIRE.pod_annotations() == (
        "nvidia.com/use-gputype", "nvidia.com/nouse-gputype",
        "nvidia.com/use-gpuuuid", "nvidia.com/nouse-gpuuuid",
        "nvidia.com/numa-bind", "nvidia.com/vgpu-mode",
    )  # fmt: skip
