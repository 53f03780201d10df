"""Text files the `hami` command reads (scenarios, manifests, settings, kubeconfigs), with one
message per way they can be unreadable, which starts with the file's name: the caller puts
the file's role before it ("kubeconfig ...")."""

from pathlib import Path

# Every file the command reads is YAML written or generated for it: kilobytes, a scenario of
# thousands of nodes a few MiB. Reading on past this (a device such as /dev/zero never ends)
# would only fill memory before the YAML parser could say anything.
MAX_BYTES = 16 * 2**20


class UnreadableFileError(ValueError):
    """A file that could not be read as UTF-8 text; the message names the file and the fix."""


def read_text(path: Path | str) -> str:
    try:
        with Path(path).open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise UnreadableFileError(f"{path}: cannot read it: {e.strerror or e}") from None
    if len(data) > MAX_BYTES:
        raise UnreadableFileError(
            f"{path}: more than {MAX_BYTES // 2**20} MiB, far more than any file the command "
            "reads: give the YAML file itself"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UnreadableFileError(
            f"{path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start}): "
            "save it as UTF-8"
        ) from None
