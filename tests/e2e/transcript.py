"""A lab's transcript (tests/e2e/labs/*.yaml): its commands, what its write-up prints, and every
remaining difference with its reason; replayed with bash against a cluster.

Outputs are compared after the same normalisation on both sides: times, ages, process ids, IP
addresses and the random suffixes Kubernetes gives pod names become placeholders, and runs of
spaces (table alignment) one run. Then each difference's `lab` text, found in the normalised
write-up, is replaced by its `ours` (a regular expression), and our normalised output must
match the whole. `compare: events` compares `kubectl describe`'s Events rows instead
(tests/e2e/labtext.py).
"""

from __future__ import annotations

import difflib
import re
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .labtext import event_rows

LABS = Path(__file__).resolve().parent / "labs"
_EXPORT = re.compile(r"^export [A-Za-z_][A-Za-z0-9_]*=\S+$")

_SUFFIX = "[bcdfghjklmnpqrstvwxz2456789]"
_NORMALISE = (
    # klog's header: severity, date and time, process id.
    (re.compile(r"^([IWEF])\d{4} \d{2}:\d{2}:\d{2}\.\d{6} +\d+ ", re.M), r"\1<time> <pid> "),
    (re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?Z"), "<time>"),
    (re.compile(r"(?<![\w./:<=-])\d+[smhd](?:\d+[smhd])?(?![\w./:>-])"), "<age>"),
    (re.compile(r"<age> \(x\d+ over <age>\)"), "<age>"),
    (re.compile(rf"-{_SUFFIX}{{6,10}}-{_SUFFIX}{{5}}\b"), "-<hash>-<id>"),
    (re.compile(rf"-{_SUFFIX}{{5}}\b"), "-<id>"),
    (re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}\b"), "<ip>"),
    (re.compile(r"[ \t]{2,}"), "  "),
    (re.compile(r"[ \t]+$", re.M), ""),
)


def normalise(text: str) -> str:
    for pattern, placeholder in _NORMALISE:
        text = pattern.sub(placeholder, text)
    return text.strip("\n") + "\n" if text.strip() else ""


@dataclass(frozen=True)
class Difference:
    lab: str
    ours: str
    why: str


@dataclass(frozen=True)
class Step:
    id: str
    define: str = ""
    run: str = ""
    show: str = ""
    expect: str = ""
    compare: str = "text"
    differences: tuple[Difference, ...] = ()
    notes: tuple[str, ...] = ()
    # A condition (shell) the replay waits for before `show`, where the write-up's author waited
    # (its outputs' ages say so) and a replay typing at once would not; `why` says where.
    wait: Mapping[str, str] = field(default_factory=dict)

    def pattern(self, renames: tuple[Difference, ...] = ()) -> re.Pattern[str]:
        """The write-up's output with the transcript's renames, normalised, each difference put
        in, as a regex."""

        def prepared(text: str) -> str:
            for r in renames:
                text = text.replace(r.lab, r.ours)
            return text

        text = re.escape(normalise(prepared(self.expect)))
        for d in self.differences:
            lab = normalise(prepared(d.lab))
            lab = re.escape(lab if d.lab.endswith("\n") else lab.rstrip("\n"))
            if lab not in text:
                raise AssertionError(f"{self.id}: difference {d.lab!r} is not in the expected text")
            text = text.replace(lab, d.ours)
        return re.compile(text)


@dataclass(frozen=True)
class Transcript:
    title: str
    steps: tuple[Step, ...]
    edits: tuple[Difference, ...] = ()
    # Literal renames in every step's expected output (node names), before the differences.
    renames: tuple[Difference, ...] = ()
    not_replayed: tuple[Mapping[str, str], ...] = ()
    stand_ins: str = ""

    def step(self, step_id: str) -> Step:
        (found,) = [s for s in self.steps if s.id == step_id]
        return found

    def command(self, text: str) -> str:
        """A command of the lab as it runs here: each edit applied."""
        for edit in self.edits:
            text = text.replace(edit.lab, edit.ours)
        return text


def _differences(raw: Any) -> tuple[Difference, ...]:
    return tuple(Difference(d["lab"], d["ours"], d["why"]) for d in raw or ())


def load(name: str) -> Transcript:
    raw = yaml.safe_load((LABS / f"{name}.yaml").read_text())
    steps = tuple(
        Step(
            id=s["id"],
            define=s.get("define", ""),
            run=s.get("run", ""),
            show=s.get("show", ""),
            expect=s.get("expect", ""),
            compare=s.get("compare", "text"),
            differences=_differences(s.get("differences")),
            notes=tuple(n["why"] for n in s.get("notes") or ()),
            wait=s.get("wait") or {},
        )
        for s in raw["steps"]
    )
    return Transcript(
        title=raw["title"],
        steps=steps,
        edits=_differences(raw.get("edits")),
        renames=_differences(raw.get("renames")),
        not_replayed=tuple(raw.get("not_replayed") or ()),
        stand_ins=raw.get("stand_ins", ""),
    )


def check(transcript: Transcript, step: Step, output: str) -> None:
    """Our output of `step`'s show commands against what the write-up prints."""
    if step.compare == "events":
        ours = {tuple(normalise(c).strip() for c in row) for row in event_rows(output)}
        lab = {tuple(normalise(c).strip() for c in row) for row in event_rows(step.expect)}
        assert ours == lab, f"{step.id}: Events rows\nlab:  {sorted(lab)}\nours: {sorted(ours)}"
        return
    actual = normalise(output)
    if step.pattern(transcript.renames).fullmatch(actual) is None:
        diff = "".join(
            difflib.unified_diff(
                normalise(step.expect).splitlines(True),
                actual.splitlines(True),
                "write-up (normalised, before its differences)",
                "ours (normalised)",
            )
        )
        raise AssertionError(f"{step.id}: output differs from the write-up's\n{diff}")


@dataclass
class Shell:
    """Runs a transcript's commands with bash in ``folder``, as a user would type them."""

    folder: Path
    env: Mapping[str, str]
    log: Path
    prelude: list[str] = field(default_factory=list)

    def __call__(self, transcript: Transcript, step: Step, timeout: float = 900) -> str:
        label = f"{transcript.title} / {step.id}"
        if step.define:
            self.prelude.append(transcript.command(step.define))
        if step.run:
            commands = transcript.command(step.run)
            self._bash(label, commands, timeout, check=True)
            # A variable the lab exports is there for its later commands (one shell in the lab).
            self.prelude += [line for line in commands.splitlines() if _EXPORT.match(line)]
        if step.wait:
            self._until(label, step.wait["until"], timeout)
        output = ""
        if step.show:
            # A lab's shown pipeline may end in a grep that finds nothing: its output is what
            # is compared, not its status.
            output = self._bash(label, transcript.command(step.show), timeout, check=False)
        if step.expect:
            check(transcript, step, output)
        return output

    def _until(self, label: str, condition: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._bash(f"{label} (waiting)", condition, 30, check=True)
                return
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(1)

    def _bash(self, label: str, commands: str, timeout: float, *, check: bool) -> str:
        script = "\n".join([*self.prelude, ("set -e\n" if check else "") + commands])
        result = subprocess.run(
            ["bash", "-c", script],
            cwd=self.folder,
            env=dict(self.env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        with self.log.open("a") as log:
            log.write(f"### {label}\n$ {commands}\n{result.stdout}{result.stderr}\n")
        if check and result.returncode != 0:
            raise AssertionError(
                f"{label}: exit {result.returncode}\n$ {commands}\n{result.stdout}{result.stderr}"
            )
        return result.stdout
