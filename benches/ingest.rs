//! The drop-zone's throughput (issue 23): `--files` Markdown notes of about a dozen typed
//! memories each (a goal with its todos, a decision, preferences, prose), renamed at once
//! into an orchestrator's `ingest/` folder, then read to the end (`flush_ingest`); then the
//! same files dropped again, which must create nothing. Reports files and memories per
//! second, the machine's CPU per file and steal, for both passes.
//!
//! Runs a private service in-process (embedded PostgreSQL in a temporary directory).
//!
//!     cargo bench --bench ingest
//!     cargo bench --bench ingest -- --files 100 --json out.json

#[path = "support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;
use serde_json::{Value, json};

use support::{Key, MachineCpu, Rng, Service, round3, write_json};

const ORCHESTRATOR: &str = "orch-ingest";
const KEY: &str = "ingest-bench-orchestrator-key";

#[derive(Parser)]
struct Args {
    /// Files dropped at once.
    #[arg(long, default_value_t = 500)]
    files: usize,
    /// Also write the numbers as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Accepted for `cargo bench` compatibility.
    #[arg(long, hide = true)]
    bench: bool,
}

const TEAMS: [&str; 6] = [
    "billing", "payroll", "mobile", "platform", "finance", "support",
];
const THINGS: [&str; 8] = [
    "the export",
    "the release",
    "the migration",
    "the audit",
    "the onboarding",
    "the price change",
    "the retention policy",
    "the on-call rota",
];

/// A note of about a dozen memories, each naming the note so that no two notes share one.
fn note(rng: &mut Rng, i: usize) -> String {
    let team = rng.pick(&TEAMS);
    let thing = rng.pick(&THINGS);
    format!(
        "# {team} notes {i}\n\n\
         Goal: Finish {thing} for {team} (note {i})\n\
         - [ ] Draft the plan for {thing} (note {i})\n\
         - [ ] Review {thing} with the {team} lead (note {i})\n\
         - [ ] Book time for {thing} tests (note {i})\n\
         - [x] Open the ticket (note {i})\n\
         Decision: {thing} ships behind a flag (note {i})\n\n\
         ## Preferences\n\
         - The {team} team wants updates on Mondays (note {i})\n\
         - Reports as PDF for {team} (note {i})\n\n\
         ## Context\n\
         The {team} team owns {thing} since the reorganisation (note {i}).\n\n\
         Risks were raised about {thing} in the last review (note {i}).\n"
    )
}

/// Renames every staged file into `ingest`, then reads them all; answers the seconds and
/// the machine's CPU.
async fn pass(
    service: &Service,
    staged: &[PathBuf],
    ingest: &Path,
) -> anyhow::Result<(f64, support::CpuUse)> {
    let cpu = MachineCpu::now();
    let started = Instant::now();
    for path in staged {
        std::fs::rename(path, ingest.join(path.file_name().unwrap()))?;
    }
    service
        .state
        .engine
        .flush_ingest()
        .await
        .map_err(|e| anyhow::anyhow!("flush_ingest: {e}"))?;
    Ok((
        started.elapsed().as_secs_f64(),
        cpu.until(&MachineCpu::now()),
    ))
}

fn stage(dir: &Path, notes: &[String], round: usize) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    notes
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let path = dir.join(format!("note-{round}-{i:05}.md"));
            std::fs::write(&path, text)?;
            Ok(path)
        })
        .collect()
}

fn report(name: &str, files: usize, memories: i64, seconds: f64, cpu: &support::CpuUse) -> Value {
    eprintln!(
        "{name}: {files} files in {seconds:.2} s ({:.1} files/s, {:.0} memories/s), {:.1} ms CPU per file, steal {:.2}%",
        files as f64 / seconds,
        memories as f64 / seconds,
        cpu.busy_seconds * 1e3 / files as f64,
        cpu.steal * 100.0
    );
    json!({
        "files": files,
        "memories_created": memories,
        "seconds": round3(seconds),
        "files_per_s": round3(files as f64 / seconds),
        "memories_per_s": round3(memories as f64 / seconds),
        "cpu_ms_per_file": round3(cpu.busy_seconds * 1e3 / files as f64),
        "cpu": cpu.json(),
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    butler_memory_actors::install_tls_provider();
    // The watch is on (a file renamed in is also seen by it); the rescan is out of the way.
    let extra = "[lifecycle]\ncatch_up_missed_runs = false\n\
                 [memory.ingest]\nsettle_ms = 0\nrescan_secs = 3600\n\
                 [log]\nlevel = \"warn,rmcp=error,sqlx=error\"\n";
    let service = Service::start(&[Key::orchestrator(KEY, ORCHESTRATOR)], extra).await?;
    let memory = service
        .state
        .config
        .edge
        .data_dir
        .join("orchestrators")
        .join(ORCHESTRATOR)
        .join("memory");
    let ingest = memory.join("ingest");
    let staging = memory.join("staging");
    let mut rng = Rng::new(23);
    let notes: Vec<String> = (0..args.files).map(|i| note(&mut rng, i)).collect();
    let count = || async {
        let n: i64 =
            sqlx::query_scalar("SELECT count(*) FROM orchestrator_memories WHERE tenant_id = $1")
                .bind(ORCHESTRATOR)
                .fetch_one(service.state.engine.store().pool())
                .await?;
        anyhow::Ok(n)
    };

    let staged = stage(&staging, &notes, 1)?;
    let (seconds, cpu) = pass(&service, &staged, &ingest).await?;
    let created = count().await?;
    let first = report("first drop", args.files, created, seconds, &cpu);
    let processed = std::fs::read_dir(ingest.join("processed"))?.count();
    anyhow::ensure!(
        processed == 2 * args.files,
        "{processed} entries in processed/, expected each file and its manifest"
    );

    let staged = stage(&staging, &notes, 2)?;
    let (seconds, cpu) = pass(&service, &staged, &ingest).await?;
    let again = count().await? - created;
    anyhow::ensure!(again == 0, "the same files again created {again} memories");
    let second = report("the same files again", args.files, again, seconds, &cpu);

    let out = json!({"files": args.files, "first_drop": first, "same_again": second});
    if let Some(path) = &args.json {
        write_json(path, &out)?;
    }
    println!("{out}");
    service.stop().await
}
