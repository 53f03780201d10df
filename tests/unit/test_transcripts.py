"""The labs' transcripts (tests/e2e/labs/) are well formed, and the comparison they rely on
tells a difference it was not told about from one it was."""

import pytest

from tests.e2e.transcript import Difference, Step, Transcript, check, load, normalise

LABS = ("lab14", "lab12")


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        (
            "I0818 11:39:13.896863       1 gpu_policy.go:221] device GPU-77b9 computer score is 0.000000",
            "I<time> <pid> gpu_policy.go:221] device GPU-77b9 computer score is 0.000000\n",
        ),
        (
            "hami-scheduler-87f65f795-84l6d   2/2     Running            0               46m",
            "hami-scheduler-<hash>-<id>  2/2  Running  0  <age>\n",
        ),
        (
            "hami-device-plugin-h4z6l   1/2   CrashLoopBackOff   10 (4m5s ago)   30m",
            "hami-device-plugin-<id>  1/2  CrashLoopBackOff  10 (<age> ago)  <age>\n",
        ),
        (
            "  Warning  FilteringFailed    31s (x3 over 32s)  hami",
            "  Warning  FilteringFailed  <age>  hami\n",
        ),
        (
            "kai-hami-lab12-a    1/1   Running   0   10.84.2.66   node",
            "kai-hami-lab12-a  1/1  Running  0  <ip>  node\n",
        ),
        ("test_start=2026-08-12T05:11:13Z", "test_start=<time>\n"),
        ("limit=4147m", "limit=4147m\n"),  # a value, not an age
        # Not ages, ids or addresses.
        (
            "0/1 nodes: 1 4/4 ExclusiveDeviceAllocateConflict, 15360MB",
            "0/1 nodes: 1 4/4 ExclusiveDeviceAllocateConflict, 15360MB\n",
        ),
        (
            "policy-mutex-c  GPU-3c5f3637-e911-b226-7a4c-52da87c38aff,NVIDIA,1000,0:;",
            "policy-mutex-c  GPU-3c5f3637-e911-b226-7a4c-52da87c38aff,NVIDIA,1000,0:;\n",
        ),
    ],
)
def test_normalise_replaces_only_what_changes_from_run_to_run(text: str, normalised: str) -> None:
    assert normalise(text) == normalised


@pytest.mark.parametrize("lab", LABS)
def test_every_difference_is_in_the_write_ups_output_and_has_a_reason(lab: str) -> None:
    transcript = load(lab)
    assert transcript.steps and transcript.stand_ins
    for step in transcript.steps:
        assert step.run or step.show, step.id
        step.pattern(transcript.renames)  # raises for a difference not found
        assert all(d.why.strip() for d in step.differences), step.id
        assert not step.wait or (step.wait["until"] and step.wait["why"].strip()), step.id
    commands = "\n".join(s.define + s.run + s.show for s in transcript.steps)
    for edit in transcript.edits:
        assert edit.lab in commands, f"edit {edit.lab!r} changes none of the lab's commands"
    assert all(n["why"].strip() for n in transcript.not_replayed)


@pytest.mark.parametrize("lab", LABS)
def test_a_step_without_differences_accepts_the_write_ups_own_output(lab: str) -> None:
    transcript = load(lab)
    for step in transcript.steps:
        if step.expect and not step.differences:
            check(transcript, step, step.expect)


def test_an_unlisted_difference_fails_and_a_listed_one_passes() -> None:
    step = Step("s", show="x", expect="NAME  READY\npod-h4z6l   3/3\n")
    transcript = Transcript("t", (step,))
    check(transcript, step, "NAME   READY\npod-x7k2p   3/3\n")
    with pytest.raises(AssertionError, match="output differs"):
        check(transcript, step, "NAME   READY\npod-x7k2p   1/1\n")
    listed = Step("s", show="x", expect=step.expect, differences=(Difference("3/3", "1/1", "why"),))
    check(Transcript("t", (listed,)), listed, "NAME   READY\npod-x7k2p   1/1\n")
