//! `butler-memory export` and `import`: bundles (`domain/bundle.rs`) as files, straight
//! against the database, for an operator with no admin key at hand or a service that is
//! down. An export may run beside the service; an import needs it stopped (a running
//! service would serve cached answers without the imported rows): import into a running
//! service through `POST /admin/import` instead.

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;

use butler_memory_actors::{EmbeddingModel, ImportReport, Store, check_name, parse_bundle};

use crate::config::Config;
use crate::database_target::{CLI_ACTOR, CommandError, DatabaseTarget};

fn file_error(path: &Path) -> impl FnOnce(std::io::Error) -> CommandError {
    let path = path.display().to_string();
    move |source| CommandError::File { path, source }
}

/// Which records and what with them an export takes.
pub struct ExportOptions<'a> {
    pub tenant: &'a str,
    pub butler: Option<&'a str>,
    pub events: bool,
    pub embeddings: bool,
}

/// Writes a bundle of `options.tenant` to `output`; answers a one-line summary.
pub async fn export(
    config: &Config,
    options: &ExportOptions<'_>,
    output: &Path,
) -> Result<String, CommandError> {
    check_name("tenant", options.tenant)?;
    // Encrypted facts are opened into the bundle (their owner's data, readable).
    let vault = config.vault().map_err(CommandError::Config)?;
    let target = DatabaseTarget::open(config, true).await?;
    let store = Store::open(target.options.clone(), &config.edge.database).with_vault(vault);
    let written = async {
        let mut exporter = store
            .exporter(
                options.tenant,
                options.butler,
                options.events,
                options.embeddings,
                chrono::Utc::now(),
            )
            .await?;
        let mut file = BufWriter::new(std::fs::File::create(output).map_err(file_error(output))?);
        let mut lines = 0u64;
        while let Some(page) = exporter.next_lines().await? {
            for line in page {
                writeln!(file, "{line}").map_err(file_error(output))?;
                lines += 1;
            }
        }
        file.flush().map_err(file_error(output))?;
        Ok::<_, CommandError>(lines)
    }
    .await;
    store.close().await;
    target.close().await?;
    Ok(format!(
        "Exported tenant {} to {} ({} lines).",
        options.tenant,
        output.display(),
        written?
    ))
}

/// Imports the bundle in `input` into `tenant`.
pub async fn import(
    config: &Config,
    tenant: &str,
    input: &Path,
) -> Result<ImportReport, CommandError> {
    check_name("tenant", tenant)?;
    let file = std::fs::File::open(input).map_err(file_error(input))?;
    let lines: Vec<String> = BufReader::new(file)
        .lines()
        .collect::<Result<_, _>>()
        .map_err(file_error(input))?;
    let (header, rows) = parse_bundle(lines.iter().map(String::as_str))?;
    // High-risk facts are sealed on the way in, by this database's policy and keys.
    let vault = config.vault().map_err(CommandError::Config)?;
    let target = DatabaseTarget::open(config, false).await?;
    let store = Store::open(target.options.clone(), &config.edge.database).with_vault(vault);
    let embedder = &config.engine.embedder;
    let running = EmbeddingModel {
        model: embedder.model_name.clone(),
        model_sha256: embedder.model_sha256.clone(),
    };
    let report = store
        .import_bundle(
            tenant,
            &header,
            rows,
            &running,
            chrono::Utc::now(),
            CLI_ACTOR,
        )
        .await;
    store.close().await;
    target.close().await?;
    Ok(report?)
}
