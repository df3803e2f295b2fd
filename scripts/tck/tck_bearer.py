"""A pytest plugin for scripts/tck.sh: every HTTP request of the conformance kit carries
`Authorization: Bearer $TCK_BEARER_TOKEN`.

The kit has no option for credentials, yet its extended agent card requirements (CARD-EXT-001,
CARD-EXT-002) expect the card, which the spec (A2A 1.0 section 3.1.11) serves to authenticated
clients only. The kit's clients are httpx clients (`httpx.Client`, and the module functions
`httpx.post`/`httpx.request`, which make one), so the token is added to every client's default
headers, where a request's own Authorization header still wins. Loaded with `-p tck_bearer`.
"""

import os

import httpx

_TOKEN = os.environ.get("TCK_BEARER_TOKEN", "")

if _TOKEN:
    _client_init = httpx.Client.__init__

    def _init_with_bearer(self, *args, **kwargs):
        _client_init(self, *args, **kwargs)
        self.headers.setdefault("Authorization", f"Bearer {_TOKEN}")

    httpx.Client.__init__ = _init_with_bearer
