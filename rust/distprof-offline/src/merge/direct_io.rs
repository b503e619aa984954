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
//! is written by a thread of its own while the next chunk fills a second buffer. File
//! systems that refuse `O_DIRECT` (tmpfs, some network file systems) get ordinary writes of
//! the same bytes.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
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
fn set_direct(file: &File, on: bool) -> bool {
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

/// Bytes that sit before `ptr` reaches the next [`ALIGN`]ed address.
fn pad_to_align(ptr: *const u8) -> usize {
    (ALIGN - ptr as usize % ALIGN) % ALIGN
}

/// An empty buffer whose data starts at an aligned address: (vector, padding length).
fn aligned_buffer(mut v: Vec<u8>) -> (Vec<u8>, usize) {
    v.clear();
    v.reserve(CHUNK + SLACK);
    let head = pad_to_align(v.as_ptr());
    v.resize(head, 0);
    (v, head)
}

/// A buffered writer of one file from offset 0, past the page cache where it can.
pub struct DirectWriter {
    file: Arc<File>,
    direct: bool,
    /// `buf[..head]` is padding that puts `buf[head..]`, the data, at an aligned address.
    buf: Vec<u8>,
    head: usize,
    /// File offset of `buf[head]`: a multiple of [`ALIGN`] while `direct`.
    at: u64,
    /// The chunk being written; it hands its buffer back.
    writing: Option<JoinHandle<io::Result<Vec<u8>>>>,
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
        let (buf, head) = aligned_buffer(Vec::new());
        Self { file: Arc::new(file), direct, buf, head, at: 0, writing: None }
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

    /// Waits for the chunk being written; returns its buffer for reuse.
    fn wait(&mut self) -> io::Result<Vec<u8>> {
        match self.writing.take() {
            Some(w) => w.join().map_err(|_| io::Error::other("the output writer thread panicked"))?,
            None => Ok(Vec::new()),
        }
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
        let (mut next, next_head) = aligned_buffer(self.wait()?);
        next.extend_from_slice(&self.buf[self.head + n..]);
        let full = std::mem::replace(&mut self.buf, next);
        let (from, at, file) = (self.head, self.at, self.file.clone());
        self.head = next_head;
        self.at += n as u64;
        self.writing = Some(std::thread::spawn(move || {
            write_at_or_cached(&file, &full[from..from + n], at)?;
            Ok(full)
        }));
        Ok(())
    }

    /// Writes the whole aligned blocks and waits for them; leaves `O_DIRECT` off.
    fn settle(&mut self) -> io::Result<()> {
        self.flush_aligned()?;
        self.wait()?;
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

    /// Writes the whole aligned blocks and keeps the tail in memory: a part to append to
    /// another file later ([`Part`]).
    pub fn into_part(mut self) -> io::Result<Part> {
        self.settle()?;
        let tail = self.buf[self.head..].to_vec();
        let (on_disk, read_direct) = (self.at, self.direct);
        Ok(Part { file: self.into_file()?, on_disk, tail, read_direct })
    }

    /// Appends `part` (its file's first `on_disk` bytes, then its tail), leaving out its
    /// first `skip` bytes. Reads past the page cache where the file allows.
    pub fn append(&mut self, part: &Part, mut skip: usize, scratch: &mut Vec<u8>) -> io::Result<()> {
        let direct = part.read_direct && set_direct(&part.file, true);
        if scratch.len() < CHUNK + ALIGN {
            scratch.resize(CHUNK + ALIGN, 0);
        }
        let pad = pad_to_align(scratch.as_ptr());
        let mut at = 0u64;
        while at < part.on_disk {
            let want = CHUNK.min((part.on_disk - at) as usize);
            // An aligned length for O_DIRECT: the file ends at `on_disk`, so a read past it
            // returns what there is.
            let ask = if direct { want.div_ceil(ALIGN) * ALIGN } else { want };
            let got = match part.file.read_at(&mut scratch[pad..pad + ask], at) {
                // Accepted the flag, refused the read (as for writes: `write_at_or_cached`).
                Err(e) if direct && e.raw_os_error() == Some(libc::EINVAL) && set_direct(&part.file, false) => {
                    part.file.read_at(&mut scratch[pad..pad + ask], at)?
                }
                r => r?,
            };
            if got == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "a part file ended early"));
            }
            let got = got.min(want);
            let from = skip.min(got);
            skip -= from;
            self.buf.extend_from_slice(&scratch[pad + from..pad + got]);
            self.maybe_flush()?;
            at += got as u64;
        }
        if direct {
            set_direct(&part.file, false);
        }
        self.buf.extend_from_slice(&part.tail[skip.min(part.tail.len())..]);
        self.maybe_flush()
    }
}

impl Drop for DirectWriter {
    fn drop(&mut self) {
        // A writer dropped on an error path: its thread must not outlive the file's owner.
        let _ = self.wait();
    }
}

/// Bytes written elsewhere for later: a file's first `on_disk` bytes, then `tail`.
pub struct Part {
    pub file: File,
    pub on_disk: u64,
    pub tail: Vec<u8>,
    /// Read past the page cache (its bytes are on the device, not in the cache).
    pub read_direct: bool,
}

impl Part {
    /// A whole file on disk.
    pub fn file(file: File) -> io::Result<Self> {
        let on_disk = file.metadata()?.len();
        Ok(Self {
            file,
            on_disk,
            tail: Vec::new(),
            read_direct: true,
        })
    }

    /// Its first bytes (at most `n`), read without moving anything.
    pub fn first_bytes(&self, n: usize) -> io::Result<Vec<u8>> {
        let from_disk = (n as u64).min(self.on_disk) as usize;
        let mut out = vec![0u8; from_disk];
        if from_disk > 0 {
            // Buffered: O_DIRECT is off except while a writer or `append` has it on.
            self.file.read_exact_at(&mut out, 0)?;
        }
        out.extend_from_slice(&self.tail[..(n - from_disk).min(self.tail.len())]);
        Ok(out)
    }

    pub fn len(&self) -> u64 {
        self.on_disk + self.tail.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
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

    #[test]
    fn writes_parts_and_appends_byte_exactly_with_and_without_o_direct() {
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

            // A part (aligned body on disk, tail in memory) appended after an odd start,
            // dropping its first two bytes; and a whole file appended as a part.
            let part_path = tmp.path().join("part");
            let mut p = open(
                File::options()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .open(&part_path)
                    .unwrap(),
            );
            p.buf().extend_from_slice(&want);
            let part = p.into_part().unwrap();
            assert_eq!(part.len(), want.len() as u64);
            assert_eq!(part.first_bytes(5).unwrap(), want[..5]);
            let mut doc = open(File::create(tmp.path().join("doc")).unwrap());
            doc.buf().extend_from_slice(b"head");
            let mut scratch = Vec::new();
            doc.append(&part, 2, &mut scratch).unwrap();
            let whole = Part::file(File::open(tmp.path().join("a")).unwrap()).unwrap();
            doc.append(&whole, 0, &mut scratch).unwrap();
            doc.finish().unwrap();
            let got = std::fs::read(tmp.path().join("doc")).unwrap();
            assert_eq!(got.len(), 4 + want.len() - 2 + want.len());
            assert!(
                got == [&b"head"[..], &want[2..], &want].concat(),
                "{}",
                mode
            );
        }
    }
}
