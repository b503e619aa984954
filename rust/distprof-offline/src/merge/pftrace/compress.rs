//! Perfetto's compressed packets: runs of a fragment's packets deflated into one
//! `TracePacket.compressed_packets` (field 50), a zlib stream of `Trace.packet` entries that
//! the trace processor inflates on import and reads as if they stood in the file there
//! (v20.1 does, checked by `tests/perfetto/check_merged.py --self-test`).
//!
//! Each worker deflates its own packets as it writes them, so the work spreads over the
//! cores like the rest of the rewrite, and a fragment stays a run of whole packets that
//! concatenates with the others (`chrome_doc`). The packets inside keep their sequence id
//! and order: the incremental state (the line's defaults, interned names, incremental
//! clock) is read in file order across compressed packets as across plain ones, so a run
//! may end anywhere between two packets.
//!
//! Why not a gzip file: the trace processor of v20.1 reads a gzip-compressed trace, but
//! only its first gzip member (it stops without an error where the second starts), and
//! fragments deflated by many workers are many members.

use super::super::cursor::Cursor;
use super::super::protobuf;
use super::fields::COMPRESSED_PACKETS;
use super::PACKET;
use std::io;

/// Raw packet bytes deflated into one compressed packet. Deflate's window is 32 KiB, so
/// larger runs compress hardly better (the bench input: 9.44 bytes per slice at 64 KiB, 9.41
/// at 256 KiB); this one stays in the core's cache with the compressor's tables.
pub const RAW_RUN: usize = 128 << 10;

/// zlib's level 1 (zlib-rs: its `deflate_quick`, static Huffman codes): on the bench's
/// GPU-like input 3.9x smaller at about 750 MB/s of raw packets per core, where level 2
/// gives 5.7x at about 400 MB/s (docs/merge.md has the figures).
const LEVEL: u32 = 1;

/// The packets of a fragment gathered until they make a run, and the compressor.
pub struct PacketRuns {
    /// Whole `Trace.packet` fields, key and length included.
    raw: Vec<u8>,
    deflated: Vec<u8>,
    /// None: the runs are written as they are (`PftraceCompression::None`).
    z: Option<flate2::Compress>,
}

impl PacketRuns {
    pub fn new(compression: PftraceCompression) -> Self {
        let z = match compression {
            PftraceCompression::Deflate => Some(flate2::Compress::new(flate2::Compression::new(LEVEL), true)),
            PftraceCompression::None => None,
        };
        Self { raw: Vec::with_capacity(RAW_RUN + (64 << 10)), deflated: Vec::new(), z }
    }

    /// Where the packets go.
    #[inline(always)]
    pub fn buf(&mut self) -> &mut Vec<u8> {
        &mut self.raw
    }

    /// Whether the packets gathered make a run.
    #[inline(always)]
    pub fn is_full(&self) -> bool {
        self.raw.len() >= RAW_RUN
    }

    /// Appends the packets gathered (if any) to `out`: deflated into one packet, or as
    /// they are.
    pub fn flush(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        let Some(z) = &mut self.z else {
            out.extend_from_slice(&self.raw);
            self.raw.clear();
            return Ok(());
        };
        if self.raw.is_empty() {
            return Ok(());
        }
        z.reset();
        self.deflated.clear();
        // Room for the usual case (a third of the input and less); the loop gives more to
        // the rare run that does not fit.
        self.deflated.reserve(self.raw.len() / 2 + 64);
        loop {
            let status = z.compress_vec(&self.raw[z.total_in() as usize..], &mut self.deflated, flate2::FlushCompress::Finish).map_err(io::Error::other)?;
            if status == flate2::Status::StreamEnd {
                break;
            }
            self.deflated.reserve(self.raw.len() / 2 + 64);
        }
        let field_len = protobuf::len_field_len(COMPRESSED_PACKETS, self.deflated.len());
        let mut c = Cursor::new(out);
        protobuf::write_len_header(&mut c, PACKET, field_len);
        protobuf::write_len_header(&mut c, COMPRESSED_PACKETS, self.deflated.len());
        c.put(&self.deflated);
        drop(c);
        self.raw.clear();
        Ok(())
    }
}

/// How `merged.pftrace` stores its packets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PftraceCompression {
    /// Deflated in runs of [`RAW_RUN`] bytes, each one `compressed_packets` packet.
    #[default]
    Deflate,
    /// Plain packets, for tools that cannot inflate `compressed_packets`.
    None,
}

impl std::str::FromStr for PftraceCompression {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "deflate" => Ok(Self::Deflate),
            "none" => Ok(Self::None),
            other => Err(format!("`{other}` is no pftrace compression: give `deflate` (the default) or `none` (plain packets, for tools that cannot inflate Perfetto's compressed_packets)")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merge::protobuf::Fields;
    use std::io::Read;

    #[test]
    fn a_run_is_one_packet_whose_field_inflates_to_the_packets_gathered() {
        let mut runs = PacketRuns::new(PftraceCompression::Deflate);
        let mut out = Vec::new();
        runs.flush(&mut out).unwrap();
        assert!(out.is_empty(), "no packets, no compressed packet");
        // Packets of varied bytes, more than fit in one run.
        let mut want = Vec::new();
        let mut k = 0u64;
        while !runs.is_full() {
            let body: Vec<u8> = (0..(k % 90) as u8).map(|b| b.wrapping_mul(k as u8)).collect();
            let mut c = Cursor::new(runs.buf());
            protobuf::write_len_header(&mut c, PACKET, body.len());
            c.put(&body);
            drop(c);
            k += 1;
        }
        want.extend_from_slice(&runs.raw);
        runs.flush(&mut out).unwrap();
        assert!(runs.raw.is_empty());
        let mut f = Fields::new(&out, 0);
        let packet = f.next_field().unwrap().unwrap();
        assert_eq!((packet.number, packet.wire_type), (PACKET, protobuf::LEN));
        assert!(f.next_field().unwrap().is_none(), "one packet");
        let mut g = Fields::new(packet.bytes, 0);
        let field = g.next_field().unwrap().unwrap();
        assert_eq!(field.number, COMPRESSED_PACKETS);
        let mut inflated = Vec::new();
        flate2::read::ZlibDecoder::new(field.bytes).read_to_end(&mut inflated).unwrap();
        assert!(inflated == want, "{} bytes inflated, {} gathered", inflated.len(), want.len());
        assert!(field.bytes.len() < want.len() / 2, "{} of {}: deflated", field.bytes.len(), want.len());
    }

    #[test]
    fn compression_names_parse_and_others_are_refused_with_the_choices() {
        assert_eq!("deflate".parse(), Ok(PftraceCompression::Deflate));
        assert_eq!("none".parse(), Ok(PftraceCompression::None));
        let e = "gzip".parse::<PftraceCompression>().unwrap_err();
        assert!(e.contains("`gzip`") && e.contains("deflate") && e.contains("none"), "{e}");
    }
}
