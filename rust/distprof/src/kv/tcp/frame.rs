//! Wire format of the TCP store: length-prefixed frames, little-endian, size-limited.
//!
//! ```text
//! frame    = len:u32 body[len]            (len <= MAX_FRAME_BYTES)
//! body     = op:u8 fields
//! string   = n:u32 bytes[n]               (UTF-8; keys <= MAX_KEY_BYTES, values <= MAX_VALUE_BYTES)
//! requests : HELLO magic:"DPKV" version:u16 secret | GET key timeout_ms:u64 | TRY_GET key | SET key value
//! replies  : OK | VALUE value | NOT_FOUND | TIMEOUT | ERROR message | BUSY message
//! ```
//! Every connection starts with HELLO so that a client pointed at the wrong port gets a
//! clear error instead of waiting on a service that speaks another protocol. The HELLO
//! carries the store secret (empty when the cluster sets none), checked before the server
//! keeps any state for the connection. BUSY refuses a connection for now (the server is
//! full): the client tries again until its own deadline.

use crate::kv::{MAX_KEY_BYTES, MAX_VALUE_BYTES};
use std::io::{self, Read, Write};

pub const MAGIC: &[u8; 4] = b"DPKV";
pub const VERSION: u16 = 2;
/// The largest secret a HELLO may carry.
pub const MAX_SECRET_BYTES: usize = 256;
/// The largest frame read before the handshake: a HELLO with the largest secret. A peer
/// that has not said HELLO cannot make the server allocate more.
pub const MAX_HELLO_FRAME_BYTES: usize = 1 + 4 + 2 + 4 + MAX_SECRET_BYTES;
/// The largest frame: a SET with the largest key and value plus field headers.
pub const MAX_FRAME_BYTES: usize = MAX_VALUE_BYTES + MAX_KEY_BYTES + 64;
/// Error messages from the server are short; longer ones are cut, not refused.
const MAX_MESSAGE_BYTES: usize = 4096;

const OP_HELLO: u8 = 0x01;
const OP_GET: u8 = 0x02;
const OP_TRY_GET: u8 = 0x03;
const OP_SET: u8 = 0x04;
const OP_OK: u8 = 0x80;
const OP_VALUE: u8 = 0x81;
const OP_NOT_FOUND: u8 = 0x82;
const OP_TIMEOUT: u8 = 0x83;
const OP_ERROR: u8 = 0x84;
const OP_BUSY: u8 = 0x85;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Hello { version: u16, secret: String },
    Get { key: String, timeout_ms: u64 },
    TryGet { key: String },
    Set { key: String, value: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    Ok,
    Value(String),
    NotFound,
    Timeout,
    Error(String),
    /// Refused for now (server full); worth retrying.
    Busy(String),
}

/// Why a frame could not be read: the connection failed, or the peer sent bytes that are
/// not our protocol (which no retry will fix).
#[derive(Debug)]
pub enum FrameError {
    Io(io::Error),
    Malformed(String),
}

impl From<io::Error> for FrameError {
    fn from(e: io::Error) -> Self {
        FrameError::Io(e)
    }
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Io(e) => write!(f, "{e}"),
            FrameError::Malformed(m) => write!(f, "{m}"),
        }
    }
}

fn put_str(buf: &mut Vec<u8>, s: &str) {
    buf.extend_from_slice(&(s.len() as u32).to_le_bytes());
    buf.extend_from_slice(s.as_bytes());
}

fn write_frame(w: &mut impl Write, body: &[u8]) -> io::Result<()> {
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(body);
    w.write_all(&frame)?;
    w.flush()
}

pub fn write_request(w: &mut impl Write, req: &Request) -> io::Result<()> {
    let mut body = Vec::new();
    match req {
        Request::Hello { version, secret } => {
            body.push(OP_HELLO);
            body.extend_from_slice(MAGIC);
            body.extend_from_slice(&version.to_le_bytes());
            // Version 1 had no secret; its HELLO stays byte for byte what it was, so that
            // an old peer gets the version error, not a frame error.
            if *version >= 2 {
                put_str(&mut body, secret);
            }
        }
        Request::Get { key, timeout_ms } => {
            body.push(OP_GET);
            put_str(&mut body, key);
            body.extend_from_slice(&timeout_ms.to_le_bytes());
        }
        Request::TryGet { key } => {
            body.push(OP_TRY_GET);
            put_str(&mut body, key);
        }
        Request::Set { key, value } => {
            body.push(OP_SET);
            put_str(&mut body, key);
            put_str(&mut body, value);
        }
    }
    write_frame(w, &body)
}

pub fn write_response(w: &mut impl Write, resp: &Response) -> io::Result<()> {
    let mut body = Vec::new();
    match resp {
        Response::Ok => body.push(OP_OK),
        Response::Value(v) => {
            body.push(OP_VALUE);
            put_str(&mut body, v);
        }
        Response::NotFound => body.push(OP_NOT_FOUND),
        Response::Timeout => body.push(OP_TIMEOUT),
        Response::Error(m) | Response::Busy(m) => {
            body.push(if matches!(resp, Response::Busy(_)) { OP_BUSY } else { OP_ERROR });
            let mut end = m.len().min(MAX_MESSAGE_BYTES);
            while !m.is_char_boundary(end) {
                end -= 1;
            }
            put_str(&mut body, &m[..end]);
        }
    }
    write_frame(w, &body)
}

/// Reads one frame body of at most `max_len` bytes. `Ok(None)` is a clean end of stream
/// before the first byte.
fn read_frame(r: &mut impl Read, max_len: usize) -> Result<Option<Vec<u8>>, FrameError> {
    let mut len_bytes = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut len_bytes[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(FrameError::Io(io::ErrorKind::UnexpectedEof.into())),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let len = u32::from_le_bytes(len_bytes) as usize;
    if len == 0 || len > max_len {
        return Err(FrameError::Malformed(format!(
            "frame length {len} outside 1..={max_len} (first bytes {len_bytes:02x?}; not a distprof store?)"
        )));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    Ok(Some(body))
}

/// A cursor over a frame body that reports truncation and bad strings as `Malformed`.
struct Fields<'a> {
    body: &'a [u8],
    pos: usize,
}

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], FrameError> {
        if self.body.len() - self.pos < n {
            return Err(FrameError::Malformed(format!(
                "frame truncated reading {what}: needs {n} bytes at offset {}, frame has {}",
                self.pos,
                self.body.len()
            )));
        }
        let s = &self.body[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn u16(&mut self, what: &str) -> Result<u16, FrameError> {
        Ok(u16::from_le_bytes(
            self.take(2, what)?.try_into().expect("2 bytes"),
        ))
    }

    fn u64(&mut self, what: &str) -> Result<u64, FrameError> {
        Ok(u64::from_le_bytes(
            self.take(8, what)?.try_into().expect("8 bytes"),
        ))
    }

    fn string(&mut self, what: &str, limit: usize) -> Result<String, FrameError> {
        let n = u32::from_le_bytes(self.take(4, what)?.try_into().expect("4 bytes")) as usize;
        if n > limit {
            return Err(FrameError::Malformed(format!(
                "{what} is {n} bytes, over the limit of {limit}"
            )));
        }
        let bytes = self.take(n, what)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|e| FrameError::Malformed(format!("{what} is not UTF-8: {e}")))
    }

    fn finish(&self) -> Result<(), FrameError> {
        if self.pos != self.body.len() {
            return Err(FrameError::Malformed(format!(
                "{} trailing bytes after the last field",
                self.body.len() - self.pos
            )));
        }
        Ok(())
    }
}

pub fn read_request(r: &mut impl Read) -> Result<Option<Request>, FrameError> {
    read_request_limited(r, MAX_FRAME_BYTES)
}

/// Like [`read_request`] for frames of at most `max_len` bytes (the handshake's limit).
pub fn read_request_limited(
    r: &mut impl Read,
    max_len: usize,
) -> Result<Option<Request>, FrameError> {
    let Some(body) = read_frame(r, max_len)? else {
        return Ok(None);
    };
    let mut f = Fields {
        body: &body,
        pos: 1,
    };
    let req = match body[0] {
        OP_HELLO => {
            let magic = f.take(4, "magic")?;
            if magic != MAGIC {
                return Err(FrameError::Malformed(format!(
                    "bad magic {magic:02x?}, expected {MAGIC:02x?}"
                )));
            }
            let version = f.u16("version")?;
            // Version 1 HELLOs end here; the server then answers with a version error.
            let secret = if version >= 2 {
                f.string("secret", MAX_SECRET_BYTES)?
            } else {
                String::new()
            };
            Request::Hello { version, secret }
        }
        OP_GET => Request::Get {
            key: f.string("key", MAX_KEY_BYTES)?,
            timeout_ms: f.u64("timeout")?,
        },
        OP_TRY_GET => Request::TryGet {
            key: f.string("key", MAX_KEY_BYTES)?,
        },
        OP_SET => {
            let key = f.string("key", MAX_KEY_BYTES)?;
            let value = f.string(&format!("value of key `{key}`"), MAX_VALUE_BYTES)?;
            Request::Set { key, value }
        }
        op => {
            return Err(FrameError::Malformed(format!(
                "unknown request opcode 0x{op:02x}"
            )))
        }
    };
    f.finish()?;
    Ok(Some(req))
}

pub fn read_response(r: &mut impl Read) -> Result<Response, FrameError> {
    let Some(body) = read_frame(r, MAX_FRAME_BYTES)? else {
        return Err(FrameError::Io(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "store closed the connection",
        )));
    };
    let mut f = Fields {
        body: &body,
        pos: 1,
    };
    let resp = match body[0] {
        OP_OK => Response::Ok,
        OP_VALUE => Response::Value(f.string("value", MAX_VALUE_BYTES)?),
        OP_NOT_FOUND => Response::NotFound,
        OP_TIMEOUT => Response::Timeout,
        OP_ERROR => Response::Error(f.string("error message", MAX_MESSAGE_BYTES)?),
        OP_BUSY => Response::Busy(f.string("busy message", MAX_MESSAGE_BYTES)?),
        op => {
            return Err(FrameError::Malformed(format!(
                "unknown reply opcode 0x{op:02x}"
            )))
        }
    };
    f.finish()?;
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip_request(req: Request) {
        let mut buf = Vec::new();
        write_request(&mut buf, &req).unwrap();
        assert_eq!(read_request(&mut buf.as_slice()).unwrap(), Some(req));
    }

    #[test]
    fn requests_and_replies_roundtrip() {
        roundtrip_request(Request::Hello { version: VERSION, secret: String::new() });
        roundtrip_request(Request::Hello { version: VERSION, secret: "s3cr3t".into() });
        roundtrip_request(Request::Get {
            key: "distprof/a".into(),
            timeout_ms: 1234,
        });
        roundtrip_request(Request::TryGet { key: "k".into() });
        roundtrip_request(Request::Set {
            key: "k".into(),
            value: "välue".into(),
        });
        for resp in [
            Response::Ok,
            Response::Value("v".into()),
            Response::NotFound,
            Response::Timeout,
            Response::Error("e".into()),
            Response::Busy("full".into()),
        ] {
            let mut buf = Vec::new();
            write_response(&mut buf, &resp).unwrap();
            assert_eq!(read_response(&mut buf.as_slice()).unwrap(), resp);
        }
    }

    #[test]
    fn a_frame_before_the_handshake_is_small() {
        let mut buf = Vec::new();
        let hello = Request::Hello { version: VERSION, secret: "x".repeat(MAX_SECRET_BYTES) };
        write_request(&mut buf, &hello).unwrap();
        assert_eq!(read_request_limited(&mut buf.as_slice(), MAX_HELLO_FRAME_BYTES).unwrap(), Some(hello));
        let mut buf = Vec::new();
        write_request(&mut buf, &Request::Set { key: "k".into(), value: "v".repeat(400) }).unwrap();
        assert!(matches!(
            read_request_limited(&mut buf.as_slice(), MAX_HELLO_FRAME_BYTES),
            Err(FrameError::Malformed(m)) if m.contains("outside 1..=267")
        ));
    }

    #[test]
    fn huge_length_prefix_is_refused_without_allocating() {
        let bytes = [0xff, 0xff, 0xff, 0x7f, 0x02];
        match read_request(&mut bytes.as_slice()) {
            Err(FrameError::Malformed(m)) => assert!(m.contains("frame length 2147483647"), "{m}"),
            other => panic!("expected Malformed, got {other:?}"),
        }
    }

    #[test]
    fn truncated_string_and_bad_utf8_are_malformed() {
        // GET whose key claims 100 bytes but carries 3.
        let mut body = vec![OP_GET];
        body.extend_from_slice(&100u32.to_le_bytes());
        body.extend_from_slice(b"abc");
        let mut frame = (body.len() as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(&body);
        assert!(
            matches!(read_request(&mut frame.as_slice()), Err(FrameError::Malformed(m)) if m.contains("truncated reading key"))
        );

        let mut body = vec![OP_TRY_GET];
        body.extend_from_slice(&2u32.to_le_bytes());
        body.extend_from_slice(&[0xc3, 0x28]);
        let mut frame = (body.len() as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(&body);
        assert!(
            matches!(read_request(&mut frame.as_slice()), Err(FrameError::Malformed(m)) if m.contains("not UTF-8"))
        );
    }

    #[test]
    fn oversized_key_is_refused() {
        let mut body = vec![OP_TRY_GET];
        body.extend_from_slice(&((MAX_KEY_BYTES + 1) as u32).to_le_bytes());
        body.extend(std::iter::repeat_n(b'k', MAX_KEY_BYTES + 1));
        let mut frame = (body.len() as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(&body);
        assert!(
            matches!(read_request(&mut frame.as_slice()), Err(FrameError::Malformed(m)) if m.contains("over the limit"))
        );
    }
}
