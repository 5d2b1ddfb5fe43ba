"""The do-it-yourself peer of the gateway's assert route: a verifier for nginx `auth_request`.

nginx sends every request under /assert/ here first (headers only, with X-Original-Method and
X-Original-URI) and forwards it upstream only on a 2xx. The checks mirror the gateway's, in its order:

1. X-App-Attest-Key-Id, -Assertion and -Client-Data present, base64; the key id is 32 bytes.
2. The client data is JSON {challenge, method, path, bodySHA256[, query]} bound to this request: same
   method, decoded path and raw query, and bodySHA256 of the empty body (an auth_request subrequest
   never sees the body, so this peer only protects body-less requests: a limit of the DIY design).
3. The key's record (public key, App ID) from the gateway's own Redis layout, cached in process.
4. pyattest verifies the ECDSA signature over SHA256(authenticatorData || SHA256(clientData)); pyattest
   does not look at rpIdHash, so this peer checks rpIdHash == SHA256(App ID) itself.
5. The challenge is the gateway's stateless one (docs/security.md, "Stateless challenges"): its
   HMAC-SHA256 under the secret the gateway keeps in Redis (`<prefix>:challenge-secret`), with the key id
   when it was issued for one, an assertion challenge, not expired.
6. One Lua script: key known and not revoked, the challenge not spent before (then recorded as spent for
   its remaining lifetime), counter strictly above the stored one, which it then replaces.

Run: python verifier.py --listen 127.0.0.1:PORT --redis redis://127.0.0.1:6379/0 [--workers N]
Workers are processes sharing the port (SO_REUSEPORT), one asyncio loop each: Python runs one thread of
Python at a time, so one process per core is the efficient shape.
"""

import argparse
import asyncio
import base64
import binascii
import hashlib
import hmac
import json
import os
import time
from urllib.parse import unquote

import redis.asyncio as redis
from aiohttp import web
from cryptography.hazmat.primitives.serialization import load_der_public_key
from pyattest.assertion import Assertion
from pyattest.configs.apple import AppleConfig

EMPTY_BODY_SHA256 = base64.b64encode(hashlib.sha256(b"").digest()).decode()

# The gateway's challenge format (Sources/Gateway/Proxy/StatelessChallenge.swift): base64url of
# version 1 | kind (2 = assert, 0x80 = issued for a key id) | expiry (4 bytes) | 16-byte nonce | HMAC.
CHALLENGE_DOMAIN = b"app-attest-gateway challenge"
CHALLENGE_HEADER_BYTES = 22
CHALLENGE_CLOCK_SKEW_MS = 5000

# The gateway's StoreScripts.commitAssertion with counter window 0 (ARGV[3]: the spent record's TTL, ms).
COMMIT = """
local record = redis.call('HMGET', KEYS[1], 'counter', 'revoked')
if not record[1] then return 'key_unknown' end
if record[2] == '1' then return 'key_revoked' end
if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[3]) then return 'challenge_reused' end
if tonumber(ARGV[1]) <= tonumber(record[1]) then return 'counter_not_increasing' end
redis.call('HSET', KEYS[1], 'counter', ARGV[1], 'last_used_at', ARGV[2])
return 'accepted'
"""


class Rejected(Exception):
    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


class Key:
    __slots__ = ("public_key", "config", "rp_id_hash", "record")

    def __init__(self, key_id, public_key, app_id, record):
        self.public_key = public_key
        self.config = AppleConfig(key_id=key_id, app_id=app_id, production=False)
        self.rp_id_hash = hashlib.sha256(app_id.encode()).digest()
        self.record = record


class Verifier:
    def __init__(self, store, prefix):
        self.store = store
        self.prefix = prefix
        self.keys = {}
        self.secret = None
        self.commit = store.register_script(COMMIT)

    def tag(self, key_id):
        return "{%s}" % base64.urlsafe_b64encode(key_id).decode().rstrip("=")

    async def key(self, key_id):
        key = self.keys.get(key_id)
        if key is not None:
            return key
        for environment in ("development", "production"):
            record = "%s:%s:%s:key" % (self.prefix, self.tag(key_id), environment)
            spki, app_id, revoked = await self.store.hmget(record, "public_key", "app_id", "revoked")
            if spki is not None:
                key = Key(key_id, load_der_public_key(spki), app_id.decode(), record)
                self.keys[key_id] = key
                return key
        raise Rejected("key_unknown")

    async def spend(self, challenge, key_id):
        """(spent-record key, its TTL in ms) of a valid assertion challenge of this gateway."""
        if self.secret is None:
            self.secret = await self.store.get("%s:challenge-secret" % self.prefix)
            if self.secret is None:
                raise Rejected("challenge_invalid")  # no gateway issued any challenge yet
        try:
            raw = base64.urlsafe_b64decode(challenge + "=" * (-len(challenge) % 4)) if len(challenge) == 72 else b""
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) != CHALLENGE_HEADER_BYTES + 32 or raw[0] != 1:
            raise Rejected("challenge_invalid")
        bound = raw[1] & 0x80 != 0
        signed = CHALLENGE_DOMAIN + raw[:CHALLENGE_HEADER_BYTES] + (key_id if bound else b"")
        if not hmac.compare_digest(hmac.new(self.secret, signed, hashlib.sha256).digest(), raw[CHALLENGE_HEADER_BYTES:]):
            raise Rejected("challenge_invalid")
        if raw[1] & 0x7F != 2:
            raise Rejected("challenge_wrong_kind")
        remaining_ms = int.from_bytes(raw[2:6], "big") * 1000 - int(time.time() * 1000)
        if remaining_ms <= 0:
            raise Rejected("challenge_expired")
        nonce = base64.urlsafe_b64encode(raw[6:CHALLENGE_HEADER_BYTES]).decode().rstrip("=")
        record = "%s:%s:ch:%s" % (self.prefix, self.tag(key_id), nonce) if bound else "%s:ch:{%s}" % (self.prefix, nonce)
        return record, remaining_ms + CHALLENGE_CLOCK_SKEW_MS

    async def check(self, headers):
        try:
            key_id = base64.b64decode(header(headers, "X-App-Attest-Key-Id"), validate=True)
            assertion = base64.b64decode(header(headers, "X-App-Attest-Assertion"), validate=True)
            client_data = base64.b64decode(header(headers, "X-App-Attest-Client-Data"), validate=True)
        except binascii.Error:
            raise Rejected("bad_base64")
        if len(key_id) != 32:
            raise Rejected("bad_header")
        challenge = bind(client_data, headers)
        key = await self.key(key_id)
        checked = Assertion(assertion, hashlib.sha256(client_data).digest(), key.public_key, key.config)
        try:
            checked.verify()
        except Exception:
            raise Rejected("signature_invalid")
        data = checked.data
        if data["rp_id"] != key.rp_id_hash:
            raise Rejected("app_id_mismatch")
        spent, ttl_ms = await self.spend(challenge, key_id)
        outcome = await self.commit(keys=[key.record, spent], args=[data["counter"], int(time.time()), ttl_ms])
        if outcome != b"accepted":
            raise Rejected(outcome.decode())


def header(headers, name):
    values = headers.getall(name, [])
    if len(values) != 1 or not values[0]:
        raise Rejected("assertion_missing")
    return values[0]


def bind(client_data, headers):
    """The challenge of client data that describes exactly this request."""
    try:
        fields = json.loads(client_data)
    except ValueError:
        raise Rejected("client_data_invalid")
    if not isinstance(fields, dict) or not isinstance(fields.get("challenge"), str):
        raise Rejected("client_data_invalid")
    uri = headers.get("X-Original-URI", "")
    path, _, query = uri.partition("?")
    expected_query = query if "?" in uri else None
    if (fields.get("method") != headers.get("X-Original-Method") or fields.get("path") != unquote(path)
            or fields.get("query") != expected_query or fields.get("bodySHA256") != EMPTY_BODY_SHA256):
        raise Rejected("client_data_mismatch")
    return fields["challenge"]


def make_app(redis_url, prefix):
    app = web.Application()
    verifier = None

    async def start(app):
        nonlocal verifier
        # Blocking: past 64 connections a request waits for one instead of failing.
        pool = redis.BlockingConnectionPool.from_url(redis_url, max_connections=64, timeout=5)
        verifier = Verifier(redis.Redis(connection_pool=pool), prefix)

    async def check(request):
        try:
            await verifier.check(request.headers)
        except Rejected as rejection:
            return web.json_response({"error": rejection.reason}, status=403)
        except redis.RedisError as error:
            return web.json_response({"error": "store_unavailable", "message": str(error)}, status=503)
        return web.Response(status=204)

    app.on_startup.append(start)
    app.router.add_route("*", "/{tail:.*}", check)
    return app


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", required=True, help="host:port")
    parser.add_argument("--redis", required=True, help="redis://host:port/db (the gateway's Redis)")
    parser.add_argument("--key-prefix", default="aag")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    options = parser.parse_args()
    host, _, port = options.listen.rpartition(":")
    for _ in range(options.workers - 1):
        if os.fork() == 0:
            break
    web.run_app(make_app(options.redis, options.key_prefix), host=host, port=int(port), reuse_port=True,
                access_log=None, print=None)


if __name__ == "__main__":
    main()
