"""A test OTLP/HTTP receiver: decodes every export with the official protobuf definitions.

POST /v1/traces takes an ExportTraceServiceRequest (application/x-protobuf) and keeps its spans;
GET /spans answers them as JSON, each with its resource's service.name. POST /v1/metrics takes an
ExportMetricsServiceRequest and keeps its data points; GET /points answers them as JSON, each
with its metric's name and kind and its resource's service.name. It binds 127.0.0.1 on the port
given (0: any free one) and prints `listening on PORT` once ready.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

SPANS = []
POINTS = []
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


def decode_metrics(body):
    request = ExportMetricsServiceRequest()
    request.ParseFromString(body)
    points = []
    for resource_metrics in request.resource_metrics:
        resource = {a.key: value(a.value) for a in resource_metrics.resource.attributes}
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                kind = metric.WhichOneof("data")
                for point in getattr(metric, kind).data_points:
                    decoded = {
                        "service_name": resource.get("service.name"),
                        "name": metric.name,
                        "kind": kind,
                        "attributes": {a.key: value(a.value) for a in point.attributes},
                    }
                    if kind == "histogram":
                        decoded.update(count=point.count, sum=point.sum)
                    else:
                        decoded["value"] = value_of(point)
                    points.append(decoded)
    return points


def value_of(number_point):
    kind = number_point.WhichOneof("value")
    return getattr(number_point, kind) if kind else None


# What each export path takes: how to decode it, where its items go, the empty answer.
EXPORTS = {
    "/v1/traces": (decode, SPANS, ExportTraceServiceResponse),
    "/v1/metrics": (decode_metrics, POINTS, ExportMetricsServiceResponse),
}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        if self.path not in EXPORTS:
            self.send_error(404)
            return
        decoder, kept, response = EXPORTS[self.path]
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        try:
            items = decoder(body)
        except Exception as error:  # a body that is not OTLP protobuf is the sender's bug
            self.send_error(400, str(error))
            return
        with LOCK:
            kept.extend(items)
        answer = response().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def do_GET(self):
        kept = {"/spans": SPANS, "/points": POINTS}.get(self.path)
        if kept is None:
            self.send_error(404)
            return
        with LOCK:
            body = json.dumps(kept).encode()
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
