//! Large outputs written past the page cache (`O_DIRECT`) where the file system allows.
//!
//! Merge writes several times its input (the Chrome JSON is about 5x the XSpace). Through
//! the page cache the kernel copies every byte into a fresh cache page, and the fsync of
//! `AtomicFile::commit` then writes those pages back: on the 2-core bench machine that
//! kernel work took more CPU than rendering the JSON (`perf stat` of a `bench merge` child:
//! 1.75 s system against 1.40 s user). With `O_DIRECT` the device takes the bytes from our
//! buffer instead.
//!
//! `O_DIRECT` wants file offsets, lengths and memory addresses aligned to the block size:
//! [`DirectWriter`] keeps its data at an [`ALIGN`]ed address, writes whole aligned chunks
//! and keeps the unaligned tail until more bytes follow; at the end `O_DIRECT` is switched
//! off for the tail. A direct write returns once the device has the bytes, so each chunk
//! is written by the writer's own background thread while the next chunk fills a second
//! buffer. File
//! systems that refuse `O_DIRECT` (tmpfs, some network file systems) get ordinary writes of
//! the same bytes. A piece of another file is appended by the kernel (`copy_file_range`)
//! where it can, through the buffer where not.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

/// Alignment of offsets, lengths and addresses: the largest block size in common use,
/// which also satisfies devices with 512-byte blocks.
pub const ALIGN: usize = 4096;
/// Bytes gathered before a write: large enough that a write costs the device little per
/// byte, small against the inputs held in memory (a writer holds two such buffers).
pub const CHUNK: usize = 2 << 20;
/// Room beyond a chunk: the padding to an aligned start and the record that passes the
/// chunk size, so that the buffer rarely grows.
const SLACK: usize = 2 * ALIGN + (256 << 10);

/// Switches `O_DIRECT` on or off for `file`'s open file description (shared by its
/// clones); false when the file system refuses.
pub fn set_direct(file: &File, on: bool) -> bool {
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own, reading and setting its status flags.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 {
            return false;
        }
        let want = if on { flags | libc::O_DIRECT } else { flags & !libc::O_DIRECT };
        libc::fcntl(fd, libc::F_SETFL, want) == 0
    }
}

/// Writes `bytes` at `at`. Some file systems (FUSE, some network ones) accept `O_DIRECT`
/// in `fcntl` and refuse the write with EINVAL: then `O_DIRECT` goes off for the file and
/// the same bytes are written again through the page cache.
fn write_at_or_cached(file: &File, bytes: &[u8], at: u64) -> io::Result<()> {
    match file.write_all_at(bytes, at) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) && set_direct(file, false) => file.write_all_at(bytes, at),
        r => r,
    }
}

/// Reads the whole file at `path` into `buf` (its contents replaced). A buffer too small for
/// it is replaced by a fresh one whose memory the kernel is asked to back with huge pages
/// (`MADV_HUGEPAGE`, where transparent huge pages are on "madvise"): the read then faults
/// 2 MiB at a time instead of 4 KiB. (A 63 MB input took 16,000 page faults, 2 % of a
/// serial merge's CPU.) A worker reuses its buffer from node to node.
pub fn read_whole(path: &std::path::Path, buf: &mut Vec<u8>) -> io::Result<()> {
    use std::io::Read;
    let mut file = File::open(path)?;
    let len = usize::try_from(file.metadata()?.len()).unwrap_or(usize::MAX);
    buf.clear();
    if buf.capacity() < len {
        // One byte more: `read_to_end` reads until a read returns nothing.
        *buf = Vec::with_capacity(len.saturating_add(1));
        advise_huge_pages(buf);
    }
    file.read_to_end(buf)?;
    Ok(())
}

/// Asks for huge pages under the whole 2 MiB pages inside `buf`'s spare capacity, which
/// nothing has touched yet. Only advice: refused or unsupported, the pages stay small.
fn advise_huge_pages(buf: &mut Vec<u8>) {
    const HUGE: usize = 2 << 20;
    let spare = buf.spare_capacity_mut();
    let (start, end) = (spare.as_ptr() as usize, spare.as_ptr() as usize + spare.len());
    let (from, to) = (start.next_multiple_of(HUGE), end / HUGE * HUGE);
    if from < to {
        // SAFETY: madvise on whole pages of memory this Vec owns; MADV_HUGEPAGE changes
        // how the kernel backs them, not their contents or mapping.
        unsafe { libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_HUGEPAGE) };
    }
}

/// Bytes that sit before `ptr` reaches the next [`ALIGN`]ed address.
fn pad_to_align(ptr: *const u8) -> usize {
    (ALIGN - ptr as usize % ALIGN) % ALIGN
}

thread_local! {
    /// Chunk buffers of the writers this thread dropped, for its next writers: a fresh
    /// buffer costs a page fault per 4 KiB it fills, and a merge worker opens two writers
    /// (two buffers each) for every node (about 7,000 of a 4-node serial merge's faults).
    static SPARE_BUFFERS: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Spare buffers a thread keeps: those of two writers.
const MAX_SPARE_BUFFERS: usize = 4;

/// A buffer that this thread's writers used before, else a new one.
fn spare_buffer() -> Vec<u8> {
    SPARE_BUFFERS.with(|s| s.borrow_mut().pop()).unwrap_or_default()
}

/// Keeps a writer's buffer for the thread's next writer.
fn keep_buffer(v: Vec<u8>) {
    if v.capacity() >= CHUNK + SLACK {
        SPARE_BUFFERS.with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < MAX_SPARE_BUFFERS {
                s.push(v);
            }
        });
    }
}

/// An empty buffer whose data starts at an aligned address: (vector, padding length).
fn aligned_buffer(mut v: Vec<u8>) -> (Vec<u8>, usize) {
    v.clear();
    v.reserve(CHUNK + SLACK);
    let head = pad_to_align(v.as_ptr());
    v.resize(head, 0);
    (v, head)
}

/// A buffered writer of one file (or of a region of one), past the page cache where it can.
pub struct DirectWriter {
    file: Arc<File>,
    direct: bool,
    /// `buf[..head]` is padding that puts `buf[head..]`, the data, at an aligned address.
    buf: Vec<u8>,
    head: usize,
    /// File offset of `buf[head]`: a multiple of [`ALIGN`] while `direct`.
    at: u64,
    /// Where the region of `file` this writer may fill ends (`u64::MAX`: no end); bytes
    /// from there on go to the overflow file instead.
    limit: u64,
    overflow: Option<Overflow>,
    /// Writes the chunks in the background, started at the first chunk.
    thread: Option<ChunkThread>,
    /// A chunk is being written; its buffer comes back from `thread`.
    writing: bool,
}

/// One chunk to write: `buf[from..from + n]` at offset `at` of a region ending at `limit`.
struct Chunk {
    file: Arc<File>,
    overflow: Option<Arc<File>>,
    limit: u64,
    buf: Vec<u8>,
    from: usize,
    n: usize,
    at: u64,
}

/// The thread that writes one writer's chunks in order and hands each buffer back, for
/// the writer's whole life. (A thread per chunk, as before, cost a stack mapping, a clone
/// and an unmapping that interrupts the other cores for every 2 MB: 727 threads in one
/// `bench merge` child.)
struct ChunkThread {
    chunks: Option<mpsc::Sender<Chunk>>,
    written: mpsc::Receiver<io::Result<Vec<u8>>>,
    handle: Option<JoinHandle<()>>,
}

impl ChunkThread {
    fn start() -> io::Result<Self> {
        let (chunks, to_write) = mpsc::channel::<Chunk>();
        let (done, written) = mpsc::channel();
        let handle = std::thread::Builder::new().name("distprof-write".into()).spawn(move || {
            for Chunk { file, overflow, limit, buf, from, n, at } in to_write {
                let r = write_split(&file, overflow.as_deref(), limit, &buf[from..from + n], at);
                // The file goes before the buffer comes back: the writer's owner may take
                // the file out of its Arc as soon as it has the buffer.
                drop((file, overflow));
                if done.send(r.map(|()| buf)).is_err() {
                    break;
                }
            }
        })?;
        Ok(Self { chunks: Some(chunks), written, handle: Some(handle) })
    }
}

impl Drop for ChunkThread {
    fn drop(&mut self) {
        // Closing the channel ends the thread's loop.
        self.chunks = None;
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Where a region writer puts what does not fit its region: a file created (and unlinked
/// at once) when first needed, holding the bytes from the region's end on.
struct Overflow {
    path: std::path::PathBuf,
    file: Option<Arc<File>>,
}

/// Writes `bytes` at file offset `at` of a region ending at `limit`: what lies past the
/// limit goes to `overflow`, at its distance from the limit.
fn write_split(file: &File, overflow: Option<&File>, limit: u64, bytes: &[u8], at: u64) -> io::Result<()> {
    let inside = limit.saturating_sub(at).min(bytes.len() as u64) as usize;
    if inside > 0 {
        write_at_or_cached(file, &bytes[..inside], at)?;
    }
    if inside < bytes.len() {
        let f = overflow.ok_or_else(|| io::Error::other("a region overflowed without an overflow file"))?;
        write_at_or_cached(f, &bytes[inside..], at + inside as u64 - limit)?;
    }
    Ok(())
}

impl DirectWriter {
    /// Writes `file` from its start.
    pub fn new(file: File) -> Self {
        let direct = set_direct(&file, true);
        Self::with_mode(file, direct)
    }

    /// Writes `file` from its start through the page cache: for a temporary file read
    /// back soon and then deleted, whose bytes need never reach the device.
    pub fn cached(file: File) -> Self {
        Self::with_mode(file, false)
    }

    fn with_mode(file: File, direct: bool) -> Self {
        let (buf, head) = aligned_buffer(spare_buffer());
        Self { file: Arc::new(file), direct, buf, head, at: 0, limit: u64::MAX, overflow: None, thread: None, writing: false }
    }

    /// Writes the region of `file` from `start` (a multiple of [`ALIGN`]) to `limit`, while
    /// other writers fill other regions of it; bytes past `limit` go to a file created at
    /// `overflow` when needed. End it with [`Self::finish_region`].
    pub fn region(file: Arc<File>, start: u64, limit: u64, overflow: std::path::PathBuf) -> Self {
        debug_assert!(start % ALIGN as u64 == 0 && limit % ALIGN as u64 == 0);
        let direct = set_direct(&file, true);
        let (buf, head) = aligned_buffer(spare_buffer());
        Self {
            file,
            direct,
            buf,
            head,
            at: start,
            limit,
            overflow: Some(Overflow { path: overflow, file: None }),
            thread: None,
            writing: false,
        }
    }

    /// Whether writes bypass the page cache.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// Where the data goes: append to it, then call [`Self::maybe_flush`].
    #[inline]
    pub fn buf(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// Output position of the next byte appended.
    pub fn pos(&self) -> u64 {
        self.at + (self.buf.len() - self.head) as u64
    }

    /// Overwrites the bytes at output position `at` when they are still in the buffer;
    /// false when they were handed to the device already.
    pub fn patch(&mut self, at: u64, bytes: &[u8]) -> bool {
        if at < self.at {
            return false;
        }
        let i = self.head + (at - self.at) as usize;
        self.buf[i..i + bytes.len()].copy_from_slice(bytes);
        true
    }

    /// Starts writing the gathered chunk once there is one.
    #[inline]
    pub fn maybe_flush(&mut self) -> io::Result<()> {
        if self.buf.len() - self.head >= CHUNK {
            self.flush_aligned()?;
        }
        Ok(())
    }

    /// Waits for the chunk being written; returns its buffer for reuse (with none being
    /// written, a spare one).
    fn wait(&mut self) -> io::Result<Vec<u8>> {
        if !std::mem::take(&mut self.writing) {
            return Ok(spare_buffer());
        }
        let thread = self.thread.as_ref().ok_or_else(|| io::Error::other("a chunk was written without a writer thread"))?;
        thread.written.recv().map_err(|_| io::Error::other("the output writer thread panicked"))?
    }

    /// Starts writing every whole aligned block (everything when not direct) in the
    /// background; the rest moves to the front of the other buffer.
    fn flush_aligned(&mut self) -> io::Result<()> {
        if self.direct && pad_to_align(self.buf[self.head..].as_ptr()) != 0 {
            // The vector grew and moved (a record larger than the slack): realign.
            let (mut v, head) = aligned_buffer(Vec::new());
            v.extend_from_slice(&self.buf[self.head..]);
            (self.buf, self.head) = (v, head);
        }
        let len = self.buf.len() - self.head;
        let n = if self.direct { len / ALIGN * ALIGN } else { len };
        if n == 0 {
            return Ok(());
        }
        let overflow = if self.at + n as u64 > self.limit { Some(self.overflow_file()?) } else { None };
        let (mut next, next_head) = aligned_buffer(self.wait()?);
        next.extend_from_slice(&self.buf[self.head + n..]);
        let full = std::mem::replace(&mut self.buf, next);
        let (from, at, file, limit) = (self.head, self.at, self.file.clone(), self.limit);
        self.head = next_head;
        self.at += n as u64;
        if self.thread.is_none() {
            self.thread = Some(ChunkThread::start()?);
        }
        let chunks = self.thread.as_ref().and_then(|t| t.chunks.as_ref());
        let sent = chunks.is_some_and(|c| c.send(Chunk { file, overflow, limit, buf: full, from, n, at }).is_ok());
        if !sent {
            return Err(io::Error::other("the output writer thread is gone"));
        }
        self.writing = true;
        Ok(())
    }

    /// The overflow file, created on first use: unlinked at once, so it is gone whatever
    /// happens to the process.
    fn overflow_file(&mut self) -> io::Result<Arc<File>> {
        let o = self.overflow.as_mut().ok_or_else(|| io::Error::other("a region overflowed without an overflow file"))?;
        if let Some(f) = &o.file {
            return Ok(f.clone());
        }
        let f = File::options().read(true).write(true).create_new(true).open(&o.path)?;
        std::fs::remove_file(&o.path)?;
        set_direct(&f, self.direct);
        let f = Arc::new(f);
        o.file = Some(f.clone());
        Ok(f)
    }

    /// Ends a region whose bytes are a whole number of [`ALIGN`] blocks: writes them and
    /// returns what the region holds and what overflowed, as pieces to read back.
    pub fn finish_region(mut self, start: u64) -> io::Result<(Part, Option<Part>)> {
        if (self.pos() - start) % ALIGN as u64 != 0 {
            return Err(io::Error::other("a region must end on a block boundary"));
        }
        self.flush_aligned()?;
        keep_buffer(self.wait()?);
        let end = self.pos();
        let inside = end.min(self.limit).saturating_sub(start);
        let region = Part { file: self.file.clone(), from: start, len: inside, read_direct: self.direct };
        let overflow = self.overflow.as_ref().and_then(|o| o.file.clone()).map(|file| Part {
            file,
            from: 0,
            len: end - self.limit,
            read_direct: self.direct,
        });
        Ok((region, overflow))
    }

    /// Writes the whole aligned blocks and waits for them; leaves `O_DIRECT` off.
    fn settle(&mut self) -> io::Result<()> {
        self.flush_aligned()?;
        keep_buffer(self.wait()?);
        if self.direct && !set_direct(&self.file, false) {
            return Err(io::Error::other("cannot switch O_DIRECT off for the last block"));
        }
        Ok(())
    }

    /// The file, once no thread writes to it.
    fn into_file(self) -> io::Result<File> {
        let file = self.file.clone();
        drop(self);
        Arc::try_unwrap(file).map_err(|_| io::Error::other("the output file is still being written"))
    }

    /// Writes everything; returns the file and its length.
    pub fn finish(mut self) -> io::Result<(File, u64)> {
        self.settle()?;
        let tail = &self.buf[self.head..];
        self.file.write_all_at(tail, self.at)?;
        let len = self.at + tail.len() as u64;
        Ok((self.into_file()?, len))
    }

    /// Appends `part`, leaving out its first `skip` bytes: copied by the kernel from file to
    /// file where it can ([`Self::copy_in_kernel`]), the rest through the buffer, read past
    /// the page cache where the file allows.
    pub fn append(&mut self, part: &Part, skip: usize, scratch: &mut Vec<u8>) -> io::Result<()> {
        let skip = (skip as u64).min(part.len);
        let copied = self.copy_in_kernel(part, part.from + skip, part.len - skip)?;
        // The rest is read from a block boundary (reads past the page cache want one) and
        // what lies before it is dropped.
        let start = part.from + skip + copied;
        let from = start - start % ALIGN as u64;
        let rest = Part { file: part.file.clone(), from, len: part.from + part.len - from, read_direct: part.read_direct };
        self.append_buffered(&rest, (start - from) as usize, scratch)
    }

    /// Copies up to `len` bytes of `part`'s file from offset `from` to the output's end with
    /// `copy_file_range`, once everything before them is written: one copy inside the kernel
    /// (none where the file system shares or offloads it) instead of a read into user space,
    /// a copy into the buffer and a write. That copy is the whole cost of assembling the Chrome
    /// JSON where the file system cannot collapse the gaps between fragments (btrfs, tmpfs,
    /// network file systems). Past the page cache only whole blocks. Returns the bytes copied: 0
    /// where the kernel cannot (across file systems, a region writer, unaligned bytes
    /// pending), and the caller copies the rest through the buffer.
    fn copy_in_kernel(&mut self, part: &Part, from: u64, len: u64) -> io::Result<u64> {
        let len = if self.direct { len / ALIGN as u64 * ALIGN as u64 } else { len };
        if len == 0 || self.limit != u64::MAX {
            return Ok(0);
        }
        self.flush_aligned()?;
        self.wait()?;
        if self.buf.len() != self.head {
            return Ok(0);
        }
        let (mut off_in, mut off_out) = (from as libc::loff_t, self.at as libc::loff_t);
        let mut copied = 0u64;
        while copied < len {
            let want = (len - copied).min(1 << 30) as usize;
            // SAFETY: copy_file_range between two descriptors we hold, offsets by pointer.
            let n = unsafe {
                libc::copy_file_range(part.file.as_raw_fd(), &mut off_in, self.file.as_raw_fd(), &mut off_out, want, 0)
            };
            if n < 0 {
                let err = io::Error::last_os_error();
                match err.raw_os_error() {
                    Some(libc::EXDEV | libc::EINVAL | libc::EOPNOTSUPP | libc::ENOSYS | libc::EBADF) => break,
                    _ => return Err(err),
                }
            }
            if n == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "a file ended before the piece to copy"));
            }
            copied += n as u64;
        }
        // A direct writer resumes on a block boundary: what a refused call left over an
        // unaligned count is copied through the buffer instead.
        let copied = if self.direct { copied / ALIGN as u64 * ALIGN as u64 } else { copied };
        self.at += copied;
        Ok(copied)
    }

    /// Appends `part` through the buffer, leaving out its first `skip` bytes.
    fn append_buffered(&mut self, part: &Part, mut skip: usize, scratch: &mut Vec<u8>) -> io::Result<()> {
        let direct = part.read_direct && part.from % ALIGN as u64 == 0 && set_direct(&part.file, true);
        if scratch.len() < CHUNK + ALIGN {
            scratch.resize(CHUNK + ALIGN, 0);
        }
        let pad = pad_to_align(scratch.as_ptr());
        let mut done = 0u64;
        while done < part.len {
            let want = CHUNK.min((part.len - done) as usize);
            // An aligned length for O_DIRECT: what lies past the piece is read and dropped
            // (a read past the file's end returns what there is).
            let ask = if direct { want.div_ceil(ALIGN) * ALIGN } else { want };
            let at = part.from + done;
            let got = match part.file.read_at(&mut scratch[pad..pad + ask], at) {
                // Accepted the flag, refused the read (as for writes: `write_at_or_cached`).
                Err(e) if direct && e.raw_os_error() == Some(libc::EINVAL) && set_direct(&part.file, false) => {
                    part.file.read_at(&mut scratch[pad..pad + ask], at)?
                }
                r => r?,
            };
            if got == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "a file ended before the piece to copy"));
            }
            let got = got.min(want);
            let from = skip.min(got);
            skip -= from;
            self.buf.extend_from_slice(&scratch[pad + from..pad + got]);
            self.maybe_flush()?;
            done += got as u64;
        }
        if direct {
            set_direct(&part.file, false);
        }
        self.maybe_flush()
    }
}

impl Drop for DirectWriter {
    fn drop(&mut self) {
        // A writer dropped on an error path: its thread must not outlive the file's owner.
        if let Ok(v) = self.wait() {
            keep_buffer(v);
        }
        keep_buffer(std::mem::take(&mut self.buf));
    }
}

/// Bytes to copy: `len` bytes of `file` from offset `from`.
pub struct Part {
    pub file: Arc<File>,
    pub from: u64,
    pub len: u64,
    /// Read past the page cache (its bytes are on the device, not in the cache).
    pub read_direct: bool,
}

impl Part {
    /// A whole file on disk.
    pub fn file(file: File) -> io::Result<Self> {
        let len = file.metadata()?.len();
        Ok(Self { file: Arc::new(file), from: 0, len, read_direct: true })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes whose every position differs from its neighbours'.
    fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[2] ^ seed)
            .collect()
    }

    /// A thread's second writer takes the buffers its first one left (no fresh memory to
    /// fault in), and writes only its own bytes, none of the first file's left in them.
    #[test]
    fn a_writer_reuses_the_buffers_of_the_one_before_and_writes_only_its_own_bytes() {
        let tmp = tempfile::tempdir().unwrap();
        let (first, second) = (pattern(2 * CHUNK + 5, 1), pattern(ALIGN + 3, 2));
        let mut w = DirectWriter::new(File::create(tmp.path().join("first")).unwrap());
        w.buf().extend_from_slice(&first);
        w.maybe_flush().unwrap();
        w.finish().unwrap();
        let kept = SPARE_BUFFERS.with(|s| s.borrow().len());
        assert_eq!(kept, 2, "the writer's two buffers are kept");
        let mut w = DirectWriter::new(File::create(tmp.path().join("second")).unwrap());
        assert_eq!(SPARE_BUFFERS.with(|s| s.borrow().len()), 1, "the next writer took one");
        w.buf().extend_from_slice(&second);
        w.finish().unwrap();
        assert!(std::fs::read(tmp.path().join("first")).unwrap() == first);
        assert!(std::fs::read(tmp.path().join("second")).unwrap() == second);
    }

    /// A file read into a buffer holds exactly the file, whether the buffer was new, too
    /// small (replaced by one with huge-page advice: 5 MiB spans whole 2 MiB pages) or
    /// larger and holding an earlier file; a missing file is an error.
    #[test]
    fn read_whole_replaces_the_buffer_with_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let (big, small) = (pattern(5 << 20, 3), pattern(3, 9));
        std::fs::write(tmp.path().join("big"), &big).unwrap();
        std::fs::write(tmp.path().join("small"), &small).unwrap();
        let mut buf = b"old".to_vec();
        read_whole(&tmp.path().join("big"), &mut buf).unwrap();
        assert!(buf == big);
        read_whole(&tmp.path().join("small"), &mut buf).unwrap();
        assert_eq!(buf, small);
        assert!(read_whole(&tmp.path().join("missing"), &mut buf).is_err());
    }

    #[test]
    fn writes_regions_and_appends_byte_exactly_with_and_without_o_direct() {
        // Past the page cache where the temporary directory's file system allows (ext4,
        // xfs, tmpfs since Linux 6.6), and through it (`cached`, the same path as a file
        // system that refuses O_DIRECT): both must give the same bytes.
        type Open = fn(File) -> DirectWriter;
        let modes: [(&str, Open); 2] = [("direct", DirectWriter::new), ("cached", DirectWriter::cached)];
        for (mode, open) in modes {
            let dir = std::env::temp_dir();
            let tmp = tempfile::tempdir_in(&dir).unwrap();
            // Sizes around the alignment and the chunk, odd pieces appended one by one.
            let pieces: Vec<Vec<u8>> = [1usize, ALIGN - 1, 7, CHUNK + 3, 2 * ALIGN, 0, 12_345]
                .iter()
                .enumerate()
                .map(|(k, &n)| pattern(n, k as u8))
                .collect();
            let want: Vec<u8> = pieces.concat();
            let mut w = open(File::create(tmp.path().join("a")).unwrap());
            if mode == "cached" {
                assert!(!w.is_direct());
            }
            for p in &pieces {
                w.buf().extend_from_slice(p);
                w.maybe_flush().unwrap();
            }
            assert_eq!(w.pos(), want.len() as u64);
            let (_, len) = w.finish().unwrap();
            assert_eq!(len, want.len() as u64);
            assert_eq!(
                std::fs::read(tmp.path().join("a")).unwrap(),
                want,
                "{}",
                mode
            );

            // A region of a shared file that overflows into a file of its own, copied back
            // after an odd start dropping its first two bytes; then a whole file.
            let shared = Arc::new(File::options().read(true).write(true).create(true).truncate(true).open(tmp.path().join("shared")).unwrap());
            if mode == "cached" {
                set_direct(&shared, false);
            }
            let body: Vec<u8> = want.iter().copied().chain(std::iter::repeat(b' ')).take(want.len().next_multiple_of(ALIGN)).collect();
            let (start, limit) = (3 * ALIGN as u64, (3 + 256) * ALIGN as u64);
            let mut r = DirectWriter::region(shared.clone(), start, limit, tmp.path().join("overflow"));
            if mode == "cached" {
                r.direct = false;
            }
            for piece in body.chunks(100_003) {
                r.buf().extend_from_slice(piece);
                r.maybe_flush().unwrap();
            }
            assert!(body.len() as u64 > limit - start, "the region must overflow");
            let (inside, overflow) = r.finish_region(start).unwrap();
            let overflow = overflow.expect("bytes past the limit");
            assert_eq!((inside.from, inside.len, overflow.len), (start, limit - start, body.len() as u64 - (limit - start)));
            assert!(!tmp.path().join("overflow").exists(), "the overflow file is unlinked");
            let mut doc = open(File::create(tmp.path().join("doc")).unwrap());
            doc.buf().extend_from_slice(b"head");
            let mut scratch = Vec::new();
            doc.append(&inside, 2, &mut scratch).unwrap();
            doc.append(&overflow, 0, &mut scratch).unwrap();
            let whole = Part::file(File::open(tmp.path().join("a")).unwrap()).unwrap();
            doc.append(&whole, 0, &mut scratch).unwrap();
            doc.finish().unwrap();
            let got = std::fs::read(tmp.path().join("doc")).unwrap();
            assert_eq!(got.len(), 4 + body.len() - 2 + want.len());
            assert!(
                got == [&b"head"[..], &body[2..], &want].concat(),
                "{}",
                mode
            );

            // Whole blocks after a block-aligned start are copied by the kernel, in both
            // modes, into the same bytes.
            let mut doc2 = open(File::create(tmp.path().join("doc2")).unwrap());
            doc2.buf().extend_from_slice(&got[..ALIGN]);
            let copied = doc2.copy_in_kernel(&Part::file(File::open(tmp.path().join("doc")).unwrap()).unwrap(), ALIGN as u64, 3 * ALIGN as u64).unwrap();
            assert_eq!(copied, 3 * ALIGN as u64, "{mode}");
            doc2.finish().unwrap();
            assert!(std::fs::read(tmp.path().join("doc2")).unwrap() == got[..4 * ALIGN], "{mode}");
        }
    }
}
