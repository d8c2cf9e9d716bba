"""Server-side TLS whose certificate follows its files, so a rotated certificate needs no restart.

Certificates in a cluster are rotated by rewriting files (cert-manager, a Secret volume's atomic
symlink swap). The listening ``SSLContext`` carries an SNI callback, which OpenSSL runs on every
handshake whether or not the client sends a server name. The callback compares the files'
stamps (inode, size, mtime: a symlink swap changes the inode even when the mtime does not) with
those of the last load. When they differ it builds a fresh context and switches the connection
to it, so the very first handshake after a rotation already gets the new certificate. A
half-written rotation (a cert that does not match the key yet) keeps the previous context and is
retried on the next handshake; it is logged once per state of the files.

With a client CA, every connection must present a certificate signed by it: that is how only
kube-scheduler (holding such a certificate) can call bind. OpenSSL verifies a client's chain for
the "ssl_client" purpose (``ssl_verify_cert_chain`` in OpenSSL's ssl/ssl_cert.c), so a
certificate whose extended key usage lacks clientAuth is refused in the handshake. A CA that
signs more than clients' certificates (the extender's own serving certificate, often) still
lets all of them in; ``AllowedClients`` narrows that to the names of ``--client-allowed-names``.
"""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

Stamp = tuple[tuple[int, int, int], ...]


class TLSError(ValueError):
    """Certificate, key or CA files that cannot be served."""


@dataclass(frozen=True)
class TLSFiles:
    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None

    def paths(self) -> tuple[Path, ...]:
        return (self.cert_file, self.key_file) + ((self.client_ca_file,) if self.client_ca_file else ())


class ReloadingTLS:
    """``context`` is what the server listens with; it hands each handshake the newest certificate."""

    def __init__(self, files: TLSFiles, clients: AllowedClients | None = None) -> None:
        self.files = files
        self.clients = clients  # the connections check it once the handshake is done
        self._stamp = self._stamps()
        self.context = self._build()  # a bad file at start-up is a TLSError: refuse to start
        self.context.sni_callback = self._on_handshake
        self._current = self.context
        self._failed_stamp: Stamp | None = None
        self.reloads = 0

    @property
    def current(self) -> ssl.SSLContext:
        return self._current

    def _stamps(self) -> Stamp:
        try:
            stats = [os.stat(path) for path in self.files.paths()]
        except OSError as exc:
            raise TLSError(f"cannot read {exc.filename}: {exc.strerror}") from None
        return tuple((s.st_ino, s.st_size, s.st_mtime_ns) for s in stats)

    def _build(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(str(self.files.cert_file), str(self.files.key_file))
        except (OSError, ssl.SSLError) as exc:
            raise TLSError(
                f"certificate {self.files.cert_file} with key {self.files.key_file}: {exc}"
            ) from None
        if self.files.client_ca_file is not None:
            try:
                ctx.load_verify_locations(cafile=str(self.files.client_ca_file))
            except (OSError, ssl.SSLError) as exc:
                raise TLSError(f"client CA {self.files.client_ca_file}: {exc}") from None
            ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx

    def refresh(self) -> bool:
        """Load the files again if they changed; returns whether a new context is now in force."""
        stamp: Stamp = ()  # unreadable files: one failure state, so it is logged once
        try:
            stamp = self._stamps()
            if stamp in (self._stamp, self._failed_stamp):
                return False
            fresh = self._build()
        except TLSError as exc:
            if stamp != self._failed_stamp:
                log.warning("TLS files changed but cannot be loaded (keeping the previous ones): %s", exc)
            self._failed_stamp = stamp
            return False
        self._current, self._stamp, self._failed_stamp = fresh, stamp, None
        self.reloads += 1
        log.info("TLS files changed: serving the new certificate from now on")
        return True

    def _on_handshake(self, conn: ssl.SSLObject | ssl.SSLSocket, _server_name: str | None,
                      _initial: ssl.SSLContext) -> None:
        self.refresh()
        if conn.context is not self._current:
            conn.context = self._current


def client_names(cert: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
    """Where a verified client certificate's names come from, and the names.

    Its DNS subjectAltNames; the subject CN only when it has no subjectAltName at all (the rule
    hostname checks used before SANs were mandatory). ``cert`` is ``getpeercert()``'s dict,
    which has "subjectAltName" exactly when the certificate has the extension.
    """
    if "subjectAltName" in cert:
        return "DNS subjectAltName", tuple(value for kind, value in cert["subjectAltName"] if kind == "DNS")
    common = tuple(value for rdn in cert.get("subject", ()) for key, value in rdn if key == "commonName")
    return "subject CN (no subjectAltName)", common


@dataclass(frozen=True)
class AllowedClients:
    """``--client-allowed-names``: of the certificates the client CA signed, the ones served."""

    names: frozenset[str]

    def refusal(self, conn: ssl.SSLObject) -> str | None:
        """Why the client of ``conn`` (verified, handshake done) is not served; None if it is."""
        source, names = client_names(conn.getpeercert() or {})
        if not self.names.isdisjoint(names):
            return None
        return f"client certificate {source}: {', '.join(names) or 'none'}; not in --client-allowed-names"
