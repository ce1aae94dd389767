//! The OpenAPI document (`/api/openapi.json`) as the REST API's contract: it matches its
//! reviewed snapshot (`UPDATE_SNAPSHOTS=1 cargo test --test api openapi` rewrites it); it
//! and the router agree both ways (every operation it names is routed, and on each of its
//! paths every other method is refused as unrouted); and what each read answers, live,
//! conforms to the schema the document gives for it, as do the answers of a fact's
//! correction and of a search, which are typed like every other answer.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::helpers::*;

/// Where the document keeps its schemas.
const COMPONENTS: &str = "#/components/schemas/";

/// What a record, a rule's application, a superseded fact, an anti-pattern and an
/// episode's derivations look like, so that every read has something to answer.
struct Seeded {
    fact: String,
    rule: String,
    episode: String,
}

async fn seed(app: &TestApp) -> Seeded {
    let health = app.client(TENANT_A_HEALTH).await;
    let id = |v: Value| v["id"].as_str().unwrap().to_owned();
    let episode = id(health
        .ok(
            "memory_store_episode",
            json!({"content": "Made oolong tea", "butler": "health"}),
        )
        .await);
    health
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "tea", "content": "Drinks green tea",
                   "source_episode_id": episode}),
        )
        .await;
    let fact = id(health
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "tea", "content": "Drinks oolong tea"}),
        )
        .await);
    let rule = id(health
        .ok(
            "memory_store_rule",
            json!({"content": "Offer oolong tea", "source_episode_id": episode}),
        )
        .await);
    health
        .ok("memory_mark_helpful", json!({"rule_id": rule}))
        .await;
    Seeded {
        fact,
        rule,
        episode,
    }
}

/// A documented path with its parameters filled in.
fn concrete(template: &str, seeded: &Seeded) -> String {
    let id = if template.contains("/facts/") {
        &seeded.fact
    } else if template.contains("/rules/") {
        &seeded.rule
    } else {
        &seeded.episode
    };
    let mut path = template.replace("{id}", id).replace("{name}", "health");
    if template.ends_with("/search") {
        path.push_str("?q=tea&mode=keyword");
    }
    path
}

#[tokio::test]
async fn the_openapi_document_matches_its_snapshot_and_the_router_both_ways() {
    let app = spawn_app().await;
    let seeded = seed(&app).await;
    let (status, served) = rest(
        &app,
        TENANT_A_ADMIN,
        "GET",
        "/api/openapi.json",
        None,
        "doc",
    )
    .await;
    assert_eq!(status, 200);
    let text = serde_json::to_string_pretty(&served).unwrap() + "\n";
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/openapi.json");
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let expected =
        std::fs::read_to_string(&path).expect("snapshot exists (UPDATE_SNAPSHOTS=1 to create)");
    assert_eq!(
        text, expected,
        "the OpenAPI document changed; review and UPDATE_SNAPSHOTS=1"
    );
    assert_eq!(served["openapi"], "3.1.0");
    let paths = served["paths"].as_object().unwrap();
    let documented: BTreeSet<(String, String)> = paths
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .unwrap()
                .keys()
                .map(|method| (method.clone(), path.clone()))
        })
        .collect();
    let table: BTreeSet<(String, String)> = butler_memory::api::ENDPOINTS
        .iter()
        .map(|e| (e.method.to_owned(), e.path.to_owned()))
        .collect();
    assert_eq!(documented, table, "the document is the endpoint table");

    // Every method on every documented path: routed where the document names it (it
    // answers the service's JSON, never 404 or 405), refused as unrouted (405) elsewhere.
    // A butler key: routed writes answer `admin_only` and change nothing.
    for (template, item) in paths {
        let path = concrete(template, &seeded);
        for method in ["get", "put", "post", "delete", "patch"] {
            let (status, body) = rest(
                &app,
                TENANT_A_HEALTH,
                &method.to_uppercase(),
                &path,
                None,
                "probe",
            )
            .await;
            let context = format!("{method} {path}: {status} {body}");
            if item.get(method).is_some() {
                assert!(![404, 405].contains(&status), "{context}");
                assert!(status == 200 || body["class"].is_string(), "{context}");
            } else {
                assert_eq!(status, 405, "{context}");
            }
        }
    }
    // A path it does not name is not routed either.
    for path in [
        "/api/memory/widgets",
        "/api/memory/facts/x/y/z",
        "/api/v2/facts",
    ] {
        let (status, _) = rest(&app, TENANT_A_ADMIN, "GET", path, None, "probe").await;
        assert_eq!(status, 404, "{path}");
    }
    // Every query parameter it documents is one the endpoint reads.
    let facts_parameters: BTreeSet<&str> = paths["/api/memory/facts"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    for name in &facts_parameters {
        let value = match *name {
            "min_confidence" => "0.5",
            "limit" => "10",
            "cursor" => &seeded.fact,
            "permanence" => "standard",
            "validity" => "active",
            _ => "x",
        };
        let path = format!("/api/memory/facts?{name}={value}");
        let (status, body) = rest(&app, TENANT_A_ADMIN, "GET", &path, None, "probe").await;
        assert_eq!(status, 200, "{name}: {body}");
    }
    app.stop().await;
}

#[tokio::test]
async fn every_answer_conforms_to_the_documents_schema_for_it() {
    let app = spawn_app().await;
    let seeded = seed(&app).await;
    let (_, document) = rest(
        &app,
        TENANT_A_ADMIN,
        "GET",
        "/api/openapi.json",
        None,
        "doc",
    )
    .await;
    let schema_of = |method: &str, template: &str| {
        document["paths"][template][method]["responses"]["200"]["content"]["application/json"]
            ["schema"]
            .clone()
    };
    let mut checked = 0;
    for (template, item) in document["paths"].as_object().unwrap() {
        if item.get("get").is_none() {
            continue;
        }
        let path = concrete(template, &seeded);
        let (status, body) = rest(&app, TENANT_A_ADMIN, "GET", &path, None, "read").await;
        assert_eq!(status, 200, "{path}: {body}");
        assert_conforms(&document, &schema_of("get", template), &body, &path);
        checked += 1;
    }
    assert_eq!(checked, 18, "every read");

    // The answers that used to be untyped: a search's results and a fact's correction.
    let search = schema_of("get", "/api/memory/search");
    let search = resolve(&document, &search);
    for field in ["results", "count", "mode", "degraded"] {
        assert!(required(search).contains(field), "{field}: {search}");
    }
    let (_, found) = rest(
        &app,
        TENANT_A_ADMIN,
        "GET",
        "/api/memory/search?q=oolong&mode=keyword",
        None,
        "read",
    )
    .await;
    let types: BTreeSet<&str> = found["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        BTreeSet::from(["episode", "fact", "rule"]),
        "{found}"
    );

    let edited_schema = schema_of("put", "/api/memory/facts/{id}");
    let (status, edited) = rest(
        &app,
        TENANT_A_ADMIN,
        "PUT",
        &format!("/api/memory/facts/{}", seeded.fact),
        Some(json!({"content": "Drinks jasmine tea"})),
        "edit",
    )
    .await;
    assert_eq!(status, 200, "{edited}");
    assert_conforms(&document, &edited_schema, &edited, "PUT fact");
    let edited_schema = resolve(&document, &edited_schema);
    for field in ["outcome", "superseded", "type", "id", "content"] {
        assert!(
            required(edited_schema).contains(field),
            "{field}: {edited_schema}"
        );
    }
    assert_eq!(edited["superseded"]["validity"], "superseded", "{edited}");

    // And the check finds an answer that is not what the document says.
    let mut errors = Vec::new();
    let wrong = json!({"items": [{"id": 5, "type": "fact"}], "next_cursor": null});
    conforms(
        &document,
        &schema_of("get", "/api/memory/facts"),
        &wrong,
        "$",
        &mut errors,
    );
    assert!(errors.len() >= 3, "{errors:#?}");
    app.stop().await;
}

/// `schema` itself, or the component its `$ref` names.
fn resolve<'a>(document: &'a Value, schema: &'a Value) -> &'a Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(reference) => {
            let name = reference.strip_prefix(COMPONENTS).expect("a component");
            let found = &document["components"]["schemas"][name];
            assert!(!found.is_null(), "{reference} is not in the document");
            resolve(document, found)
        }
        None => schema,
    }
}

/// The properties a schema requires, its `allOf` parts' included.
fn required(schema: &Value) -> BTreeSet<&str> {
    let own = schema["required"].as_array().into_iter().flatten();
    let parts = schema["allOf"].as_array().into_iter().flatten();
    own.filter_map(Value::as_str)
        .chain(parts.flat_map(|p| required(p).into_iter().collect::<Vec<_>>()))
        .collect()
}

fn assert_conforms(document: &Value, schema: &Value, value: &Value, what: &str) {
    let mut errors = Vec::new();
    conforms(document, schema, value, "$", &mut errors);
    assert!(errors.is_empty(), "{what}: {errors:#?}\n{value}");
}

/// A structural check of `value` against a JSON Schema 2020-12 `schema` of the document:
/// references, types, `enum` and `const`, required and declared properties, array items,
/// and `allOf` / `anyOf` / `oneOf` (formats and numeric bounds are not checked).
fn conforms(document: &Value, schema: &Value, value: &Value, at: &str, errors: &mut Vec<String>) {
    let Some(schema) = schema.as_object() else {
        if schema == &Value::Bool(false) {
            errors.push(format!("{at}: nothing is allowed here"));
        }
        return;
    };
    if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
        let name = reference.strip_prefix(COMPONENTS).expect("a component");
        let target = &document["components"]["schemas"][name];
        if target.is_null() {
            errors.push(format!("{at}: {reference} is not in the document"));
        } else {
            conforms(document, target, value, at, errors);
        }
    }
    if let Some(kind) = schema.get("type") {
        let kinds: Vec<&str> = match kind {
            Value::Array(kinds) => kinds.iter().filter_map(Value::as_str).collect(),
            other => vec![other.as_str().unwrap_or_default()],
        };
        if !kinds.iter().any(|k| is_a(value, k)) {
            errors.push(format!("{at}: {value} is not {kinds:?}"));
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        errors.push(format!("{at}: {value} is not one of {allowed:?}"));
    }
    if let Some(constant) = schema.get("const")
        && constant != value
    {
        errors.push(format!("{at}: {value} is not {constant}"));
    }
    for part in schema
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        conforms(document, part, value, at, errors);
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(choices) = schema.get(key).and_then(Value::as_array) {
            let fits = |choice: &Value| {
                let mut mismatches = Vec::new();
                conforms(document, choice, value, at, &mut mismatches);
                mismatches.is_empty()
            };
            if !choices.iter().any(fits) {
                errors.push(format!("{at}: {value} fits none of its {key}"));
            }
        }
    }
    if let Value::Object(object) = value {
        object_conforms(document, schema, object, at, errors);
    }
    if let (Value::Array(items), Some(item)) = (value, schema.get("items")) {
        for (n, element) in items.iter().enumerate() {
            conforms(document, item, element, &format!("{at}[{n}]"), errors);
        }
    }
}

fn object_conforms(
    document: &Value,
    schema: &Map<String, Value>,
    object: &Map<String, Value>,
    at: &str,
    errors: &mut Vec<String>,
) {
    for name in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !object.contains_key(name) {
            errors.push(format!("{at}: `{name}` is required and missing"));
        }
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    for (name, field) in object {
        let at = format!("{at}.{name}");
        match properties.and_then(|p| p.get(name)) {
            Some(declared) => conforms(document, declared, field, &at, errors),
            None => match schema.get("additionalProperties") {
                Some(Value::Bool(false)) => errors.push(format!("{at}: not a declared property")),
                Some(extra) => conforms(document, extra, field, &at, errors),
                None => {}
            },
        }
    }
}

fn is_a(value: &Value, kind: &str) -> bool {
    match kind {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "string" => value.is_string(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        _ => false,
    }
}
