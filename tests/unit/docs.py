"""The README and docs/*.md, and the shell commands their code blocks show."""

from __future__ import annotations

import re
import textwrap

from tests.builders.chart import (
    REPO_ROOT,
)

README = (REPO_ROOT / "README.md").read_text()

DOCS = REPO_ROOT / "docs"

PAGES = {"README.md": README} | {f"docs/{p.name}": p.read_text() for p in sorted(DOCS.glob("*.md"))}

ALL = "\n".join(PAGES.values())


def sh_blocks(text: str = ALL) -> list[str]:
    # Indented blocks (inside a numbered step) count too, without their indentation.
    return [
        textwrap.dedent(body)
        for body in re.findall(r"^ *```sh\n(.*?)^ *```", text, flags=re.S | re.M)
    ]


def command_lines(text: str = ALL) -> list[str]:
    """Every command of the pages' sh blocks, continuation lines joined."""
    return [
        line.replace("\\\n", " ")
        for block in sh_blocks(text)
        for line in re.split(r"(?<!\\)\n", block)
        if line.strip() and not line.lstrip().startswith("#")
    ]
