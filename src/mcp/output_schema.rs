//! The tools' output schemas: what `structuredContent` holds, so a client can check a result
//! (the TypeScript and Python SDKs do, on every call) and a code generator can type it.
//!
//! Records, statistics, events and reports are generated from the engine's own types (what
//! they serialise, so a field the engine adds appears here by itself); the envelopes the
//! tools wrap them in are written out below, next to nothing else. Every schema is
//! "the tool's answer, or the service's one error shape": MCP clients validate the
//! structured content of a tool error against the same schema (the TypeScript SDK does).

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use butler_memory_actors::{
    AuditRead, BulletinAnswer, ComponentScores, ContextBlock, DeadLetter, Episode, ErrorClass,
    Fact, FactOutcome, Intent, Maturity, MemoryRecord, MemoryStats, MemoryStatus, MemoryType, Node,
    NodeWithEdges, Purge, RecallBundle, RecordWithLinks, Remembered, Rule, SearchMode, StatedTime,
    StoredEvent, SweepReport,
};
use rmcp::model::JsonObject;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{Map, Value, json};

/// A generator of the engine types' schemas into one `$defs` map.
struct Definitions {
    generator: SchemaGenerator,
}

impl Definitions {
    fn new() -> Definitions {
        Definitions {
            generator: SchemaSettings::draft2020_12()
                .for_serialize()
                .into_generator(),
        }
    }

    /// A reference to `T`'s schema (added to the definitions on first use).
    fn of<T: schemars::JsonSchema>(&mut self) -> Value {
        self.generator.subschema_for::<T>().to_value()
    }

    fn into_map(mut self) -> Map<String, Value> {
        self.generator.take_definitions(true)
    }
}

/// Every tool's output schema, built once (`tools/list` answers them on every session).
static SCHEMAS: LazyLock<BTreeMap<&'static str, Arc<JsonObject>>> = LazyLock::new(|| {
    super::tool_names()
        .filter_map(|tool| Some((tool, Arc::new(output_schema(tool)?))))
        .collect()
});

/// `tool`'s output schema, shared; `None` for a name that is not a tool.
pub fn for_tool(tool: &str) -> Option<Arc<JsonObject>> {
    SCHEMAS.get(tool).cloned()
}

/// `tool`'s output schema; `None` for a name that is not a tool.
fn output_schema(tool: &str) -> Option<JsonObject> {
    let mut defs = Definitions::new();
    let success = success(tool, &mut defs)?;
    let mut schema = json!({
        "type": "object",
        "anyOf": [with_request_context(success), error()],
    });
    let mut definitions = defs.into_map();
    // The fields' meanings are in docs/tools.md; repeated in every tool's schema they would
    // double what `tools/list` weighs.
    for definition in definitions.values_mut() {
        drop_descriptions(definition);
    }
    if !definitions.is_empty() {
        schema["$defs"] = Value::Object(definitions);
    }
    let Value::Object(mut object) = schema else {
        unreachable!("built as an object")
    };
    super::schema::strip_nonstandard_formats(&mut object);
    Some(object)
}

/// What a successful call answers.
fn success(tool: &str, defs: &mut Definitions) -> Option<Value> {
    let record = |defs: &mut Definitions| defs.of::<MemoryRecord>();
    // A tool that answers one type of record names it, rather than the union of all three.
    let one_of = |defs: &mut Definitions, kind: MemoryType, extra: Value, required: &[&str]| {
        let fields = match kind {
            MemoryType::Episode => defs.of::<Episode>(),
            MemoryType::Fact => defs.of::<Fact>(),
            MemoryType::Rule => defs.of::<Rule>(),
        };
        let mut required = required.to_vec();
        required.push("type");
        json!({"allOf": [fields, {
            "type": "object",
            "properties": merge(json!({"type": {"const": kind}}), extra),
            "required": required,
        }]})
    };
    let uuid = json!({"type": "string", "format": "uuid"});
    let count = json!({"type": "integer", "minimum": 0});
    Some(match tool {
        "memory_store_episode" => one_of(
            defs,
            MemoryType::Episode,
            json!({"duplicate": {"type": "boolean",
                "description": "true when an earlier call with the same idempotency key stored it"}}),
            &["duplicate"],
        ),
        "memory_ingest_batch" => object(
            json!({
                "ids": {"type": "array", "items": uuid, "description": "in input order"},
                "count": count,
                "stored": count,
                "duplicates": {"type": "array", "items": count,
                    "description": "input positions an idempotency key had already stored"},
            }),
            &["ids", "count", "stored", "duplicates"],
        ),
        "memory_store_fact" => {
            let outcome = defs.of::<FactOutcome>();
            let superseded = one_of(defs, MemoryType::Fact, json!({}), &[]);
            one_of(
                defs,
                MemoryType::Fact,
                json!({
                    "outcome": outcome,
                    "superseded": {"anyOf": [superseded, {"type": "null"}],
                        "description": "the fact this one replaced, in its new state"},
                }),
                &["outcome", "superseded"],
            )
        }
        "memory_store_rule" => one_of(defs, MemoryType::Rule, json!({}), &[]),
        "memory_get" => defs.of::<RecordWithLinks>(),
        "orchestrator_remember" | "orchestrator_capture" => defs.of::<Remembered>(),
        "orchestrator_set_status" => defs.of::<Node>(),
        "orchestrator_get" => defs.of::<NodeWithEdges>(),
        "orchestrator_recall" => defs.of::<RecallBundle>(),
        "orchestrator_bulletin" => defs.of::<BulletinAnswer>(),
        "orchestrator_status" => defs.of::<MemoryStatus>(),
        "memory_confirm" => {
            let fact = one_of(defs, MemoryType::Fact, json!({}), &[]);
            json!({"anyOf": [fact, one_of(defs, MemoryType::Rule, json!({}), &[])]})
        }
        "memory_restore" => record(defs),
        "memory_forget" => json!({"allOf": [record(defs), object(
            json!({"changed": {"type": "boolean",
                "description": "false when it was already forgotten"}}),
            &["changed"],
        )]}),
        "memory_mark_helpful" | "memory_mark_harmful" => {
            let maturity = defs.of::<Maturity>();
            one_of(
                defs,
                MemoryType::Rule,
                json!({"maturity_before": maturity}),
                &["maturity_before"],
            )
        }
        "memory_search" | "memory_recall" => object(
            json!({
                "results": {"type": "array", "items": hit(defs)},
                "count": count,
                "mode": defs.of::<SearchMode>(),
                "degraded": {"type": "boolean",
                    "description": "true when relevance had to do without embeddings"},
                "intent": merge(defs.of::<Intent>(), json!({"description":
                    "the query's intent, when the service routes queries by intent"})),
                "stated_time": merge(defs.of::<StatedTime>(), json!({"description":
                    "the time the query states, as read, when it had no window: its \
                     episodes and facts rank first"})),
            }),
            &["results", "count", "mode", "degraded"],
        ),
        "memory_context" => context(defs),
        "memory_context_batch" => {
            let failed = object(json!({"error": error()}), &["error"]);
            object(
                json!({"results": {"type": "array", "items": {"anyOf": [context(defs), failed]},
                    "description": "one per request, in request order"}}),
                &["results"],
            )
        }
        "memory_activity_stream" => object(
            json!({
                "events": {"type": "array", "items": defs.of::<StoredEvent>()},
                "count": count,
                "next_cursor": {"type": ["string", "null"],
                    "description": "pass back as `since` for the next page"},
            }),
            &["events", "count", "next_cursor"],
        ),
        "memory_run_sweep" => object(
            json!({
                "reports": {"type": "array", "items": defs.of::<SweepReport>()},
                "count": count,
            }),
            &["reports", "count"],
        ),
        "memory_dead_letters" => object(
            json!({
                "episodes": {"type": "array", "items": defs.of::<DeadLetter>()},
                "count": count,
            }),
            &["episodes", "count"],
        ),
        "memory_requeue_dead_letters" => object(
            json!({"requeued": {"type": "array", "items": uuid}, "count": count}),
            &["requeued", "count"],
        ),
        "memory_stats" => defs.of::<MemoryStats>(),
        "memory_purge" => defs.of::<Purge>(),
        "memory_audit_reads" => object(
            json!({
                "reads": {"type": "array", "items": defs.of::<AuditRead>()},
                "count": count,
                "next_cursor": {"type": ["integer", "null"]},
            }),
            &["reads", "count", "next_cursor"],
        ),
        _ => return None,
    })
}

/// One search result (`tools::hit_json`): the record's common fields, its score and the
/// components behind it, and the attributes its type has.
fn hit(defs: &mut Definitions) -> Value {
    let text = json!({"type": "string"});
    object(
        json!({
            "type": defs.of::<MemoryType>(),
            "id": {"type": "string", "format": "uuid"},
            "content": text,
            "score": {"type": "number"},
            "scores": defs.of::<ComponentScores>(),
            "created_at": {"type": "string", "format": "date-time"},
            "last_referenced_at": {"type": "string", "format": "date-time"},
            "importance": {"type": "number"},
            "metadata": true,
            "subject": text,
            "predicate": text,
            "scope": text,
            "permanence": text,
            "validity": text,
            "maturity": text,
            "butler": text,
            "session_id": text,
            "occurred_at": {"type": "string", "format": "date-time", "description": "episodes stored with an earlier time: when it happened"},
            "effective_confidence": {"type": "number", "description": "facts and rules"},
            "valid_from": {"type": "string", "format": "date-time", "description": "facts: when it became true"},
            "valid_until": {"type": ["string", "null"], "format": "date-time", "description": "facts: when it stopped being true (superseded), found only with as_of, since or until"},
            "warning": {"const": true, "description": "an anti-pattern: do the opposite"},
        }),
        &[
            "type",
            "id",
            "content",
            "score",
            "scores",
            "created_at",
            "last_referenced_at",
            "importance",
            "metadata",
        ],
    )
}

/// `memory_context`'s answer: the block, the butler and whether it is degraded.
fn context(defs: &mut Definitions) -> Value {
    json!({"allOf": [defs.of::<ContextBlock>(), object(
        json!({"butler": {"type": "string"}, "degraded": {"type": "boolean"}}),
        &["butler", "degraded"],
    )]})
}

/// The service's one error shape (`reply::failure`).
fn error() -> Value {
    let classes: Vec<&str> = ErrorClass::ALL.iter().map(|c| c.as_str()).collect();
    object(
        json!({
            "class": {"enum": classes},
            "code": {"type": "string"},
            "message": {"type": "string"},
            "retry_after_ms": {"type": "integer", "minimum": 0},
            "request_context": {"type": "object"},
        }),
        &["class", "code", "message"],
    )
}

/// `success` with the `request_context` every successful answer echoes (`reply::success`).
fn with_request_context(success: Value) -> Value {
    json!({"allOf": [success, object(
        json!({"request_context": {"type": "object", "properties": {
            "request_id": {"type": "string"},
            "subrequest_id": {"type": ["string", "null"]},
            "segment_id": {"type": ["string", "null"]},
        }, "required": ["request_id"]}}),
        &["request_context"],
    )]})
}

fn drop_descriptions(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.remove("description");
            map.values_mut().for_each(drop_descriptions);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_descriptions),
        _ => {}
    }
}

fn object(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required})
}

fn merge(mut into: Value, from: Value) -> Value {
    if let (Value::Object(into), Value::Object(from)) = (&mut into, from) {
        into.extend(from);
    }
    into
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// Every `$ref` points at a definition in the same document: clients resolve refs
    /// within the schema only.
    fn refs(value: &Value, found: &mut BTreeSet<String>) {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(r)) = map.get("$ref") {
                    found.insert(r.clone());
                }
                map.values().for_each(|v| refs(v, found));
            }
            Value::Array(items) => items.iter().for_each(|v| refs(v, found)),
            _ => {}
        }
    }

    #[test]
    fn every_tool_has_a_self_contained_object_schema() {
        for tool in crate::mcp::tool_names() {
            let schema = output_schema(tool).unwrap_or_else(|| panic!("{tool}: no schema"));
            assert_eq!(schema["type"], "object", "{tool}");
            let mut found = BTreeSet::new();
            refs(&Value::Object(schema.clone()), &mut found);
            for reference in &found {
                let name = reference
                    .strip_prefix("#/$defs/")
                    .unwrap_or_else(|| panic!("{tool}: {reference} is not local"));
                assert!(schema["$defs"].get(name).is_some(), "{tool}: {reference}");
            }
            let text = serde_json::to_string(&schema).unwrap();
            assert!(!text.contains("\"double\""), "{tool}: non-standard format");
        }
        assert!(output_schema("memory_nonexistent").is_none());
        assert_eq!(SCHEMAS.len(), crate::mcp::tool_names().count());
    }
}
