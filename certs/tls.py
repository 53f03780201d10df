"""Server-side TLS whose certificate can be rotated without restarting the process.

cert-manager and Kubernetes Secret volumes replace ``tls.crt``/``tls.key`` in place while the
webhook keeps serving. :class:`ReloadingServerContext` owns one :class:`ssl.SSLContext`, handed once
to the HTTP server, and loads a changed pair into that same object: OpenSSL copies the context's
certificate into each connection at handshake time, so new handshakes present the new certificate
and established connections keep the one they negotiated.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import tempfile
from pathlib import Path

from cryptography import x509

__all__ = ["ReloadingServerContext"]

log = logging.getLogger(__name__)

# (device, inode, size, mtime in ns) of the certificate file, then the same for the key file.
# The inode catches atomic replacement and Secret-volume symlink swaps even when size and a
# coarse mtime happen to match.
_Stamp = tuple[int, int, int, int, int, int, int, int]


class ReloadingServerContext:
    """A server :class:`ssl.SSLContext` that follows changes of its certificate and key files.

    The context uses a single key type. Loading a certificate of another key type (say RSA after
    ECDSA) adds it next to the old one instead of replacing it, because OpenSSL keeps one
    certificate per key type; rotate within one key type.

    The constructor raises :class:`OSError` or :class:`ssl.SSLError` when the initial pair cannot
    be loaded: unlike a rotation, there is no previous certificate to fall back on.
    """

    def __init__(self, cert_file: str | os.PathLike[str], key_file: str | os.PathLike[str]):
        self.cert_file = Path(cert_file)
        self.key_file = Path(key_file)
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        stamp = self._stamp()
        pem = self._read_pair()
        _load_pem(self.context, pem)
        self._loaded = stamp
        self.not_after = _not_after(pem)

    def maybe_reload(self) -> bool:
        """Load the files into :attr:`context` if either changed since the last load.

        Returns True when a new pair was installed. A pair that cannot be loaded (missing file,
        half-written file, certificate and key that do not match, as seen in the middle of a
        rotation) leaves the current certificate in place and returns False; the next call tries
        again.
        """
        try:
            before = self._stamp()
            if before == self._loaded:
                return False
            pem = self._read_pair()
            if self._stamp() != before:
                return False  # a writer is active; read again once it has finished
        except OSError:
            return False
        # Validate on a scratch context first: a failed load into the live context could leave it
        # with the new certificate and no usable key, which would break every new handshake.
        try:
            _load_pem(ssl.create_default_context(ssl.Purpose.CLIENT_AUTH), pem)
        except (ssl.SSLError, ValueError, OSError):
            return False
        _load_pem(self.context, pem)
        self._loaded = before
        self.not_after = _not_after(pem)
        log.info("reloaded TLS certificate from %s", self.cert_file)
        return True

    async def watch(self, interval: float, stop: asyncio.Event) -> None:
        """Call :meth:`maybe_reload` every ``interval`` seconds until ``stop`` is set."""
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=interval)
            except TimeoutError:
                self.maybe_reload()

    def _stamp(self) -> _Stamp:
        cert = os.stat(self.cert_file)
        key = os.stat(self.key_file)
        return (
            cert.st_dev,
            cert.st_ino,
            cert.st_size,
            cert.st_mtime_ns,
            key.st_dev,
            key.st_ino,
            key.st_size,
            key.st_mtime_ns,
        )

    def _read_pair(self) -> bytes:
        # Certificate chain and key in one buffer, so validation and the live load use exactly
        # the same bytes even if the files change in between.
        return self.cert_file.read_bytes().rstrip(b"\n") + b"\n" + self.key_file.read_bytes()


def _not_after(pem: bytes) -> float:
    """When the served certificate (the chain's first) expires, in Unix seconds: for the
    expiry metric, so that a rotation that never happens is seen before clients refuse it."""
    return x509.load_pem_x509_certificates(pem)[0].not_valid_after_utc.timestamp()


def _load_pem(context: ssl.SSLContext, pem: bytes) -> None:
    # SSLContext.load_cert_chain only reads from paths. The temporary file holds a private key,
    # so it is created 0600 and removed as soon as OpenSSL has read it.
    fd, path = tempfile.mkstemp(prefix="tls-reload-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        context.load_cert_chain(path)
    finally:
        os.unlink(path)
