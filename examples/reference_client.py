#!/usr/bin/env python3
"""A reference client for the App Attest gateway without an iPhone: what a device and its app do, in one
file, for people writing a client on another platform or a test harness (docs/client.md, "Testing without a
device"). Needs the `cryptography` package (Debian: python3-cryptography).

It plays the device with a CA the gateway was told to trust instead of Apple's (`gateway bench ca --out DIR`,
then `gateway serve --config gateway.yaml --trust-anchor DIR/root.pem`; never in production):

  1. makes a P-256 key; its key id is SHA-256 of the uncompressed public point;
  2. registers it: GET /attest/challenge, builds the attestation object Apple would (CBOR: fmt
     "apple-appattest", attStmt {x5c: [credential certificate, intermediate], receipt}, authData), the
     credential certificate carrying the nonce SHA-256(authData || SHA-256(challenge)) in extension
     1.2.840.113635.100.8.2, and POSTs it to /attest/verify;
  3. makes one signed request: GET /assert/challenge?key_id=…, client data {"challenge","method","path",
     "bodySHA256"}, authenticatorData (rpIdHash, flags, counter 1), signs
     nonce = SHA-256(authenticatorData || SHA-256(clientData)) with ECDSA-SHA256 — so the ECDSA digest is
     SHA-256(nonce): the data is hashed twice — and sends the three X-App-Attest-* headers.

Prints one JSON line per step; exits 0 when the signed request was forwarded (2xx), 1 otherwise.

  python3 examples/reference_client.py --gateway http://127.0.0.1:8080 --ca run/ca \\
      --app TEAMID1234.com.example.app --path /v1/ai/generate --body '{"prompt":"hi"}'
"""
import argparse
import base64
import datetime
import hashlib
import json
import os
import struct
import sys
import urllib.error
import urllib.parse
import urllib.request

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

NONCE_EXTENSION = x509.ObjectIdentifier("1.2.840.113635.100.8.2")
AAGUID = {"development": b"appattestdevelop", "production": b"appattest" + bytes(7)}
FLAG_ATTESTED_CREDENTIAL_DATA = 0x40


def sha256(*parts):
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    return digest.digest()


def b64(data):
    return base64.b64encode(data).decode()


def cbor(value):
    """The CBOR subset App Attest uses: unsigned and negative integers, bytes, text, arrays, maps (in order)."""
    def head(major, length):
        if length < 24:
            return bytes([major << 5 | length])
        for info, size in ((24, "B"), (25, ">H"), (26, ">I"), (27, ">Q")):
            if length < 1 << (8 * struct.calcsize(size)):
                return bytes([major << 5 | info]) + struct.pack(size, length)
        raise ValueError("too long")
    if isinstance(value, int):
        return head(0, value) if value >= 0 else head(1, -1 - value)
    if isinstance(value, bytes):
        return head(2, len(value)) + value
    if isinstance(value, str):
        data = value.encode()
        return head(3, len(data)) + data
    if isinstance(value, list):
        return head(4, len(value)) + b"".join(cbor(item) for item in value)
    if isinstance(value, dict):
        return head(5, len(value)) + b"".join(cbor(k) + cbor(v) for k, v in value.items())
    raise TypeError(type(value))


def der(tag, content):
    length = len(content)
    encoded = bytes([length]) if length < 128 else bytes([0x81, length]) if length < 256 else bytes([0x82]) + struct.pack(">H", length)
    return bytes([tag]) + encoded + content


class Device:
    """One App Attest key, as DCAppAttestService holds it."""

    def __init__(self, app_id, environment):
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.point = self.key.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
        self.key_id = sha256(self.point)
        self.rp_id_hash = sha256(app_id.encode())
        self.environment = environment
        self.counter = 0

    def attest(self, client_data_hash, intermediate, intermediate_key):
        """attestKey(keyId, clientDataHash:): the attestation object, certified by `intermediate`."""
        cose_key = cbor({1: 2, 3: -7, -1: 1, -2: self.point[1:33], -3: self.point[33:65]})
        auth_data = (self.rp_id_hash + bytes([FLAG_ATTESTED_CREDENTIAL_DATA]) + struct.pack(">I", 0)
                     + AAGUID[self.environment] + struct.pack(">H", len(self.key_id)) + self.key_id + cose_key)
        nonce = sha256(auth_data, client_data_hash)
        now = datetime.datetime.now(datetime.timezone.utc)
        credential = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, self.key_id.hex())]))
            .issuer_name(intermediate.subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
            # SEQUENCE { [1] { OCTET STRING nonce } }, as in Apple's credential certificates.
            .add_extension(x509.UnrecognizedExtension(NONCE_EXTENSION, der(0x30, der(0xA1, der(0x04, nonce)))), critical=False)
            .sign(intermediate_key, hashes.SHA256())
        )
        statement = {"x5c": [credential.public_bytes(serialization.Encoding.DER), intermediate.public_bytes(serialization.Encoding.DER)],
                     "receipt": b"reference-client-receipt"}
        return cbor({"fmt": "apple-appattest", "attStmt": statement, "authData": auth_data})

    def assert_(self, client_data_hash):
        """generateAssertion(keyId, clientDataHash:): the next counter, signed over the double hash."""
        self.counter += 1
        authenticator_data = self.rp_id_hash + bytes([FLAG_ATTESTED_CREDENTIAL_DATA]) + struct.pack(">I", self.counter)
        nonce = sha256(authenticator_data, client_data_hash)
        signature = self.key.sign(nonce, ec.ECDSA(hashes.SHA256()))  # ECDSA over SHA-256(nonce)
        return cbor({"signature": signature, "authenticatorData": authenticator_data})


def call(gateway, method, path, body=None, headers=None):
    request = urllib.request.Request(gateway + path, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def step(name, status, body):
    print(json.dumps({"step": name, "status": status, "body": body.decode(errors="replace")[:500]}), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gateway", default="http://127.0.0.1:8080")
    parser.add_argument("--ca", required=True, help="a directory from `gateway bench ca --out DIR` (intermediate.pem, intermediate-key.pem)")
    parser.add_argument("--app", default="TEAMID1234.com.example.app", help="TEAMID.bundle.id, one of app_attest.apps")
    parser.add_argument("--environment", choices=sorted(AAGUID), default="production")
    parser.add_argument("--prefix", default="", help="the gateway's `prefix`")
    parser.add_argument("--method", default="POST")
    parser.add_argument("--path", default="/v1/ai/generate", help="a protected route's path, with its query if any")
    parser.add_argument("--body", default='{"prompt":"hello from the reference client"}')
    arguments = parser.parse_args()

    with open(os.path.join(arguments.ca, "intermediate.pem"), "rb") as file:
        intermediate = x509.load_pem_x509_certificate(file.read())
    with open(os.path.join(arguments.ca, "intermediate-key.pem"), "rb") as file:
        intermediate_key = serialization.load_pem_private_key(file.read(), password=None)
    gateway, prefix = arguments.gateway.rstrip("/"), arguments.prefix
    device = Device(arguments.app, arguments.environment)

    # 1. Registration: the challenge's bytes are hashed once into clientDataHash.
    status, challenge = call(gateway, "GET", prefix + "/attest/challenge")
    step("attest_challenge", status, challenge)
    if status != 200:
        return 1
    attestation = device.attest(sha256(challenge), intermediate, intermediate_key)
    registration = json.dumps({"key_id": b64(device.key_id), "attestation": b64(attestation), "challenge": b64(challenge)})
    status, answer = call(gateway, "POST", prefix + "/attest/verify", registration.encode(), {"Content-Type": "application/json"})
    step("attest_verify", status, answer)
    if status != 200:
        return 1

    # 2. One signed request: the client data describes exactly this request.
    status, challenge = call(gateway, "GET", prefix + "/assert/challenge?key_id=" + urllib.parse.quote(b64(device.key_id), safe=""))
    step("assert_challenge", status, challenge)
    if status != 200:
        return 1
    body = arguments.body.encode()
    target = urllib.parse.urlsplit(arguments.path)
    fields = {"challenge": challenge.decode(), "method": arguments.method, "path": urllib.parse.unquote(target.path),
              "bodySHA256": b64(sha256(body))}
    if target.query:
        fields["query"] = target.query
    client_data = json.dumps(fields, separators=(",", ":")).encode()
    assertion = device.assert_(sha256(client_data))
    headers = {"Content-Type": "application/json", "X-App-Attest-Key-Id": b64(device.key_id),
               "X-App-Attest-Assertion": b64(assertion), "X-App-Attest-Client-Data": b64(client_data)}
    status, answer = call(gateway, arguments.method, arguments.path, body, headers)
    step("signed_request", status, answer)
    return 0 if 200 <= status < 300 else 1


if __name__ == "__main__":
    sys.exit(main())
