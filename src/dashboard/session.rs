//! Browser sessions of the dashboard: a person signs in with an API key once, and the
//! browser holds only a random session token in an `HttpOnly`, `SameSite=Strict` cookie
//! (never the key). Each session carries its caller (what the key may see and do) and a
//! CSRF token that every form sends back. Sessions live in this process's memory and end
//! after `dashboard.session_idle_minutes` without a request, at sign-out, or at a restart.

use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use butler_memory_actors::{Caller, ErrorCode, MemoryError, MemoryResult};
use dashmap::DashMap;
use ring::rand::{SecureRandom, SystemRandom};
use sha2::{Digest, Sha256};

/// The session cookie's name.
pub const COOKIE: &str = "bm_session";

/// Most sessions at once: a bound on what signing in can allocate.
const MAX_SESSIONS: usize = 10_000;

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

struct Session {
    viewer: Viewer,
    last_seen: Instant,
}

/// The signed-in browsers, by the SHA-256 of their token (a memory dump shows no usable
/// token).
pub struct Sessions {
    by_token: DashMap<[u8; 32], Session>,
    idle: Duration,
    random: SystemRandom,
}

impl Sessions {
    pub fn new(idle: Duration) -> Self {
        Sessions {
            by_token: DashMap::new(),
            idle,
            random: SystemRandom::new(),
        }
    }

    /// Starts a session for `caller`; answers its token (the cookie's value).
    pub fn start(&self, caller: Caller) -> MemoryResult<String> {
        if self.by_token.len() >= MAX_SESSIONS {
            self.forget_idle();
            if self.by_token.len() >= MAX_SESSIONS {
                return Err(MemoryError::new(
                    ErrorCode::TooManySessions,
                    "too many dashboard sessions are open; try again later",
                ));
            }
        }
        let token = self.random_token()?;
        let viewer = Viewer {
            caller,
            csrf: self.random_token()?,
        };
        self.by_token.insert(
            digest(&token),
            Session {
                viewer,
                last_seen: Instant::now(),
            },
        );
        Ok(token)
    }

    /// The viewer of a live session, which this request keeps alive.
    pub fn find(&self, token: &str) -> Option<Viewer> {
        let key = digest(token);
        let mut session = self.by_token.get_mut(&key)?;
        if session.last_seen.elapsed() > self.idle {
            drop(session);
            self.by_token.remove(&key);
            return None;
        }
        session.last_seen = Instant::now();
        Some(session.viewer.clone())
    }

    /// Ends a session (sign-out).
    pub fn end(&self, token: &str) {
        self.by_token.remove(&digest(token));
    }

    /// How long a session lives without a request.
    pub fn idle(&self) -> Duration {
        self.idle
    }

    fn forget_idle(&self) {
        self.by_token
            .retain(|_, s| s.last_seen.elapsed() <= self.idle);
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

#[cfg(test)]
mod tests {
    use super::*;
    use butler_memory_actors::Role;

    fn caller() -> Caller {
        Caller {
            tenant_id: "t".into(),
            role: Role::Admin,
            butler: None,
            key_name: "k".into(),
            audit_reason: None,
        }
    }

    #[test]
    fn a_session_is_found_by_its_token_until_it_ends() {
        let sessions = Sessions::new(Duration::from_secs(60));
        let token = sessions.start(caller()).unwrap();
        let viewer = sessions.find(&token).unwrap();
        assert_eq!(viewer.caller.tenant_id, "t");
        assert!(viewer.check_csrf(&viewer.csrf).is_ok());
        assert!(viewer.check_csrf("forged").is_err());
        assert!(sessions.find("another-token").is_none());
        sessions.end(&token);
        assert!(sessions.find(&token).is_none());
    }

    #[test]
    fn an_idle_session_expires_and_tokens_differ() {
        let sessions = Sessions::new(Duration::ZERO);
        let first = sessions.start(caller()).unwrap();
        let second = sessions.start(caller()).unwrap();
        assert_ne!(first, second);
        assert!(first.len() >= 43, "256 random bits");
        std::thread::sleep(Duration::from_millis(2));
        assert!(sessions.find(&first).is_none());
    }
}
