//! Output for the one-pass rewrite: a buffered file writer whose length prefixes are written
//! as fixed-width placeholders and patched once the message is complete.
//!
//! Protobuf parsers accept non-minimal varints (a 5-byte varint with continuation bits is
//! valid up to 2^35), so a message can be streamed before its length is known. The patch
//! lands in the buffer when the message is still there, else through a seek, so memory stays
//! at the buffer size however large a plane or line is.

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};

/// Width of a placeholder length: 5 varint bytes hold up to 2^35 - 1 (32 GiB).
pub const PLACEHOLDER_LEN: usize = 5;
/// Flush threshold of the buffer.
const BUFFER_BYTES: usize = 4 << 20;

pub struct PatchWriter {
    file: File,
    buf: Vec<u8>,
    /// Bytes already written to the file.
    flushed: u64,
}

impl PatchWriter {
    pub fn new(file: File) -> Self {
        Self {
            file,
            buf: Vec::with_capacity(BUFFER_BYTES + (64 << 10)),
            flushed: 0,
        }
    }

    /// Absolute output position of the next byte.
    pub fn pos(&self) -> u64 {
        self.flushed + self.buf.len() as u64
    }

    #[inline]
    pub fn buf(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// Flushes when the buffer is full; call between messages.
    #[inline]
    pub fn maybe_flush(&mut self) -> io::Result<()> {
        if self.buf.len() >= BUFFER_BYTES {
            self.flush_buf()?;
        }
        Ok(())
    }

    fn flush_buf(&mut self) -> io::Result<()> {
        self.file.write_all(&self.buf)?;
        self.flushed += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Writes a placeholder length and returns its position for [`Self::patch_len`].
    pub fn placeholder(&mut self) -> u64 {
        let at = self.pos();
        self.buf.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x00]);
        at
    }

    /// Fills the placeholder at `at` with the length of everything written after it.
    pub fn patch_len(&mut self, at: u64) -> io::Result<()> {
        let len = self.pos() - at - PLACEHOLDER_LEN as u64;
        if len >= 1 << 35 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "message longer than 32 GiB",
            ));
        }
        let mut v = [0u8; PLACEHOLDER_LEN];
        for (i, b) in v.iter_mut().enumerate() {
            *b = ((len >> (7 * i)) & 0x7f) as u8 | if i + 1 < PLACEHOLDER_LEN { 0x80 } else { 0 };
        }
        if at >= self.flushed {
            let i = (at - self.flushed) as usize;
            self.buf[i..i + PLACEHOLDER_LEN].copy_from_slice(&v);
        } else {
            self.flush_buf()?;
            self.file.seek(SeekFrom::Start(at))?;
            self.file.write_all(&v)?;
            self.file.seek(SeekFrom::Start(self.flushed))?;
        }
        Ok(())
    }

    /// Flushes everything; returns the total bytes written.
    pub fn finish(mut self) -> io::Result<u64> {
        self.flush_buf()?;
        self.file.flush()?;
        Ok(self.flushed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use distprof::xplane::{XLine, XPlane, XSpace};
    use prost::Message;

    #[test]
    fn padded_lengths_parse_in_and_out_of_the_buffer() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("x.pb");
        let mut w = PatchWriter::new(File::create(&path).unwrap());
        let name = "n".repeat(300);
        // Plane 1 small (patched in the buffer), plane 2 larger than the buffer (patched by seek).
        for (id, lines) in [(1i64, 2usize), (2, 20_000)] {
            w.buf().push(0x0a); // XSpace.planes
            let at = w.placeholder();
            crate::merge::protobuf::put_int_field(w.buf(), 1, id);
            for l in 0..lines {
                let line = XLine {
                    id: l as i64,
                    name: name.clone(),
                    ..Default::default()
                }
                .encode_to_vec();
                crate::merge::protobuf::put_len_header(w.buf(), 3, line.len());
                w.buf().extend_from_slice(&line);
                w.maybe_flush().unwrap();
            }
            w.patch_len(at).unwrap();
        }
        let n = w.finish().unwrap();
        assert!(n > BUFFER_BYTES as u64);
        let space = XSpace::decode(std::fs::read(&path).unwrap().as_slice()).unwrap();
        assert_eq!(
            space
                .planes
                .iter()
                .map(|p: &XPlane| (p.id, p.lines.len()))
                .collect::<Vec<_>>(),
            vec![(1, 2), (2, 20_000)]
        );
    }
}
