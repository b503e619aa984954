//! The Perfetto output document (Chrome JSON or Perfetto's protobuf trace), assembled in
//! node order from fragments that the nodes' workers write at the same time.
//!
//! A node's fragment (its records) has a size known only once it is written, and the
//! document is one file in node order. So each node writes straight into a region of the
//! document reserved for it, far larger than it will need (the file is sparse: space never
//! written costs nothing); when all are written, the gaps between fragments are cut out
//! with `FALLOC_FL_COLLAPSE_RANGE` (ext4, XFS), which changes the file's block map and moves
//! no bytes. No fragment is written twice, and no worker waits for another. Where the file
//! system refuses the collapse (btrfs, tmpfs, network file systems) or a fragment outgrew its
//! region, the document is written again from the pieces in order: one extra copy, the
//! same bytes.
//!
//! The collapse wants block-aligned ranges, which fixes the layout, the same whatever the
//! number of workers, whether the nodes were merged in one run or in shards joined later:
//! - the header is padded with spaces to a multiple of [`ALIGN`];
//! - every record starts with [`SEP`], and each node's fragment is padded with spaces to a
//!   multiple of [`ALIGN`] ([`chrome::ChromeWriter::finish`]);
//! - the footer (with the metadata) follows the last fragment, and the first record's comma
//!   becomes a space.
//!
//! JSON allows any whitespace between tokens, so parsers do not see the padding; it adds
//! less than 4 KiB per node. The protobuf trace has no header or footer (a `Trace` is its
//! packets, and fragments of packets concatenate), and pads each fragment with packets
//! that readers skip (`pftrace::pad`).

use super::chrome;
use super::pftrace::PftraceCompression;
use super::trace_out::TraceFormat;
use super::direct_io::{self, DirectWriter, Part, ALIGN};
use distprof::atomic_file::AtomicFile;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Room reserved for a node's fragment per byte of its input. The JSON is about 5 times
/// the XSpace for GPU profiles (`bench merge`); a fragment that outgrows its region costs
/// the copy of the whole document, not its correctness.
const REGION_PER_INPUT_BYTE: u64 = 16;
/// Room reserved for every node beyond that: small inputs can carry long names.
const REGION_BASE: u64 = 16 << 20;
/// How far regions may reach into the sparse file (ext4 files end at 16 TiB). Past it, new
/// fragments start in their overflow files (and the document is written again).
const MAX_SPAN: u64 = 4 << 40;

/// The document (or a shard's fragment file) being written.
pub struct ChromeDoc {
    atomic: AtomicFile,
    file: Arc<File>,
    path: PathBuf,
    /// The header's length: where the first fragment starts (0 in a shard's fragment file).
    head_len: u64,
    /// The base time of a whole document (header and footer), None for a shard's fragment.
    base_ns: Option<i64>,
    format: TraceFormat,
    /// How the fragments of a protobuf trace store their packets.
    compression: PftraceCompression,
    layout: Mutex<Layout>,
}

#[derive(Default)]
struct Layout {
    /// End of the furthest region reserved so far.
    cursor: u64,
    fragments: Vec<Fragment>,
}

struct Fragment {
    start: u64,
    /// Its bytes in the region, and what overflowed it; None while being written.
    written: Option<(Part, Option<Part>)>,
}

/// Where one node's fragment goes: hand it to [`chrome::ChromeWriter::new`], give the finished
/// pieces back with [`ChromeDoc::fragment_done`].
pub struct Region {
    pub order: usize,
    pub writer: DirectWriter,
}

/// The opening of a whole document (`base_ns` given) padded to a whole number of blocks;
/// nothing for a shard's fragment file.
fn padded_header(base_ns: Option<i64>, format: TraceFormat) -> Vec<u8> {
    if base_ns.is_none() || format == TraceFormat::Pftrace {
        return Vec::new();
    }
    let mut h = chrome::HEADER.to_vec();
    h.resize(h.len().next_multiple_of(ALIGN), b' ');
    h
}

impl ChromeDoc {
    /// Starts writing `path`: a whole document with origin `base_ns`, or, without it, a
    /// shard's fragment file (records only, for [`write_pieces`] to join).
    pub fn create(path: &Path, base_ns: Option<i64>, format: TraceFormat) -> io::Result<Self> {
        let atomic = AtomicFile::create(path)?;
        let file = atomic.handle()?;
        let header = padded_header(base_ns, format);
        file.write_all_at(&header, 0)?;
        let head_len = header.len() as u64;
        Ok(Self {
            atomic,
            file: Arc::new(file),
            path: path.to_path_buf(),
            head_len,
            base_ns,
            format,
            compression: PftraceCompression::default(),
            layout: Mutex::new(Layout { cursor: head_len, fragments: Vec::new() }),
        })
    }

    fn layout(&self) -> std::sync::MutexGuard<'_, Layout> {
        // A panicked worker's poison does not hide the layout.
        self.layout.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reserves the region of the next fragment in document order, for a node whose input
    /// has `input_bytes`. Regions are handed out in order: take the job and its region
    /// together ([`Self::next_job`]).
    fn reserve(&self, l: &mut Layout, input_bytes: u64) -> Region {
        let order = l.fragments.len();
        // Right after the previous fragment when it is complete (always so on one worker:
        // then there is no gap at all), else past every region reserved so far.
        let start = match l.fragments.last() {
            None => self.head_len,
            Some(Fragment { start, written: Some((region, _)) }) => start + region.len,
            Some(_) => l.cursor,
        };
        let want = (input_bytes.saturating_mul(REGION_PER_INPUT_BYTE) + REGION_BASE).next_multiple_of(ALIGN as u64);
        let limit = start.saturating_add(want).min(MAX_SPAN.max(start));
        l.cursor = l.cursor.max(limit);
        l.fragments.push(Fragment { start, written: None });
        let name = self.path.file_name().unwrap_or_default().to_string_lossy();
        let overflow = self.path.with_file_name(format!(".{name}.tmp-{}-overflow{order}", std::process::id()));
        Region { order, writer: DirectWriter::region(self.file.clone(), start, limit, overflow) }
    }

    /// Takes the next of `jobs` jobs, in order, with its fragment's region (under one lock,
    /// so that regions lie in job order); None when all are taken. `input_bytes(k)` sizes
    /// job k's region.
    pub fn next_job(&self, jobs: usize, input_bytes: impl Fn(usize) -> u64) -> Option<Region> {
        let mut l = self.layout();
        let k = l.fragments.len();
        (k < jobs).then(|| self.reserve(&mut l, input_bytes(k)))
    }

    /// The document's format.
    pub fn format(&self) -> TraceFormat {
        self.format
    }

    /// Has the fragments of a protobuf trace store their packets as `compression` says.
    pub fn with_pftrace_compression(mut self, compression: PftraceCompression) -> Self {
        self.compression = compression;
        self
    }

    /// How the fragments of a protobuf trace store their packets.
    pub fn pftrace_compression(&self) -> PftraceCompression {
        self.compression
    }

    /// The document's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records the finished fragment of job `order` ([`chrome::ChromeWriter::finish`]).
    pub fn fragment_done(&self, order: usize, pieces: (Part, Option<Part>)) {
        self.layout().fragments[order].written = Some(pieces);
    }

    /// Closes the gaps between the fragments (or writes the document again where that
    /// cannot be done), ends the document and publishes it.
    pub fn commit(self) -> io::Result<()> {
        let layout = self.layout.into_inner().unwrap_or_else(|e| e.into_inner());
        let mut pieces = Vec::new();
        let mut overflowed = false;
        for f in layout.fragments {
            let (region, overflow) = f.written.ok_or_else(|| io::Error::other("a Chrome JSON fragment was not finished"))?;
            overflowed |= overflow.is_some();
            pieces.push(region);
            pieces.extend(overflow);
        }
        pieces.retain(|p| p.len > 0);
        if !overflowed && collapse_gaps(&self.file, self.head_len, &mut pieces) {
            let end = self.head_len + pieces.iter().map(|p| p.len).sum::<u64>();
            direct_io::set_direct(&self.file, false);
            self.file.set_len(end)?;
            end_document(&self.file, self.head_len, end, self.base_ns, self.format)?;
            drop(self.file);
            return self.atomic.commit();
        }
        // Written again in order (the first document's temporary file goes with `self`).
        write_pieces(&self.path, self.base_ns, self.format, &pieces)
    }
}

/// Cuts out the gaps between `pieces` (regions of `file`, in order, after a header of
/// `head_len` bytes), last gap first so that earlier offsets stay valid; keeps `pieces`'
/// offsets current. False when the file system refused a collapse (the pieces are then
/// where `pieces` says, some gaps closed).
fn collapse_gaps(file: &File, head_len: u64, pieces: &mut [Part]) -> bool {
    for i in (0..pieces.len()).rev() {
        let prev_end = if i == 0 { head_len } else { pieces[i - 1].from + pieces[i - 1].len };
        // Pieces never overlap (each region starts at or past the end of the one before);
        // were they to, the copy would be the safe way.
        let Some(gap) = pieces[i].from.checked_sub(prev_end) else { return false };
        if gap == 0 {
            continue;
        }
        // SAFETY: fallocate on a descriptor we own.
        let r = unsafe {
            libc::fallocate(file.as_raw_fd(), libc::FALLOC_FL_COLLAPSE_RANGE, prev_end as libc::off_t, gap as libc::off_t)
        };
        if r != 0 {
            return false;
        }
        for p in &mut pieces[i..] {
            p.from -= gap;
        }
    }
    true
}

/// Ends a document whose records end at `end`: the footer with the origin `base_ns` (a
/// whole document only), and the first record's separator turned into whitespace.
fn end_document(file: &File, head_len: u64, end: u64, base_ns: Option<i64>, format: TraceFormat) -> io::Result<()> {
    if let (Some(base_ns), TraceFormat::ChromeJson) = (base_ns, format) {
        file.write_all_at(&chrome::footer(base_ns), end)?;
        if end > head_len {
            file.write_all_at(b" ", head_len)?;
        }
    }
    Ok(())
}

/// Writes `dest` from `pieces` in order: a whole document with origin `base_ns` (header,
/// the pieces, footer), or a shard's fragment file without it. The join of shards, and
/// the fallback of [`ChromeDoc::commit`].
pub fn write_pieces(dest: &Path, base_ns: Option<i64>, format: TraceFormat, pieces: &[Part]) -> io::Result<()> {
    let atomic = AtomicFile::create(dest)?;
    let mut out = DirectWriter::new(atomic.handle()?);
    let header = padded_header(base_ns, format);
    out.buf().extend_from_slice(&header);
    let mut scratch = Vec::new();
    for p in pieces {
        out.append(p, 0, &mut scratch)?;
    }
    let (file, end) = out.finish()?;
    end_document(&file, header.len() as u64, end, base_ns, format)?;
    drop(file);
    atomic.commit()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merge::chrome::ChromeWriter;

    /// A fragment's records as a node's writer makes them.
    fn records(node: u64, events: usize, name_len: usize) -> impl Fn(&mut ChromeWriter) {
        move |w: &mut ChromeWriter| {
            if events == 0 {
                return;
            }
            let pid = w.begin_process(&format!("node {node}")).unwrap();
            w.thread(pid, 1, node as i64, "stream").unwrap();
            let prefix = ChromeWriter::event_prefix(pid, 1);
            let name = format!(",\"name\":\"{}\"", "n".repeat(name_len));
            for e in 0..events {
                w.complete(&prefix, e as i64 * 1000, 500, name.as_bytes(), |_| {}).unwrap();
            }
        }
    }

    /// The document of `nodes` (input sizes, record counts) written by `workers` threads.
    fn document(dir: &Path, nodes: &[(u64, usize, usize)], workers: usize, collapse: bool) -> Vec<u8> {
        let path = dir.join(format!("doc-{workers}-{collapse}.json"));
        let doc = ChromeDoc::create(&path, Some(1_763_000_000_000_000_000), TraceFormat::ChromeJson).unwrap();
        std::thread::scope(|s| {
            for _ in 0..workers {
                s.spawn(|| loop {
                    let region = doc.next_job(nodes.len(), |k| nodes[k].0);
                    let Some(Region { order, writer }) = region else { break };
                    let mut w = ChromeWriter::new(writer, 1 + order as u64);
                    records(order as u64, nodes[order].1, nodes[order].2)(&mut w);
                    doc.fragment_done(order, w.finish().unwrap());
                });
            }
        });
        if collapse {
            doc.commit().unwrap();
        } else {
            // As on a file system without COLLAPSE_RANGE: the pieces written again.
            let layout = doc.layout.into_inner().unwrap();
            let pieces: Vec<Part> = layout
                .fragments
                .into_iter()
                .flat_map(|f| {
                    let (r, o) = f.written.unwrap();
                    std::iter::once(r).chain(o)
                })
                .collect();
            write_pieces(&path, Some(1_763_000_000_000_000_000), TraceFormat::ChromeJson, &pieces).unwrap();
        }
        std::fs::read(&path).unwrap()
    }

    #[test]
    fn parallel_overflowing_and_rewritten_documents_are_byte_identical_json() {
        let tmp = tempfile::tempdir().unwrap();
        // Node 2 writes far more than its region (tiny input, long names): it overflows.
        let nodes = [(1_000, 3_000, 8), (0, 0, 0), (10, 120_000, 200), (5_000, 20_000, 3), (1, 1, 1)];
        let serial = document(tmp.path(), &nodes, 1, true);
        for (workers, collapse) in [(3, true), (2, true), (3, false)] {
            let got = document(tmp.path(), &nodes, workers, collapse);
            assert!(got == serial, "{workers} workers, collapse {collapse}: the bytes differ");
        }
        let v: serde_json::Value = serde_json::from_slice(&serial).unwrap();
        let events = v["traceEvents"].as_array().unwrap();
        // Per node with records: 2 process and 2 thread metadata records, then its events.
        assert_eq!(events.len(), 4 * 4 + 3_000 + 120_000 + 20_000 + 1);
        assert_eq!(events[0]["args"]["name"], "node 0");
        assert_eq!(events.last().unwrap()["name"], "n");
        // Header and fragments padded to blocks: the document is blocks plus the footer.
        assert_eq!((serial.len() - chrome::footer(1_763_000_000_000_000_000).len()) % ALIGN, 0);
        // Without the overflow the regions are collapsed in place, and no temporary file
        // is left beside the document.
        let small = [(1_000, 3_000, 8), (2_000, 1_000, 8)];
        assert!(document(tmp.path(), &small, 2, true) == document(tmp.path(), &small, 1, true));
        let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().map(|e| e.unwrap().file_name()).filter(|n| n.to_string_lossy().starts_with('.')).collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn where_the_file_system_refuses_the_collapse_the_document_is_written_again() {
        // tmpfs (/dev/shm) has no COLLAPSE_RANGE: commit takes the copy, with the same bytes.
        let shm = Path::new("/dev/shm");
        if !shm.is_dir() {
            eprintln!("no /dev/shm here: only the disk path is tested");
            return;
        }
        let probe = tempfile::tempfile_in(shm).unwrap();
        probe.set_len(4 * ALIGN as u64).unwrap();
        // SAFETY: fallocate on a file we own.
        let refused = unsafe { libc::fallocate(probe.as_raw_fd(), libc::FALLOC_FL_COLLAPSE_RANGE, 0, ALIGN as libc::off_t) } != 0;
        let (disk, mem) = (tempfile::tempdir().unwrap(), tempfile::tempdir_in(shm).unwrap());
        let nodes = [(1_000, 3_000, 8), (2_000, 1_000, 8), (500, 2_000, 30)];
        let on_disk = document(disk.path(), &nodes, 1, true);
        assert!(document(mem.path(), &nodes, 3, true) == on_disk, "tmpfs (collapse refused: {refused}) gave other bytes");
    }

    #[test]
    fn a_document_without_records_is_valid_json() {
        let tmp = tempfile::tempdir().unwrap();
        for workers in [1, 2] {
            let text = document(tmp.path(), &[(10, 0, 0), (10, 0, 0)], workers, true);
            let v: serde_json::Value = serde_json::from_slice(&text).unwrap();
            assert_eq!(v["traceEvents"].as_array().unwrap().len(), 0);
        }
    }
}
