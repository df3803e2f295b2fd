"""A pytest plugin for scripts/tck.sh: every HTTP request of the conformance kit carries
`Authorization: Bearer $TCK_BEARER_TOKEN`, and every gRPC call the same as `authorization` metadata.

The kit has no option for credentials, yet its extended agent card requirements (CARD-EXT-001,
CARD-EXT-002) expect the card, which the spec (A2A 1.0 section 3.1.11) serves to authenticated
clients only. The kit's clients are httpx clients (`httpx.Client`, and the module functions
`httpx.post`/`httpx.request`, which make one), so the token is added to every client's default
headers, where a request's own Authorization header still wins. Its gRPC client opens
`grpc.insecure_channel`, wrapped here with an interceptor adding the metadata. Loaded with
`-p tck_bearer`.
"""

import collections
import os

import grpc
import httpx

_TOKEN = os.environ.get("TCK_BEARER_TOKEN", "")

if _TOKEN:
    _client_init = httpx.Client.__init__

    def _init_with_bearer(self, *args, **kwargs):
        _client_init(self, *args, **kwargs)
        self.headers.setdefault("Authorization", f"Bearer {_TOKEN}")

    httpx.Client.__init__ = _init_with_bearer

    class _CallDetails(
        collections.namedtuple("_CallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready")),
        grpc.ClientCallDetails,
    ):
        pass

    class _BearerMetadata(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
        def _with_bearer(self, details):
            metadata = list(details.metadata or [])
            if not any(key == "authorization" for key, _ in metadata):
                metadata.append(("authorization", f"Bearer {_TOKEN}"))
            return _CallDetails(
                details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
            )

        def intercept_unary_unary(self, continuation, client_call_details, request):
            return continuation(self._with_bearer(client_call_details), request)

        def intercept_unary_stream(self, continuation, client_call_details, request):
            return continuation(self._with_bearer(client_call_details), request)

    _insecure_channel = grpc.insecure_channel

    def _channel_with_bearer(*args, **kwargs):
        return grpc.intercept_channel(_insecure_channel(*args, **kwargs), _BearerMetadata())

    grpc.insecure_channel = _channel_with_bearer
