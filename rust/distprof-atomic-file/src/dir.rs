//! A whole directory tree being written (a merge's output): everything goes into a staging
//! directory beside the destination, and [`AtomicDir::commit`] moves it into place once all
//! of it is written. Dropped without a commit, the staging directory is removed: a failed
//! command leaves nothing behind, not even an empty directory.
//!
//! The staging directory lies in the destination's nearest existing ancestor (same file
//! system, so every move is a rename) and is named `.distprof-staging-<pid>-<n>`; those of
//! killed processes are removed by the next writer there. A destination that does not
//! exist yet (nor its missing parents) appears at once, by one rename. Into an existing
//! destination the tree is moved entry by entry: new entries by one rename each, an
//! existing file replaced by its new version (a rename too), existing directories merged.

use super::{create_dir_all, process_gone, DIR_MODE};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

const PREFIX: &str = ".distprof-staging-";

/// See the module documentation.
pub struct AtomicDir {
    /// The staging directory.
    root: PathBuf,
    /// Where the destination's contents are written: `root` itself, or `root/<missing
    /// components of the destination>`.
    work: PathBuf,
    dest: PathBuf,
    /// When the destination does not exist: its first missing component, staged and final.
    first_missing: Option<(PathBuf, PathBuf)>,
    committed: bool,
}

impl AtomicDir {
    /// Starts writing the tree `dest`. Refuses a `dest` that exists and is not a directory.
    pub fn create(dest: &Path) -> io::Result<AtomicDir> {
        let dest = std::path::absolute(dest)?;
        if dest.components().any(|c| c == Component::ParentDir) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "an output path with `..` in it; give it without"));
        }
        let mut existing = dest.as_path();
        let mut missing = Vec::new();
        while std::fs::symlink_metadata(existing).is_err() {
            missing.push(existing.file_name().ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no existing parent directory"))?);
            existing = existing.parent().ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no existing parent directory"))?;
        }
        if !existing.is_dir() {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("{} exists and is not a directory", existing.display())));
        }
        // An existing destination is staged beside it, never inside it (a reader of the
        // destination must not see the staging tree).
        if missing.is_empty() {
            existing = existing.parent().unwrap_or(existing);
        }
        remove_stale(existing);
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let root = existing.join(format!("{PREFIX}{}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed)));
        std::fs::DirBuilder::new().mode(DIR_MODE).create(&root)?;
        missing.reverse();
        // The destination itself, existing: its contents are written into `root`.
        let work = missing.iter().fold(root.clone(), |p, c| p.join(c));
        let first_missing = missing.first().map(|c| (root.join(c), existing.join(c)));
        let dir = AtomicDir { root, work, dest, first_missing, committed: false };
        create_dir_all(&dir.work)?;
        Ok(dir)
    }

    /// Where to write what belongs under the destination.
    pub fn path(&self) -> &Path {
        &self.work
    }

    /// `path` (under [`AtomicDir::path`]) as it will be named once committed; other paths
    /// as they are.
    pub fn final_path(&self, path: &Path) -> PathBuf {
        match path.strip_prefix(&self.work) {
            Ok(rest) => self.dest.join(rest),
            Err(_) => path.to_path_buf(),
        }
    }

    /// `path` (under the destination) as it is named while staged; other paths as they are.
    pub fn staged_path(&self, path: &Path) -> PathBuf {
        let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        match abs.strip_prefix(&self.dest) {
            Ok(rest) => self.work.join(rest),
            Err(_) => path.to_path_buf(),
        }
    }

    /// Moves the tree into place (see the module documentation).
    pub fn commit(mut self) -> io::Result<()> {
        match &self.first_missing {
            Some((staged, fin)) => move_into(staged, fin)?,
            None => move_into(&self.work, &self.dest)?,
        }
        self.committed = true;
        let _ = std::fs::remove_dir_all(&self.root);
        Ok(())
    }
}

impl Drop for AtomicDir {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

/// `from` to `to`: one rename where `to` does not exist or is a file; entry by entry where
/// both are directories.
fn move_into(from: &Path, to: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(to) {
        Ok(m) if m.is_dir() && from.is_dir() => {
            for e in std::fs::read_dir(from)? {
                let e = e?;
                move_into(&e.path(), &to.join(e.file_name()))?;
            }
            std::fs::remove_dir(from)
        }
        Ok(m) if m.is_dir() => Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("{} is a directory; remove it or write elsewhere", to.display()))),
        // A hard link to the file already there (a join into a shard's own directory):
        // rename would leave both names, so the staged one goes.
        Ok(m) if std::fs::symlink_metadata(from).is_ok_and(|f| (f.dev(), f.ino()) == (m.dev(), m.ino())) => std::fs::remove_file(from),
        _ => std::fs::rename(from, to),
    }
}

/// Removes the staging directories in `dir` whose process is gone. Best effort.
fn remove_stale(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(PREFIX)) else { continue };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<libc::pid_t>().ok()) else { continue };
        if process_gone(pid) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

    #[test]
    fn a_new_tree_appears_whole_on_commit_and_nothing_without() {
        let tmp = tempfile::tempdir().unwrap();
        let dest = tmp.path().join("a/b/out");
        let d = AtomicDir::create(&dest).unwrap();
        std::fs::write(d.path().join("x"), b"1").unwrap();
        assert!(!tmp.path().join("a").exists(), "nothing visible before the commit");
        assert_eq!(d.final_path(&d.path().join("x")), dest.join("x"));
        assert_eq!(d.staged_path(&dest.join("y")), d.path().join("y"));
        d.commit().unwrap();
        assert_eq!(std::fs::read(dest.join("x")).unwrap(), b"1");
        assert_eq!(names(tmp.path()), ["a"], "the staging directory is gone");

        let d = AtomicDir::create(&tmp.path().join("failed/out")).unwrap();
        std::fs::write(d.path().join("x"), b"1").unwrap();
        drop(d);
        assert_eq!(names(tmp.path()), ["a"], "a dropped tree leaves nothing");
    }

    #[test]
    fn into_an_existing_directory_entries_are_added_and_files_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let dest = tmp.path().join("out");
        std::fs::create_dir_all(dest.join("keep/sub")).unwrap();
        std::fs::write(dest.join("keep/old"), b"old").unwrap();
        std::fs::write(dest.join("keep/sub/f"), b"old").unwrap();
        let d = AtomicDir::create(&dest).unwrap();
        assert_eq!(names(&dest), ["keep"], "staged beside the destination, not inside it");
        std::fs::create_dir_all(d.path().join("keep/sub")).unwrap();
        std::fs::write(d.path().join("keep/sub/f"), b"new").unwrap();
        std::fs::write(d.path().join("top"), b"new").unwrap();
        d.commit().unwrap();
        assert_eq!(std::fs::read(dest.join("keep/old")).unwrap(), b"old");
        assert_eq!(std::fs::read(dest.join("keep/sub/f")).unwrap(), b"new");
        assert_eq!(std::fs::read(dest.join("top")).unwrap(), b"new");
        assert_eq!(names(tmp.path()), ["out"]);
        // A staged hard link to the file already in place.
        let d = AtomicDir::create(&dest).unwrap();
        std::fs::hard_link(dest.join("top"), d.path().join("top")).unwrap();
        d.commit().unwrap();
        assert_eq!(std::fs::read(dest.join("top")).unwrap(), b"new");
        assert_eq!(names(tmp.path()), ["out"]);
        std::fs::write(tmp.path().join("file"), b"").unwrap();
        assert!(AtomicDir::create(&tmp.path().join("file")).is_err());
        assert!(AtomicDir::create(&tmp.path().join("file/below")).is_err());
    }
}
