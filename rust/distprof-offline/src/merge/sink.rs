//! Output for the one-pass rewrite: a buffered file writer whose length prefixes are written
//! as fixed-width placeholders and patched once the message is complete.
//!
//! Protobuf parsers accept non-minimal varints (a 5-byte varint with continuation bits is
//! valid up to 2^35), so a message can be streamed before its length is known. The patch
//! lands in the buffer when the message is still there, else it is written once the file
//! is complete, so memory stays at the buffer size however large a plane or line is. The
//! bytes go past the page cache where the file system allows (`direct_io`).

use super::direct_io::DirectWriter;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// Width of a placeholder length: 5 varint bytes hold up to 2^35 - 1 (32 GiB).
pub const PLACEHOLDER_LEN: usize = 5;

pub struct PatchWriter {
    out: DirectWriter,
    /// Lengths whose bytes had left the buffer: (file offset, value), written at the end.
    late: Vec<(u64, [u8; PLACEHOLDER_LEN])>,
}

impl PatchWriter {
    pub fn new(file: File) -> Self {
        Self { out: DirectWriter::new(file), late: Vec::new() }
    }

    /// Absolute output position of the next byte.
    pub fn pos(&self) -> u64 {
        self.out.pos()
    }

    #[inline]
    pub fn buf(&mut self) -> &mut Vec<u8> {
        self.out.buf()
    }

    /// Flushes when the buffer is full; call between messages.
    #[inline]
    pub fn maybe_flush(&mut self) -> io::Result<()> {
        self.out.maybe_flush()
    }

    /// Writes a placeholder length and returns its position for [`Self::patch_len`].
    pub fn placeholder(&mut self) -> u64 {
        let at = self.pos();
        self.buf().extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x00]);
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
        if !self.out.patch(at, &v) {
            self.late.push((at, v));
        }
        Ok(())
    }

    /// Writes everything; returns the total bytes written.
    pub fn finish(self) -> io::Result<u64> {
        let (file, len) = self.out.finish()?;
        for (at, v) in &self.late {
            file.write_all_at(v, *at)?;
        }
        Ok(len)
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
        assert!(n > crate::merge::direct_io::CHUNK as u64);
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
