"""Checks an A2A agent with the official Python SDK client (a2a-sdk 1.3.0).

One binding (`--transport jsonrpc|http_json|grpc`) at one protocol version (`--protocol 1.0|0.3`;
gRPC: 1.0), chosen among the interfaces the agent card advertises:

    python client_checks.py --url http://127.0.0.1:18765/ --transport jsonrpc --protocol 1.0

Prints one line per check (PASS, FAIL or SKIP, then the detail) and exits 0 only when no check
failed. Each check asserts on content (states, ids, artifact text, history, page sizes) and on
the wire: every request the SDK sent is recorded, and the operation it names (JSON-RPC method
or HTTP verb and path, or gRPC method) must be the one the chosen binding and version prescribe,
so a client that silently fell back to another interface fails.

`--long-running-prefix P` additionally sends a message whose messageId starts with P with
returnImmediately (0.3: blocking false), expects a task that is not finished, subscribes to
it, cancels it and expects the canceled state in the cancel answer, the subscription and a
later GetTask. The SDK's own echo agent has no such behaviour; our agents do.

`--push-webhook URL` additionally sends a message whose configuration sets a push notification
webhook at URL (token PUSH_TOKEN), then creates, gets, lists and deletes a second config of
that task with the SDK's push notification config calls (in 0.3 over HTTP+JSON the SDK has
no list and delete: SKIP). The caller checks what the webhook received.

`--credential C` hands C to the SDK's own `AuthInterceptor` for every security scheme the card
declares: the interceptor, reading the card, decides how to send it (an agent that requires
authentication refuses every check otherwise).

`--extended-skill ID` additionally fetches the authenticated extended card with the SDK's
`get_extended_agent_card` (the credential sent by the interceptor) and expects skill ID on it,
and not on the public card.
"""

import argparse
import asyncio
import json
import sys
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import grpc
import httpx
from a2a.client import A2ACardResolver, A2AClientError, ClientConfig, ClientFactory
from a2a.client.auth.credentials import CredentialService
from a2a.client.auth.interceptor import AuthInterceptor
from a2a.client.client import Client
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError

BINDINGS = {"jsonrpc": "JSONRPC", "http_json": "HTTP+JSON", "grpc": "GRPC"}

# What each operation looks like on the wire, per binding and version: the JSON-RPC method,
# or the HTTP verb and the path below the interface URL ({id} stands for the task id).
WIRE_OPERATIONS = {
    ("JSONRPC", "1.0"): {
        "send": {"SendMessage"},
        "stream": {"SendStreamingMessage"},
        "get": {"GetTask"},
        "list": {"ListTasks"},
        "cancel": {"CancelTask"},
        "subscribe": {"SubscribeToTask"},
        "push-create": {"CreateTaskPushNotificationConfig"},
        "push-get": {"GetTaskPushNotificationConfig"},
        "push-list": {"ListTaskPushNotificationConfigs"},
        "push-delete": {"DeleteTaskPushNotificationConfig"},
        "extended-card": {"GetExtendedAgentCard"},
    },
    ("JSONRPC", "0.3"): {
        "send": {"message/send"},
        "stream": {"message/stream"},
        "get": {"tasks/get"},
        "cancel": {"tasks/cancel"},
        "subscribe": {"tasks/resubscribe"},
        "push-create": {"tasks/pushNotificationConfig/set"},
        "push-get": {"tasks/pushNotificationConfig/get"},
        "push-list": {"tasks/pushNotificationConfig/list"},
        "push-delete": {"tasks/pushNotificationConfig/delete"},
        "extended-card": {"agent/getAuthenticatedExtendedCard"},
    },
    ("HTTP+JSON", "1.0"): {
        "send": {"POST /message:send"},
        "stream": {"POST /message:stream"},
        "get": {"GET /tasks/{id}"},
        "list": {"GET /tasks"},
        "cancel": {"POST /tasks/{id}:cancel"},
        "subscribe": {"POST /tasks/{id}:subscribe", "GET /tasks/{id}:subscribe"},
        "push-create": {"POST /tasks/{id}/pushNotificationConfigs"},
        "push-get": {"GET /tasks/{id}/pushNotificationConfigs/{config}"},
        "push-list": {"GET /tasks/{id}/pushNotificationConfigs"},
        "push-delete": {"DELETE /tasks/{id}/pushNotificationConfigs/{config}"},
        "extended-card": {"GET /extendedAgentCard"},
    },
    ("GRPC", "1.0"): {
        "send": {"SendMessage"},
        "stream": {"SendStreamingMessage"},
        "get": {"GetTask"},
        "list": {"ListTasks"},
        "cancel": {"CancelTask"},
        "subscribe": {"SubscribeToTask"},
        "push-create": {"CreateTaskPushNotificationConfig"},
        "push-get": {"GetTaskPushNotificationConfig"},
        "push-list": {"ListTaskPushNotificationConfigs"},
        "push-delete": {"DeleteTaskPushNotificationConfig"},
        "extended-card": {"GetExtendedAgentCard"},
    },
    ("HTTP+JSON", "0.3"): {
        "send": {"POST /v1/message:send"},
        "stream": {"POST /v1/message:stream"},
        "get": {"GET /v1/tasks/{id}"},
        "cancel": {"POST /v1/tasks/{id}:cancel"},
        "subscribe": {"POST /v1/tasks/{id}:subscribe", "GET /v1/tasks/{id}:subscribe"},
        "push-create": {"POST /v1/tasks/{id}/pushNotificationConfigs"},
        "push-get": {"GET /v1/tasks/{id}/pushNotificationConfigs/{config}"},
        "extended-card": {"GET /v1/card"},
    },
}

TERMINAL_STATES = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
}

# Long enough for a loaded 2-core CI machine, short enough that a hung stream fails the run.
CALL_TIMEOUT_SECONDS = 30.0
# The token of the webhook set with the message, and the id of the config created after it.
PUSH_TOKEN = "interop-push-token"
PUSH_CONFIG_ID = "interop-hook"
LIST_CONTEXT_TASKS = 3


class CheckFailed(Exception):
    """A check's expectation did not hold; the message says what was seen."""


def expect(condition: bool, what: str) -> None:
    if not condition:
        raise CheckFailed(what)


def state_name(state: int) -> str:
    return TaskState.Name(state)


@dataclass
class WireCall:
    operation: str
    version_header: str | None
    status: int | None = None
    content_type: str | None = None


class Wire:
    """Records what the SDK client sends, through httpx event hooks."""

    def __init__(self, interface_url: str, binding: str):
        self.base_path = urlsplit(interface_url).path.rstrip("/")
        self.binding = binding
        self.calls: list[WireCall] = []
        self.task_ids: set[str] = set()

    def operation_of(self, request: httpx.Request) -> str:
        if self.binding == "JSONRPC":
            try:
                return str(json.loads(request.content)["method"])
            except (ValueError, KeyError, TypeError):
                return f"{request.method} {request.url.path} (not JSON-RPC)"
        path = request.url.path
        if self.base_path and path.startswith(self.base_path):
            path = path[len(self.base_path) :]
        for task_id in self.task_ids:
            path = path.replace(task_id, "{id}")
        path = path.replace(PUSH_CONFIG_ID, "{config}")
        return f"{request.method} {path}"

    async def on_request(self, request: httpx.Request) -> None:
        if request.url.path.endswith("/.well-known/agent-card.json"):
            return
        self.calls.append(WireCall(self.operation_of(request), request.headers.get("A2A-Version")))

    async def on_response(self, response: httpx.Response) -> None:
        if self.calls and not response.request.url.path.endswith("agent-card.json"):
            self.calls[-1].status = response.status_code
            self.calls[-1].content_type = response.headers.get("content-type")

    def mark(self) -> int:
        return len(self.calls)

    def since(self, mark: int) -> list[WireCall]:
        return self.calls[mark:]


def record_grpc_call(wire: Wire, details: grpc.aio.ClientCallDetails) -> None:
    """Records a gRPC call the SDK client makes: the method and the `a2a-version` metadata."""
    method = details.method.decode() if isinstance(details.method, bytes) else str(details.method)
    version = dict(details.metadata or ()).get("a2a-version")
    wire.calls.append(WireCall(method.rsplit("/", 1)[-1], version))


# grpc.aio files an interceptor under the first kind it is an instance of, so one per kind.
class GrpcUnaryWire(grpc.aio.UnaryUnaryClientInterceptor):
    def __init__(self, wire: Wire):
        self.wire = wire

    async def intercept_unary_unary(self, continuation, client_call_details, request):
        record_grpc_call(self.wire, client_call_details)
        return await continuation(client_call_details, request)


class GrpcStreamWire(grpc.aio.UnaryStreamClientInterceptor):
    def __init__(self, wire: Wire):
        self.wire = wire

    async def intercept_unary_stream(self, continuation, client_call_details, request):
        record_grpc_call(self.wire, client_call_details)
        return await continuation(client_call_details, request)


class StaticCredentials(CredentialService):
    """The one credential of this run, for whichever scheme the card names."""

    def __init__(self, credential: str):
        self.credential = credential

    async def get_credentials(self, security_scheme_name, context):  # noqa: ARG002
        return self.credential


class Checker:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.binding = BINDINGS[args.transport]
        self.version = args.protocol
        self.operations = WIRE_OPERATIONS[(self.binding, self.version)]
        self.failures = 0
        self.wire: Wire | None = None
        self.http: httpx.AsyncClient | None = None
        self.blocking: Client | None = None
        self.streaming: Client | None = None
        self.card: AgentCard | None = None
        self.completed_task: Task | None = None
        self.sent_text = f"interop {uuid.uuid4().hex[:8]}"

    def report(self, verdict: str, name: str, detail: str) -> None:
        print(f"{verdict} {name}: {detail}", flush=True)

    async def check(self, name: str, body: Callable[[], Awaitable[str]]) -> None:
        try:
            detail = await asyncio.wait_for(body(), CALL_TIMEOUT_SECONDS)
        except CheckFailed as failure:
            self.failures += 1
            self.report("FAIL", name, str(failure))
        except Exception as error:  # an SDK or transport error fails this check only
            self.failures += 1
            self.report("FAIL", name, f"{type(error).__name__}: {error}")
        else:
            self.report("PASS", name, detail)

    def expect_wire(self, mark: int, operation: str) -> str:
        """The calls since `mark` all name `operation` with the version header of the mode."""
        assert self.wire is not None
        calls = self.wire.since(mark)
        allowed = self.operations[operation]
        expect(bool(calls), f"no request reached the wire for {operation}")
        for call in calls:
            expect(
                call.operation in allowed,
                f"{operation} went out as {call.operation!r}, expected one of {sorted(allowed)}",
            )
            expect(
                call.version_header == self.version,
                f"{call.operation} carried A2A-Version {call.version_header!r}, "
                f"expected {self.version}",
            )
        last = calls[-1]
        return f"{last.operation} -> {last.status} {last.content_type}"

    def new_message(
        self, text: str, message_id: str | None = None, context_id: str = ""
    ) -> Message:
        return Message(
            role=Role.ROLE_USER,
            message_id=message_id or str(uuid.uuid4()),
            context_id=context_id,
            parts=[Part(text=text)],
        )

    def expected_artifact_text(self, text: str) -> str | None:
        template = self.args.expect_artifact_text
        return template.replace("{text}", text) if template else None

    def check_completed_task(self, task: Task, message: Message, text: str) -> None:
        expect(bool(task.id), "task has no id")
        expect(bool(task.context_id), "task has no contextId")
        expect(
            task.status.state == TaskState.TASK_STATE_COMPLETED,
            f"task {task.id} is {state_name(task.status.state)}, expected TASK_STATE_COMPLETED",
        )
        texts = [part.text for artifact in task.artifacts for part in artifact.parts if part.text]
        expect(
            bool(texts),
            f"task {task.id} has no artifact with text ({len(task.artifacts)} artifacts)",
        )
        wanted = self.expected_artifact_text(text)
        if wanted is not None:
            expect(wanted in texts, f"artifact texts {texts!r} lack {wanted!r}")
        expect(
            any(m.message_id == message.message_id for m in task.history),
            f"history of {task.id} lacks the sent message {message.message_id}",
        )

    # --- checks ------------------------------------------------------------------------

    async def check_card(self) -> str:
        assert self.http is not None
        self.card = await A2ACardResolver(self.http, self.args.url).get_agent_card()
        card = self.card
        expect(bool(card.name), "card has no name")
        expect(card.capabilities.streaming, "card does not declare capabilities.streaming")
        expect(len(card.skills) > 0, "card has no skills")
        advertised = {
            (i.protocol_binding, i.protocol_version): i.url for i in card.supported_interfaces
        }
        expect(
            (self.binding, self.version) in advertised,
            f"no {self.binding} {self.version} interface among {sorted(advertised)}",
        )
        return (
            f"{card.name!r}, {len(card.supported_interfaces)} interfaces, "
            f"{self.binding} {self.version} at {advertised[(self.binding, self.version)]}"
        )

    async def make_clients(self) -> None:
        """Clients restricted to the chosen interface: the SDK would otherwise prefer 1.0."""
        assert self.card is not None and self.http is not None
        chosen = [
            i
            for i in self.card.supported_interfaces
            if i.protocol_binding == self.binding and i.protocol_version == self.version
        ]
        card = AgentCard()
        card.CopyFrom(self.card)
        del card.supported_interfaces[:]
        card.supported_interfaces.extend(chosen[:1])
        self.wire = Wire(chosen[0].url, self.binding)
        self.http.event_hooks = {
            "request": [self.wire.on_request],
            "response": [self.wire.on_response],
        }
        recorders = [GrpcUnaryWire(self.wire), GrpcStreamWire(self.wire)]
        for streaming in (False, True):
            config = ClientConfig(
                streaming=streaming,
                httpx_client=self.http,
                # gRPC calls go through a channel of their own, recorded by an interceptor.
                grpc_channel_factory=lambda url: grpc.aio.insecure_channel(url, interceptors=recorders),
                supported_protocol_bindings=[self.binding],
            )
            interceptors = (
                [AuthInterceptor(StaticCredentials(self.args.credential))]
                if self.args.credential
                else []
            )
            client = ClientFactory(config).create(card, interceptors)
            if streaming:
                self.streaming = client
            else:
                self.blocking = client

    async def send_blocking(self, message: Message, **configuration: object) -> Task:
        assert self.blocking is not None
        request = SendMessageRequest(
            message=message, configuration=SendMessageConfiguration(**configuration)
        )
        answers = [answer async for answer in self.blocking.send_message(request)]
        expect(len(answers) == 1, f"a blocking send gave {len(answers)} answers")
        expect(
            answers[0].HasField("task"), f"answer is not a task: {answers[0].WhichOneof('payload')}"
        )
        if self.wire is not None:
            self.wire.task_ids.add(answers[0].task.id)
        return answers[0].task

    async def check_send(self) -> str:
        mark = self.wire.mark()
        message = self.new_message(self.sent_text)
        task = await self.send_blocking(message)
        # Kept even if wrong, so get and cancel still run and report on their own.
        self.completed_task = task
        self.check_completed_task(task, message, self.sent_text)
        wire = self.expect_wire(mark, "send")
        state = state_name(task.status.state)
        return f"task {task.id} {state}, {len(task.artifacts)} artifact(s); {wire}"

    async def check_stream(self) -> str:
        assert self.streaming is not None
        mark = self.wire.mark()
        text = f"{self.sent_text} streamed"
        message = self.new_message(text)
        request = SendMessageRequest(message=message)
        events: list[StreamResponse] = [
            event async for event in self.streaming.send_message(request)
        ]
        kinds = [event.WhichOneof("payload") for event in events]
        expect(bool(events), "the stream carried no event")
        expect(kinds[0] == "task", f"first event is {kinds[0]}, expected the task (kinds {kinds})")
        task_id = events[0].task.id
        self.wire.task_ids.add(task_id)
        for event, kind in zip(events, kinds, strict=True):
            event_task_id = event.task.id if kind == "task" else getattr(event, kind).task_id
            expect(
                event_task_id == task_id,
                f"{kind} event names task {event_task_id}, expected {task_id}",
            )
        expect("status_update" in kinds, f"no status update in {kinds}")
        artifacts = [
            event.artifact_update.artifact for event in events if event.HasField("artifact_update")
        ]
        expect(bool(artifacts), f"no artifact update in {kinds}")
        wanted = self.expected_artifact_text(text)
        if wanted is not None:
            texts = [part.text for artifact in artifacts for part in artifact.parts]
            expect(wanted in texts, f"streamed artifact texts {texts!r} lack {wanted!r}")
        expect(kinds[-1] == "status_update", f"last event is {kinds[-1]}, expected a status update")
        final = events[-1].status_update.status.state
        expect(final in TERMINAL_STATES, f"stream ended in {state_name(final)}, not a final state")
        expect(final == TaskState.TASK_STATE_COMPLETED, f"stream ended in {state_name(final)}")
        wire = self.expect_wire(mark, "stream")
        last = self.wire.since(mark)[-1]
        # The JSON bindings stream Server-Sent Events; gRPC its own server stream, seen above.
        expect(
            self.binding == "GRPC" or (last.content_type or "").startswith("text/event-stream"),
            f"stream answered with content type {last.content_type!r}",
        )
        return f"task {task_id}: {' '.join(kinds)}, ended {state_name(final)}; {wire}"

    async def check_get(self) -> str:
        expect(self.completed_task is not None, "no task from the send check to get")
        assert self.blocking is not None and self.completed_task is not None
        task_id = self.completed_task.id
        mark = self.wire.mark()
        full = await self.blocking.get_task(GetTaskRequest(id=task_id))
        one = await self.blocking.get_task(GetTaskRequest(id=task_id, history_length=1))
        none = await self.blocking.get_task(GetTaskRequest(id=task_id, history_length=0))
        for got in (full, one, none):
            expect(got.id == task_id, f"GetTask({task_id}) answered task {got.id}")
            expect(
                got.status.state == TaskState.TASK_STATE_COMPLETED,
                f"GetTask({task_id}) says {state_name(got.status.state)}",
            )
            expect(
                [a.artifact_id for a in got.artifacts]
                == [a.artifact_id for a in self.completed_task.artifacts],
                f"GetTask({task_id}) artifacts differ from the send answer",
            )
        expect(len(full.history) >= 1, f"full history has {len(full.history)} messages")
        expect(len(one.history) == 1, f"historyLength 1 gave {len(one.history)} messages")
        expect(
            one.history[0].message_id == full.history[-1].message_id,
            "historyLength 1 did not keep the most recent message",
        )
        if self.version == "0.3":
            # 0.3 reads historyLength 0 as "no limit" (the SDK's conversion says so too).
            expect(
                len(none.history) == len(full.history),
                f"0.3 historyLength 0 gave {len(none.history)} messages, "
                f"the full history has {len(full.history)}",
            )
        else:
            expect(len(none.history) == 0, f"historyLength 0 gave {len(none.history)} messages")
        wire = self.expect_wire(mark, "get")
        lengths = f"{len(full.history)}/{len(one.history)}/{len(none.history)}"
        return f"task {task_id}, history {lengths} for historyLength unset/1/0; {wire}"

    async def check_list(self) -> str:
        assert self.blocking is not None
        context_id = str(uuid.uuid4())
        sent = set()
        for index in range(LIST_CONTEXT_TASKS):
            text = f"{self.sent_text} list {index}"
            task = await self.send_blocking(self.new_message(text, context_id=context_id))
            expect(
                task.context_id == context_id,
                f"task {task.id} got contextId {task.context_id}, sent {context_id}",
            )
            sent.add(task.id)
        mark = self.wire.mark()
        seen: list[str] = []
        token = ""
        pages = 0
        while True:
            page = await self.blocking.list_tasks(
                ListTasksRequest(context_id=context_id, page_size=1, page_token=token)
            )
            pages += 1
            expect(len(page.tasks) <= 1, f"page size 1 gave {len(page.tasks)} tasks")
            for task in page.tasks:
                expect(
                    task.context_id == context_id,
                    f"listed task {task.id} has contextId {task.context_id}",
                )
                seen.append(task.id)
            if pages == 1:
                expect(
                    page.total_size == LIST_CONTEXT_TASKS,
                    f"totalSize {page.total_size}, expected {LIST_CONTEXT_TASKS}",
                )
                expect(page.page_size == 1, f"pageSize echoed as {page.page_size}, expected 1")
            token = page.next_page_token
            if not token:
                break
            expect(pages < LIST_CONTEXT_TASKS + 2, f"pagination did not end after {pages} pages")
        expect(len(seen) == len(set(seen)), f"pages repeated tasks: {seen}")
        expect(set(seen) == sent, f"listed {sorted(seen)}, sent {sorted(sent)}")
        unfiltered = await self.blocking.list_tasks(ListTasksRequest(page_size=2))
        expect(
            len(unfiltered.tasks) == 2,
            f"page size 2 without filter gave {len(unfiltered.tasks)} tasks",
        )
        wire = self.expect_wire(mark, "list")
        return f"{len(seen)} tasks of context {context_id} over {pages} pages of 1; {wire}"

    async def expect_not_cancelable(self, task_id: str) -> str:
        """Cancelling `task_id` must fail with the SDK's TaskNotCancelableError."""
        assert self.blocking is not None
        mark = self.wire.mark()
        try:
            task = await self.blocking.cancel_task(CancelTaskRequest(id=task_id))
        except TaskNotCancelableError as error:
            detail = f"TaskNotCancelableError({error})"
        except A2AClientError as error:
            detail = self.untyped_not_cancelable(error)
        else:
            state = state_name(task.status.state)
            raise CheckFailed(f"cancelling {task_id} answered a task in {state}")
        return f"{detail}; {self.expect_wire(mark, 'cancel')}"

    async def check_cancel_completed(self) -> str:
        expect(self.completed_task is not None, "no task from the send check to cancel")
        assert self.completed_task is not None
        return await self.expect_not_cancelable(self.completed_task.id)

    def untyped_not_cancelable(self, error: A2AClientError) -> str:
        """The 0.3 HTTP+JSON client of the SDK maps only `{"type": "<ErrorClass>"}` bodies to typed
        errors, while the SDK's server (and the spec's AIP-193 shape) answers
        `{"error": {"status": ..., "details": [ErrorInfo]}}`: there the SDK surfaces a generic
        A2AClientError, so the answer itself is checked instead."""
        cause = error.__cause__
        expect(
            self.binding == "HTTP+JSON" and self.version == "0.3",
            f"{type(error).__name__}({error}) instead of TaskNotCancelableError",
        )
        expect(isinstance(cause, httpx.HTTPStatusError), f"{error} has no HTTP answer behind it")
        assert isinstance(cause, httpx.HTTPStatusError)
        status = cause.response.status_code
        body = cause.response.json()
        reasons = [
            d.get("reason") for d in body.get("error", {}).get("details", []) if isinstance(d, dict)
        ]
        expect(
            400 <= status < 500 and "TASK_NOT_CANCELABLE" in reasons,
            f"HTTP {status} {body!r}: expected a 4xx naming TASK_NOT_CANCELABLE",
        )
        return (
            f"HTTP {status} {body['error'].get('status')} TASK_NOT_CANCELABLE "
            "(an untyped A2AClientError in the SDK's 0.3 REST client)"
        )

    async def check_cancel_running(self) -> str:
        assert self.blocking is not None and self.streaming is not None
        prefix = self.args.long_running_prefix
        message = self.new_message(f"{self.sent_text} long", message_id=f"{prefix}{uuid.uuid4()}")
        task = await self.send_blocking(message, return_immediately=True)
        expect(
            task.status.state not in TERMINAL_STATES,
            f"returnImmediately answered a task already {state_name(task.status.state)}",
        )
        subscription_events: list[StreamResponse] = []
        first_event = asyncio.Event()

        async def subscribe() -> None:
            async for event in self.streaming.subscribe(SubscribeToTaskRequest(id=task.id)):
                subscription_events.append(event)
                first_event.set()

        subscribe_mark = self.wire.mark()
        subscription = asyncio.create_task(subscribe())
        try:
            try:
                await asyncio.wait_for(first_event.wait(), CALL_TIMEOUT_SECONDS / 3)
            except TimeoutError:
                raise CheckFailed(f"subscribing to {task.id} gave no event") from None
            subscribe_wire = self.expect_wire(subscribe_mark, "subscribe")
            mark = self.wire.mark()
            canceled = await self.blocking.cancel_task(CancelTaskRequest(id=task.id))
            cancel_wire = self.expect_wire(mark, "cancel")
            expect(canceled.id == task.id, f"cancel answered task {canceled.id}")
            expect(
                canceled.status.state == TaskState.TASK_STATE_CANCELED,
                f"cancel answered {state_name(canceled.status.state)}",
            )
            # The subscription must end by itself once the task is canceled.
            await asyncio.wait_for(asyncio.shield(subscription), CALL_TIMEOUT_SECONDS / 3)
        finally:
            subscription.cancel()
        kinds = [event.WhichOneof("payload") for event in subscription_events]
        last = subscription_events[-1]
        last_state = (
            last.status_update.status.state
            if last.HasField("status_update")
            else last.task.status.state
        )
        expect(
            last_state == TaskState.TASK_STATE_CANCELED,
            f"subscription ended with {kinds[-1]} in {state_name(last_state)} (events {kinds})",
        )
        got = await self.blocking.get_task(GetTaskRequest(id=task.id))
        expect(
            got.status.state == TaskState.TASK_STATE_CANCELED,
            f"GetTask after cancel says {state_name(got.status.state)}",
        )
        try:
            await self.expect_not_cancelable(task.id)
        except CheckFailed as failure:
            raise CheckFailed(f"a second cancel: {failure}") from None
        first = state_name(task.status.state)
        return (
            f"task {task.id} {first} -> canceled; subscription {' '.join(kinds)}; "
            f"{subscribe_wire}; {cancel_wire}"
        )

    async def check_push(self) -> str:
        """A webhook set with a message, then a second config created, read, listed, deleted."""
        assert self.blocking is not None
        webhook = self.args.push_webhook
        mark = self.wire.mark()
        text = f"{self.sent_text} pushed"
        message = self.new_message(text)
        given = TaskPushNotificationConfig(url=webhook, token=PUSH_TOKEN)
        task = await self.send_blocking(message, task_push_notification_config=given)
        self.check_completed_task(task, message, text)
        self.expect_wire(mark, "send")

        mark = self.wire.mark()
        wanted = TaskPushNotificationConfig(
            task_id=task.id, id=PUSH_CONFIG_ID, url=webhook, token="second-token"
        )
        created = await self.blocking.create_task_push_notification_config(wanted)
        expect(
            (created.task_id, created.id, created.url, created.token)
            == (task.id, PUSH_CONFIG_ID, webhook, "second-token"),
            f"created config differs: {created}",
        )
        wire = [self.expect_wire(mark, "push-create")]

        mark = self.wire.mark()
        got = await self.blocking.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task.id, id=PUSH_CONFIG_ID)
        )
        expect((got.id, got.url) == (PUSH_CONFIG_ID, webhook), f"got config differs: {got}")
        wire.append(self.expect_wire(mark, "push-get"))

        if "push-list" not in self.operations:
            return f"task {task.id}: created and read; list and delete: the SDK has none in 0.3 HTTP+JSON; {wire}"
        mark = self.wire.mark()
        listed = await self.blocking.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
        ids = sorted(config.id for config in listed.configs)
        # The config given with the message is named as its task, as the SDK names it.
        expect(ids == sorted([task.id, PUSH_CONFIG_ID]), f"listed configs {ids}")
        wire.append(self.expect_wire(mark, "push-list"))

        mark = self.wire.mark()
        await self.blocking.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task.id, id=PUSH_CONFIG_ID)
        )
        wire.append(self.expect_wire(mark, "push-delete"))
        try:
            gone = await self.blocking.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task.id, id=PUSH_CONFIG_ID)
            )
        except TaskNotFoundError:
            pass
        else:
            raise CheckFailed(f"a deleted config was still found: {gone}")
        return f"task {task.id}: configs {ids} created, read, listed, deleted; {wire}"

    async def check_extended_card(self) -> str:
        assert self.blocking is not None and self.card is not None and self.wire is not None
        mark = self.wire.mark()
        extended = await self.blocking.get_extended_agent_card(GetExtendedAgentCardRequest())
        wire = self.expect_wire(mark, "extended-card")
        skill = self.args.extended_skill
        expect(self.card.capabilities.extended_agent_card, "the public card does not announce it")
        expect(skill not in [s.id for s in self.card.skills], f"{skill!r} is on the public card")
        ids = [s.id for s in extended.skills]
        expect(skill in ids, f"the extended card's skills {ids} lack {skill!r}")
        return f"skills {ids}; {wire}"

    async def run(self) -> int:
        print(f"== {self.args.url} {self.binding} {self.version}", flush=True)
        async with httpx.AsyncClient(timeout=CALL_TIMEOUT_SECONDS) as http:
            self.http = http
            await self.check("card", self.check_card)
            if self.card is None or self.failures:
                # Without the chosen interface on the card there is nothing to check.
                print("== FAILED: the card check failed", flush=True)
                return 1
            await self.make_clients()
            await self.check("send", self.check_send)
            await self.check("stream", self.check_stream)
            await self.check("get", self.check_get)
            if "list" in self.operations:
                await self.check("list", self.check_list)
            else:
                await self.report_list_absent()
            await self.check("cancel-completed", self.check_cancel_completed)
            if self.args.long_running_prefix:
                await self.check("cancel-running", self.check_cancel_running)
            else:
                self.report("SKIP", "cancel-running", "no --long-running-prefix given")
            if self.args.push_webhook:
                await self.check("push", self.check_push)
            else:
                self.report("SKIP", "push", "no --push-webhook given")
            if self.args.extended_skill:
                await self.check("extended-card", self.check_extended_card)
            else:
                self.report("SKIP", "extended-card", "no --extended-skill given")
            for client in (self.blocking, self.streaming):
                if client is not None:
                    await client.close()
        print(
            f"== {'FAILED' if self.failures else 'OK'}: {self.failures} check(s) failed", flush=True
        )
        return 1 if self.failures else 0

    async def report_list_absent(self) -> None:
        """0.3 defines no list method: SKIP, once the SDK is seen to refuse it too."""
        assert self.blocking is not None
        try:
            await self.blocking.list_tasks(ListTasksRequest(page_size=1))
        except NotImplementedError as error:
            self.report("SKIP", "list", f"A2A 0.3 has no ListTasks (the SDK client: {error})")
        except Exception as error:
            self.failures += 1
            self.report("FAIL", "list", f"{type(error).__name__}: {error}")
        else:
            self.failures += 1
            self.report(
                "FAIL",
                "list",
                "the SDK answered a ListTasks in 0.3 mode, which 0.3 does not define",
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--url", required=True, help="agent base URL (the card is at /.well-known/agent-card.json)"
    )
    parser.add_argument("--transport", choices=sorted(BINDINGS), default="jsonrpc")
    parser.add_argument("--protocol", choices=["1.0", "0.3"], default="1.0")
    parser.add_argument(
        "--long-running-prefix",
        default="",
        help="messageId prefix that makes the agent keep the task running until canceled",
    )
    parser.add_argument(
        "--push-webhook",
        default="",
        help="a webhook URL to set push notification configs to (the caller checks what it gets)",
    )
    parser.add_argument(
        "--credential",
        default="",
        help="a token or API key the SDK's AuthInterceptor sends as the card's schemes say",
    )
    parser.add_argument(
        "--extended-skill",
        default="",
        help="a skill id the authenticated extended card has and the public card has not",
    )
    parser.add_argument(
        "--expect-artifact-text",
        default="echo: {text}",
        help="artifact text the agent must answer ({text}: the sent text; '': any non-empty text)",
    )
    return asyncio.run(Checker(parser.parse_args()).run())


if __name__ == "__main__":
    sys.exit(main())
