//! The dashboard's static files, compiled into the binary: the stylesheet, a few lines of
//! script (the search shortcut), and htmx 2.0.11 (0BSD, `assets/htmx-LICENSE`), vendored
//! from npm and pinned by its SHA-256 (a test fails if the file in the tree is not the one
//! published). Each is served under a URL that carries its digest, so a browser may keep it
//! for a year and never runs an old copy after an upgrade.

use std::sync::LazyLock;

use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

/// One embedded file.
pub struct Asset {
    pub name: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

const FILES: [Asset; 3] = [
    Asset {
        name: "htmx.min.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../../assets/htmx-2.0.11.min.js"),
    },
    Asset {
        name: "app.css",
        content_type: "text/css; charset=utf-8",
        bytes: include_bytes!("../../assets/app.css"),
    },
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../../assets/app.js"),
    },
];

/// The SHA-256 of htmx.min.js 2.0.11 as published on npm (`htmx.org@2.0.11`, `dist/`).
pub const HTMX_SHA256: &str = "d6fdc75f204e6bdefa99b69bf1e6d4ac69b8a364f77929f45c13476b4000f717";

/// Each file's URL, with the first 16 hex digits of its digest as a version.
static URLS: LazyLock<Vec<(&'static str, String)>> = LazyLock::new(|| {
    FILES
        .iter()
        .map(|a| {
            let digest = hex(&Sha256::digest(a.bytes));
            (a.name, format!("/assets/{}/{}", &digest[..16], a.name))
        })
        .collect()
});

/// The URL of an embedded file, by name.
pub fn url(name: &str) -> &'static str {
    URLS.iter()
        .find(|(n, _)| *n == name)
        .map(|(_, url)| url.as_str())
        .unwrap_or("/assets/missing")
}

/// `GET /assets/{version}/{name}`: the file, cached for a year when the version is its
/// own (any other version is an old page asking for an old file: served, not cached).
pub async fn serve(Path((version, name)): Path<(String, String)>) -> Response {
    let Some(asset) = FILES.iter().find(|a| a.name == name) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let current = url(asset.name).split('/').nth(2) == Some(version.as_str());
    let cache = if current {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    (
        [
            (header::CONTENT_TYPE, asset.content_type),
            (header::CACHE_CONTROL, cache),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        asset.bytes,
    )
        .into_response()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vendored_htmx_is_the_published_file() {
        assert_eq!(hex(&Sha256::digest(FILES[0].bytes)), HTMX_SHA256);
    }

    #[test]
    fn every_file_has_a_versioned_url() {
        for asset in &FILES {
            let url = url(asset.name);
            assert!(
                url.starts_with("/assets/") && url.ends_with(asset.name),
                "{url}"
            );
        }
        assert_eq!(url("nothing.js"), "/assets/missing");
    }
}
