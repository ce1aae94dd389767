//! `GET /admin/export` and `POST /admin/import`: a tenant's admin takes its memories out as
//! a bundle (JSON Lines, `domain/bundle.rs`, streamed page by page) and brings a bundle in.
//! The tenant is the key's, as on `/mcp`.

use std::sync::Arc;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::{Extension, extract::DefaultBodyLimit};
use butler_memory_actors::{Caller, ErrorCode, MemoryError};
use serde::Deserialize;

use super::error_response;
use crate::app_state::AppState;

/// Largest bundle `/admin/import` reads in one request.
pub const MAX_IMPORT_BYTES: usize = 512 * 1024 * 1024;

/// The body limit of `/admin/import`.
pub fn import_body_limit() -> DefaultBodyLimit {
    DefaultBodyLimit::max(MAX_IMPORT_BYTES)
}

/// `/admin/export`'s query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportQuery {
    /// Only this butler's records.
    butler: Option<String>,
    /// With the audit stream's events.
    #[serde(default)]
    events: bool,
    /// With each record's embedding.
    #[serde(default)]
    embeddings: bool,
}

pub async fn export(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<ExportQuery>, QueryRejection>,
) -> Response {
    let Query(query) = match query {
        Ok(query) => query,
        Err(e) => {
            return error_response(&MemoryError::new(
                ErrorCode::InvalidArguments,
                e.body_text(),
            ));
        }
    };
    let exporter = match state
        .engine
        .exporter(
            &caller,
            query.butler.as_deref(),
            query.events,
            query.embeddings,
        )
        .await
    {
        Ok(exporter) => exporter,
        Err(e) => return error_response(&e),
    };
    let filename = format!(
        "{}{}.jsonl",
        caller.tenant_id,
        query.butler.map(|b| format!("-{b}")).unwrap_or_default()
    );
    let pages = futures::stream::try_unfold(exporter, |mut exporter| async move {
        match exporter.next_lines().await {
            Ok(Some(lines)) => {
                let mut page = String::new();
                for line in lines {
                    page.push_str(&line.to_string());
                    page.push('\n');
                }
                Ok(Some((Bytes::from(page), exporter)))
            }
            Ok(None) => Ok(None),
            Err(e) => {
                // Headers are gone: the client sees the transfer cut short, never a bundle
                // that looks complete.
                tracing::warn!(error = %e, "export failed part-way");
                Err(std::io::Error::other(e.to_string()))
            }
        }
    });
    (
        [
            (header::CONTENT_TYPE, "application/x-ndjson".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{filename}\""),
            ),
        ],
        Body::from_stream(pages),
    )
        .into_response()
}

pub async fn import(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Response {
    let Ok(text) = std::str::from_utf8(&body) else {
        return error_response(&MemoryError::new(
            ErrorCode::InvalidBundle,
            "the bundle is not UTF-8 text",
        ));
    };
    match state.engine.import_bundle(&caller, text).await {
        Ok(report) => Json(report).into_response(),
        Err(e) => error_response(&e),
    }
}
