"""The official MCP Python SDK's stdio client starting a server as its child, as a desktop
client or an agent framework does (`butler-memory stdio`, or mcp-remote bridging to the HTTP
service): list the tools, store an episode and find it again with a search. Prints one JSON
report; exits non-zero on the first thing that does not hold.

    python_stdio.py DATA_HOME KEY|- COMMAND [ARGS...]
"""

import asyncio
import json
import os
import sys

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


def check(condition, what):
    if not condition:
        print(json.dumps({"ok": False, "failed": what}))
        sys.exit(1)


async def main(data_home: str, key: str | None, command: list[str]) -> None:
    env = {"PATH": os.environ.get("PATH", ""), "XDG_DATA_HOME": data_home, "HOME": data_home}
    if key:
        env["BUTLER_MEMORY_KEY"] = key
    server = StdioServerParameters(command=command[0], args=command[1:], env=env)
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            check(init.server_info.name == "butler-memory", "server name")
            tools = {t.name for t in (await session.list_tools()).tools}
            stored = await session.call_tool(
                "memory_store_episode",
                {"content": "The stdio client planted tomatoes.", "butler": "health"},
            )
            check(not stored.is_error, f"store: {stored}")
            found = await session.call_tool("memory_search", {"query": "tomatoes"})
            check(not found.is_error, f"search: {found}")
            hits = [r["id"] for r in found.structured_content["results"]]
            check(stored.structured_content["id"] in hits, f"found: {found.structured_content}")
            print(json.dumps({
                "ok": True,
                "protocol": init.protocol_version,
                "tools": len(tools),
                "admin_tools": "memory_activity_stream" in tools,
                "stored": stored.structured_content["id"],
            }))


if __name__ == "__main__":
    key = None if sys.argv[2] == "-" else sys.argv[2]
    asyncio.run(main(sys.argv[1], key, sys.argv[3:]))
