//! The job's private directory (`$TMPDIR/cohort-<uid>-<pid>-<hex>`, mode 0700): node
//! servers put their client sockets under it. Removed when the [`JobDir`] is dropped.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use cohort_proto::env::{random_bytes, to_hex};

/// Owns the job directory; removes it (recursively) on drop.
#[derive(Debug)]
pub struct JobDir {
    path: PathBuf,
}

impl JobDir {
    /// Creates a fresh directory under `$TMPDIR` (or `/tmp`). Fails rather than reuse
    /// an existing path, so nobody can pre-create it for us.
    pub fn create() -> std::io::Result<JobDir> {
        let base = std::env::var_os("TMPDIR")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/tmp"));
        Self::create_in(&base)
    }

    pub fn create_in(base: &Path) -> std::io::Result<JobDir> {
        // SAFETY: getuid has no preconditions and cannot fail.
        let uid = unsafe { libc::getuid() };
        let name = format!(
            "cohort-{uid}-{}-{}",
            std::process::id(),
            to_hex(&random_bytes(4)?)
        );
        let path = base.join(name);
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        Ok(JobDir { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the directory now (also done on drop).
    pub fn remove(&self) {
        match std::fs::remove_dir_all(&self.path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(dir = %self.path.display(), "cannot remove the job directory: {e}")
            }
        }
    }
}

impl Drop for JobDir {
    fn drop(&mut self) {
        self.remove();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn private_and_removed_on_drop() {
        let base = std::env::temp_dir();
        let dir = JobDir::create_in(&base).unwrap();
        let path = dir.path().to_path_buf();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        std::fs::create_dir(path.join("node0")).unwrap();
        std::fs::write(path.join("node0/sock"), b"x").unwrap();
        drop(dir);
        assert!(!path.exists());
    }
}
