// Every tool, through the official MCP TypeScript SDK with an admin key: each is called once
// so that it succeeds and once so that it fails. The SDK checks each answer's structured
// content against the tool's `outputSchema` (errors included) and throws when it does not
// conform; this script also checks that every listed tool declares one and was called.
// Prints one JSON report; exits non-zero on the first thing that does not hold.
//
//     node every_tool.mjs URL ADMIN_KEY

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
const client = new Client({ name: "butler-memory-every-tool", version: "1.0.0" });
await client.connect(transport);
const { tools } = await client.listTools();
for (const tool of tools) {
  check(tool.outputSchema?.type === "object", `${tool.name} declares an object outputSchema`);
}

const called = new Map();
async function call(name, args, expect) {
  let result;
  try {
    result = await client.callTool({ name, arguments: args });
  } catch (e) {
    check(false, `${name}: ${e.message}`);
  }
  const failed = result.isError === true;
  check(failed === (expect === "error"), `${name} ${expect}: ${JSON.stringify(result)}`);
  check(result.structuredContent !== undefined, `${name}: structured content`);
  const seen = called.get(name) ?? new Set();
  seen.add(expect);
  called.set(name, seen);
  return result.structuredContent;
}
const ok = (name, args) => call(name, args, "ok");
const error = (name, args) => call(name, args, "error");
const nobody = "00000000-0000-4000-8000-000000000000";

const episode = await ok("memory_store_episode", {
  butler: "health",
  content: "Every tool: the user walks the dog at seven.",
  idempotency_key: "every-tool-1",
});
await error("memory_store_episode", { butler: "health", content: "" });
await ok("memory_ingest_batch", {
  episodes: [
    { butler: "health", content: "Every tool: batch one.", idempotency_key: "every-tool-1" },
    { butler: "health", content: "Every tool: batch two." },
  ],
});
await error("memory_ingest_batch", { episodes: [] });
const fact = await ok("memory_store_fact", {
  butler: "health",
  subject: "user",
  predicate: "walks_dog_at",
  content: "seven in the morning",
  source_episode_id: episode.id,
});
const newer = await ok("memory_store_fact", {
  butler: "health",
  subject: "user",
  predicate: "walks_dog_at",
  content: "eight in the morning",
});
check(newer.outcome === "superseded" && newer.superseded?.id === fact.id, "supersession");
await error("memory_store_fact", { butler: "health", subject: "", predicate: "p", content: "c" });
const rule = await ok("memory_store_rule", { butler: "health", content: "Remind the user before the walk." });
await error("memory_store_rule", { butler: "health", content: "" });
await ok("memory_get", { type: "fact", id: newer.id });
await error("memory_get", { type: "fact", id: nobody });
const found = await ok("memory_search", { query: "dog walk", mode: "keyword" });
check(found.count > 0, "keyword search finds the episode");
await ok("memory_search", { query: "dog walk" });
await error("memory_search", { query: "" });
await ok("memory_recall", { topic: "the dog" });
await error("memory_recall", { topic: "" });
await ok("memory_context", { butler: "health", trigger_prompt: "When is the walk?" });
await error("memory_context", { butler: "", trigger_prompt: "When is the walk?" });
const batch = await ok("memory_context_batch", {
  requests: [
    { butler: "health", trigger_prompt: "the walk" },
    { butler: "bad name!", trigger_prompt: "the walk" },
  ],
});
check(batch.results.length === 2 && batch.results[1].error?.class === "invalid_input", "batch item error");
await error("memory_context_batch", { requests: [] });
await ok("memory_confirm", { type: "fact", id: newer.id });
await error("memory_confirm", { type: "episode", id: episode.id });
await ok("memory_mark_helpful", { rule_id: rule.id });
await error("memory_mark_helpful", { rule_id: nobody });
await ok("memory_mark_harmful", { rule_id: rule.id, reason: "too early" });
await error("memory_mark_harmful", { rule_id: nobody });
const forgotten = await ok("memory_forget", { type: "rule", id: rule.id, reason: "every tool" });
check(forgotten.changed === true, "forget changed the rule");
await error("memory_forget", { type: "rule", id: nobody });
await ok("memory_restore", { type: "rule", id: rule.id });
await error("memory_restore", { type: "rule", id: nobody });
const page = await ok("memory_activity_stream", { limit: 5 });
check(page.events.length > 0 && page.next_cursor !== null, "activity page");
await error("memory_activity_stream", { since: "yesterday" });
const swept = await ok("memory_run_sweep", { kinds: ["decay_sweep"] });
check(swept.count > 0, "a sweep report per shard");
await error("memory_run_sweep", { kinds: [] });
await ok("memory_dead_letters", {});
await error("memory_dead_letters", { limit: "many" });
await ok("memory_requeue_dead_letters", {});
await error("memory_requeue_dead_letters", { ids: ["not-a-uuid"] });
const purgeable = await ok("memory_store_fact", { butler: "health", subject: "neighbour", predicate: "name", content: "Ada" });
const candidates = await ok("memory_purge", { subject: "neighbour", reason: "every tool" });
check(candidates.dry_run && candidates.records.some((r) => r.id === purgeable.id), "purge candidates");
const purged = await ok("memory_purge", { subject: "neighbour", confirm: [purgeable.id], reason: "every tool" });
check(!purged.dry_run && purged.counts.facts === 1 && purged.records[0].content_hash, "purged");
await error("memory_purge", { type: "fact", id: purgeable.id, reason: "gone already" });
await ok("memory_audit_reads", {});
await error("memory_audit_reads", { limit: 0 });
await ok("memory_stats", {});
await error("memory_stats", { butler: "bad name!" });

// The orchestrator memory: an admin key acts on its tenant's graph.
const remembered = await ok("orchestrator_remember", {
  source: { sourceType: "workflow_output", workflowRunId: "run-1", capturedBy: "extractor" },
  memories: [
    { ref: "goal", type: "Goal", content: "Every tool: a goal.", importance: 90 },
    { ref: "todo", type: "Todo", content: "Every tool: a todo." },
  ],
  edges: [{ from: "todo", to: "goal", edgeType: "PartOf" }],
});
check(remembered.memories.length === 2 && remembered.edges[0].created, "remembered");
await error("orchestrator_remember", {
  source: { sourceType: "ingest_file", capturedBy: "system" },
  memories: [{ type: "Todo", content: "No path." }],
});
const goal = remembered.memories[0].memoryId;
const todo = remembered.memories[1].memoryId;
const node = await ok("orchestrator_get", { memoryId: goal });
check(node.edges.length === 1 && node.edges[0].fromMemoryId === todo, "the goal's edge");
await error("orchestrator_get", { memoryId: nobody });
const recalled = await ok("orchestrator_recall", { query: "every tool goal" });
check(recalled.memories.length === 2 && recalled.edges.length === 1, "recalled the goal and its todo");
await error("orchestrator_recall", { query: "every tool", limit: 0 });
const bulletin = await ok("orchestrator_bulletin", { message: "every tool goal" });
check(bulletin.text.includes("## active_goals") && bulletin.memoryIds.includes(goal), "bulletin");
await error("orchestrator_bulletin", { message: "   " });
const status = await ok("orchestrator_status", {});
check(status.status === "enabled" && status.graph.active === 2 && status.graph.edges === 1, "status");
await error("orchestrator_status", { orchestratorId: "someone-else" });
const captured = await ok("orchestrator_capture", {
  source: { sourceType: "diagnostics", capturedBy: "system" },
  text: "Goal: Every tool captured.\n- [ ] Every tool: a captured todo.",
});
check(captured.memories.length === 2 && captured.edges[0].edgeType === "PartOf", "captured");
await error("orchestrator_capture", { source: { sourceType: "manual", capturedBy: "user" }, text: " " });
await ok("orchestrator_set_status", { memoryId: todo, status: "retracted", reason: "every tool" });
await error("orchestrator_set_status", { memoryId: goal, status: "active", reason: "every tool" });

for (const tool of tools) {
  const seen = called.get(tool.name);
  check(seen?.has("ok") && seen?.has("error"), `${tool.name} called both ways`);
}
await client.close();
console.log(JSON.stringify({ ok: true, tools: tools.length, calls: [...called.values()].reduce((n, s) => n + s.size, 0) }));
