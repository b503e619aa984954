//! Streaming Chrome Trace Event JSON writer (loads in Perfetto and chrome://tracing).
//!
//! `displayTimeUnit` comes first (Perfetto's streaming parser only sees it in the first
//! chunk); `ts` is relative to the global origin, in µs with three decimals (ns), because
//! epoch µs in a double cannot hold ns. The origin is in `metadata.baseTimeNanoseconds`.
//! Every (node, plane) gets its own pid, every line its own tid: the line's place in its
//! plane (1, 2, ...), which fits the 32 bits Perfetto reads, named by `thread_name`
//! metadata (the XLine's display name, its XLine id in the args) and ordered by
//! `thread_sort_index` as XProf orders the lines. Events carry their XEvent's stats in
//! `args` (see `chrome_args`).
//!
//! The document is the header, a run of records and the footer. Every record is written
//! with a leading `,\n`; the first record of the document drops it. A node's records are
//! one *fragment*: merge writes fragments in parallel (to the document directly when all
//! earlier nodes are in, else to a part file appended later, `ChromeDoc::append`), and a
//! sharded merge joins the shards' fragments the same way, so every path gives the same
//! bytes.
//!
//! Formatting is by hand into the output's own buffer (no allocation per event, no copy
//! between buffers), written past the page cache (`direct_io`): the JSON is several times
//! the size of the XSpace and must be written at the same speed.

use super::direct_io::{DirectWriter, Part};
use std::fs::File;
use std::io::{self, Write};

/// The record separator: every record starts with it, except the document's first.
pub const SEP: &[u8] = b",\n";

/// The document's opening, up to the first record. `base_ns` is the global origin (epoch
/// ns on G).
pub fn header(base_ns: i64) -> Vec<u8> {
    format!(
        "{{\"displayTimeUnit\":\"ns\",\"metadata\":{{\"baseTimeNanoseconds\":{base_ns},\"producer\":\"distprof merge\",\"highres-ticks\":true}},\"traceEvents\":[\n"
    )
    .into_bytes()
}

/// The document's close.
pub const FOOTER: &[u8] = b"\n]}\n";

/// Writes one fragment: the records of one node's planes.
pub struct ChromeWriter {
    out: DirectWriter,
    next_pid: u64,
    /// The next record is the document's first: drop its separator.
    skip_sep: bool,
    pub events: u64,
    /// Records written (events and metadata).
    pub records: u64,
}

/// JSON string escaping of UTF-8 `s` (without the quotes), appended to `out`; runs of
/// plain bytes are copied at once.
pub fn escape_bytes(s: &[u8], out: &mut Vec<u8>) {
    let mut start = 0;
    for (i, &b) in s.iter().enumerate() {
        if b >= 0x20 && b != b'"' && b != b'\\' {
            continue;
        }
        out.extend_from_slice(&s[start..i]);
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            _ => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(b"\\u00");
                out.push(HEX[(b >> 4) as usize]);
                out.push(HEX[(b & 15) as usize]);
            }
        }
        start = i + 1;
    }
    out.extend_from_slice(&s[start..]);
}

/// [`escape_bytes`] of possibly invalid UTF-8 (invalid sequences become U+FFFD), at most
/// `cap` input bytes (cut at a character boundary; `...` marks the cut).
pub fn escape_lossy(s: &[u8], cap: usize, out: &mut Vec<u8>) {
    let text = String::from_utf8_lossy(s);
    let mut t: &str = &text;
    let cut = t.len() > cap;
    if cut {
        let mut end = cap;
        while !t.is_char_boundary(end) {
            end -= 1;
        }
        t = &t[..end];
    }
    escape_bytes(t.as_bytes(), out);
    if cut {
        out.extend_from_slice(b"...");
    }
}

const DIGIT_PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Appends `s`. Most pieces of an event (its prefix, name, stat keys) are short and of
/// varying length, which `extend_from_slice` copies with a `memcpy` call each; up to 32
/// bytes are copied here with two overlapping fixed-size moves instead.
#[inline(always)]
pub fn put_bytes(out: &mut Vec<u8>, s: &[u8]) {
    let n = s.len();
    if !(4..=32).contains(&n) {
        out.extend_from_slice(s);
        return;
    }
    let start = out.len();
    out.extend_from_slice(&[0u8; 32]);
    let dst = &mut out[start..start + 32];
    if n >= 16 {
        dst[..16].copy_from_slice(&s[..16]);
        dst[n - 16..n].copy_from_slice(&s[n - 16..]);
    } else if n >= 8 {
        dst[..8].copy_from_slice(&s[..8]);
        dst[n - 8..n].copy_from_slice(&s[n - 8..]);
    } else {
        dst[..4].copy_from_slice(&s[..4]);
        dst[n - 4..n].copy_from_slice(&s[n - 4..]);
    }
    out.truncate(start + n);
}

/// Powers of ten that fit a u64.
const POW10: [u64; 20] = {
    let mut p = [1u64; 20];
    let mut i = 1;
    while i < 20 {
        p[i] = p[i - 1] * 10;
        i += 1;
    }
    p
};

/// Digits of `v` in decimal: from its bit length (log10 2 ~ 1233 / 4096) and one
/// comparison, not the loop of `ilog10`.
#[inline(always)]
fn decimal_digits(v: u64) -> usize {
    let bits = 64 - (v | 1).leading_zeros() as usize;
    let guess = (bits * 1233) >> 12;
    guess + usize::from((v | 1) >= POW10[guess])
}

/// Decimal `v`, two digits per division, written in place: room for the longest number
/// is appended (a fixed-size copy, no call) and cut to the digits, which fill it from the
/// end; a copy of a variable number of digits would cost a `memcpy` call per number.
#[inline]
pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    let n = decimal_digits(v);
    let start = out.len();
    out.extend_from_slice(&[0u8; 20]);
    out.truncate(start + n);
    digits_into(&mut out[start..], n, v);
}

/// Writes the decimal digits of `v` into `text[..end]`, two per division from the end;
/// `end` is exactly its digit count.
#[inline]
fn digits_into(text: &mut [u8], mut end: usize, mut v: u64) {
    while v >= 100 {
        let d = (v % 100) as usize * 2;
        v /= 100;
        end -= 2;
        text[end..end + 2].copy_from_slice(&DIGIT_PAIRS[d..d + 2]);
    }
    if v >= 10 {
        let d = v as usize * 2;
        text[end - 2..end].copy_from_slice(&DIGIT_PAIRS[d..d + 2]);
    } else {
        text[end - 1] = b'0' + v as u8;
    }
}

#[inline]
pub fn put_i64(out: &mut Vec<u8>, v: i64) {
    if v < 0 {
        out.push(b'-');
    }
    put_u64(out, v.unsigned_abs());
}

/// A double as a JSON number (shortest round-trip form); null when not finite, which
/// JSON cannot hold.
pub fn put_f64(out: &mut Vec<u8>, v: f64) {
    if v.is_finite() {
        // Debug gives the shortest round-trip digits ("0.1", "1e-7", "1.0"), all JSON.
        let _ = write!(out, "{v:?}");
    } else {
        out.extend_from_slice(b"null");
    }
}

/// Writes ps as "µs.nnn" (floored to ns), correct for negative values too: the digits of
/// the ns count with a point before the last three, written in place from the end like
/// [`put_u64`] (one pass, no second number).
#[inline]
fn put_micros(out: &mut Vec<u8>, ps: i64) {
    let ns = ps.div_euclid(1000);
    if ns < 0 {
        out.push(b'-');
    }
    let mut v = ns.unsigned_abs();
    // At least "0.000": four digits.
    let n = decimal_digits(v).max(4);
    let start = out.len();
    out.extend_from_slice(&[0u8; 24]);
    out.truncate(start + n + 1);
    let text = &mut out[start..];
    // The fraction: three digits after the point.
    let f = (v % 1000) as usize;
    v /= 1000;
    text[n - 2] = b'0' + (f / 100) as u8;
    text[n - 1..n + 1].copy_from_slice(&DIGIT_PAIRS[(f % 100) * 2..(f % 100) * 2 + 2]);
    text[n - 3] = b'.';
    digits_into(text, n - 3, v);
}

impl ChromeWriter {
    /// A fragment whose first process gets pid `first_pid`. `document_start`: its first
    /// record is the document's first (no separator before it).
    pub fn new(out: DirectWriter, first_pid: u64, document_start: bool) -> Self {
        Self {
            out,
            next_pid: first_pid,
            skip_sep: document_start,
            events: 0,
            records: 0,
        }
    }

    /// Starts a record in the buffer: its separator unless it is the document's first.
    #[inline]
    fn start_record(&mut self) {
        if self.skip_sep {
            self.skip_sep = false;
        } else {
            self.out.buf().extend_from_slice(SEP);
        }
        self.records += 1;
    }

    #[inline]
    fn maybe_flush(&mut self) -> io::Result<()> {
        self.out.maybe_flush()
    }

    /// Declares a process (one node's plane) and returns its pid.
    pub fn begin_process(&mut self, name: &str) -> io::Result<u64> {
        let pid = self.next_pid;
        self.next_pid += 1;
        self.start_record();
        self.out.buf().extend_from_slice(b"{\"ph\":\"M\",\"pid\":");
        put_u64(self.out.buf(), pid);
        self.out.buf().extend_from_slice(b",\"name\":\"process_name\",\"args\":{\"name\":\"");
        escape_bytes(name.as_bytes(), self.out.buf());
        self.out.buf().extend_from_slice(b"\"}}");
        self.start_record();
        self.out.buf().extend_from_slice(b"{\"ph\":\"M\",\"pid\":");
        put_u64(self.out.buf(), pid);
        self.out.buf().extend_from_slice(b",\"name\":\"process_sort_index\",\"args\":{\"sort_index\":");
        put_u64(self.out.buf(), pid);
        self.out.buf().extend_from_slice(b"}}");
        self.maybe_flush()?;
        Ok(pid)
    }

    /// Names thread `tid` of process `pid` (a line; `line_id` is its XLine id, kept in
    /// the args) and sorts it by its tid.
    pub fn thread(&mut self, pid: u64, tid: u32, line_id: i64, name: &str) -> io::Result<()> {
        for sort in [false, true] {
            self.start_record();
            self.out.buf().extend_from_slice(b"{\"ph\":\"M\",\"pid\":");
            put_u64(self.out.buf(), pid);
            self.out.buf().extend_from_slice(b",\"tid\":");
            put_u64(self.out.buf(), tid as u64);
            if sort {
                self.out.buf().extend_from_slice(b",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":");
                put_u64(self.out.buf(), tid as u64);
                self.out.buf().extend_from_slice(b"}}");
            } else {
                self.out.buf().extend_from_slice(b",\"name\":\"thread_name\",\"args\":{\"name\":\"");
                escape_bytes(name.as_bytes(), self.out.buf());
                self.out.buf().extend_from_slice(b"\",\"xline_id\":");
                put_i64(self.out.buf(), line_id);
                self.out.buf().extend_from_slice(b"}}");
            }
        }
        self.maybe_flush()
    }

    /// What starts every complete event of thread `tid` of `pid`, up to its `ts` value.
    pub fn event_prefix(pid: u64, tid: u32) -> Vec<u8> {
        let mut p = b"{\"ph\":\"X\",\"pid\":".to_vec();
        put_u64(&mut p, pid);
        p.extend_from_slice(b",\"tid\":");
        put_u64(&mut p, tid as u64);
        p.extend_from_slice(b",\"ts\":");
        p
    }

    /// One complete ("X") event: `prefix` from [`Self::event_prefix`], `ts_ps` relative to
    /// the origin, `name_field` the rendered `,"name":"..."` (names repeat and are
    /// rendered once per plane), then `args` appends `,"args":{...}` or nothing.
    #[inline]
    pub fn complete(
        &mut self,
        prefix: &[u8],
        ts_ps: i64,
        dur_ps: i64,
        name_field: &[u8],
        args: impl FnOnce(&mut Vec<u8>),
    ) -> io::Result<()> {
        self.start_record();
        self.events += 1;
        let b = self.out.buf();
        put_bytes(b, prefix);
        put_micros(b, ts_ps);
        b.extend_from_slice(b",\"dur\":");
        put_micros(b, dur_ps);
        put_bytes(b, name_field);
        args(b);
        b.push(b'}');
        self.maybe_flush()
    }

    /// The next free pid.
    pub fn next_pid(&self) -> u64 {
        self.next_pid
    }

    /// Ends a fragment written to a part file: its whole blocks are on disk, the rest in
    /// the part, which [`ChromeDoc::append`] takes in turn.
    pub fn into_part(self) -> io::Result<Part> {
        self.out.into_part()
    }
}

/// The Chrome JSON document being assembled from fragments in node order.
pub struct ChromeDoc {
    /// The document's writer; lent to the fragment written straight into it.
    out: Option<DirectWriter>,
    /// No record written yet: the next fragment's first separator is dropped.
    pub empty: bool,
    /// A whole document (header written, footer at the end), not a shard's fragment.
    whole: bool,
    /// Read buffer of [`Self::append`], kept for the next part.
    scratch: Vec<u8>,
}

impl ChromeDoc {
    /// Starts the document in `file` (empty) with its header.
    pub fn new(file: File, base_ns: i64) -> io::Result<Self> {
        let mut out = DirectWriter::new(file);
        out.buf().extend_from_slice(&header(base_ns));
        Ok(Self { out: Some(out), empty: true, whole: true, scratch: Vec::new() })
    }

    /// A shard's fragment: records only, every one with its separator (the join decides
    /// which record opens the document).
    pub fn fragment(file: File) -> Self {
        Self { out: Some(DirectWriter::new(file)), empty: false, whole: false, scratch: Vec::new() }
    }

    fn lent() -> io::Error {
        io::Error::other("the Chrome JSON document is lent to a fragment writer")
    }

    /// A writer appending one fragment straight to the document (the fragment next in
    /// order); give it back with [`Self::wrote_direct`] when it is finished.
    pub fn direct(&mut self, first_pid: u64) -> io::Result<ChromeWriter> {
        let out = self.out.take().ok_or_else(Self::lent)?;
        Ok(ChromeWriter::new(out, first_pid, self.empty))
    }

    /// Takes the document back from the fragment writer of [`Self::direct`]; returns the
    /// next free pid.
    pub fn wrote_direct(&mut self, w: ChromeWriter) -> u64 {
        self.empty &= w.records == 0;
        self.out = Some(w.out);
        w.next_pid
    }

    /// Appends a fragment written with separators throughout (a part file), dropping its
    /// first separator when it opens the document.
    pub fn append(&mut self, part: &Part) -> io::Result<()> {
        if part.is_empty() {
            return Ok(());
        }
        let mut skip = 0;
        if self.empty {
            if part.first_bytes(SEP.len())? != SEP {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "a Chrome JSON fragment must start with a record separator"));
            }
            skip = SEP.len();
            self.empty = false;
        }
        let out = self.out.as_mut().ok_or_else(Self::lent)?;
        out.append(part, skip, &mut self.scratch)
    }

    pub fn finish(mut self) -> io::Result<()> {
        let mut out = self.out.take().ok_or_else(Self::lent)?;
        if self.whole {
            out.buf().extend_from_slice(FOOTER);
        }
        out.finish()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn document(fragments: &[(bool, Vec<u8>)], base: i64) -> String {
        // Each fragment either direct (document_start decided by the doc) or via a part file.
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("doc.json");
        let mut doc = ChromeDoc::new(File::create(&path).unwrap(), base).unwrap();
        for (i, (direct, bytes)) in fragments.iter().enumerate() {
            if *direct {
                let mut w = doc.direct(100).unwrap();
                // Replay the fragment's records through the writer's buffer.
                let body = bytes.strip_prefix(SEP).unwrap_or(bytes);
                if !body.is_empty() {
                    w.start_record();
                    w.out.buf().extend_from_slice(body);
                }
                doc.wrote_direct(w);
            } else {
                let p = tmp.path().join(format!("part{i}"));
                std::fs::write(&p, bytes).unwrap();
                doc.append(&Part::file(File::open(&p).unwrap()).unwrap()).unwrap();
            }
        }
        doc.finish().unwrap();
        std::fs::read_to_string(&path).unwrap()
    }

    #[test]
    fn writes_valid_json_with_relative_ns_timestamps_and_args() {
        let tmp = tempfile::tempdir().unwrap();
        let part = tmp.path().join("part");
        let file = File::options().read(true).write(true).create_new(true).open(&part).unwrap();
        let mut w = ChromeWriter::new(DirectWriter::new(file), 1, false);
        let pid = w.begin_process("node 1 \"h\" /host:CPU").unwrap();
        w.thread(pid, 7, -7_111_125_260_410_667_223, "python").unwrap();
        let prefix = ChromeWriter::event_prefix(pid, 7);
        w.complete(&prefix, 1_234_567_891, 999, b",\"name\":\"all-reduce\"", |b| {
            b.extend_from_slice(b",\"args\":{\"hlo_op\":\"all-reduce.1\",\"correlation_id\":");
            put_u64(b, u64::MAX);
            b.push(b'}');
        })
        .unwrap();
        w.complete(&prefix, 5_000, 2_000_001, b",\"name\":\"x\"", |_| {}).unwrap();
        w.complete(&prefix, -1_500_000, 0, b",\"name\":\"early\"", |_| {}).unwrap();
        assert_eq!(w.next_pid(), 2);
        let p = w.into_part().unwrap();
        let mut bytes = vec![0; p.on_disk as usize];
        std::os::unix::fs::FileExt::read_exact_at(&p.file, &mut bytes, 0).unwrap();
        bytes.extend_from_slice(&p.tail);
        let text = document(&[(false, Vec::new()), (false, bytes.clone())], 1_763_000_000_000_000_000);
        assert!(text.starts_with("{\"displayTimeUnit\":\"ns\""));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let ev = &v["traceEvents"];
        assert_eq!(ev[2]["args"]["xline_id"].as_i64().unwrap(), -7_111_125_260_410_667_223);
        assert_eq!(ev[3]["name"], "thread_sort_index");
        assert_eq!(ev[4]["ts"].as_f64().unwrap(), 1234.567);
        assert_eq!(ev[4]["dur"].as_f64().unwrap(), 0.0);
        assert_eq!(ev[4]["args"]["hlo_op"], "all-reduce.1");
        assert_eq!(ev[4]["args"]["correlation_id"].as_u64(), Some(u64::MAX));
        assert_eq!(ev[5]["dur"].as_f64().unwrap(), 2.0);
        assert_eq!(ev[6]["ts"].as_f64().unwrap(), -1.5);
        assert_eq!(ev[0]["args"]["name"], "node 1 \"h\" /host:CPU");
        // Direct or through a part file: the same document.
        assert_eq!(text, document(&[(true, bytes.clone()), (false, Vec::new())], 1_763_000_000_000_000_000));
        let twice = document(&[(true, bytes.clone()), (false, bytes.clone())], 5);
        assert_eq!(twice, document(&[(false, bytes.clone()), (true, bytes)], 5));
        serde_json::from_str::<serde_json::Value>(&twice).unwrap();
        // No records at all is still a document.
        serde_json::from_str::<serde_json::Value>(&document(&[], 0)).unwrap();
    }

    #[test]
    fn numbers_and_strings_format_as_json() {
        // Every length around the fixed-size moves, after a prefix of every alignment.
        let src: Vec<u8> = (0..80u8).map(|i| i.wrapping_mul(37) ^ 0x55).collect();
        for pre in 0..3 {
            for n in 0..=src.len() {
                let mut b = vec![b'x'; pre];
                put_bytes(&mut b, &src[..n]);
                assert_eq!(&b[pre..], &src[..n]);
                assert_eq!(b.len(), pre + n);
            }
        }
        for p in POW10 {
            for v in [p - 1, p, p + 1] {
                assert_eq!(decimal_digits(v), v.to_string().len(), "{v}");
            }
        }
        // µs with ns: every digit count, negative values, and ps floored to ns.
        for ps in [0i64, 999, 1_000, 9_999, 12_345_678, 999_999_999, 1_000_000_000, 123_456_789_012_345, i64::MAX, -1, -1_000, -1_001, -2_000_000_000, i64::MIN] {
            let mut b = Vec::new();
            put_micros(&mut b, ps);
            let ns = ps.div_euclid(1000);
            let want = format!("{}{}.{:03}", if ns < 0 { "-" } else { "" }, ns.unsigned_abs() / 1000, ns.unsigned_abs() % 1000);
            assert_eq!(String::from_utf8(b).unwrap(), want, "{ps}");
        }
        for v in [0u64, 9, 10, 99, 100, 12_345, 1_000_000_007, u64::MAX] {
            let mut b = Vec::new();
            put_u64(&mut b, v);
            assert_eq!(String::from_utf8(b).unwrap(), v.to_string());
        }
        for v in [i64::MIN, -1, 0, 42] {
            let mut b = Vec::new();
            put_i64(&mut b, v);
            assert_eq!(String::from_utf8(b).unwrap(), v.to_string());
        }
        for v in [0.1, 1e-7, 1e300, -2.5, 3.0] {
            let mut b = Vec::new();
            put_f64(&mut b, v);
            let back: f64 = serde_json::from_slice(&b).unwrap();
            assert_eq!(back, v);
        }
        let mut b = Vec::new();
        put_f64(&mut b, f64::NAN);
        assert_eq!(b, b"null");
        let mut b = b"\"".to_vec();
        escape_lossy(b"a\"b\\c\n\x01\xff\xe2\x82\xacz", 10, &mut b);
        b.push(b'"');
        let s: String = serde_json::from_slice(&b).unwrap();
        assert_eq!(s, "a\"b\\c\n\u{1}\u{fffd}...");
    }
}
