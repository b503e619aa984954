//! The per-node probe JSONL file `probe_windows_node<id>.jsonl` (schema: `docs/jsonl.md`).
//!
//! Line 1 is the meta line; then one line per closed window, each written with a single
//! `write` and flushed at the window's close, so a crash (even `kill -9`) loses at most the
//! open window and never leaves a closed one half written.

use crate::clock::VirtualClock;
use crate::config::Config;
use crate::context::{NodeId, RunContext};
use crate::timestamp::{NicClockInfo, StampMode, TimestampQuality};
use crate::window::ClosedWindow;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{self, BufRead, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Version of the line formats below; bumped on incompatible change.
pub const FORMAT_VERSION: u32 = 1;

/// The first line of the file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// Always true: tells the meta line from window lines.
    pub meta: bool,
    pub format_version: u32,
    pub node: NodeId,
    pub session_id: String,
    pub session_token: u64,
    pub reference_node: NodeId,
    /// Timestamping in force, and the error one stamp of that mode may carry (hardware:
    /// the NIC clock mapping's error at the start included; each window line has its own).
    pub timestamp_mode: StampMode,
    pub stamp_error_bound_ns: i64,
    /// Why a better mode was not used (e.g. the NIC refused hardware stamping); empty if none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub timestamp_note: String,
    /// Hardware stamps: the NIC clock and its mapping to the host clock at the start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic_clock: Option<NicClockInfo>,
    /// The virtual clock applied to every stamp (tests only; absent on real hosts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_clock: Option<VirtualClock>,
    pub out_edges: Vec<NodeId>,
    pub start_local_ns: i64,
    /// The effective configuration.
    pub config: Config,
}

impl Meta {
    /// The meta line of the context's node probing in the run `ctx` with the timestamping
    /// `stamps`, starting at `start_local_ns` of its clock; no virtual clock (set it for
    /// test networks).
    pub fn for_node(
        ctx: &RunContext,
        stamps: &TimestampQuality,
        start_local_ns: i64,
        config: &Config,
    ) -> Meta {
        Meta {
            meta: true,
            format_version: FORMAT_VERSION,
            node: ctx.node,
            session_id: ctx.session_id.clone(),
            session_token: ctx.session_token,
            reference_node: ctx.reference_node,
            timestamp_mode: stamps.mode,
            stamp_error_bound_ns: stamps.stamp_error_bound_ns,
            timestamp_note: stamps.note.clone(),
            nic_clock: stamps.nic_clock.clone(),
            virtual_clock: None,
            out_edges: ctx.out_edges.clone(),
            start_local_ns,
            config: config.clone(),
        }
    }
}

pub fn file_name(node: NodeId) -> String {
    format!("probe_windows_node{node}.jsonl")
}

/// Writes one node's file.
pub struct JsonlWriter {
    file: File,
    path: PathBuf,
    /// Bytes of whole lines written so far.
    len: u64,
}

impl JsonlWriter {
    /// Creates the file in `dir` with its meta line. A file already there (a node restarted
    /// on the same output_dir) is kept under the first free `<name>.<k>` and named in a
    /// warning: what an earlier run recorded is never overwritten.
    pub fn create(dir: &Path, meta: &Meta) -> io::Result<JsonlWriter> {
        crate::atomic_file::create_dir_all(dir).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot create output_dir `{}`: {e}", dir.display()))
        })?;
        let path = dir.join(file_name(meta.node));
        if path.exists() {
            let kept = keep_earlier_file(&path)?;
            tracing::warn!(
                "`{}` existed (an earlier run of node {} on this output_dir); kept as `{}`",
                path.display(),
                meta.node,
                kept.display()
            );
        }
        // The file appears with its meta line whole (temporary file renamed), so a file
        // that exists always names its node and session, even after a `kill -9` at once.
        let mut first = serde_json::to_string(meta).map_err(io::Error::other)?;
        first.push('\n');
        crate::atomic_file::write(&path, first.as_bytes())?;
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|e| io::Error::new(e.kind(), format!("cannot open `{}`: {e}", path.display())))?;
        Ok(JsonlWriter { file, path, len: first.len() as u64 })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn write_window(&mut self, w: &ClosedWindow) -> io::Result<()> {
        self.write_line(&serde_json::to_string(w).map_err(io::Error::other)?)?;
        // After the write returned, the window survives a kill of the process: the crash
        // tests hold the file to every window this line announced.
        tracing::debug!(node = w.node, window_id = w.window_id, "window written");
        Ok(())
    }

    fn write_line(&mut self, line: &str) -> io::Result<()> {
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
        // One write_all of the whole line: the page cache keeps it even if the process is
        // killed right after, which is all "flushed" has to mean for a crash of the process.
        match self.file.write_all(&buf).and_then(|()| self.file.flush()) {
            Ok(()) => {
                self.len += buf.len() as u64;
                Ok(())
            }
            Err(e) => {
                // A full disk can take part of the line: cut the file back to its last
                // whole line, so that the lines before stay readable and the next reader
                // sees no torn window. The file may be no longer writable at all (best effort).
                let _ = self.file.set_len(self.len);
                let _ = self.file.seek(SeekFrom::Start(self.len));
                Err(io::Error::new(e.kind(), format!("cannot write `{}`: {e}", self.path.display())))
            }
        }
    }
}

/// Renames `path` to the first free `<path>.<k>` (k = 1, 2, ...) and returns the new name.
fn keep_earlier_file(path: &Path) -> io::Result<PathBuf> {
    for k in 1..=1000u32 {
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".{k}"));
        let kept = PathBuf::from(name);
        if !kept.exists() {
            std::fs::rename(path, &kept).map_err(|e| {
                io::Error::new(e.kind(), format!("cannot keep the earlier `{}` as `{}`: {e}", path.display(), kept.display()))
            })?;
            return Ok(kept);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("`{}` and 1000 earlier copies exist; choose another output_dir", path.display()),
    ))
}

/// A parsed file.
#[derive(Debug, Clone)]
pub struct NodeFile {
    pub meta: Meta,
    pub windows: Vec<ClosedWindow>,
    /// True when the last line was cut short (the node died while writing it).
    pub truncated_tail: bool,
}

impl NodeFile {
    /// The node's timestamping over the windows it recorded: the meta line's, with every
    /// window's NIC clock figures taken in (worst stamp error, newest mapping, drops summed).
    pub fn timestamps(&self) -> TimestampQuality {
        let mut t = TimestampQuality {
            mode: self.meta.timestamp_mode,
            stamp_error_bound_ns: self.meta.stamp_error_bound_ns,
            note: self.meta.timestamp_note.clone(),
            // The windows hold the run's figures from the start; the meta line's are the
            // warm-up's, already inside the first window's.
            nic_clock: self.meta.nic_clock.as_ref().map(|n| NicClockInfo { source: n.source.clone(), phc_index: n.phc_index, ..Default::default() }),
        };
        for w in &self.windows {
            t.absorb_window(w.nic_clock.as_ref());
        }
        t
    }
}

/// Reads a file; a cut-off last line (a node killed mid-write) is reported, not an error;
/// any other unparsable line is an error naming the line.
pub fn read(path: &Path) -> Result<NodeFile, String> {
    let f = File::open(path).map_err(|e| format!("cannot open `{}`: {e}", path.display()))?;
    let lines: Vec<String> = io::BufReader::new(f)
        .lines()
        .collect::<Result<_, _>>()
        .map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    let first = lines.first().ok_or_else(|| format!("`{}` is empty: no meta line", path.display()))?;
    let meta: Meta = serde_json::from_str(first)
        .map_err(|e| format!("`{}` line 1: not a distprof meta line: {e}", path.display()))?;
    let mut windows = Vec::new();
    let mut truncated_tail = false;
    for (i, line) in lines.iter().enumerate().skip(1) {
        match serde_json::from_str::<ClosedWindow>(line) {
            Ok(w) => windows.push(w),
            Err(e) if e.is_eof() && i == lines.len() - 1 => {
                tracing::warn!(
                    "`{}` line {}: cut short (the node died while writing it); that window is left out",
                    path.display(),
                    i + 1
                );
                truncated_tail = true
            }
            Err(e) => return Err(format!("`{}` line {}: {e}", path.display(), i + 1)),
        }
    }
    Ok(NodeFile { meta, windows, truncated_tail })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::ProbeRecord;

    const CHILD: &str = "DISTPROF_JSONL_FSIZE_CHILD";
    const NAME: &str = "jsonl::tests::a_write_cut_short_by_a_full_disk_leaves_whole_lines_only";

    fn meta() -> Meta {
        Meta {
            meta: true,
            format_version: FORMAT_VERSION,
            node: 1,
            session_id: "s".into(),
            session_token: 7,
            reference_node: 0,
            timestamp_mode: StampMode::User,
            stamp_error_bound_ns: StampMode::User.stamp_error_bound_ns(),
            timestamp_note: String::new(),
            nic_clock: None,
            virtual_clock: None,
            out_edges: vec![0],
            start_local_ns: 1_000,
            config: Config::default(),
        }
    }

    /// A window line of several KB (100 records).
    fn window(id: u64) -> ClosedWindow {
        let t = 1_000_000_000 * id as i64;
        ClosedWindow {
            node: 1,
            window_id: id,
            start_local_ns: t,
            end_local_ns: t + 1_000_000_000,
            edges: Vec::new(),
            answered: Default::default(),
            dropped: Default::default(),
            records: (0..100)
                .map(|seq| ProbeRecord {
                    src: 1,
                    dst: 0,
                    seq,
                    fwd_tx_ns: [t + 1_111_111, t + 2_222_222],
                    fwd_rx_ns: [t + 3_333_333, t + 4_444_444],
                    rev_tx_ns: [t + 5_555_555, t + 6_666_666],
                    rev_rx_ns: [t + 7_777_777, t + 8_888_888],
                })
                .collect(),
            model: None,
            nic_clock: None,
        }
    }

    /// The disk fills in the middle of a window line (a file-size limit makes `write`
    /// stop part-way, as `ENOSPC` does): the error is returned, and the file is cut back
    /// to its whole lines, so it reads without a torn tail.
    #[test]
    fn a_write_cut_short_by_a_full_disk_leaves_whole_lines_only() {
        if std::env::var_os(CHILD).is_none() {
            // The limit is process-wide: the body runs in a process of its own.
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", NAME, "--nocapture", "--test-threads", "1"])
                .env(CHILD, "1")
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && stdout.contains("1 passed"),
                "{stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let mut w = JsonlWriter::create(dir.path(), &meta()).unwrap();
        w.write_window(&window(0)).unwrap();
        let whole = std::fs::metadata(w.path()).unwrap().len();
        let line = serde_json::to_string(&window(1)).unwrap().len() as u64;
        // Room for half of the next line only.
        // SAFETY: plain libc calls on this process (a child of the test, see above).
        unsafe {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let limit = libc::rlimit { rlim_cur: whole + line / 2, rlim_max: libc::RLIM_INFINITY };
            assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &limit), 0);
        }
        let err = w.write_window(&window(1)).unwrap_err();
        assert!(err.to_string().contains("probe_windows_node1.jsonl"), "{err}");
        assert_eq!(std::fs::metadata(w.path()).unwrap().len(), whole);
        let f = read(w.path()).unwrap();
        assert_eq!(f.windows.len(), 1);
        assert!(!f.truncated_tail);
    }

    /// A node restarted on the same output_dir: its earlier file is kept whole beside the
    /// new one, twice over, never overwritten.
    #[test]
    fn a_restart_keeps_the_earlier_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = JsonlWriter::create(dir.path(), &meta()).unwrap();
        first.write_window(&window(0)).unwrap();
        drop(first);
        let mut second = JsonlWriter::create(dir.path(), &meta()).unwrap();
        second.write_window(&window(0)).unwrap();
        second.write_window(&window(1)).unwrap();
        drop(second);
        JsonlWriter::create(dir.path(), &meta()).unwrap();
        let name = dir.path().join(file_name(1));
        let kept = |k: u32| read(&PathBuf::from(format!("{}.{k}", name.display()))).unwrap().windows.len();
        assert_eq!((kept(1), kept(2), read(&name).unwrap().windows.len()), (1, 2, 0));
    }
}
