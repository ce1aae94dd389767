//! What a load runs against: a deployment at `--url` with the keys of a keys file, or a
//! private service it starts (`--spawn`): this same binary, `serve`, in a temporary data
//! directory with generated keys, stopped at the end.
//!
//! A keys file is TOML:
//!
//! ```toml
//! [[keys]]
//! tenant = "acme"
//! butler = "health"       # a key bound to one butler: that butler is one shard of the load
//! key = "..."
//! [[keys]]
//! tenant = "globex"       # no butler: the key writes for the scenario's `population.butlers`
//! key = "..."             # butlers (`load-butler-0`, ...) of its tenant
//! ```

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde::Deserialize;

use super::scenario::Population;

/// One butler of the load: its tenant, name and key, and the rule its marks rate.
#[derive(Debug, Clone)]
pub struct Shard {
    pub tenant: String,
    pub butler: String,
    pub key: String,
    pub rule_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeysFile {
    keys: Vec<KeyEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyEntry {
    tenant: String,
    key: String,
    #[serde(default)]
    butler: Option<String>,
}

/// The shards of a keys file: one per butler key, and `population.butlers` per key that
/// names no butler.
pub fn shards_from_keys(path: &Path, population: &Population) -> anyhow::Result<Vec<Shard>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the keys file {}", path.display()))?;
    let file: KeysFile =
        toml::from_str(&text).with_context(|| format!("the keys file {}", path.display()))?;
    let mut shards = Vec::new();
    for entry in file.keys {
        match entry.butler {
            Some(butler) => shards.push(Shard {
                tenant: entry.tenant,
                butler,
                key: entry.key,
                rule_id: None,
            }),
            None => shards.extend((0..population.butlers).map(|b| Shard {
                tenant: entry.tenant.clone(),
                butler: format!("load-butler-{b}"),
                key: entry.key.clone(),
                rule_id: None,
            })),
        }
    }
    if shards.is_empty() {
        bail!("the keys file {} names no key", path.display());
    }
    Ok(shards)
}

/// A private service this process started.
pub struct Spawned {
    child: Child,
    /// `http://127.0.0.1:port`.
    pub base: String,
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Spawned {
    /// Starts `serve` with `config` (the user's `--config`, if any) and a key per butler of
    /// `population`, and waits until it is ready.
    pub async fn start(
        config: Option<&Path>,
        population: &Population,
    ) -> anyhow::Result<(Spawned, Vec<Shard>)> {
        let dir = tempfile::tempdir().context("creating the service's temporary directory")?;
        let mut table: toml::Table = match config {
            Some(path) => toml::from_str(
                &std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?,
            )
            .with_context(|| format!("{}", path.display()))?,
            None => toml::Table::new(),
        };
        // A free port: taken now, given back, used by the child at once.
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let base = format!("http://127.0.0.1:{port}");
        table.insert("listen".into(), format!("127.0.0.1:{port}").into());
        table.insert(
            "data_dir".into(),
            dir.path().join("data").display().to_string().into(),
        );
        let mut shards = Vec::new();
        let mut keys = toml::value::Array::new();
        for t in 0..population.tenants {
            for b in 0..population.butlers {
                let shard = Shard {
                    tenant: format!("load-tenant-{t}"),
                    butler: format!("load-butler-{b}"),
                    key: format!("load-key-{t}-{b}-{}", uuid::Uuid::new_v4().simple()),
                    rule_id: None,
                };
                let mut key = toml::Table::new();
                key.insert("key".into(), shard.key.clone().into());
                key.insert("tenant".into(), shard.tenant.clone().into());
                key.insert("role".into(), "butler".into());
                key.insert("butler".into(), shard.butler.clone().into());
                keys.push(key.into());
                shards.push(shard);
            }
        }
        let auth = table
            .entry("auth")
            .or_insert_with(|| toml::Table::new().into())
            .as_table_mut()
            .context("`auth` of the configuration is not a table")?;
        auth.insert("bootstrap_admin_key".into(), false.into());
        auth.insert("keys".into(), keys.into());
        let config_path = dir.path().join("config.toml");
        std::fs::write(&config_path, toml::to_string(&table)?)?;
        let log = dir.path().join("service.log");
        let out = std::fs::File::create(&log)?;
        let child = Command::new(std::env::current_exe()?)
            .arg("--config")
            .arg(&config_path)
            .arg("serve")
            .stdout(out.try_clone()?)
            .stderr(out)
            .stdin(Stdio::null())
            .spawn()
            .context("starting the service")?;
        let mut spawned = Spawned {
            child,
            base,
            log,
            _dir: dir,
        };
        spawned.wait_ready(Duration::from_secs(180)).await?;
        Ok((spawned, shards))
    }

    async fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let http = reqwest::Client::new();
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "the service exited ({status}) before it was ready; its log: {}",
                    self.log.display()
                );
            }
            let ready = http
                .get(format!("{}/readyz", self.base))
                .timeout(Duration::from_secs(2))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ready {
                return Ok(());
            }
            if started.elapsed() > timeout {
                bail!(
                    "the service was not ready after {timeout:?}; its log: {}",
                    self.log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Stops the service as a signal would, and waits for it.
    pub fn stop(mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let _ = self.child.wait();
    }
}
