//! Protobuf wire format, just enough to stream an XSpace without decoding it.
//!
//! Merge rewrites a few integer fields (line timestamps, event offsets and durations, plane
//! ids) and copies every other byte verbatim. Decoding the whole XSpace into messages would
//! cost several times the file size in memory and most of the time.

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

    /// Skips the run of well-formed length-delimited fields with one-byte key `key` at the
    /// current position (a line's events, when only its other fields are wanted): one
    /// byte compare and one length per field instead of a whole [`Field`]. Stops at the
    /// first other or malformed field, which [`Self::next_field`] then reads or reports.
    #[inline]
    pub fn skip_run(&mut self, key: u8) {
        while self.buf.get(self.pos) == Some(&key) {
            let mut at = self.pos + 1;
            let Some(end) = read_varint(self.buf, &mut at)
                .and_then(|len| at.checked_add(len as usize))
                .filter(|&e| e <= self.buf.len())
            else {
                return;
            };
            self.pos = end;
        }
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

pub fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn put_key(out: &mut Vec<u8>, number: u32, wire_type: u8) {
    put_varint(out, ((number as u64) << 3) | wire_type as u64);
}

/// Size of an int64 varint field (proto3: zero is not written).
pub fn int_field_len(number: u32, v: i64) -> usize {
    if v == 0 {
        0
    } else {
        varint_len(((number as u64) << 3) | VARINT as u64) + varint_len(v as u64)
    }
}

pub fn put_int_field(out: &mut Vec<u8>, number: u32, v: i64) {
    if v != 0 {
        put_key(out, number, VARINT);
        put_varint(out, v as u64);
    }
}

/// Size of a length-delimited field with a payload of `len` bytes.
pub fn len_field_len(number: u32, len: usize) -> usize {
    varint_len(((number as u64) << 3) | LEN as u64) + varint_len(len as u64) + len
}

pub fn put_len_header(out: &mut Vec<u8>, number: u32, len: usize) {
    put_key(out, number, LEN);
    put_varint(out, len as u64);
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
        for v in [0u64, 1, 127, 128, 1 << 35, u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v).max(1), "{v}");
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
