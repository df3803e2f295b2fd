"""Echo agent served by the official A2A Python SDK (a2a-sdk 1.3.0).

The reference the Rust agent kit is compared with: the interop checks run against it while
developing, and it is the Python contender of the SendMessage benchmark. It reproduces the
agent recorded in ../shared/a2a-captures: every message yields a completed task whose
artifact named "echo" holds "echo: <text>", JSON-RPC at `/`, HTTP+JSON under `--rest-prefix`
(the captures used `/rest`; pass `--rest-prefix ''` to serve it at the root as our agents
do), 0.3 compatibility on, one uvicorn worker, no per-request logging (it is benchmarked).

    python echo_agent.py --port 18765
"""

import argparse

import uvicorn
from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import (
    create_agent_card_routes,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
)
from starlette.applications import Starlette


class EchoExecutor(AgentExecutor):
    """Submitted, working, the "echo" artifact, completed: the captured event sequence."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        await updater.add_artifact(
            [new_text_part(f"echo: {context.get_user_input()}")], name="echo"
        )
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        # Echo tasks complete within execute(); a cancel can only race a task that is
        # already finishing, so mark it canceled as the SDK expects of an executor.
        task = context.current_task
        if task is not None:
            await TaskUpdater(event_queue, task.id, task.context_id).cancel()


def agent_card(base_url: str, rest_url: str) -> AgentCard:
    interfaces = [
        AgentInterface(url=url, protocol_binding=binding, protocol_version=version)
        for version in ("1.0", "0.3")
        for binding, url in (("JSONRPC", base_url), ("HTTP+JSON", rest_url))
    ]
    return AgentCard(
        name="Echo Agent",
        description="Echoes text back",
        supported_interfaces=interfaces,
        version="0.0.1",
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="Echo", description="Echo input", tags=["echo"])],
    )


def build_app(base_url: str, rest_prefix: str) -> Starlette:
    card = agent_card(base_url, base_url.rstrip("/") + rest_prefix + ("" if rest_prefix else "/"))
    handler = DefaultRequestHandler(
        agent_executor=EchoExecutor(), task_store=InMemoryTaskStore(), agent_card=card
    )
    # JSON-RPC first: with HTTP+JSON at the root, the REST tenant mount `/{tenant}` must
    # not shadow `POST /`.
    routes = [
        *create_agent_card_routes(card),
        *create_jsonrpc_routes(handler, rpc_url="/", enable_v0_3_compat=True),
        *create_rest_routes(handler, enable_v0_3_compat=True, path_prefix=rest_prefix),
    ]
    return Starlette(routes=routes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=18765)
    parser.add_argument(
        "--rest-prefix",
        default="/rest",
        help="path prefix of the HTTP+JSON binding ('' serves it at the root)",
    )
    args = parser.parse_args()
    base_url = f"http://{args.host}:{args.port}/"
    app = build_app(base_url, args.rest_prefix)
    uvicorn.run(
        app, host=args.host, port=args.port, workers=1, access_log=False, log_level="warning"
    )


if __name__ == "__main__":
    main()
