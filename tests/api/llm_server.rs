//! A local server speaking the OpenAI chat-completions protocol, over HTTP or over TLS with
//! a CA made for the test: it answers each call as its script says (a good answer built
//! from the request, malformed or schema-invalid content, 400, 429, slowness, a flood), so
//! consolidation's LLM client is tested against the real protocol.

use serde_json::{Value, json};

/// What the scripted chat-completions server answers, call by call.
#[derive(Clone, Copy, Debug)]
pub enum Script {
    /// A new fact, an update of the known `city` fact, a rule and a confirmation of the
    /// known `name` fact, built from the request's episodes and known facts.
    Happy,
    /// Content that is not JSON.
    Malformed,
    /// JSON with a field the schema does not have.
    SchemaInvalid,
    /// HTTP 429.
    RateLimited,
    /// No answer within the client's timeout.
    Slow,
    /// No answer for a minute (the caller is killed meanwhile).
    Hang,
    /// HTTP 400: the endpoint refuses the request as it is.
    BadRequest,
    /// HTTP 400 when an episode of the request says "poison", `Happy` otherwise.
    RefusePoison,
    /// An answer streamed without a length, 1 MiB and more.
    Flood,
    /// A fact and a rule that echo secrets back (an AWS key, a card number).
    LeakSecrets,
    /// For the orchestrator memory's extractor: the document's first line as a goal, its
    /// second as a todo part of it.
    Memories,
}

/// The requests a server received, in order.
type Requests = std::sync::Arc<std::sync::Mutex<Vec<Value>>>;

pub struct LlmServer {
    pub base_url: String,
    pub requests: Requests,
}

/// A local server speaking the OpenAI chat-completions protocol, answering `script` in
/// order (the last entry repeats).
fn llm_app(script: Vec<Script>) -> (axum::Router, Requests) {
    use axum::extract::State;
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    use std::sync::{Arc, Mutex};
    type Shared = (Arc<Mutex<Vec<Script>>>, Arc<Mutex<Vec<Value>>>);
    async fn complete(
        State((script, seen)): State<Shared>,
        body: axum::Json<Value>,
    ) -> axum::response::Response {
        let request = body.0;
        seen.lock().unwrap().push(request.clone());
        let step = {
            let mut s = script.lock().unwrap();
            if s.len() > 1 { s.remove(0) } else { s[0] }
        };
        let user: Value =
            serde_json::from_str(request["messages"][1]["content"].as_str().unwrap()).unwrap();
        let episode = user["episodes"][0]["id"].clone();
        let poisoned = user["episodes"].as_array().is_some_and(|episodes| {
            episodes
                .iter()
                .any(|e| e["content"].as_str().unwrap().contains("poison"))
        });
        let step = match step {
            Script::RefusePoison if poisoned => Script::BadRequest,
            Script::RefusePoison => Script::Happy,
            other => other,
        };
        let content = match step {
            Script::Happy => {
                let known = |predicate: &str| {
                    user["known_facts"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|f| f["predicate"] == predicate)
                        .map(|f| f["id"].clone())
                        .unwrap_or(Value::Null)
                };
                json!({
                    "new_facts": [{"subject": "user", "predicate": "favourite_tea", "content": "Likes oolong tea",
                                   "permanence": "stable", "importance": 6, "source_episode_id": episode,
                                   "links": if known("name").is_null() { json!([]) } else { json!([{"relation": "supports", "fact_id": known("name")}]) }}],
                    "updated_facts": if known("city").is_null() { json!([]) } else { json!([{"supersedes_fact_id": known("city"), "subject": "user", "predicate": "city",
                                       "content": "Lives in Nantes", "permanence": "stable", "importance": 7,
                                       "source_episode_id": episode, "links": [], "valid_from": "2026-03-02"}]) },
                    "new_rules": [{"content": "Offer tea when the user is tired", "source_episode_id": episode}],
                    "confirmations": if known("name").is_null() { json!([]) } else { json!([{"fact_id": known("name")}]) },
                })
                .to_string()
            }
            Script::LeakSecrets => json!({
                "new_facts": [{"subject": "user", "predicate": "aws_key",
                               "content": "Their key is AKIAIOSFODNN7EXAMPLE", "permanence": "stable",
                               "importance": 6, "source_episode_id": episode, "links": []}],
                "updated_facts": [],
                "new_rules": [{"content": "Charge card 4111 1111 1111 1111 every month",
                               "source_episode_id": episode}],
                "confirmations": [],
            })
            .to_string(),
            Script::Memories => {
                let document = user["document"].as_str().unwrap_or_default();
                let mut lines = document.lines().map(str::trim).filter(|l| !l.is_empty());
                let goal = lines.next().unwrap_or("nothing");
                let todo = lines.next().unwrap_or("nothing either");
                json!({
                    "memories": [
                        {"type": "Goal", "content": goal, "importance": 80, "confidence": 0.9},
                        {"type": "Todo", "content": todo, "importance": null, "confidence": null},
                    ],
                    "edges": [{"from": 1, "to": 0, "edgeType": "PartOf"}],
                })
                .to_string()
            }
            Script::Malformed => "{not json".to_owned(),
            Script::SchemaInvalid => json!({"new_facts": [], "updated_facts": [], "new_rules": [],
                                            "confirmations": [], "mood": "happy"})
            .to_string(),
            Script::RateLimited => {
                return (StatusCode::TOO_MANY_REQUESTS, "slow down").into_response();
            }
            Script::Slow => {
                tokio::time::sleep(std::time::Duration::from_secs(2)).await;
                return (StatusCode::OK, "late").into_response();
            }
            Script::Hang => {
                tokio::time::sleep(std::time::Duration::from_secs(60)).await;
                return (StatusCode::OK, "late").into_response();
            }
            Script::BadRequest | Script::RefusePoison => {
                return (StatusCode::BAD_REQUEST, "this input is not accepted").into_response();
            }
            Script::Flood => {
                let chunks = futures::stream::iter(
                    (0..128).map(|_| Ok::<_, std::io::Error>(vec![b' '; 8192])),
                );
                return axum::body::Body::from_stream(chunks).into_response();
            }
        };
        axum::Json(
            json!({"id": "cmpl-1", "object": "chat.completion", "model": "test",
                          "choices": [{"index": 0, "finish_reason": "stop",
                                       "message": {"role": "assistant", "content": content}}]}),
        )
        .into_response()
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let state: Shared = (Arc::new(Mutex::new(script)), seen.clone());
    let app = axum::Router::new()
        .route("/v1/chat/completions", axum::routing::post(complete))
        .with_state(state);
    (app, seen)
}

/// A local server speaking the OpenAI chat-completions protocol over plain HTTP, answering
/// `script` in order (the last entry repeats).
pub async fn llm_server(script: Vec<Script>) -> LlmServer {
    let (app, requests) = llm_app(script);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    LlmServer {
        base_url: format!("http://{address}/v1"),
        requests,
    }
}

/// The same server over TLS, with a certificate for `127.0.0.1` and `localhost` issued by
/// a CA made for the test, whose PEM is returned beside it.
pub async fn llm_server_tls(script: Vec<Script>) -> (LlmServer, String) {
    use hyper_util::rt::TokioIo;
    use hyper_util::service::TowerToHyperService;
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    use tokio_rustls::rustls;

    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "butler-memory test CA");
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca, ca_key);
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::try_from(leaf_key.serialize_der()).unwrap(),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(tls));

    let (app, requests) = llm_app(script);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                // A client that refuses the certificate ends its handshake here.
                let Ok(stream) = acceptor.accept(socket).await else {
                    return;
                };
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app))
                    .await;
            });
        }
    });
    let server = LlmServer {
        base_url: format!("https://127.0.0.1:{}/v1", address.port()),
        requests,
    };
    (server, ca_pem)
}
