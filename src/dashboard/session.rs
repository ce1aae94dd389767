//! Browser sessions of the dashboard: a person signs in with an API key once, and the
//! browser holds only a random session token in an `HttpOnly`, `SameSite=Strict` cookie
//! (never the key). Each session carries its caller (what the key may see and do) and a
//! CSRF token, derived from the session token, that every form sends back. Sessions live in
//! the database (`store/dashboard_sessions.rs`), so every instance behind a load balancer
//! knows them; they end after `dashboard.session_idle_minutes` without a request, at
//! sign-out, or when their key is no longer configured.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use butler_memory_actors::{Caller, ErrorCode, MemoryError, MemoryResult, Store};
use ring::rand::{SecureRandom, SystemRandom};
use sha2::{Digest, Sha256};

/// The session cookie's name.
pub const COOKIE: &str = "bm_session";

/// Most sessions at once: a bound on what signing in can allocate.
const MAX_SESSIONS: i64 = 10_000;

/// Who is looking at a page: the key's caller and the session's CSRF token.
#[derive(Debug, Clone)]
pub struct Viewer {
    pub caller: Caller,
    pub csrf: String,
}

impl Viewer {
    /// Whether a form's CSRF token is this session's. The digests are compared, not the
    /// tokens: how long a comparison takes then tells nothing about the token's bytes.
    pub fn check_csrf(&self, sent: &str) -> MemoryResult<()> {
        if Sha256::digest(sent.as_bytes()) == Sha256::digest(self.csrf.as_bytes()) {
            Ok(())
        } else {
            Err(MemoryError::new(
                ErrorCode::CsrfRejected,
                "this form is stale or was not sent by the dashboard: reload the page and try again",
            ))
        }
    }

    /// Whether the key may change memory (an admin key).
    pub fn can_write(&self) -> bool {
        self.caller.role == butler_memory_actors::Role::Admin
    }
}

/// The signed-in browsers, kept by the SHA-256 of their token (the database never holds a
/// usable token).
pub struct Sessions {
    store: Store,
    idle: Duration,
    random: SystemRandom,
}

impl Sessions {
    pub fn new(store: Store, idle: Duration) -> Self {
        Sessions {
            store,
            idle,
            random: SystemRandom::new(),
        }
    }

    /// Starts a session for `caller`; answers its token (the cookie's value).
    pub async fn start(&self, caller: &Caller) -> MemoryResult<String> {
        let token = self.random_token()?;
        self.store
            .start_dashboard_session(&digest(&token), caller, self.idle_secs(), MAX_SESSIONS)
            .await?;
        Ok(token)
    }

    /// The viewer of a live session, which this request keeps alive.
    pub async fn find(&self, token: &str) -> MemoryResult<Option<Viewer>> {
        let caller = self
            .store
            .find_dashboard_session(&digest(token), self.idle_secs())
            .await?;
        Ok(caller.map(|caller| Viewer {
            caller,
            csrf: csrf_of(token),
        }))
    }

    /// Ends a session (sign-out), on every instance.
    pub async fn end(&self, token: &str) -> MemoryResult<()> {
        self.store.end_dashboard_session(&digest(token)).await
    }

    /// How long a session lives without a request.
    pub fn idle(&self) -> Duration {
        self.idle
    }

    fn idle_secs(&self) -> i64 {
        i64::try_from(self.idle.as_secs()).unwrap_or(i64::MAX)
    }

    fn random_token(&self) -> MemoryResult<String> {
        let mut bytes = [0u8; 32];
        self.random
            .fill(&mut bytes)
            .map_err(|_| MemoryError::internal("the system's random source failed"))?;
        Ok(URL_SAFE_NO_PAD.encode(bytes))
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The session's CSRF token: a digest of its token under a label of its own, so only a
/// holder of the token (the browser's `HttpOnly` cookie) can know it, and nothing stores it.
fn csrf_of(token: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(b"butler-memory dashboard csrf\0");
    hash.update(token.as_bytes());
    URL_SAFE_NO_PAD.encode(hash.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_csrf_token_is_the_sessions_own_and_no_token_itself() {
        let (a, b) = ("token-a", "token-b");
        assert_eq!(csrf_of(a), csrf_of(a));
        assert_ne!(csrf_of(a), csrf_of(b));
        assert_ne!(csrf_of(a), a);
        assert_ne!(
            csrf_of(a),
            URL_SAFE_NO_PAD.encode(digest(a)),
            "not the digest the database keeps"
        );
    }
}
