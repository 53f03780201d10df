"""Text files the `hami` command reads (scenarios, manifests, settings, kubeconfigs), with one
message per way they can be unreadable, which starts with the file's name: the caller puts
the file's role before it ("kubeconfig ...")."""

from pathlib import Path


class UnreadableFileError(ValueError):
    """A file that could not be read as UTF-8 text; the message names the file and the fix."""


def read_text(path: Path | str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UnreadableFileError(
            f"{path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start}): "
            "save it as UTF-8"
        ) from None
    except OSError as e:
        raise UnreadableFileError(f"{path}: cannot read it: {e.strerror or e}") from None
