//! The command line an operator uses: `check-config` names every problem at once (exit 2) or
//! prints the effective configuration without its secrets, `migrate` says what it applied,
//! and a `serve` that cannot start says why in one line.

use std::path::Path;

use crate::binary::run_cli as run;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A configuration of the embedded default under `dir/data` with the test assets and
/// `extra`; returns its path.
fn embedded_config(dir: &Path, extra: &str) -> std::path::PathBuf {
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "data_dir = {:?}\n{}\n{extra}",
            dir.join("data"),
            butler_memory::testkit::assets_toml()
        ),
    )
    .unwrap();
    config
}

#[test]
fn check_config_names_every_problem_at_once_with_where_it_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.toml");
    std::fs::write(
        &config,
        "colour = 'blue'\n[retrieval]\nworkers = 0\ndefault_mode = 'fuzzy'\n\
         [writes]\ngroup_commit_max = -1\n[facts]\nexpiry_confidence_threshold = 0.5\n\
         [shards]\nreference_date_resolution_secs = 90000\n",
    )
    .unwrap();
    let out = run(
        &config,
        &["check-config"],
        &[("BUTLER_MEMORY_LISTEN", "nowhere")],
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    let file = config.display().to_string();
    for expected in [
        format!("colour: unknown key (in {file})"),
        "retrieval.workers: ".to_owned(),
        "retrieval.default_mode: ".to_owned(),
        "writes.group_commit_max: ".to_owned(),
        "facts.expiry_confidence_threshold: ".to_owned(),
        "shards.reference_date_resolution_secs: ".to_owned(),
        "listen: invalid socket address syntax (from BUTLER_MEMORY_LISTEN)".to_owned(),
    ] {
        assert!(stderr.contains(&expected), "{expected} in:\n{stderr}");
    }
    assert!(stderr.contains("7 problems"), "{stderr}");
    assert!(
        !stderr.contains("default."),
        "figment's profile leaks:\n{stderr}"
    );
}

#[test]
fn check_config_prints_the_effective_configuration_without_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("ok.toml");
    std::fs::write(
        &config,
        "[retrieval]\ndefault_limit = 7\n[consolidation.llm]\napi_key = 'sk-live-123'\n\
         [[auth.keys]]\nname = 'ops'\nkey = 'a-very-long-admin-key-0001'\ntenant = 't'\nrole = 'admin'\n",
    )
    .unwrap();
    let out = run(
        &config,
        &["check-config"],
        &[
            (
                "BUTLER_MEMORY_DATABASE_URL",
                "postgres://app:hunter2@db/memory",
            ),
            ("BUTLER_MEMORY_RETRIEVAL__MAX_LIMIT", "55"),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    for secret in ["sk-live-123", "a-very-long-admin-key-0001", "hunter2"] {
        assert!(!stdout.contains(secret), "{secret} printed:\n{stdout}");
    }
    let printed: toml::Table = stdout.parse().expect("the output is TOML");
    assert_eq!(printed["retrieval"]["default_limit"].as_integer(), Some(7));
    assert_eq!(printed["retrieval"]["max_limit"].as_integer(), Some(55));
    assert_eq!(
        printed["database_url"].as_str(),
        Some("postgres://app:<redacted>@db/memory")
    );
    assert_eq!(
        printed["auth"]["keys"][0]["key"].as_str(),
        Some("<redacted>")
    );
    assert_eq!(printed["auth"]["keys"][0]["name"].as_str(), Some("ops"));
    // Every documented section is there, with its defaults.
    assert_eq!(
        printed["episodes"]["default_ttl_days"].as_float(),
        Some(7.0)
    );
}

#[test]
fn migrate_says_what_it_applied_then_that_nothing_is_left() {
    let dir = tempfile::tempdir().unwrap();
    let config = embedded_config(dir.path(), "[log]\nlevel = 'warn'\n");
    // Text logs into a pipe (not a terminal) carry no colour codes.
    let first = run(
        &config,
        &["migrate"],
        &[
            ("BUTLER_MEMORY_LOG__LEVEL", "info"),
            ("BUTLER_MEMORY_LOG__FORMAT", "text"),
        ],
    );
    assert!(first.status.success(), "{}", text(&first.stderr));
    let log = text(&first.stderr);
    assert!(log.contains(" INFO "), "{log}");
    assert!(
        !log.contains('\u{1b}'),
        "colour codes in a piped log: {log:?}"
    );
    let stdout = text(&first.stdout);
    let migrations = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations"))
        .unwrap()
        .count();
    assert!(
        stdout.starts_with(&format!("Applied {migrations} migration(s):")),
        "{stdout}"
    );
    assert!(stdout.contains("memory schema"), "{stdout}");
    let second = run(&config, &["migrate"], &[]);
    assert!(second.status.success(), "{}", text(&second.stderr));
    assert_eq!(
        text(&second.stdout).trim(),
        "The database is up to date: no migration to apply."
    );
}

#[test]
fn a_start_that_fails_says_why_in_one_line_each_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = embedded_config(dir.path(), "");
    let missing = dir.path().join("no-such-tokenizer.json");
    let out = run(
        &config,
        &["serve"],
        &[(
            "BUTLER_MEMORY_EMBEDDER__TOKENIZER_PATH",
            missing.to_str().unwrap(),
        )],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.starts_with("butler-memory: "))
        .unwrap_or_else(|| panic!("no error line in:\n{stderr}"));
    assert!(
        line.contains("the embedding model could not be loaded"),
        "{line}"
    );
    assert_eq!(
        line.matches(missing.to_str().unwrap()).count(),
        1,
        "the missing file named once: {line}"
    );
    // Nothing was started for a model that cannot load: no data directory made.
    assert!(!dir.path().join("data").exists(), "{stderr}");
}
