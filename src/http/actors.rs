//! `/actors`: the live actor tree, this instance's name and the scheduled sweeps it holds
//! (issue 21). Needs an operator key (everything) or an admin key (the shared actors and
//! its own tenant's shards and sweeps): tenant ids are not public.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use butler_memory_actors::{
    ActorKind, ActorSnapshot, Caller, Engine, ErrorCode, MemoryError, MemoryResult, Role, SweepFire,
};
use serde_json::json;

use super::error_response;
use crate::app_state::AppState;
use crate::auth::unauthorized;

pub async fn actors(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let Some(caller) = state.auth.caller(authorization) else {
        return unauthorized(&headers);
    };
    let listed = async {
        let actors = visible_actors(&state.engine, &caller)?;
        let leases = visible_leases(&state.engine, &caller).await?;
        Ok::<_, MemoryError>((actors, leases))
    };
    match listed.await {
        Ok((actors, leases)) => {
            let shards = actors.iter().filter(|a| a.kind == ActorKind::Shard).count();
            Json(json!({
                "instance_id": state.engine.instance_id(),
                "shards": shards,
                "actors": actors,
                "leases": leases,
            }))
            .into_response()
        }
        Err(e) => error_response(&e),
    }
}

/// The scheduled sweeps this instance has claimed and not finished (an admin sees its own
/// tenant's).
pub async fn visible_leases(engine: &Engine, caller: &Caller) -> MemoryResult<Vec<SweepFire>> {
    let held = engine.held_claims().await?;
    Ok(match caller.role {
        Role::Operator => held,
        _ => held
            .into_iter()
            .filter(|f| f.shard.tenant_id == caller.tenant_id)
            .collect(),
    })
}

/// The actors a key may see: an operator every one, an admin the shared actors and its own
/// tenant's shards; a butler or auditor key none (`operator_only`).
pub fn visible_actors(engine: &Engine, caller: &Caller) -> MemoryResult<Vec<ActorSnapshot>> {
    let own_prefix = format!("{}/", caller.tenant_id);
    let visible = |kind: ActorKind, key: &str| match caller.role {
        Role::Operator => true,
        Role::Admin => kind != ActorKind::Shard || key.starts_with(&own_prefix),
        Role::Butler | Role::Auditor | Role::Orchestrator => false,
    };
    if matches!(
        caller.role,
        Role::Butler | Role::Auditor | Role::Orchestrator
    ) {
        return Err(MemoryError::new(
            ErrorCode::OperatorOnly,
            "the actor tree needs an operator or admin key",
        ));
    }
    Ok(engine
        .actors()
        .into_iter()
        .filter(|a| visible(a.kind, &a.key))
        .collect())
}
