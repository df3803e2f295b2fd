"""An official-SDK agent (a2a-sdk 1.3.0) for the gateway's tests: it echoes, or relays through
the gateway to the agents its message names.

A message "via:b,c|text" makes it call agent b through the gateway (JSON-RPC `SendMessage`,
the same `contextId`, its own token, no `x-mesh-*` headers: it knows nothing of the mesh) with
"via:c|text"; the last agent echoes "echo: text". Each agent answers with one artifact:
"NAME <- <what the next one answered>", or "NAME <- refused: <message> (<error code>)" when the
gateway refused its call. It binds a free port itself and prints `PORT <n>` once listening.

    python gateway_agent.py --name a --gateway http://127.0.0.1:8030 --token TOKEN
"""

import argparse
import socket
import sys
import uuid

import httpx
import uvicorn
from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from starlette.applications import Starlette

CALL_TIMEOUT_SECONDS = 30


class RelayExecutor(AgentExecutor):
    def __init__(self, name: str, gateway: str | None, token: str | None):
        self.name = name
        self.gateway = gateway
        self.token = token

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        text = context.get_user_input()
        if text.startswith("via:") and self.gateway:
            answer = f"{self.name} <- {await self.relay(text, task.context_id)}"
        else:
            answer = f"echo: {text}"
        await updater.add_artifact([new_text_part(answer)], name="echo")
        await updater.complete()

    async def relay(self, text: str, context_id: str) -> str:
        hops, _, payload = text[len("via:"):].partition("|")
        first, *rest = hops.split(",")
        onward = f"via:{','.join(rest)}|{payload}" if rest else payload
        request = {
            "jsonrpc": "2.0",
            "id": str(uuid.uuid4()),
            "method": "SendMessage",
            "params": {
                "message": {
                    "role": "ROLE_USER",
                    "messageId": str(uuid.uuid4()),
                    "contextId": context_id,
                    "parts": [{"text": onward}],
                }
            },
        }
        headers = {"A2A-Version": "1.0"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        async with httpx.AsyncClient(timeout=CALL_TIMEOUT_SECONDS) as http:
            response = await http.post(f"{self.gateway}/agents/{first}/", json=request, headers=headers)
        body = response.json()
        if "error" in body:
            error = body["error"]
            code = (error.get("data") or {}).get("error_code", error.get("code"))
            return f"refused: {error.get('message')} ({code})"
        artifacts = body["result"]["task"].get("artifacts", [])
        return " | ".join(part.get("text", "") for artifact in artifacts for part in artifact["parts"])

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is not None:
            await TaskUpdater(event_queue, task.id, task.context_id).cancel()


def build_app(name: str, base_url: str, gateway: str | None, token: str | None) -> Starlette:
    rest_url = base_url.rstrip("/") + "/rest"
    interfaces = [
        AgentInterface(url=url, protocol_binding=binding, protocol_version=version)
        for version in ("1.0", "0.3")
        for binding, url in (("JSONRPC", base_url), ("HTTP+JSON", rest_url))
    ]
    card = AgentCard(
        name=name,
        description="Echoes text back, or relays it through the gateway",
        supported_interfaces=interfaces,
        version="0.0.1",
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="Echo", description="Echo input", tags=["echo"])],
    )
    handler = DefaultRequestHandler(
        agent_executor=RelayExecutor(name, gateway, token),
        task_store=InMemoryTaskStore(),
        agent_card=card,
    )
    routes = [
        *create_agent_card_routes(card),
        *create_jsonrpc_routes(handler, rpc_url="/", enable_v0_3_compat=True),
        *create_rest_routes(handler, enable_v0_3_compat=True, path_prefix="/rest"),
    ]
    return Starlette(routes=routes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--gateway")
    parser.add_argument("--token")
    args = parser.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = build_app(args.name, f"http://127.0.0.1:{port}/", args.gateway, args.token)
    config = uvicorn.Config(app, workers=1, access_log=False, log_level="warning")
    server = uvicorn.Server(config)
    print(f"PORT {port}", flush=True)
    server.run(sockets=[sock])
    sys.exit(0)


if __name__ == "__main__":
    main()
