//! The tools' input schemas as standard JSON Schema, with their limits in keywords a
//! client can check before it calls: `maxLength`, `maxItems`, `minimum`, `maximum`,
//! `pattern`. schemars writes the Rust type of a number as a `format` (`double`, `uint32`)
//! that JSON Schema does not define; those go. The limits come from the running
//! configuration, so a schema never promises what the service would refuse. Byte limits
//! (`content`, `reason`, `metadata`) have no JSON Schema keyword and stay in the
//! descriptions and docs/tools.md.

use butler_memory_actors::{MAX_ACTIVITY_PAGE, MAX_TTL_DAYS, MIN_TTL_DAYS};
use serde_json::{Map, Value, json};

use crate::config::Config;

use super::tools::MAX_CONTEXT_BATCH;

/// Formats JSON Schema 2020-12 defines; any other is dropped.
const STANDARD_FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "uuid",
    "regex",
];

/// The longest caller-chosen identifier (`request_context` ids, `session_id`,
/// `idempotency_key`), as `check_identifier_text` bounds it.
const MAX_IDENTIFIER_CHARS: u64 = 200;

/// Butler and scope names: 1 to 64 of `A-Z a-z 0-9 _ - .`, as `check_name` accepts them.
pub const NAME_PATTERN: &str = "^[A-Za-z0-9_.-]{1,64}$";

/// `tool`'s input schema in standard form with `config`'s limits.
pub fn standardize(tool: &str, schema: &mut Map<String, Value>, config: &Config) {
    let engine = &config.engine;
    let limits = &engine.limits;
    let limit_max = match tool {
        "memory_search" | "memory_recall" => u64::from(engine.retrieval.max_limit),
        _ => u64::from(MAX_ACTIVITY_PAGE),
    };
    let keywords = |property: &str| -> Vec<(&'static str, Value)> {
        match property {
            "butler" | "scope" | "tenant" => vec![("pattern", json!(NAME_PATTERN))],
            "session_id" | "idempotency_key" | "request_id" | "subrequest_id" | "segment_id" => {
                vec![("maxLength", json!(MAX_IDENTIFIER_CHARS))]
            }
            "subject" | "predicate" => vec![("maxLength", json!(limits.max_key_chars))],
            "tags" => vec![
                ("maxItems", json!(limits.max_tags)),
                (
                    "items",
                    json!({"type": "string", "maxLength": limits.max_tag_chars}),
                ),
            ],
            "links" => vec![("maxItems", json!(limits.max_links))],
            "importance" => vec![("minimum", json!(0)), ("maximum", json!(10))],
            "confidence" => vec![("exclusiveMinimum", json!(0)), ("maximum", json!(1))],
            "min_confidence" => vec![("minimum", json!(0)), ("maximum", json!(1))],
            "ttl_days" => vec![
                ("minimum", json!(MIN_TTL_DAYS)),
                ("maximum", json!(MAX_TTL_DAYS)),
            ],
            "limit" => vec![("minimum", json!(1)), ("maximum", json!(limit_max))],
            "token_budget" => vec![
                ("minimum", json!(1)),
                ("maximum", json!(engine.retrieval.context.max_token_budget)),
            ],
            "episodes" => vec![
                ("minItems", json!(1)),
                ("maxItems", json!(engine.writes.max_ingest_batch.get())),
            ],
            "requests" => vec![
                ("minItems", json!(1)),
                ("maxItems", json!(MAX_CONTEXT_BATCH)),
            ],
            "content" | "query" | "trigger_prompt" | "topic" => vec![("minLength", json!(1))],
            _ => vec![],
        }
    };
    walk(schema, &keywords);
}

/// Drops every `format` JSON Schema does not define, at any depth (for output schemas,
/// which have no input limits to add).
pub fn strip_nonstandard_formats(object: &mut Map<String, Value>) {
    walk(object, &|_| vec![]);
}

fn walk(object: &mut Map<String, Value>, keywords: &dyn Fn(&str) -> Vec<(&'static str, Value)>) {
    if object
        .get("format")
        .and_then(Value::as_str)
        .is_some_and(|f| !STANDARD_FORMATS.contains(&f))
    {
        object.remove("format");
    }
    if let Some(Value::Object(properties)) = object.get_mut("properties") {
        for (name, property) in properties.iter_mut() {
            if let Value::Object(property) = property {
                for (keyword, value) in keywords(name) {
                    property.insert(keyword.to_owned(), value);
                }
            }
        }
    }
    for value in object.values_mut() {
        match value {
            Value::Object(inner) => walk(inner, keywords),
            Value::Array(items) => {
                for item in items {
                    if let Value::Object(inner) = item {
                        walk(inner, keywords);
                    }
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_formats_go_and_limits_come_from_the_configuration() {
        let config = Config::from_toml("[retrieval]\nmax_limit = 42").unwrap();
        let mut schema = json!({
            "type": "object",
            "properties": {
                "limit": {"type": ["integer", "null"], "format": "uint32", "minimum": 0},
                "importance": {"type": ["number", "null"], "format": "double"},
                "id": {"type": "string", "format": "uuid"},
                "request_context": {"$ref": "#/$defs/RequestContext"},
            },
            "$defs": {"RequestContext": {"type": "object", "properties": {
                "request_id": {"type": "string"}}}},
        });
        let Value::Object(object) = &mut schema else {
            unreachable!()
        };
        standardize("memory_search", object, &config);
        let p = &schema["properties"];
        assert_eq!(p["limit"].get("format"), None);
        assert_eq!(p["limit"]["maximum"], 42);
        assert_eq!(p["limit"]["minimum"], 1);
        assert_eq!(p["importance"].get("format"), None);
        assert_eq!(p["importance"]["maximum"], 10);
        assert_eq!(p["id"]["format"], "uuid");
        assert_eq!(
            schema["$defs"]["RequestContext"]["properties"]["request_id"]["maxLength"],
            200
        );
    }
}
