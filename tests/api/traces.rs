//! OpenTelemetry export: the real binary, with `traces.endpoint` pointing at a local OTLP/HTTP
//! receiver (an axum route that decodes the protobuf the exporter sends), joins the caller's
//! W3C trace and exports the tool call, the shard write and its group commit, the query
//! embedding, the retrieval and each SQL statement family, and never a word of content.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message;
use serde_json::json;

use crate::binary::{Service, write_config};
use crate::helpers::*;

/// One received span: its name, trace, parent and attributes (as text).
#[derive(Debug, Clone)]
struct Received {
    name: String,
    trace_id: String,
    span_id: String,
    parent: String,
    attributes: HashMap<String, String>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A local OTLP/HTTP receiver: every span it was sent, and the service name it came with.
async fn receiver() -> (String, Arc<Mutex<Vec<Received>>>, Arc<Mutex<Vec<String>>>) {
    let spans = Arc::new(Mutex::new(Vec::new()));
    let services = Arc::new(Mutex::new(Vec::new()));
    let (into, named) = (spans.clone(), services.clone());
    let app = axum::Router::new().route(
        "/v1/traces",
        post(move |body: Bytes| {
            let (into, named) = (into.clone(), named.clone());
            async move {
                let request = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                for resource in request.resource_spans {
                    if let Some(resource) = &resource.resource {
                        for kv in &resource.attributes {
                            if kv.key == "service.name" {
                                named.lock().unwrap().push(format!("{:?}", kv.value));
                            }
                        }
                    }
                    for scope in resource.scope_spans {
                        for span in scope.spans {
                            into.lock().unwrap().push(Received {
                                name: span.name,
                                trace_id: hex(&span.trace_id),
                                span_id: hex(&span.span_id),
                                parent: hex(&span.parent_span_id),
                                attributes: span
                                    .attributes
                                    .into_iter()
                                    .map(|kv| (kv.key, format!("{:?}", kv.value)))
                                    .collect(),
                            });
                        }
                    }
                }
                (
                    [("content-type", "application/x-protobuf")],
                    ExportTraceServiceResponse::default().encode_to_vec(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, spans, services)
}

#[tokio::test]
async fn spans_join_the_callers_trace_and_reach_an_otlp_receiver() {
    let (endpoint, spans, services) = receiver().await;
    let (database, _) = fresh_database().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &format!(
            "[traces]\nendpoint = \"{endpoint}\"\n\
             service_name = \"memory-under-test\"\nbatch_delay_ms = 100\n"
        ),
    );
    let service = Service::start_with(&config, &[("BUTLER_MEMORY_DATABASE_URL", &database)]);
    let secret = "Biscuit the spaniel hates thunderstorms";

    let (write_trace, write_parent) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let traceparent = format!("00-{write_trace}-{write_parent}-01");
    let (failed, answer) = service
        .call_with(
            TENANT_A_HEALTH,
            &[("traceparent", &traceparent)],
            "memory_store_episode",
            json!({"butler": "health", "content": secret}),
        )
        .await;
    assert!(!failed, "{answer}");
    let (read_trace, read_parent) = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
    let traceparent = format!("00-{read_trace}-{read_parent}-01");
    let (failed, answer) = service
        .call_with(
            TENANT_A_HEALTH,
            &[("traceparent", &traceparent)],
            "memory_search",
            json!({"query": "which dog is afraid of storms"}),
        )
        .await;
    assert!(!failed, "{answer}");

    // Both traces arrive within a few batch delays.
    let wanted = [
        (write_trace, "db.insert_episodes"),
        (read_trace, "db.semantic_candidates"),
        (read_trace, "tools/call memory_search"),
    ];
    eventually(Duration::from_secs(30), || {
        let got = spans.lock().unwrap().clone();
        std::future::ready(
            if wanted
                .iter()
                .all(|(t, n)| got.iter().any(|s| s.trace_id == *t && s.name == *n))
            {
                Ok(())
            } else {
                Err(format!("spans so far: {got:#?}"))
            },
        )
    })
    .await
    .unwrap();
    // The statement families' latency, timed from the same spans.
    let metrics = service.metrics().await;
    for family in ["db.insert_episodes", "db.semantic_candidates"] {
        let series = format!("butler_memory_db_statement_seconds_bucket{{family=\"{family}\"");
        assert!(metrics.contains(&series), "{series} missing:\n{metrics}");
    }

    // Stopped as a signal would: it sends what is still batched (the receiver runs on this
    // runtime, so the wait must not block it).
    service.stop().await;

    let got = spans.lock().unwrap().clone();
    let in_trace = |trace: &str| -> Vec<Received> {
        got.iter()
            .filter(|s| s.trace_id == trace)
            .cloned()
            .collect()
    };
    let named = |spans: &[Received], name: &str| -> Received {
        spans
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no {name} in {spans:#?}"))
            .clone()
    };

    // The write: the tool call is a child of the caller's span; the shard write, the group
    // commit and the statement hang below it.
    let write = in_trace(write_trace);
    let tool = named(&write, "tools/call memory_store_episode");
    assert_eq!(tool.parent, write_parent);
    assert!(tool.attributes["mcp.outcome"].contains("ok"), "{tool:?}");
    let shard = named(&write, "shard.store_episodes");
    assert_eq!(shard.parent, tool.span_id);
    let commit = named(&write, "write.group_commit");
    assert_eq!(commit.parent, shard.span_id);
    let insert = named(&write, "db.insert_episodes");
    assert_eq!(insert.parent, commit.span_id);
    assert!(insert.attributes["db.system.name"].contains("postgresql"));

    // The read: the query embedding and the retrieval below the tool call, SQL below that.
    let read = in_trace(read_trace);
    let tool = named(&read, "tools/call memory_search");
    assert_eq!(tool.parent, read_parent);
    assert_eq!(named(&read, "embed.query").parent, tool.span_id);
    let retrieval = named(&read, "retrieval.search");
    assert_eq!(retrieval.parent, tool.span_id);
    for family in ["db.semantic_candidates", "db.keyword_candidates"] {
        assert_eq!(named(&read, family).parent, retrieval.span_id, "{family}");
    }
    // The query's words are read once for the keyword lists of every type searched, their
    // neighbours in the vocabulary with them (a text not read before).
    let count = |name: &str| read.iter().filter(|s| s.name == name).count();
    assert!(count("db.keyword_candidates") >= 2, "{read:#?}");
    assert_eq!(count("db.query_words"), 1, "{read:#?}");
    assert_eq!(count("db.word_neighbours"), 0, "{read:#?}");

    // The indexer's embedding runs in traces of its own.
    assert!(got.iter().any(|s| s.name == "indexer.embed"), "{got:#?}");
    assert!(
        services
            .lock()
            .unwrap()
            .iter()
            .all(|s| s.contains("memory-under-test"))
    );
    // Never content: no attribute of any span carries a word of what was stored.
    for span in &got {
        for value in span.attributes.values() {
            assert!(!value.contains("Biscuit"), "{span:?}");
        }
    }
}
