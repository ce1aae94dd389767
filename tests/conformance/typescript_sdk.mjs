// The official MCP TypeScript SDK against a running butler-memory: connect with a bearer key,
// list the tools, store an episode, read it back, and get a classified tool error. Prints one
// JSON report; exits non-zero on the first thing that does not hold.
//
//     node typescript_sdk.mjs URL KEY

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

function check(condition, what) {
  if (!condition) {
    console.log(JSON.stringify({ ok: false, failed: what }));
    process.exit(1);
  }
}

const [url, key] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${key}` } },
});
const client = new Client({ name: "butler-memory-conformance", version: "1.0.0" });
await client.connect(transport);
check(client.getServerVersion()?.name === "butler-memory", "server name");
const { tools } = await client.listTools();
const names = new Set(tools.map((t) => t.name));
check(names.has("memory_store_episode"), "memory_store_episode listed");
check(!names.has("memory_activity_stream"), "admin tools hidden from a butler key");
const stored = await client.callTool({
  name: "memory_store_episode",
  arguments: { content: "The TypeScript SDK stored this.", butler: "health" },
});
check(!stored.isError, `store: ${JSON.stringify(stored)}`);
const episode = stored.structuredContent;
const got = await client.callTool({ name: "memory_get", arguments: { type: "episode", id: episode.id } });
check(!got.isError && got.structuredContent.content === "The TypeScript SDK stored this.", "read back");
const refused = await client.callTool({
  name: "memory_store_episode",
  arguments: { content: "", butler: "health" },
});
check(refused.isError && refused.structuredContent.class === "invalid_input", `refused: ${JSON.stringify(refused)}`);
await client.close();
console.log(JSON.stringify({
  ok: true,
  protocol: transport.protocolVersion ?? null,
  tools: names.size,
  stored: episode.id,
  refused: refused.structuredContent.code,
}));
