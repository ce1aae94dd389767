//! A local server speaking the OpenAI chat-completions protocol, over HTTP or over TLS with
//! a CA made for the test: it answers each call as its script says (a good answer built
//! from the request, malformed or schema-invalid content, 400, 429, slowness, a flood), so
//! consolidation's LLM client is tested against the real protocol.

use serde_json::{Value, json};

/// What the scripted chat-completions server answers, call by call.
#[derive(Clone, Copy, Debug)]
pub enum Script {
    /// A new fact, an update of the known `city` fact (contradicting it, dated when the
    /// episode says "on 2 March 2026"), a rule and the known `name` fact restated, built from
    /// the request's episode and known facts.
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
    /// HTTP 400 when the request's episode says "poison", `Happy` otherwise.
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
        // Consolidation asks about one episode in its last message (plain text: the known
        // facts as "F1: subject | predicate | content", then the episode); the orchestrator
        // memory's extractor sends a JSON document.
        let last = request["messages"]
            .as_array()
            .and_then(|m| m.last())
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
            .to_owned();
        let user: Value = serde_json::from_str(&last).unwrap_or(Value::Null);
        let episode = last
            .split_once("\nEpisode (")
            .and_then(|(_, rest)| rest.split_once("):\n"))
            .map_or("", |(_, text)| text);
        let known: Vec<(String, String, String)> = last
            .lines()
            .filter_map(|line| {
                let (label, fact) = line.split_once(": ")?;
                let parts: Vec<&str> = fact.splitn(3, " | ").collect();
                (label.starts_with('F') && parts.len() == 3)
                    .then(|| (label.to_owned(), parts[1].to_owned(), parts[2].to_owned()))
            })
            .collect();
        let known = |predicate: &str| known.iter().find(|(_, p, _)| p == predicate).cloned();
        let step = match step {
            Script::RefusePoison if episode.contains("poison") => Script::BadRequest,
            Script::RefusePoison => Script::Happy,
            other => other,
        };
        let fact = |subject: &str, predicate: &str, object: &str, time: &str, contradicts: &str| {
            json!({"statement": format!("{subject} {predicate} {object}"), "subject": subject,
                   "predicate": predicate, "object": object, "kind": "stable",
                   "time": time, "contradicts": contradicts})
        };
        let content = match step {
            Script::Happy => {
                // A new fact; an update of the known city, dated by the episode's words and
                // contradicting the known value; the known name restated, which confirms it.
                let mut facts = vec![fact("user", "favourite_tea", "Likes oolong tea", "", "")];
                if let Some((label, _, _)) = known("city") {
                    let time = ["on 2 March 2026"]
                        .into_iter()
                        .find(|t| episode.contains(t))
                        .unwrap_or("");
                    facts.push(fact("user", "city", "Lives in Nantes", time, &label));
                }
                if let Some((_, _, name)) = known("name") {
                    facts.push(fact("user", "name", &name, "", ""));
                }
                json!({"rules": ["Offer tea when the user is tired"], "facts": facts}).to_string()
            }
            Script::LeakSecrets => json!({
                "facts": [fact("user", "aws_key", "Their key is AKIAIOSFODNN7EXAMPLE", "", "")],
                "rules": ["Charge card 4111 1111 1111 1111 every month"],
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
            Script::SchemaInvalid => json!({"rules": [], "facts": [], "mood": "happy"}).to_string(),
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
