"""Throw-away certificates and kubeconfigs for a one-machine control plane on 127.0.0.1.

One CA signs the API server's serving certificate and the client certificates of the
identities the control plane runs as (the client certificate's CN is the user, its O the
group, as the API server's x509 authenticator reads them). The extender and its
kube-scheduler do not get a certificate: like the shipped pod, they run as the ServiceAccount
``dra-system/dra-extender``, with a token (``ControlPlane.service_account_kubeconfig``).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# The control plane's own identities: the user names bootstrap RBAC grants their roles to.
IDENTITIES = {
    "admin": ("e2e-admin", "system:masters"),
    "controller-manager": ("system:kube-controller-manager", None),
    "scheduler": ("system:kube-scheduler", None),
}


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem_key(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


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
        now = datetime.datetime.now(datetime.UTC)
        ca_key = _key()
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "dra-extender-e2e-ca")])
        ca_cert = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=7))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(ca_key, hashes.SHA256())
        )

        def issue(name: str, common_name: str, group: str | None, server: bool) -> None:
            key = _key()
            attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
            if group:
                attributes.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, group))
            builder = (
                x509.CertificateBuilder()
                .subject_name(x509.Name(attributes))
                .issuer_name(ca_name)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=7))
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(
                    x509.ExtendedKeyUsage(
                        [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
                    ),
                    critical=False,
                )
            )
            if server:
                builder = builder.add_extension(
                    x509.SubjectAlternativeName(
                        [
                            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                            x509.DNSName("localhost"),
                            x509.DNSName("kubernetes"),
                            x509.DNSName("kubernetes.default.svc"),
                        ]
                    ),
                    critical=False,
                )
            pki.cert(name).write_bytes(
                builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
            )
            pki.key(name).write_bytes(_pem_key(key))

        issue("apiserver", "kube-apiserver", None, server=True)
        for name, (user, group) in IDENTITIES.items():
            issue(name, user, group, server=False)
        sa_key = _key()
        pki.service_account_key.write_bytes(_pem_key(sa_key))
        pki.service_account_public_key.write_bytes(
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        pki.key("ca").write_bytes(_pem_key(ca_key))
        pki.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))  # last: marks completion
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
