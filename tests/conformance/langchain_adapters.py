"""LangChain's MCP adapters (langchain-mcp-adapters) against a running butler-memory: the
service's tools become LangChain tools, one stores an episode and another finds it. Prints one
JSON report; exits non-zero on the first thing that does not hold.

    langchain_adapters.py URL KEY
"""

import asyncio
import json
import sys

from langchain_mcp_adapters.client import MultiServerMCPClient


def check(condition, what):
    if not condition:
        print(json.dumps({"ok": False, "failed": what}))
        sys.exit(1)


async def main(url: str, key: str) -> None:
    client = MultiServerMCPClient({
        "memory": {
            "transport": "streamable_http",
            "url": url,
            "headers": {"Authorization": f"Bearer {key}"},
        }
    })
    tools = {t.name: t for t in await client.get_tools()}
    check("memory_store_episode" in tools, "memory_store_episode is a LangChain tool")
    check("memory_activity_stream" not in tools, "admin tools hidden from a butler key")
    stored = await tools["memory_store_episode"].ainvoke(
        {"content": "LangChain stored the seed order.", "butler": "health"}
    )
    check("seed order" in str(stored), f"stored: {stored}")
    found = await tools["memory_search"].ainvoke({"query": "seed order"})
    check("seed order" in str(found), f"found: {found}")
    print(json.dumps({"ok": True, "tools": len(tools)}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
