"""A certificate authority made for one test, and a server certificate for 127.0.0.1 that it signed.

The CA is written to a file a client can be pointed at (SSL_CERT_FILE); nothing else trusts it.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _certificate(subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name | None,
                 issuer_key: ec.EllipticCurvePrivateKey, ca: bool) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer or name).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
            decipher_only=False), critical=True)
    else:
        loopback = x509.IPAddress(ipaddress.ip_address("127.0.0.1"))
        builder = builder.add_extension(x509.SubjectAlternativeName([loopback]), critical=False)
        builder = builder.add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                                        critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def throwaway_ca(folder: Path) -> tuple[Path, ssl.SSLContext]:
    """(the CA's PEM file, a server context that presents a certificate for 127.0.0.1 signed by it)."""
    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("Nalar test CA", ca_key, None, ca_key, ca=True)
    server = _certificate("127.0.0.1", server_key, ca.subject, ca_key, ca=False)
    folder.mkdir(parents=True, exist_ok=True)
    ca_file, chain, key_file = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    chain.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(server_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(chain, key_file)
    return ca_file, context
