"""A test OTLP/HTTP trace receiver: decodes every export with the official protobuf definitions.

POST /v1/traces takes an ExportTraceServiceRequest (application/x-protobuf) and keeps its spans;
GET /spans answers them as JSON, each with its resource's service.name. It binds 127.0.0.1 on
the port given (0: any free one) and prints `listening on PORT` once ready.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

SPANS = []
LOCK = threading.Lock()


def value(any_value):
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def decode(body):
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = {a.key: value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    {
                        "service_name": resource.get("service.name"),
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "name": span.name,
                        "kind": span.kind,
                        "start_ns": span.start_time_unix_nano,
                        "end_ns": span.end_time_unix_nano,
                        "attributes": {a.key: value(a.value) for a in span.attributes},
                        "events": [e.name for e in span.events],
                    }
                )
    return spans


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        if self.path != "/v1/traces":
            self.send_error(404)
            return
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        try:
            spans = decode(body)
        except Exception as error:  # a body that is not OTLP protobuf is the sender's bug
            self.send_error(400, str(error))
            return
        with LOCK:
            SPANS.extend(spans)
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def do_GET(self):
        if self.path != "/spans":
            self.send_error(404)
            return
        with LOCK:
            body = json.dumps(SPANS).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"listening on {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
