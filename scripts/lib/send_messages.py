"""Sends COUNT blocking A2A 1.0 SendMessage requests to http://ADDR/PATH over one connection, one
at a time, and checks that every answer is a completed task. With HS256_SECRET set, each request
carries a user's bearer JWT signed with it. Used by the instruction-count scripts.

    python3 scripts/lib/send_messages.py ADDR COUNT [PATH]
"""
import base64
import hashlib
import hmac
import http.client
import json
import os
import sys
import time
import uuid


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=")


def bearer(secret):
    now = int(time.time())
    claims = {"sub": "bench", "tenant": "acme", "roles": ["user"], "exp": now + 3600, "nbf": now}
    signing = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode()) + b"." + b64(json.dumps(claims).encode())
    return (signing + b"." + b64(hmac.new(secret, signing, hashlib.sha256).digest())).decode()


host, port = sys.argv[1].rsplit(":", 1)
count = int(sys.argv[2])
path = sys.argv[3] if len(sys.argv) > 3 else "/"
headers = {"content-type": "application/json", "A2A-Version": "1.0"}
if os.environ.get("HS256_SECRET"):
    headers["authorization"] = "Bearer " + bearer(os.environ["HS256_SECRET"].encode())
connection = http.client.HTTPConnection(host, int(port), timeout=60)
for i in range(count):
    message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "hello a2a"}]}
    body = json.dumps({"jsonrpc": "2.0", "id": i, "method": "SendMessage", "params": {"message": message}})
    connection.request("POST", path, body, headers)
    response = connection.getresponse()
    answer = response.read()
    if response.status != 200 or b"TASK_STATE_COMPLETED" not in answer:
        sys.exit(f"request {i}: {response.status} {answer[:300]!r}")
