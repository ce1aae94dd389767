//! The OpenAPI 3.1 document of `/api`, at `/api/openapi.json`. OpenAPI 3.1's schemas are
//! JSON Schema 2020-12, which schemars already derives for the very types the handlers
//! read and answer (the same derives give the MCP tools their schemas), so the document is
//! assembled from [`ENDPOINTS`](super::ENDPOINTS) and those derives rather than from a
//! second set of annotations on every type. A snapshot test keeps it reviewed.

use std::sync::LazyLock;

use axum::Json;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{Map, Value, json};

use super::ENDPOINTS;

/// Where the document keeps its schemas.
const COMPONENTS: &str = "#/components/schemas/";

static DOCUMENT: LazyLock<Value> = LazyLock::new(document_value);

/// `GET /api/openapi.json`.
pub async fn document() -> Json<Value> {
    Json(DOCUMENT.clone())
}

fn generator(settings: SchemaSettings) -> SchemaGenerator {
    let mut settings = settings;
    settings.definitions_path = COMPONENTS.into();
    settings.into_generator()
}

/// The document.
pub fn document_value() -> Value {
    // Answers are what the types serialise to, queries what they deserialise from.
    let mut answers = generator(SchemaSettings::draft2020_12().for_serialize());
    let mut queries = generator(SchemaSettings::draft2020_12().for_deserialize());
    let mut paths = Map::new();
    for endpoint in ENDPOINTS {
        let mut parameters = Vec::new();
        for name in ["id", "name"] {
            if endpoint.path.contains(&format!("{{{name}}}")) {
                let schema = match name {
                    "id" => json!({"type": "string", "format": "uuid"}),
                    _ => json!({"type": "string", "pattern": crate::mcp::schema::NAME_PATTERN}),
                };
                parameters
                    .push(json!({"name": name, "in": "path", "required": true, "schema": schema}));
            }
        }
        if let Some(query) = endpoint.query {
            let reference = query(&mut queries);
            parameters.extend(query_parameters(&mut queries, reference));
        }
        let response = (endpoint.response)(&mut answers).to_value();
        let error = json!({"$ref": "#/components/responses/Error"});
        let mut operation = json!({
            "summary": endpoint.summary,
            "parameters": parameters,
            "responses": {
                "200": {"description": "OK", "content": {"application/json": {"schema": response}}},
                "400": error, "401": error, "403": error, "404": error, "409": error, "503": error,
            },
        });
        if let Some(body) = endpoint.body {
            operation["requestBody"] = json!({
                "required": true,
                "content": {"application/json": {"schema": body(&mut queries).to_value()}},
            });
        }
        let item = paths
            .entry(endpoint.path.to_owned())
            .or_insert_with(|| json!({}));
        item[endpoint.method] = operation;
    }
    let mut schemas = queries.take_definitions(true);
    for (name, schema) in answers.take_definitions(true) {
        schemas.insert(name, schema);
    }
    schemas.insert(
        "Error".into(),
        json!({
            "type": "object",
            "properties": {
                "class": {"type": "string", "enum": ["invalid_input", "forbidden", "not_found",
                    "conflict", "overloaded", "unavailable", "integrity", "internal"]},
                "code": {"type": "string"},
                "message": {"type": "string"},
            },
            "required": ["class", "code", "message"],
        }),
    );
    let mut document = json!({
        "openapi": "3.1.0",
        "info": {
            "title": "butler-memory REST API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "What a key may see of the memory of its tenant. The tenant comes \
                from the key; the error shape is the MCP tools' (docs/tools.md).",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "responses": {"Error": {
                "description": "The request failed: the class and code say why (docs/tools.md)",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
            }},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    });
    if let Value::Object(object) = &mut document {
        crate::mcp::schema::strip_nonstandard_formats(object);
    }
    document
}

/// A query type's fields as OpenAPI query parameters.
fn query_parameters(generator: &mut SchemaGenerator, reference: schemars::Schema) -> Vec<Value> {
    let name = reference
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix(COMPONENTS))
        .expect("a query type is a named struct")
        .to_owned();
    let definition = generator
        .definitions_mut()
        .remove(&name)
        .expect("its definition was just generated");
    let required: Vec<Value> = definition
        .get("required")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let properties = definition
        .get("properties")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    properties
        .into_iter()
        .map(|(field, mut schema)| {
            let description = schema
                .as_object_mut()
                .and_then(|s| s.remove("description"))
                .unwrap_or(Value::Null);
            let mut parameter = json!({
                "name": field,
                "in": "query",
                "required": required.contains(&json!(field)),
                "schema": schema,
            });
            if !description.is_null() {
                parameter["description"] = description;
            }
            parameter
        })
        .collect()
}
