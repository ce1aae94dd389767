//! Start-up against a database that does not answer yet: the service waits for it (up to
//! `database.startup_wait_secs`) and then serves, or gives up with the error after that.
//! And what start-up leaves ready: the standing database connections.

use std::time::{Duration, Instant};

use butler_memory::startup::Application;
use sqlx::Connection;

use crate::helpers::*;

/// A database URL whose socket directory is `dir` (where no server listens until a test
/// links the cluster's socket into it).
fn url_in(dir: &std::path::Path, database: &str, port: u16) -> String {
    format!(
        "postgres://postgres@localhost/{database}?host={}&port={port}",
        dir.display()
    )
}

fn database_name(options: &sqlx::postgres::PgConnectOptions) -> String {
    options.get_database().expect("a database name").to_owned()
}

#[tokio::test]
async fn a_database_that_comes_up_after_the_service_is_waited_for() {
    let (_, options) = fresh_database().await;
    let (socket_dir, port) = cluster_socket();
    let late = tempfile::tempdir().unwrap();
    let data_dir = tempfile::tempdir().unwrap();
    let mut config = base_config("");
    config.edge.database_url =
        butler_memory::config::Secret::new(url_in(late.path(), &database_name(&options), port));
    config.edge.database.acquire_timeout_ms = std::num::NonZeroU64::new(500).unwrap();
    config.edge.data_dir = data_dir.path().to_owned();
    // The server "starts" a second and a half after the service: its socket appears.
    let socket = format!(".s.PGSQL.{port}");
    let (from, to) = (socket_dir.join(&socket), late.path().join(&socket));
    let linker = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        std::os::unix::fs::symlink(from, to).unwrap();
    });
    let app = Application::build(config)
        .await
        .expect("the service waits for its database, then starts");
    linker.await.unwrap();
    let url = format!("http://{}/readyz", app.address());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(app.run_until_stopped(async move {
        let _ = stopped.await;
    }));
    let ready = reqwest::get(url).await.unwrap();
    assert_eq!(ready.status(), 200, "{}", ready.text().await.unwrap());
    stop.send(()).unwrap();
    serving.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_database_that_never_answers_fails_start_up_after_the_wait() {
    let (_, port) = cluster_socket();
    let nowhere = tempfile::tempdir().unwrap();
    let data_dir = tempfile::tempdir().unwrap();
    let mut config = base_config("");
    config.edge.database_url =
        butler_memory::config::Secret::new(url_in(nowhere.path(), "butler_memory", port));
    config.edge.database.acquire_timeout_ms = std::num::NonZeroU64::new(200).unwrap();
    config.edge.database.startup_wait_secs = 1;
    config.edge.data_dir = data_dir.path().to_owned();
    let started = Instant::now();
    let error = Application::build(config)
        .await
        .err()
        .expect("no database, no service");
    assert!(
        format!("{error:#}").contains("cannot connect to the database"),
        "{error:#}"
    );
    // It retried past the first failure, and stopped once the wait was over.
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(1), "gave up after {took:?}");
    assert!(took < Duration::from_secs(30), "took {took:?}");
}

/// A burst right after start finds the connections it needs already open: every write
/// connection (its episode insert prepared, which writes nothing) and `min_connections` in
/// each read pool.
#[tokio::test]
async fn start_up_opens_the_standing_connections() {
    let (url, options) = fresh_database().await;
    let data_dir = tempfile::tempdir().unwrap();
    let mut config = base_config("");
    config.edge.database_url = butler_memory::config::Secret::new(url);
    config.edge.database.write_connections = 3;
    config.edge.database.min_connections = 2;
    config.edge.data_dir = data_dir.path().to_owned();
    let app = Application::build(config)
        .await
        .expect("the service starts");

    let mut sql = sqlx::PgConnection::connect_with(&options).await.unwrap();
    let open: Vec<(String, i64)> = sqlx::query_as(
        "SELECT application_name, count(*) FROM pg_stat_activity
         WHERE datname = current_database() AND application_name LIKE 'butler-memory %'
         GROUP BY 1 ORDER BY 1",
    )
    .fetch_all(&mut sql)
    .await
    .unwrap();
    let count = |name: &str| open.iter().find(|(n, _)| n == name).map_or(0, |(_, c)| *c);
    assert_eq!(count("butler-memory writes"), 3, "{open:?}");
    // At least: start-up work of its own (migrations, the scheduler) may have opened more.
    assert!(count("butler-memory reads") >= 2, "{open:?}");
    assert!(count("butler-memory retrieval") >= 2, "{open:?}");
    let written: (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM episodes), (SELECT count(*) FROM memory_events)",
    )
    .fetch_one(&mut sql)
    .await
    .unwrap();
    assert_eq!(written, (0, 0), "preparing the insert wrote nothing");

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(app.run_until_stopped(async move {
        let _ = stopped.await;
    }));
    stop.send(()).unwrap();
    serving.await.unwrap().unwrap();
}
