//! The `/api` handlers: each reads its query (unknown or malformed parameters are a 400
//! `invalid_arguments`), asks the engine as the key's caller, and answers JSON or the
//! error shape of the tools with the status its code implies.

use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use butler_memory_actors::{
    Caller, EpisodeQuery, ErrorCode, FactEdit, FactQuery, Governance, GovernanceRequest,
    MemoryError, MemoryResult, MemoryType, RuleEdit, RuleQuery, SearchInput, Since,
};
use serde::Serialize;
use uuid::Uuid;

use super::{
    ActivityPage, ActivityQuery, ApplicationsQuery, ForgetQuery, SearchQuery, StatsQuery,
    TimelineQuery,
};
use crate::app_state::AppState;
use crate::http::error_response;
use crate::http::request_meta::RequestMeta;
use crate::mcp::answers::{FactStored, SearchResults};
use crate::mcp::params::PurgeParams;

type Api = State<Arc<AppState>>;
type Key = Extension<Caller>;

fn answer<T: Serialize>(result: MemoryResult<T>) -> Response {
    match result {
        Ok(body) => Json(body).into_response(),
        Err(e) => error_response(&e),
    }
}

fn bad_request(message: String) -> MemoryError {
    MemoryError::new(ErrorCode::InvalidArguments, message)
}

/// The query, or what is wrong with it.
fn query<T>(query: Result<Query<T>, QueryRejection>) -> MemoryResult<T> {
    query
        .map(|Query(q)| q)
        .map_err(|e| bad_request(e.body_text()))
}

fn body<T>(body: Result<Json<T>, JsonRejection>) -> MemoryResult<T> {
    body.map(|Json(b)| b)
        .map_err(|e| bad_request(e.body_text()))
}

fn path<T>(path: Result<Path<T>, PathRejection>) -> MemoryResult<T> {
    path.map(|Path(p)| p)
        .map_err(|e| bad_request(e.body_text()))
}

/// Unwraps a parsed request part, or answers what is wrong with it (a 400).
macro_rules! parsed {
    ($e:expr) => {
        match $e {
            Ok(value) => value,
            Err(e) => return error_response(&e),
        }
    };
}

pub async fn stats(
    State(s): Api,
    Extension(c): Key,
    q: Result<Query<StatsQuery>, QueryRejection>,
) -> Response {
    let q = parsed!(query(q));
    answer(s.engine.stats(&c, q.scope, q.butler).await)
}

pub async fn timeline(
    State(s): Api,
    Extension(c): Key,
    q: Result<Query<TimelineQuery>, QueryRejection>,
) -> Response {
    let q = parsed!(query(q));
    answer(s.engine.timeline(&c, q.butler, q.days).await)
}

pub async fn facts(
    State(s): Api,
    Extension(c): Key,
    q: Result<Query<FactQuery>, QueryRejection>,
) -> Response {
    answer(s.engine.list_facts(&c, parsed!(query(q))).await)
}

pub async fn rules(
    State(s): Api,
    Extension(c): Key,
    q: Result<Query<RuleQuery>, QueryRejection>,
) -> Response {
    answer(s.engine.list_rules(&c, parsed!(query(q))).await)
}

pub async fn episodes(
    State(s): Api,
    Extension(c): Key,
    q: Result<Query<EpisodeQuery>, QueryRejection>,
) -> Response {
    answer(s.engine.list_episodes(&c, parsed!(query(q))).await)
}

/// The memory type of a record route (each type's routes carry theirs, `api::routes`).
type Kind = Extension<MemoryType>;

pub async fn record(
    State(s): Api,
    Extension(c): Key,
    Extension(memory_type): Kind,
    id: Result<Path<Uuid>, PathRejection>,
) -> Response {
    let id = parsed!(path(id));
    answer(s.engine.record_for_dashboard(&c, memory_type, id).await)
}

pub async fn activity(
    State(s): Api,
    Extension(c): Key,
    q: Result<Query<ActivityQuery>, QueryRejection>,
) -> Response {
    let q = parsed!(query(q));
    answer(
        async {
            let since = Since::parse(q.since.as_deref())?;
            let events = s
                .engine
                .activity_for_dashboard(&c, since, q.scope, q.butler, q.limit)
                .await?;
            let next_cursor = since.next_cursor(&events);
            Ok(ActivityPage {
                events,
                next_cursor,
            })
        }
        .await,
    )
}

/// The statistics query of a butler's view: `butler`, if given, must be the one the path
/// names.
fn butler_of(named: &str, asked: Option<&str>) -> MemoryResult<()> {
    match asked {
        Some(other) if other != named => Err(bad_request(format!(
            "the path names butler `{named}` and the query `{other}`"
        ))),
        _ => Ok(()),
    }
}

/// What the butler named in the path sees (`Engine::butler_stats` and its lists), not
/// what the key sees nor what the butler wrote.
pub async fn butler_stats(
    State(s): Api,
    Extension(c): Key,
    name: Result<Path<String>, PathRejection>,
    q: Result<Query<StatsQuery>, QueryRejection>,
) -> Response {
    let (name, q) = (parsed!(path(name)), parsed!(query(q)));
    parsed!(butler_of(&name, q.butler.as_deref()));
    answer(s.engine.butler_stats(&c, &name, q.scope).await)
}

pub async fn butler_facts(
    State(s): Api,
    Extension(c): Key,
    name: Result<Path<String>, PathRejection>,
    q: Result<Query<FactQuery>, QueryRejection>,
) -> Response {
    let (name, q) = (parsed!(path(name)), parsed!(query(q)));
    answer(s.engine.butler_facts(&c, &name, q).await)
}

pub async fn butler_rules(
    State(s): Api,
    Extension(c): Key,
    name: Result<Path<String>, PathRejection>,
    q: Result<Query<RuleQuery>, QueryRejection>,
) -> Response {
    let (name, q) = (parsed!(path(name)), parsed!(query(q)));
    answer(s.engine.butler_rules(&c, &name, q).await)
}

pub async fn butler_episodes(
    State(s): Api,
    Extension(c): Key,
    name: Result<Path<String>, PathRejection>,
    q: Result<Query<EpisodeQuery>, QueryRejection>,
) -> Response {
    let (name, q) = (parsed!(path(name)), parsed!(query(q)));
    answer(s.engine.butler_episodes(&c, &name, q).await)
}

type Meta = Extension<RequestMeta>;

pub async fn edit_fact(
    State(s): Api,
    Extension(c): Key,
    Extension(meta): Meta,
    id: Result<Path<Uuid>, PathRejection>,
    edit: Result<Json<FactEdit>, JsonRejection>,
) -> Response {
    let (id, edit) = (parsed!(path(id)), parsed!(body(edit)));
    answer(
        s.engine
            .edit_fact(&c, id, edit, meta.lineage())
            .await
            .map(FactStored::from),
    )
}

pub async fn edit_rule(
    State(s): Api,
    Extension(c): Key,
    Extension(meta): Meta,
    id: Result<Path<Uuid>, PathRejection>,
    edit: Result<Json<RuleEdit>, JsonRejection>,
) -> Response {
    let (id, edit) = (parsed!(path(id)), parsed!(body(edit)));
    answer(s.engine.edit_rule(&c, id, edit, meta.lineage()).await)
}

pub async fn forget(
    State(s): Api,
    Extension(c): Key,
    Extension(meta): Meta,
    Extension(memory_type): Kind,
    id: Result<Path<Uuid>, PathRejection>,
    q: Result<Query<ForgetQuery>, QueryRejection>,
) -> Response {
    let (id, q) = (parsed!(path(id)), parsed!(query(q)));
    answer(
        s.engine
            .forget_for_dashboard(&c, memory_type, id, q.reason, meta.lineage())
            .await
            .map(|done| done.record),
    )
}

pub async fn restore(
    State(s): Api,
    Extension(c): Key,
    Extension(meta): Meta,
    Extension(memory_type): Kind,
    id: Result<Path<Uuid>, PathRejection>,
) -> Response {
    let id = parsed!(path(id));
    answer(
        s.engine
            .restore(&c, memory_type, id, meta.lineage())
            .await
            .map(|done| done.record),
    )
}

pub async fn provenance(
    State(s): Api,
    Extension(c): Key,
    Extension(memory_type): Kind,
    id: Result<Path<Uuid>, PathRejection>,
) -> Response {
    let id = parsed!(path(id));
    answer(s.engine.provenance(&c, memory_type, id).await)
}

pub async fn applications(
    State(s): Api,
    Extension(c): Key,
    id: Result<Path<Uuid>, PathRejection>,
    q: Result<Query<ApplicationsQuery>, QueryRejection>,
) -> Response {
    let (id, q) = (parsed!(path(id)), parsed!(query(q)));
    answer(s.engine.rule_applications(&c, id, q.cursor, q.limit).await)
}

pub async fn search(
    State(s): Api,
    Extension(c): Key,
    q: Result<Query<SearchQuery>, QueryRejection>,
) -> Response {
    let q = parsed!(query(q));
    let types = match q.types.as_deref() {
        None => None,
        Some(list) => Some(parsed!(
            list.split(',')
                .map(|t| t.trim().parse::<MemoryType>())
                .collect::<MemoryResult<Vec<_>>>()
        )),
    };
    let input = SearchInput {
        query: q.q,
        types,
        scope: q.scope,
        mode: q.mode,
        limit: q.limit,
        min_confidence: q.min_confidence,
        butler: q.butler,
        as_of: q.as_of,
        since: q.since,
        until: q.until,
    };
    answer(
        s.engine
            .search_for_dashboard(&c, input)
            .await
            .map(SearchResults::from),
    )
}

async fn govern(
    s: &AppState,
    c: &Caller,
    meta: &RequestMeta,
    decision: Governance,
    id: Result<Path<Uuid>, PathRejection>,
    request: Result<Json<GovernanceRequest>, JsonRejection>,
) -> Response {
    let (id, request) = (parsed!(path(id)), parsed!(body(request)));
    answer(
        s.engine
            .govern_rule(c, id, decision, request.reason, meta.lineage())
            .await,
    )
}

/// One handler per decision, each a route of its own.
macro_rules! decision_handler {
    ($name:ident, $decision:expr) => {
        pub async fn $name(
            State(s): Api,
            Extension(c): Key,
            Extension(meta): Meta,
            id: Result<Path<Uuid>, PathRejection>,
            request: Result<Json<GovernanceRequest>, JsonRejection>,
        ) -> Response {
            govern(&s, &c, &meta, $decision, id, request).await
        }
    };
}

decision_handler!(promote_rule, Governance::Promote);
decision_handler!(demote_rule, Governance::Demote);
decision_handler!(disable_rule, Governance::Disable);
decision_handler!(enable_rule, Governance::Enable);

pub async fn purge(
    State(s): Api,
    Extension(c): Key,
    Extension(meta): Meta,
    request: Result<Json<PurgeParams>, JsonRejection>,
) -> Response {
    let mut request = parsed!(body(request));
    let target = parsed!(request.target());
    answer(
        s.engine
            .purge(&c, target, request.reason, request.dry_run, meta.lineage())
            .await,
    )
}
