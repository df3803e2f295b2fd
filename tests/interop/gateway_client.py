"""The official A2A Python SDK client (a2a-sdk 1.3.0) against an agent behind the gateway.

It reads the agent's card from the gateway, keeps the one interface of `--transport` and
`--protocol` (the SDK would otherwise prefer 1.0), sends the bearer token on every request, and
does one operation, printing one JSON line: `send` and `stream` a message (the task, its state
and artifact texts, the kinds of the streamed events), or `get` a task.

    python gateway_client.py --url http://127.0.0.1:8030/agents/echo --transport jsonrpc \
        --protocol 1.0 --token TOKEN --op send --text hello
"""

import argparse
import asyncio
import json
import uuid

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import (
    AgentCard,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskState,
)

BINDINGS = {"jsonrpc": "JSONRPC", "http_json": "HTTP+JSON"}
CALL_TIMEOUT_SECONDS = 30


def describe(task) -> dict:
    return {
        "task_id": task.id,
        "context_id": task.context_id,
        "state": TaskState.Name(task.status.state),
        "texts": [p.text for a in task.artifacts for p in a.parts if p.text],
    }


async def run(args: argparse.Namespace) -> dict:
    headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
    async with httpx.AsyncClient(headers=headers, timeout=CALL_TIMEOUT_SECONDS) as http:
        card = await A2ACardResolver(http, args.url).get_agent_card()
        binding = BINDINGS[args.transport]
        chosen = [
            i
            for i in card.supported_interfaces
            if i.protocol_binding == binding and i.protocol_version == args.protocol
        ]
        if not chosen:
            return {"ok": False, "error": f"no {binding} {args.protocol} interface on the card"}
        only = AgentCard()
        only.CopyFrom(card)
        del only.supported_interfaces[:]
        only.supported_interfaces.extend(chosen[:1])
        streaming = args.op == "stream"
        config = ClientConfig(
            streaming=streaming, httpx_client=http, supported_protocol_bindings=[binding]
        )
        client = ClientFactory(config).create(only)
        if args.op == "get":
            task = await client.get_task(GetTaskRequest(id=args.task))
            return {"ok": True, "interface": chosen[0].url, **describe(task)}
        message = Message(
            role=Role.ROLE_USER,
            message_id=str(uuid.uuid4()),
            parts=[Part(text=args.text)],
        )
        request = SendMessageRequest(message=message, configuration=SendMessageConfiguration())
        events = [event async for event in client.send_message(request)]
        kinds = [event.WhichOneof("payload") for event in events]
        tasks = [event.task for event in events if event.HasField("task")]
        result = {"ok": True, "interface": chosen[0].url, "kinds": kinds}
        if streaming:
            texts = [
                p.text
                for e in events
                if e.HasField("artifact_update")
                for p in e.artifact_update.artifact.parts
            ]
            final = events[-1].status_update.status.state if kinds[-1] == "status_update" else 0
            result.update(describe(tasks[0]) if tasks else {})
            result.update({"texts": texts, "state": TaskState.Name(final)})
        elif tasks:
            result.update(describe(tasks[0]))
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--transport", choices=sorted(BINDINGS), required=True)
    parser.add_argument("--protocol", choices=["1.0", "0.3"], required=True)
    parser.add_argument("--token")
    parser.add_argument("--op", choices=["send", "stream", "get"], required=True)
    parser.add_argument("--text", default="hello")
    parser.add_argument("--task")
    args = parser.parse_args()
    try:
        result = asyncio.run(run(args))
    except Exception as error:  # the test reads the refusal from here
        result = {"ok": False, "error": f"{type(error).__name__}: {error}"}
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
