//! A streaming replica made from the embedded binaries (`EmbeddedPostgres::start_replica`):
//! the cluster copied from its primary with `pg_basebackup -R`, then made to start beside it.

use std::fs::{self, OpenOptions};
use std::process::Command;

use super::{EmbeddedPostgres, Result, io_err, run};

impl EmbeddedPostgres {
    /// Makes the cluster a standby of `primary`: a base backup streamed with its WAL, the
    /// standby signal and `primary_conninfo` written by `-R`.
    pub(super) fn copy_primary(&self, primary: &str) -> Result<()> {
        tracing::info!(dir = %self.cluster_dir.display(), "copying the primary for a streaming replica");
        let mut cmd = Command::new(self.bin_dir.join("pg_basebackup"));
        cmd.arg("-D")
            .arg(&self.cluster_dir)
            .args(["-R", "-X", "stream", "-c", "fast", "-w", "-d", primary]);
        if let Err(e) = run(&mut cmd, self.run_as, "pg_basebackup") {
            // A half-copied cluster must not start next time as if it were whole.
            let _ = fs::remove_file(self.cluster_dir.join("PG_VERSION"));
            return Err(e);
        }
        // The primary's socket lives in its cluster directory, so the copy has the
        // primary's socket lock file (naming the primary's live postmaster): without
        // removing it the replica would refuse to start.
        let entries = fs::read_dir(&self.cluster_dir).map_err(io_err("listing the copy"))?;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(".s.PGSQL.") && name.ends_with(".lock") {
                fs::remove_file(entry.path())
                    .map_err(io_err("removing the primary's socket lock"))?;
            }
        }
        let auto_conf = self.cluster_dir.join("postgresql.auto.conf");
        let mut conf = OpenOptions::new()
            .append(true)
            .open(&auto_conf)
            .map_err(io_err("opening postgresql.auto.conf"))?;
        std::io::Write::write_all(&mut conf, b"hot_standby_feedback = on\n")
            .map_err(io_err("writing postgresql.auto.conf"))
    }
}
