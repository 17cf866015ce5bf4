"""hookd's MCP server through an MCP client no one here wrote: the `mcp` package (PyPI, the
official Python SDK), over stdio (`hookd mcp`, a client of the running hookd) and over
streamable HTTP (`/mcp` on the HTTP listener). Each tool is allowed exactly what its gRPC
call is: the agent token (enqueue scope) may enqueue and publish but not read; the reader
token reads but neither enqueues nor replays; the ops token (admin) replays, dry run first.

The servers are started as the README's MCP configuration (README_MCP_JSON, the block of its
"MCP" section) says, with this test's binary, addresses and tokens in place of the README's.

Usage: mcp_client.py HOOKD_BIN GRPC_ADDR HTTP_ADDR AGENT_TOKEN READER_TOKEN OPS_TOKEN DEAD_ID README_MCP_JSON
"""

import asyncio
import json
import sys
import urllib.error
import urllib.request

from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

hookd_bin, grpc_addr, http_addr, agent, reader, ops, dead_id, readme_json = sys.argv[1:9]
with open(readme_json) as f:
    configured = json.load(f)["mcpServers"]
STDIO, HTTP = configured["hookd"], configured["hookd-http"]
assert STDIO["command"] == "hookd" and STDIO["args"] == ["mcp"], STDIO
assert set(STDIO["env"]) == {"HOOKD_SERVER", "HOOKD_TOKEN"}, STDIO
assert STDIO["env"]["HOOKD_SERVER"] == "http://127.0.0.1:7700", STDIO
assert HTTP["url"] == "http://127.0.0.1:7701/mcp" and list(HTTP["headers"]) == ["Authorization"], HTTP
TOOLS = {
    "enqueue_event",
    "publish_event",
    "get_message",
    "search_messages",
    "list_dead_letters",
    "analyze_dead_letters",
    "replay_dead_letters",
    "list_endpoints",
    "list_subscriptions",
    "list_event_types",
    "get_stats",
}


def answer(result):
    """The tool's JSON answer; fails on a tool error."""
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)


def refusal(result):
    assert result.is_error, result.content
    return result.content[0].text


def stdio(token):
    env = dict(STDIO["env"], HOOKD_SERVER=f"http://{grpc_addr}", HOOKD_TOKEN=token)
    return StdioServerParameters(command=hookd_bin, args=STDIO["args"], env=env)


def http(token):
    """Streamable HTTP with the token on every request."""
    headers = {"Authorization": f"Bearer {token}"}
    url = HTTP["url"].replace("127.0.0.1:7701", http_addr)
    return streamable_http_client(url, http_client=create_mcp_http_client(headers=headers))


async def main():
    # Over stdio, as the agent: enqueue and publish; reading is not its scope.
    async with Client(stdio(agent)) as c:
        tools = {t.name for t in (await c.list_tools()).tools}
        assert tools == TOOLS, tools
        order = {"order": 42, "items": [{"sku": "a-1", "qty": 2}]}
        queued = answer(await c.call_tool("enqueue_event", {"destination": "queue:mcp-jobs", "data": order, "event_type": "order.created"}))
        assert queued["id"] and queued["duplicate"] is False, queued
        again = answer(await c.call_tool("enqueue_event", {"destination": "queue:mcp-jobs", "data": order, "idempotency_key": "k1"}))
        dup = answer(await c.call_tool("enqueue_event", {"destination": "queue:mcp-jobs", "data": order, "idempotency_key": "k1"}))
        assert dup["duplicate"] is True and dup["id"] == again["id"], dup
        published = answer(await c.call_tool("publish_event", {"topic": "agent.step", "text": "step done"}))
        assert published["subscribers"] == 1, published
        denied = refusal(await c.call_tool("get_message", {"id": queued["id"]}))
        assert denied.startswith("PERMISSION_DENIED"), denied
        bad = refusal(await c.call_tool("enqueue_event", {"destination": "nowhere", "text": "x"}))
        assert bad.startswith("INVALID_ARGUMENT") and "destination" in bad, bad
        print("stdio: tools listed, enqueue/publish answered durable ids, read refused for the agent")

    # Over streamable HTTP, as the reader: reads everything, writes nothing.
    async with Client(http(reader)) as c:
        assert {t.name for t in (await c.list_tools()).tools} == TOOLS
        message = answer(await c.call_tool("get_message", {"id": queued["id"]}))
        assert message["data"] == order and message["eventType"] == "order.created", message
        assert message["state"] == "MESSAGE_STATE_PENDING", message
        dead = answer(await c.call_tool("list_dead_letters", {"destination": "queue:mcp-dead"}))
        assert [d["id"] for d in dead["deadLetters"]] == [dead_id], dead
        found = answer(await c.call_tool("search_messages", {"destination": "queue:mcp-dead", "states": ["dead"]}))
        assert [m["id"] for m in found["messages"]] == [dead_id], found
        bad = refusal(await c.call_tool("search_messages", {"states": ["lost"]}))
        assert bad.startswith("INVALID_ARGUMENT: states[0]"), bad
        analysis = answer(await c.call_tool("analyze_dead_letters", {}))
        assert any(d["destination"] == "queue:mcp-dead" for d in analysis["destinations"]), analysis
        subs = answer(await c.call_tool("list_subscriptions", {}))
        assert [s["name"] for s in subs["subscriptions"]] == ["mcp-steps"], subs
        answer(await c.call_tool("list_endpoints", {}))
        answer(await c.call_tool("list_event_types", {}))
        stats = answer(await c.call_tool("get_stats", {}))
        assert "total" in stats, stats
        for tool, args in [
            ("enqueue_event", {"destination": "queue:mcp-jobs", "text": "x"}),
            ("replay_dead_letters", {"ids": [dead_id], "dry_run": False}),
        ]:
            denied = refusal(await c.call_tool(tool, args))
            assert denied.startswith("PERMISSION_DENIED"), (tool, denied)
        print("http: reader reads messages, dead letters, analysis, subscriptions, stats; writes refused")

    # A client of the older protocol (the `initialize` handshake, 2025-11-25) is served too.
    async with Client(http(reader), mode="legacy") as c:
        assert {t.name for t in (await c.list_tools()).tools} == TOOLS
        assert answer(await c.call_tool("get_message", {"id": queued["id"]}))["data"] == order
    async with Client(stdio(reader), mode="legacy") as c:
        assert answer(await c.call_tool("get_message", {"id": queued["id"]}))["data"] == order
        print("legacy protocol: served over http and stdio")

    # As ops: replay, a dry run first (the default).
    async with Client(http(ops)) as c:
        dry = answer(await c.call_tool("replay_dead_letters", {"ids": [dead_id]}))
        assert (dry["matched"], dry["replayed"]) == (1, 0), dry
        still = answer(await c.call_tool("list_dead_letters", {"destination": "queue:mcp-dead"}))
        assert len(still["deadLetters"]) == 1, still
        done = answer(await c.call_tool("replay_dead_letters", {"ids": [dead_id], "dry_run": False}))
        assert (done["matched"], done["replayed"]) == (1, 1), done
        gone = answer(await c.call_tool("list_dead_letters", {"destination": "queue:mcp-dead"}))
        assert gone["deadLetters"] == [], gone
        print("http: ops replayed the dead letter after a dry run")

    # No credential: /mcp answers 401 before any MCP.
    request = urllib.request.Request(
        f"http://{http_addr}/mcp",
        data=b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
        headers={"content-type": "application/json", "accept": "application/json, text/event-stream"},
    )
    try:
        urllib.request.urlopen(request, timeout=10)
        raise AssertionError("an anonymous /mcp call was answered")
    except urllib.error.HTTPError as e:
        assert e.code == 401, e.code
    print("mcp_client.py: every tool answered through the mcp package, scopes as the gRPC API's")


asyncio.run(main())
