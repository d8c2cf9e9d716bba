"""Throw-away certificates and kubeconfigs for a one-machine control plane on 127.0.0.1.

One CA signs the API server's serving certificate and the client certificates of the
identities the control plane runs as (the client certificate's CN is the user, its O the
group, as the API server's x509 authenticator reads them). The extender and its
kube-scheduler do not get a certificate: like the shipped pod, they run as the ServiceAccount
``dra-system/dra-extender``, with a token (``ControlPlane.service_account_kubeconfig``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID

from tests.certs import issue

# The control plane's own identities: the user names bootstrap RBAC grants their roles to.
IDENTITIES = {
    "admin": ("e2e-admin", "system:masters"),
    "controller-manager": ("system:kube-controller-manager", None),
    "scheduler": ("system:kube-scheduler", None),
}


@dataclass(frozen=True)
class Pki:
    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.crt"

    def cert(self, name: str) -> Path:
        return self.directory / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.directory / f"{name}.key"

    @property
    def service_account_key(self) -> Path:
        return self.directory / "sa.key"

    @property
    def service_account_public_key(self) -> Path:
        return self.directory / "sa.pub"

    @classmethod
    def create(cls, directory: Path) -> Pki:
        """Every file once; a directory that has them is reused (a restarted run keeps its CA)."""
        pki = cls(directory)
        if pki.ca.exists():
            return pki
        directory.mkdir(parents=True, exist_ok=True)
        ca = issue("dra-extender-e2e-ca", ca=True, days=7)
        api_names = ("localhost", "kubernetes", "kubernetes.default.svc")
        server_auth, client_auth = (ExtendedKeyUsageOID.SERVER_AUTH,), (ExtendedKeyUsageOID.CLIENT_AUTH,)
        issue("kube-apiserver", ca, server=True, dns=api_names, usages=server_auth, days=7).write(
            directory, "apiserver"
        )
        for name, (user, group) in IDENTITIES.items():
            issue(user, ca, organization=group, usages=client_auth, days=7).write(directory, name)
        # The service-account token signing key pair (RS256, the API server's default).
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pki.service_account_key.write_bytes(
            sa_key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.TraditionalOpenSSL,
                serialization.NoEncryption(),
            )
        )
        pki.service_account_public_key.write_bytes(
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        ca.write(directory, "ca")  # last: the CA's certificate marks a complete directory
        return pki

    def kubeconfig(
        self, path: Path, server: str, *, identity: str | None = None, token: str | None = None
    ) -> Path:
        """A kubeconfig for ``identity``'s client certificate, or for a bearer ``token``."""
        if identity is not None:
            user = f"client-certificate: {self.cert(identity)}\n    client-key: {self.key(identity)}"
        elif token is not None:
            user = f"token: {token}"
        else:
            raise ValueError("kubeconfig: an identity or a token")
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: e2e\n  cluster:\n    server: {server}\n"
            f"    certificate-authority: {self.ca}\n"
            f"users:\n- name: e2e\n  user:\n    {user}\n"
            "contexts:\n- name: e2e\n  context: {cluster: e2e, user: e2e}\ncurrent-context: e2e\n"
        )
        return path
