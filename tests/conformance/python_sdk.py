"""The official MCP Python SDK against a running butler-memory: connect with a bearer key,
list the tools, store an episode, read it back, and get a classified tool error. Prints one
JSON report; exits non-zero on the first thing that does not hold.

    python_sdk.py URL KEY
"""

import asyncio
import json
import sys

import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def check(condition, what):
    if not condition:
        print(json.dumps({"ok": False, "failed": what}))
        sys.exit(1)


async def main(url: str, key: str) -> None:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
    async with http, streamable_http_client(url, http_client=http) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            check(init.server_info.name == "butler-memory", "server name")
            tools = await session.list_tools()
            names = {t.name for t in tools.tools}
            check("memory_store_episode" in names, "memory_store_episode listed")
            check("memory_activity_stream" not in names, "admin tools hidden from a butler key")
            stored = await session.call_tool(
                "memory_store_episode",
                {"content": "The Python SDK stored this.", "butler": "health"},
            )
            check(not stored.is_error, f"store: {stored}")
            episode = stored.structured_content
            got = await session.call_tool("memory_get", {"type": "episode", "id": episode["id"]})
            check(not got.is_error, f"get: {got}")
            check(got.structured_content["content"] == "The Python SDK stored this.", "read back")
            refused = await session.call_tool("memory_store_episode", {"content": "", "butler": "health"})
            check(refused.is_error, "an empty episode is refused")
            check(refused.structured_content["class"] == "invalid_input", f"class: {refused}")
            print(json.dumps({
                "ok": True,
                "protocol": init.protocol_version,
                "tools": len(names),
                "stored": episode["id"],
                "refused": refused.structured_content["code"],
            }))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
