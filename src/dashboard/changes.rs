//! The changes every record type shares: forget (reversible, as `memory_forget`, with a
//! reason) and restore, each from a form carrying the session's CSRF token and sent back
//! to the page it came from; and the short notes a page shows after a change.

use std::sync::Arc;

use axum::extract::rejection::FormRejection;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use butler_memory_actors::{ErrorCode, MemoryError, MemoryResult, MemoryType};
use serde::Deserialize;
use uuid::Uuid;

use super::filters;
use super::layout;
use super::session::Viewer;
use super::widgets::record_href;
use crate::app_state::AppState;
use crate::http::request_meta::RequestMeta;

/// A record id from a path, or a clear `invalid_arguments`.
pub fn record_id(raw: &str) -> MemoryResult<Uuid> {
    raw.parse().map_err(|_| {
        MemoryError::new(
            ErrorCode::InvalidArguments,
            format!(
                "`{}` is not a record id (a UUID)",
                raw.chars().take(64).collect::<String>()
            ),
        )
    })
}

fn memory_type(raw: &str) -> MemoryResult<MemoryType> {
    raw.parse()
}

/// What a page says after a change (`?done=`); fixed sentences, so a link cannot make
/// the dashboard say anything else.
pub fn done_note(raw_query: Option<&str>) -> Option<&'static str> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw_query?).ok()?;
    let done = pairs
        .iter()
        .find(|(k, _)| k == "done")
        .map(|(_, v)| v.as_str())?;
    Some(match done {
        "edited" => "Saved: the new version supersedes the old one, which stays in the history.",
        "forgotten" => "Forgotten: it no longer reaches retrieval, and can be restored.",
        "restored" => "Restored.",
        "governed" => "The rule's decision is recorded.",
        "requeued" => "Requeued for consolidation.",
        "status" => "The memory's new status is recorded in the audit stream.",
        _ => return None,
    })
}

#[derive(Deserialize)]
pub struct ForgetForm {
    csrf: String,
    reason: Option<String>,
}

/// `POST /memory/{type}/{id}/forget`
pub async fn forget(
    State(state): State<Arc<AppState>>,
    Extension(viewer): Extension<Viewer>,
    Extension(meta): Extension<RequestMeta>,
    Path((kind, id)): Path<(String, String)>,
    form: Result<Form<ForgetForm>, FormRejection>,
) -> Response {
    let done = async {
        let (memory_type, id) = (memory_type(&kind)?, record_id(&id)?);
        let form = filters::form(form)?;
        viewer.check_csrf(&form.csrf)?;
        let reason = form.reason.filter(|r| !r.trim().is_empty());
        state
            .engine
            .forget_for_dashboard(&viewer.caller, memory_type, id, reason, meta.lineage())
            .await?;
        MemoryResult::Ok((memory_type, id))
    }
    .await;
    back(&viewer, done, "forgotten")
}

#[derive(Deserialize)]
pub struct RestoreForm {
    csrf: String,
}

/// `POST /memory/{type}/{id}/restore`
pub async fn restore(
    State(state): State<Arc<AppState>>,
    Extension(viewer): Extension<Viewer>,
    Extension(meta): Extension<RequestMeta>,
    Path((kind, id)): Path<(String, String)>,
    form: Result<Form<RestoreForm>, FormRejection>,
) -> Response {
    let done = async {
        let (memory_type, id) = (memory_type(&kind)?, record_id(&id)?);
        viewer.check_csrf(&filters::form(form)?.csrf)?;
        state
            .engine
            .restore(&viewer.caller, memory_type, id, meta.lineage())
            .await?;
        MemoryResult::Ok((memory_type, id))
    }
    .await;
    back(&viewer, done, "restored")
}

/// After a change: the record's page with a note, or the error.
fn back(viewer: &Viewer, done: MemoryResult<(MemoryType, Uuid)>, note: &str) -> Response {
    match done {
        Ok((memory_type, id)) => Redirect::to(&format!(
            "{}?done={note}",
            record_href(memory_type.as_str(), &id)
        ))
        .into_response(),
        Err(e) => layout::error_page(Some(viewer), &e),
    }
}
