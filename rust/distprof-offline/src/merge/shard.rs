//! Sharded merge: each host of a job array merges its share of the nodes
//! (`distprof merge --nodes 0-127 ...`), then one cheap step joins the shares
//! (`distprof merge --join SHARD_DIRS... --out D`) into exactly the outputs of one merge of
//! everything.
//!
//! A shard scans every input (the seek-only prescan: the small planes, not the events), so
//! it knows what a whole merge knows: the clock models solved from every plane, the global
//! origin, and every node's first plane id and Chrome pid. It then rewrites only its own
//! nodes into its `--out` run directory, writes their Chrome records as a fragment
//! ([`FRAGMENT_FILE`]) and describes itself in [`MANIFEST_FILE`]. The join checks that the
//! shards belong together and cover every node once, hard-links (else copies) the node
//! files into one run directory, and writes the Chrome JSON's header, the fragments in node
//! order and its footer.

use super::trace_out::TraceFormat;
use super::{MergeError, MergeReport, MergedNode};
use std::fmt;
use std::path::{Path, PathBuf};

/// A shard's Chrome JSON records, in its `--out`.
pub const FRAGMENT_FILE: &str = "shard.trace.part";
/// A shard's description, in its `--out`.
pub const MANIFEST_FILE: &str = "shard.json";
const FORMAT: u32 = 2;

/// A set of node ids: `0-127`, `5`, `0-3,8,10-12`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSet(Vec<(u32, u32)>);

impl NodeSet {
    pub fn contains(&self, node: u32) -> bool {
        self.0.iter().any(|&(a, b)| (a..=b).contains(&node))
    }
}

impl std::str::FromStr for NodeSet {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = |part: &str| format!("`{part}` in --nodes `{s}` is not a node id or range; write e.g. 0-127 or 0-3,8");
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim) {
            let (a, b) = match part.split_once('-') {
                Some((a, b)) => (a.trim(), b.trim()),
                None => (part, part),
            };
            let (a, b): (u32, u32) = (a.parse().map_err(|_| bad(part))?, b.parse().map_err(|_| bad(part))?);
            if a > b {
                return Err(format!("--nodes `{part}` runs backwards; write the lower id first"));
            }
            out.push((a, b));
        }
        Ok(Self(out))
    }
}

impl fmt::Display for NodeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, &(a, b)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if a == b {
                write!(f, "{a}")?;
            } else {
                write!(f, "{a}-{b}")?;
            }
        }
        Ok(())
    }
}

/// What a shard writes about itself.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Manifest {
    distprof_merge_shard: u32,
    /// The `--nodes` it was given.
    nodes_arg: String,
    /// Every node of the whole merge, as the shard scanned them.
    all_nodes: Vec<u32>,
    g0_ns: i64,
    /// The run directory's name under `plugins/profile/`.
    run: String,
    /// Its Perfetto fragment is in [`FRAGMENT_FILE`].
    chrome: bool,
    /// The fragment's format.
    trace_format: TraceFormat,
    bytes_in: u64,
    bytes_out: u64,
    nodes: Vec<MergedNode>,
}

pub(super) fn write_manifest(
    out_dir: &Path,
    run: &str,
    set: &NodeSet,
    all_nodes: &[u32],
    report: &MergeReport,
    chrome: bool,
    trace_format: TraceFormat,
) -> Result<(), MergeError> {
    let m = Manifest {
        distprof_merge_shard: FORMAT,
        nodes_arg: set.to_string(),
        all_nodes: all_nodes.to_vec(),
        g0_ns: report.g0_ns,
        run: run.to_string(),
        chrome,
        trace_format,
        bytes_in: report.bytes_in,
        bytes_out: report.bytes_out,
        nodes: report.nodes.clone(),
    };
    let path = out_dir.join(MANIFEST_FILE);
    let text = serde_json::to_vec_pretty(&m).expect("a manifest serializes");
    distprof::atomic_file::write(&path, &text).map_err(|err| MergeError::Io { path, err })
}

fn read_manifest(dir: &Path) -> Result<Manifest, MergeError> {
    let path = dir.join(MANIFEST_FILE);
    let text = std::fs::read(&path).map_err(|err| MergeError::Io {
        path: path.clone(),
        err: std::io::Error::new(err.kind(), format!("{err}; pass the --out directories of `distprof merge --nodes ...` runs")),
    })?;
    let m: Manifest = serde_json::from_slice(&text)
        .map_err(|e| MergeError::Shard(format!("{}: not a shard manifest ({e}); pass the --out directories of `distprof merge --nodes ...` runs", path.display())))?;
    if m.distprof_merge_shard != FORMAT {
        return Err(MergeError::Shard(format!(
            "{}: shard format {} (this distprof joins format {FORMAT}); merge the shards again with this version",
            path.display(),
            m.distprof_merge_shard
        )));
    }
    Ok(m)
}

/// Joins shard directories into `out_dir` (the node files into one run directory, the
/// Perfetto output to `chrome` in `format` when given): the outputs of one merge of every
/// node.
pub fn join(shards: &[PathBuf], out_dir: &Path, chrome: Option<&Path>, format: TraceFormat) -> Result<MergeReport, MergeError> {
    let mut list = Vec::new();
    for d in shards {
        list.push((d.clone(), read_manifest(d)?));
    }
    let Some((first_dir, first)) = list.first().cloned() else {
        return Err(MergeError::Shard("--join needs the shard directories to join".into()));
    };
    for (d, m) in &list {
        if m.g0_ns != first.g0_ns || m.run != first.run || m.all_nodes != first.all_nodes {
            return Err(MergeError::Shard(format!(
                "{} and {} are shards of different merges (other inputs, models or options: origin {} vs {}, nodes {:?} vs {:?}); merge every shard from the same inputs with the same options",
                first_dir.display(),
                d.display(),
                first.g0_ns,
                m.g0_ns,
                first.all_nodes,
                m.all_nodes
            )));
        }
        if chrome.is_some() && !m.chrome {
            return Err(MergeError::Shard(format!(
                "{}: this shard was merged without its Perfetto output (--no-perfetto); merge it again with it, or join with --no-perfetto",
                d.display()
            )));
        }
        if chrome.is_some() && m.trace_format != format {
            let flag = |f: TraceFormat| if f == TraceFormat::ChromeJson { "with --chrome" } else { "without --chrome" };
            return Err(MergeError::Shard(format!(
                "{}: this shard wrote its Perfetto output {} and the join is {}; join {} too, or merge the shard again",
                d.display(),
                flag(m.trace_format),
                flag(format),
                flag(m.trace_format)
            )));
        }
    }
    // Shards in node order; each node exactly once, and the shards' nodes consecutive, so
    // that their fragments concatenate in the order of a whole merge.
    list.sort_by_key(|(_, m)| m.nodes.first().map_or(u32::MAX, |n| n.node));
    let mut covered: Vec<(u32, &Path)> = Vec::new();
    for (d, m) in &list {
        for n in &m.nodes {
            if let Some((_, other)) = covered.iter().find(|(k, _)| *k == n.node) {
                return Err(MergeError::Shard(format!(
                    "node {} is in two shards, {} and {}; give each host its own --nodes range",
                    n.node,
                    other.display(),
                    d.display()
                )));
            }
            if covered.last().is_some_and(|&(k, _)| k > n.node) {
                return Err(MergeError::Shard(format!(
                    "the shards' node ranges interleave (node {} of {} comes before node {} of another shard); give each host one consecutive --nodes range",
                    n.node,
                    d.display(),
                    covered.last().map_or(0, |c| c.0)
                )));
            }
            covered.push((n.node, d.as_path()));
        }
    }
    let missing: Vec<u32> = first.all_nodes.iter().copied().filter(|k| !covered.iter().any(|(c, _)| c == k)).collect();
    if !missing.is_empty() {
        return Err(MergeError::Shard(format!(
            "no shard holds node(s) {missing:?}; merge them with `distprof merge --nodes ...` and join that shard too"
        )));
    }
    // All or nothing, as a merge (`AtomicDir`).
    let staged = distprof::atomic_file::AtomicDir::create(out_dir).map_err(|err| MergeError::Io { path: out_dir.to_path_buf(), err })?;
    let run_dir = staged.path().join("plugins").join("profile").join(&first.run);
    distprof::atomic_file::create_dir_all(&run_dir).map_err(|err| MergeError::Io { path: run_dir.clone(), err })?;
    let mut nodes = Vec::new();
    let (mut bytes_in, mut bytes_out) = (0, 0);
    for (d, m) in &list {
        bytes_in += m.bytes_in;
        bytes_out += m.bytes_out;
        for n in &m.nodes {
            let name = n.output.file_name().map(PathBuf::from).unwrap_or_default();
            let from = d.join("plugins").join("profile").join(&m.run).join(&name);
            let to = run_dir.join(&name);
            link_or_copy(&from, &to)?;
            nodes.push(MergedNode { output: staged.final_path(&to), ..n.clone() });
        }
    }
    if let Some(p) = chrome {
        let mut pieces = Vec::new();
        for (d, _) in &list {
            let part = d.join(FRAGMENT_FILE);
            let piece = std::fs::File::open(&part).and_then(super::direct_io::Part::file);
            pieces.push(piece.map_err(|err| MergeError::Io { path: part.clone(), err })?);
        }
        let staged_chrome = staged.staged_path(p);
        super::chrome_doc::write_pieces(&staged_chrome, Some(first.g0_ns), format, &pieces).map_err(|err| MergeError::Io { path: p.to_path_buf(), err })?;
    }
    let run_dir = staged.final_path(&run_dir);
    staged.commit().map_err(|err| MergeError::Io { path: out_dir.to_path_buf(), err })?;
    Ok(MergeReport { run_dir, chrome: chrome.map(Path::to_path_buf), g0_ns: first.g0_ns, bytes_in, bytes_out, nodes })
}

/// A hard link where `from` and `to` share a file system (no bytes copied), else a copy;
/// an existing `to` (an earlier join into the same place) is replaced.
fn link_or_copy(from: &Path, to: &Path) -> Result<(), MergeError> {
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |err| MergeError::Io { path, err }
    };
    if let Ok(existing) = std::fs::symlink_metadata(to) {
        use std::os::unix::fs::MetadataExt;
        let source = std::fs::metadata(from).map_err(io_err(from))?;
        if (existing.dev(), existing.ino()) == (source.dev(), source.ino()) {
            // Already there (a join into a shard's own directory, or joined before).
            return Ok(());
        }
        std::fs::remove_file(to).map_err(io_err(to))?;
    }
    if std::fs::hard_link(from, to).is_ok() {
        return Ok(());
    }
    std::fs::copy(from, to).map(|_| ()).map_err(io_err(from))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_sets_parse_and_print() {
        let s: NodeSet = "0-127".parse().unwrap();
        assert!(s.contains(0) && s.contains(127) && !s.contains(128));
        let s: NodeSet = "0-3, 8,10-12".parse().unwrap();
        assert_eq!(s.to_string(), "0-3,8,10-12");
        assert!(s.contains(8) && !s.contains(9) && s.contains(11));
        assert!("5-2".parse::<NodeSet>().unwrap_err().contains("backwards"));
        assert!("a-2".parse::<NodeSet>().unwrap_err().contains("`a-2`"));
        assert!("".parse::<NodeSet>().is_err());
    }
}
