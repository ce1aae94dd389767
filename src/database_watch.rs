//! The database, watched like a supervised child. Every quarter second the watch asks
//! whether the database answers (for the embedded PostgreSQL, first whether its postmaster
//! is alive), on the store's health connection: a read pool whose every connection is busy
//! is a full pool, not a database that does not answer. While it does not, the engine is
//! told, and every call fails at once as `unavailable` instead of waiting out connection
//! timeouts: callers fail open, and fast.
//!
//! An embedded PostgreSQL that died is started again, after 0.5 s and then doubling up to
//! 30 s between tries, at most `embedded_postgres.max_restarts` times within
//! `restart_window_secs`. Beyond that the watch gives up, loudly: an error in the log, the
//! reason on `/readyz`, and every call `unavailable`, until the service is restarted. What
//! was committed survives a restart (PostgreSQL replays its WAL), so no acknowledged write
//! is lost. An external database (`database_url`) is watched the same way but never
//! restarted: it is someone else's to run.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use butler_memory_actors::{DatabaseHealth, EmbeddedPostgres, EmbeddedPostgresConfig, Store};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How often the watch looks.
const PERIOD: Duration = Duration::from_millis(250);

/// How long a ping may take before it counts as no answer.
const PING_TIMEOUT: Duration = Duration::from_secs(1);

/// Pings that go unanswered in a row before an external database counts as down: one slow
/// answer under load is not an outage.
const UNANSWERED_BEFORE_DOWN: u32 = 2;

/// The first wait before starting a dead PostgreSQL again, and the longest.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// A running watch; [`DatabaseWatch::stop`] ends it and hands the embedded PostgreSQL back.
pub struct DatabaseWatch {
    stop: CancellationToken,
    task: JoinHandle<Option<EmbeddedPostgres>>,
}

impl DatabaseWatch {
    /// Watches `store`'s database, restarting `embedded` (when given) as configured.
    pub fn start(
        store: Store,
        health: Arc<DatabaseHealth>,
        embedded: Option<EmbeddedPostgres>,
        config: EmbeddedPostgresConfig,
    ) -> DatabaseWatch {
        let stop = CancellationToken::new();
        let watch = Watch {
            store,
            health,
            embedded,
            restarts: Restarts::new(&config),
            config,
            unanswered: 0,
        };
        let task = tokio::spawn(watch.run(stop.clone()));
        DatabaseWatch { stop, task }
    }

    /// Stops watching; returns the embedded PostgreSQL, for the shutdown to stop it.
    pub async fn stop(self) -> Option<EmbeddedPostgres> {
        self.stop.cancel();
        self.task.await.unwrap_or_else(|e| {
            tracing::error!(error = %e, "the database watch ended abnormally");
            None
        })
    }
}

struct Watch {
    store: Store,
    health: Arc<DatabaseHealth>,
    embedded: Option<EmbeddedPostgres>,
    config: EmbeddedPostgresConfig,
    restarts: Restarts,
    /// Pings unanswered in a row.
    unanswered: u32,
}

impl Watch {
    async fn run(mut self, stop: CancellationToken) -> Option<EmbeddedPostgres> {
        let mut tick = tokio::time::interval(PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return self.embedded,
                _ = tick.tick() => {}
            }
            tokio::select! {
                () = stop.cancelled() => return self.embedded,
                () = self.look() => {}
            }
        }
    }

    async fn look(&mut self) {
        if let Some(pg) = &mut self.embedded
            && !pg.postmaster_alive()
        {
            match self.restarts.next() {
                Next::Restart(wait) => {
                    self.health
                        .set_down("the embedded PostgreSQL is not running; starting it again");
                    tracing::error!(retry_in = ?wait, "the embedded PostgreSQL died; starting it again");
                    tokio::time::sleep(wait).await;
                    match pg.recover(&self.config).await {
                        Ok(()) => tracing::warn!("the embedded PostgreSQL is running again"),
                        Err(error) => {
                            tracing::error!(%error, "starting the embedded PostgreSQL failed")
                        }
                    }
                }
                Next::GiveUp => {
                    let why = format!(
                        "the embedded PostgreSQL stopped {} times within {} s; the service no \
                         longer restarts it (see {}/postgres.log); restart the service",
                        self.config.max_restarts,
                        self.config.restart_window_secs,
                        pg.cluster_dir().display()
                    );
                    tracing::error!("{why}");
                    self.health.set_down(why);
                }
                // The reason given up for stays what readiness and every call say.
                Next::GaveUp => {}
            }
            return;
        }
        match tokio::time::timeout(PING_TIMEOUT, self.store.ping()).await {
            Ok(Ok(())) => {
                if self.health.down().is_some() {
                    tracing::warn!("the database answers again");
                }
                self.unanswered = 0;
                self.restarts.answered();
                self.health.set_up();
            }
            Ok(Err(error)) => self.unanswered(error.message),
            Err(_) => self.unanswered(format!("no answer within {PING_TIMEOUT:?}")),
        }
    }

    fn unanswered(&mut self, why: String) {
        self.unanswered += 1;
        if self.unanswered >= UNANSWERED_BEFORE_DOWN {
            if self.health.down().is_none() {
                tracing::error!(%why, "the database does not answer");
            }
            self.health
                .set_down(format!("the database does not answer: {why}"));
        }
    }
}

/// What to do about a PostgreSQL found dead.
enum Next {
    /// Start it again after this wait.
    Restart(Duration),
    /// The window's budget is spent: stop restarting, and say so (once).
    GiveUp,
    /// Already given up.
    GaveUp,
}

/// The restart policy: a budget of restarts per window, and a backoff between them.
struct Restarts {
    /// When each restart of the window was tried.
    tried: VecDeque<Instant>,
    window: Duration,
    max: usize,
    /// The wait before the next try: doubles after each, back to the first once the
    /// database answers.
    backoff: Duration,
    gave_up: bool,
}

impl Restarts {
    fn new(config: &EmbeddedPostgresConfig) -> Self {
        Restarts {
            tried: VecDeque::new(),
            window: Duration::from_secs(config.restart_window_secs),
            max: config.max_restarts as usize,
            backoff: FIRST_BACKOFF,
            gave_up: false,
        }
    }

    fn next(&mut self) -> Next {
        if self.gave_up {
            return Next::GaveUp;
        }
        let now = Instant::now();
        while self
            .tried
            .front()
            .is_some_and(|t| now.duration_since(*t) > self.window)
        {
            self.tried.pop_front();
        }
        if self.tried.len() >= self.max {
            self.gave_up = true;
            return Next::GiveUp;
        }
        self.tried.push_back(now);
        let wait = self.backoff;
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        Next::Restart(wait)
    }

    /// The database answered: the next death starts from the first backoff again.
    fn answered(&mut self) {
        self.backoff = FIRST_BACKOFF;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn restarts(max: u32) -> Restarts {
        let mut config = crate::config::Config::from_toml("")
            .unwrap()
            .edge
            .embedded_postgres;
        config.max_restarts = max;
        Restarts::new(&config)
    }

    #[test]
    fn restarts_back_off_then_give_up_once() {
        let mut r = restarts(3);
        let waits: Vec<Duration> = (0..3)
            .map(|_| match r.next() {
                Next::Restart(wait) => wait,
                _ => panic!("a restart is due"),
            })
            .collect();
        assert_eq!(
            waits,
            [500, 1000, 2000].map(Duration::from_millis),
            "the wait doubles"
        );
        assert!(matches!(r.next(), Next::GiveUp));
        assert!(matches!(r.next(), Next::GaveUp), "said once");
    }

    #[test]
    fn an_answer_resets_the_backoff() {
        let mut r = restarts(5);
        let _ = r.next();
        let _ = r.next();
        r.answered();
        assert!(matches!(r.next(), Next::Restart(w) if w == FIRST_BACKOFF));
    }
}
