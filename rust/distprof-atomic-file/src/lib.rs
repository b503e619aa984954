//! The one way distprof writes a whole file (model files, merged traces, reports, config
//! and simulation files, XLA patches): a temporary file in the destination's directory,
//! fsync, rename over the destination, fsync of the directory. A reader, or the next run
//! after a `kill -9` or a power cut, sees either the old file or the whole new one, never
//! a prefix. Append-only logs (the probe JSONL files) are not whole files and do not go
//! through here (`jsonl.rs` creates them through here with their first line, then keeps
//! every appended window line whole on its own).
//!
//! Permissions are ordinary: files 0644 and directories 0755, further narrowed by the
//! process' umask; a replaced file keeps its own bits minus group and world write.
//! Nothing distprof creates is group- or world-writable. The temporary
//! file is created with `O_EXCL`, so a planted file or symlink at its name is never
//! written through.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

mod dir;
pub use dir::AtomicDir;

/// Mode of every file distprof creates (before the umask).
pub const FILE_MODE: u32 = 0o644;
/// Mode of every directory distprof creates (before the umask).
pub const DIR_MODE: u32 = 0o755;

/// Creates `dir` and its missing parents with [`DIR_MODE`].
pub fn create_dir_all(dir: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(DIR_MODE).create(dir)
}

/// Writes `bytes` to `path` atomically (see the module documentation).
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = AtomicFile::create(path)?;
    f.write_all(bytes)?;
    f.commit()
}

/// A whole file being written: [`Write`] into a temporary file next to the destination;
/// [`AtomicFile::commit`] publishes it. Dropped without a commit, the temporary file is
/// removed and the destination is untouched.
pub struct AtomicFile {
    file: Option<File>,
    tmp: PathBuf,
    dest: PathBuf,
}

impl AtomicFile {
    /// Starts writing `dest`. Its directory must exist.
    pub fn create(dest: &Path) -> io::Result<AtomicFile> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let name = dest.file_name().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("`{}` names no file", dest.display()),
            )
        })?;
        let prefix = format!(".{}.tmp-", name.to_string_lossy());
        remove_stale_temporaries(dest, &prefix);
        let tmp = dest.with_file_name(format!(
            "{prefix}{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        // Readable too: a writer may read back what it wrote (merge's Chrome JSON is
        // assembled from pieces of its own file where gaps cannot be cut out).
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(FILE_MODE)
            .open(&tmp)
            .map_err(|e| {
                io::Error::new(e.kind(), format!("cannot create `{}`: {e}", tmp.display()))
            })?;
        Ok(AtomicFile { file: Some(file), tmp, dest: dest.to_path_buf() })
    }

    /// A second handle on the temporary file, for writers that take ownership of a
    /// `File` (and may seek): write through it, let it go, then [`AtomicFile::commit`].
    pub fn handle(&self) -> io::Result<File> {
        self.file.as_ref().expect("not committed").try_clone()
    }

    /// The destination.
    pub fn path(&self) -> &Path {
        &self.dest
    }

    /// Flushes the data to disk and renames the temporary file over the destination.
    pub fn commit(mut self) -> io::Result<()> {
        let file = self.file.take().expect("only commit takes the file");
        let result = (|| {
            // Replacing a file keeps its permission bits (an edited source file stays
            // executable if it was), minus group and world write.
            if let Ok(old) = std::fs::metadata(&self.dest) {
                let mode = old.permissions().mode() & 0o755;
                file.set_permissions(std::fs::Permissions::from_mode(mode))?;
            }
            file.sync_all()?;
            drop(file);
            std::fs::rename(&self.tmp, &self.dest)?;
            // The rename itself must reach the disk for the new name to survive a crash
            // of the machine; a directory that cannot be opened (rare) still has the
            // rename in the page cache, which is all a crash of the process needs.
            if let Some(dir) = self.dest.parent().filter(|d| !d.as_os_str().is_empty()) {
                if let Ok(d) = File::open(dir) {
                    let _ = d.sync_all();
                }
            }
            Ok(())
        })();
        result.map_err(|e: io::Error| {
            let _ = std::fs::remove_file(&self.tmp);
            io::Error::new(e.kind(), format!("cannot write `{}`: {e}", self.dest.display()))
        })
    }
}

/// Removes the temporary files of `dest` left by writers that were killed (their process
/// is gone), so repeated crashes do not pile them up. Best effort: a file that cannot be
/// listed or removed stays; one whose process may still run is never touched.
fn remove_stale_temporaries(dest: &Path, prefix: &str) {
    let dir = match dest.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(prefix)) else { continue };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<libc::pid_t>().ok()) else {
            continue;
        };
        if process_gone(pid) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// True when no process `pid` exists (so what it left behind is nobody's).
fn process_gone(pid: libc::pid_t) -> bool {
    // SAFETY: kill with signal 0 only checks whether the process exists.
    pid > 0 && unsafe { libc::kill(pid, 0) } != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.as_mut().expect("not committed").write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file.as_mut().expect("not committed").flush()
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn replaces_the_whole_file_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("model.json");
        std::fs::write(&p, "old contents, longer than the new ones\n").unwrap();
        write(&p, b"new\n").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new\n");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("model.json")]);
    }

    #[test]
    fn an_uncommitted_file_leaves_the_old_one_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("trace.json");
        std::fs::write(&p, "old\n").unwrap();
        {
            let mut f = AtomicFile::create(&p).unwrap();
            f.write_all(b"half of a new fi").unwrap();
            // Dropped: an error (or a panic) in the middle of writing.
        }
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "old\n");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn files_and_directories_get_ordinary_permissions_even_with_umask_0() {
        let dir = tempfile::tempdir().unwrap();
        // SAFETY: umask is process-wide but only narrows what other tests create.
        let old = unsafe { libc::umask(0) };
        let sub = dir.path().join("a/b");
        let made = create_dir_all(&sub).and_then(|()| write(&sub.join("f"), b"x"));
        unsafe { libc::umask(old) };
        made.unwrap();
        assert_eq!(mode(&dir.path().join("a")), 0o755);
        assert_eq!(mode(&sub), 0o755);
        assert_eq!(mode(&sub.join("f")), 0o644);
    }

    #[test]
    fn temporaries_of_killed_writers_are_removed_and_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        // A process that has certainly ended: a child we waited for.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let stale = dir.path().join(format!(".out.json.tmp-{dead}-0"));
        let live = dir.path().join(format!(".out.json.tmp-{}-99", std::process::id()));
        let other = dir.path().join(format!(".other.json.tmp-{dead}-0"));
        for p in [&stale, &live, &other] {
            std::fs::write(p, "partial").unwrap();
        }
        write(&dir.path().join("out.json"), b"{}").unwrap();
        assert!(!stale.exists(), "the killed writer's temporary is left");
        assert!(live.exists() && other.exists());
    }

    #[test]
    fn a_replaced_file_keeps_its_mode_without_group_or_world_write() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("configure.sh");
        std::fs::write(&script, "old").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o777)).unwrap();
        write(&script, b"new").unwrap();
        assert_eq!(mode(&script), 0o755);
    }

    #[test]
    fn a_missing_directory_is_an_error_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("missing/out.json");
        let err = write(&p, b"x").unwrap_err();
        assert!(err.to_string().contains("missing/.out.json.tmp-"), "{err}");
    }

    #[test]
    fn a_planted_symlink_at_the_temporary_name_is_not_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        // The next temporary name cannot be predicted exactly, so plant many.
        for i in 0..64 {
            let _ = std::os::unix::fs::symlink(&victim, dir.path().join(format!(".out.tmp-{}-{i}", std::process::id())));
        }
        let _ = write(&dir.path().join("out"), b"x");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    }
}
