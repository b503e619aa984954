//! A directory tree as bytes, for tests that compare outputs file by file (a merge on one
//! thread, on many, in shards, through Ray: the same bytes).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Every file under `dir`: its path relative to `dir` -> its bytes.
pub fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.strip_prefix(dir).unwrap().to_path_buf(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}
