//! Protobuf wire format, just enough to stream an XSpace without decoding it.
//!
//! Merge rewrites a few integer fields (line timestamps, event offsets and durations, plane
//! ids) and copies every other byte verbatim. Decoding the whole XSpace into messages would
//! cost several times the file size in memory and most of the time.

use super::cursor::Cursor;

/// Reads a varint at `*pos`; None when truncated or overlong.
#[inline(always)]
pub fn read_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let b = *buf.get(*pos)?;
        *pos += 1;
        v |= ((b & 0x7f) as u64) << shift;
        if b < 0x80 {
            return Some(v);
        }
        shift += 7;
        if shift >= 64 {
            return None;
        }
    }
}

/// Wire types used by xplane.proto.
pub const VARINT: u8 = 0;
pub const FIXED64: u8 = 1;
pub const LEN: u8 = 2;
pub const FIXED32: u8 = 5;

/// Malformed protobuf input.
#[derive(Debug, thiserror::Error)]
#[error("malformed protobuf at byte {at}: {what}")]
pub struct WireError {
    pub at: usize,
    pub what: &'static str,
}

/// One field as it sits in the buffer.
#[derive(Debug, Clone, Copy)]
pub struct Field<'a> {
    pub number: u32,
    pub wire_type: u8,
    /// Varint or fixed value (fixed64/32 as raw bits).
    pub int: u64,
    /// Payload of a length-delimited field.
    pub bytes: &'a [u8],
    /// The whole field, tag included, for verbatim copying.
    pub raw: &'a [u8],
}

/// Iterates the fields of one message.
pub struct Fields<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Absolute offset of `buf` in the file, for error messages.
    base: usize,
}

impl<'a> Fields<'a> {
    pub fn new(buf: &'a [u8], base: usize) -> Self {
        Self { buf, pos: 0, base }
    }
    /// Absolute offset of the next field (of the payload of the last field, after `next`).
    pub fn offset_of(&self, payload: &[u8]) -> usize {
        self.base + (payload.as_ptr() as usize - self.buf.as_ptr() as usize)
    }

    fn err(&self, what: &'static str) -> WireError {
        WireError {
            at: self.base + self.pos,
            what,
        }
    }

    #[inline(always)]
    fn varint(&mut self) -> Result<u64, WireError> {
        // Most keys and many values are one byte.
        if let Some(&b) = self.buf.get(self.pos) {
            if b < 0x80 {
                self.pos += 1;
                return Ok(b as u64);
            }
        }
        self.varint_slow()
    }

    #[inline(never)]
    fn varint_slow(&mut self) -> Result<u64, WireError> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = *self
                .buf
                .get(self.pos)
                .ok_or_else(|| self.err("truncated varint"))?;
            self.pos += 1;
            v |= ((b & 0x7f) as u64) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(self.err("varint longer than 10 bytes"))
    }

    /// The payload of the next field when it is a well-formed length-delimited field with
    /// the one-byte key `key` (a line's events): one byte compare and one length instead
    /// of a whole [`Field`]. None at any other or malformed field, which
    /// [`Self::next_field`] then reads or reports.
    #[inline(always)]
    pub fn next_in_run(&mut self, key: u8) -> Option<&'a [u8]> {
        if self.buf.get(self.pos) != Some(&key) {
            return None;
        }
        let mut at = self.pos + 1;
        let len = read_varint(self.buf, &mut at)?;
        let end = at.checked_add(len as usize).filter(|&e| e <= self.buf.len())?;
        self.pos = end;
        Some(&self.buf[at..end])
    }

    /// Skips the run of fields that [`Self::next_in_run`] reads (a line's events, when
    /// only its other fields are wanted).
    #[inline]
    pub fn skip_run(&mut self, key: u8) {
        while self.next_in_run(key).is_some() {}
    }

    #[inline(always)]
    pub fn next_field(&mut self) -> Result<Option<Field<'a>>, WireError> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let start = self.pos;
        let key = self.varint()?;
        let number = (key >> 3) as u32;
        let wire_type = (key & 7) as u8;
        let (mut int, mut bytes) = (0u64, &self.buf[0..0]);
        match wire_type {
            VARINT => int = self.varint()?,
            FIXED64 | FIXED32 => {
                let n = if wire_type == FIXED64 { 8 } else { 4 };
                let s = self
                    .buf
                    .get(self.pos..self.pos + n)
                    .ok_or_else(|| self.err("truncated fixed field"))?;
                let mut b = [0u8; 8];
                b[..n].copy_from_slice(s);
                int = u64::from_le_bytes(b);
                self.pos += n;
            }
            LEN => {
                let len = self.varint()? as usize;
                let end = self
                    .pos
                    .checked_add(len)
                    .filter(|&e| e <= self.buf.len())
                    .ok_or_else(|| self.err("length past end of message"))?;
                bytes = &self.buf[self.pos..end];
                self.pos = end;
            }
            _ => {
                return Err(self.err("unsupported wire type (groups are not used by xplane.proto)"))
            }
        }
        Ok(Some(Field {
            number,
            wire_type,
            int,
            bytes,
            raw: &self.buf[start..self.pos],
        }))
    }
}

/// Every field of a message, in order: for tests, on a buffer they built themselves.
#[cfg(test)]
pub fn fields_of(buf: &[u8]) -> Vec<Field<'_>> {
    let mut f = Fields::new(buf, 0);
    std::iter::from_fn(|| f.next_field().unwrap()).collect()
}

/// Bytes of varint `v`: its significant bits over 7, rounded up, as `(9 bits + 64) / 64`
/// (exact for 1 to 64 bits) with a shift instead of a division.
#[inline(always)]
pub fn varint_len(v: u64) -> usize {
    let bits = 64 - (v | 1).leading_zeros() as usize;
    (bits * 9 + 64) >> 6
}

/// Appends varint `v`. Below 2^56 (every offset and duration of a trace shorter than 20
/// hours) its 7-bit groups are spread into bytes all at once (three shift-and-mask steps:
/// 28-bit halves into 32-bit lanes, 14-bit quarters into 16-bit lanes, 7-bit groups into
/// bytes), the continuation bits set on all bytes but the last, and written with one
/// 8-byte move instead of a loop of one push per byte. One byte (keys, most lengths) is
/// one push.
#[inline(always)]
pub fn write_varint(out: &mut Cursor<'_>, v: u64) {
    if v < 0x80 {
        return out.push(v as u8);
    }
    if v >= 1 << 56 {
        return write_varint_long(out, v);
    }
    let n = varint_len(v);
    let mut x = v;
    x = (x & 0x0000_0000_0fff_ffff) | ((x & 0x00ff_ffff_f000_0000) << 4);
    x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x0fff_c000_0fff_c000) << 2);
    x = (x & 0x007f_007f_007f_007f) | ((x & 0x3f80_3f80_3f80_3f80) << 1);
    let more = 0x8080_8080_8080_8080u64 & ((1u64 << (8 * (n - 1))) - 1);
    out.put_fixed((x | more).to_le_bytes(), n);
}

#[cold]
fn write_varint_long(out: &mut Cursor<'_>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends an int64 varint field (proto3: zero is not written).
#[inline(always)]
pub fn write_int_field(out: &mut Cursor<'_>, number: u32, v: i64) {
    if v != 0 {
        write_varint(out, ((number as u64) << 3) | VARINT as u64);
        write_varint(out, v as u64);
    }
}

/// Appends the key and length of a length-delimited field.
#[inline(always)]
pub fn write_len_header(out: &mut Cursor<'_>, number: u32, len: usize) {
    write_varint(out, ((number as u64) << 3) | LEN as u64);
    write_varint(out, len as u64);
}

// The `put_*` forms write straight to a `Vec` (planes, lines, metadata: once per message,
// not per event) through the `write_*` forms above.

pub fn put_varint(out: &mut Vec<u8>, v: u64) {
    write_varint(&mut Cursor::new(out), v);
}

pub fn put_key(out: &mut Vec<u8>, number: u32, wire_type: u8) {
    put_varint(out, ((number as u64) << 3) | wire_type as u64);
}

/// Size of an int64 varint field (proto3: zero is not written).
#[inline(always)]
pub fn int_field_len(number: u32, v: i64) -> usize {
    if v == 0 {
        0
    } else {
        varint_len(((number as u64) << 3) | VARINT as u64) + varint_len(v as u64)
    }
}

pub fn put_int_field(out: &mut Vec<u8>, number: u32, v: i64) {
    write_int_field(&mut Cursor::new(out), number, v);
}

/// Size of a length-delimited field with a payload of `len` bytes.
pub fn len_field_len(number: u32, len: usize) -> usize {
    varint_len(((number as u64) << 3) | LEN as u64) + varint_len(len as u64) + len
}

pub fn put_len_header(out: &mut Vec<u8>, number: u32, len: usize) {
    write_len_header(&mut Cursor::new(out), number, len);
}

#[cfg(test)]
mod tests {
    use super::*;
    use distprof::xplane::{XEvent, XEventData, XLine};
    use prost::Message;

    #[test]
    fn skip_run_passes_a_run_of_fields_and_leaves_the_rest_to_next_field() {
        // Three events (field 4), a timestamp (field 3), then an event whose length runs
        // past the end: the run is skipped, the timestamp read, the bad event reported.
        let mut buf = Vec::new();
        for payload in [&b"ab"[..], b"", b"cde"] {
            put_len_header(&mut buf, 4, payload.len());
            buf.extend_from_slice(payload);
        }
        put_int_field(&mut buf, 3, 300);
        buf.extend_from_slice(&[0x22, 9, 1]);
        let mut f = Fields::new(&buf, 100);
        f.skip_run(0x22);
        let ts = f.next_field().unwrap().unwrap();
        assert_eq!((ts.number, ts.int), (3, 300));
        f.skip_run(0x22);
        let err = f.next_field().unwrap_err();
        assert_eq!(err.what, "length past end of message");
        assert_eq!(err.at, 100 + buf.len() - 1);
    }

    #[test]
    fn reads_what_prost_writes() {
        let line = XLine {
            id: 5,
            name: "n".into(),
            timestamp_ns: -7,
            events: vec![XEvent {
                metadata_id: 300,
                data: Some(XEventData::OffsetPs(1 << 40)),
                duration_ps: 1,
                stats: vec![],
            }],
            ..Default::default()
        };
        let buf = line.encode_to_vec();
        let mut f = Fields::new(&buf, 0);
        let mut seen = Vec::new();
        while let Some(x) = f.next_field().unwrap() {
            seen.push((x.number, x.wire_type, x.int as i64, x.bytes.len()));
        }
        assert_eq!(seen[0], (1, VARINT, 5, 0));
        assert_eq!(seen[1], (2, LEN, 0, 1));
        assert_eq!(seen[2], (3, VARINT, -7, 0));
        assert_eq!(seen[3].0, 4);
        // Every length on both sides of each 7-bit boundary and a spread of values, against
        // the one-byte-at-a-time encoding (and prost's reading of it).
        let edges = (0..64).flat_map(|b| [(1u64 << b) - 1, 1 << b, (1 << b) + 1]);
        let spread = (0..20_000u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (i % 64));
        for v in edges.chain(spread).chain([0, u64::MAX]) {
            let mut out = vec![0xaa];
            put_varint(&mut out, v);
            let mut want = vec![0xaa];
            let mut x = v;
            while x >= 0x80 {
                want.push((x as u8) | 0x80);
                x >>= 7;
            }
            want.push(x as u8);
            assert_eq!(out, want, "{v}");
            assert_eq!(out.len() - 1, varint_len(v), "{v}");
            let mut pos = 1;
            assert_eq!(read_varint(&out, &mut pos), Some(v), "{v}");
            assert_eq!(pos, out.len(), "{v}");
            // With more bytes after it: the same value and length, whatever follows.
            for tail in [0x00, 0xff] {
                let mut more = out.clone();
                more.resize(out.len() + 9, tail);
                let mut pos = 1;
                assert_eq!(read_varint(&more, &mut pos), Some(v), "{v} before {tail:#x}");
                assert_eq!(pos, out.len(), "{v} before {tail:#x}");
                let mut f = Fields::new(&more[1..], 0);
                assert_eq!(f.varint().unwrap(), v, "{v} before {tail:#x}");
                assert_eq!(f.pos, out.len() - 1, "{v} before {tail:#x}");
            }
        }
    }

    #[test]
    fn truncated_input_is_an_error_not_a_panic() {
        let line = XLine {
            id: 5,
            name: "name".into(),
            ..Default::default()
        }
        .encode_to_vec();
        for cut in 1..line.len() {
            let mut f = Fields::new(&line[..cut], 0);
            let mut r = Ok(None);
            for _ in 0..10 {
                r = f.next_field();
                if !matches!(r, Ok(Some(_))) {
                    break;
                }
            }
            assert!(r.is_err() || cut == 2, "cut {cut}: {r:?}");
        }
    }
}
