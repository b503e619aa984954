//! Streaming Chrome Trace Event JSON writer (loads in Perfetto and chrome://tracing).
//!
//! `ts` is relative to the global origin, in µs with three decimals (ns), because epoch µs
//! in a double cannot hold ns. The origin is in `metadata.baseTimeNanoseconds`.
//!
//! The layout is one that old and current Perfetto releases read alike, checked with
//! Perfetto's own trace processor of 2021 (v20.1, `tests/perfetto`): `traceEvents` is the
//! first key and `metadata` comes after it (that release reads no event at all after any
//! other key first), and there is no `displayTimeUnit` (that release takes it as the unit
//! of `ts` and `dur`, so `"ns"` over µs values puts every event 1000 times too early; the
//! current importer ignores it).
//! Every (node, plane) gets its own pid, every line its own tid: the line's place in its
//! plane (1, 2, ...), which fits the 32 bits Perfetto reads, named by `thread_name`
//! metadata (the XLine's display name, its XLine id in the args) and ordered by
//! `thread_sort_index` as XProf orders the lines. Events carry their XEvent's stats in
//! `args` (see `chrome_args`).
//!
//! The document is the header, a run of records and the footer. Every record is written
//! with a leading `,\n`. A node's records are one *fragment*; `chrome_doc` assembles the
//! fragments in node order while the nodes are merged in parallel (and joins the shards of
//! a sharded merge), so every path gives the same bytes.
//!
//! Formatting is by hand into the output's own buffer (no allocation per event, no copy
//! between buffers), written past the page cache (`direct_io`): the JSON is several times
//! the size of the XSpace and must be written at the same speed.

use super::cursor::{written, Cursor};
use super::direct_io::{DirectWriter, Part, ALIGN};
use std::io::{self, Write};

/// The record separator: every record starts with it (the document's first has its comma
/// turned into a space at the end).
pub const SEP: &[u8] = b",\n";

/// The document's opening, up to the first record.
pub const HEADER: &[u8] = b"{\"traceEvents\":[\n";

/// The document's close, with its metadata. `base_ns` is the global origin (epoch ns on G).
pub fn footer(base_ns: i64) -> Vec<u8> {
    format!("\n],\"metadata\":{{\"baseTimeNanoseconds\":{base_ns},\"producer\":\"distprof merge\",\"highres-ticks\":true}}}}\n")
        .into_bytes()
}

/// Writes one fragment: the records of one node's planes.
pub struct ChromeWriter {
    out: DirectWriter,
    /// Where the fragment starts in its file.
    start: u64,
    next_pid: u64,
    pub events: u64,
    /// Records written (events and metadata).
    pub records: u64,
}

/// JSON string escaping of UTF-8 `s` (without the quotes), appended to `out`; runs of
/// plain bytes are copied at once.
pub fn escape_bytes(s: &[u8], out: &mut Cursor<'_>) {
    let mut start = 0;
    for (i, &b) in s.iter().enumerate() {
        if b >= 0x20 && b != b'"' && b != b'\\' {
            continue;
        }
        out.put(&s[start..i]);
        match b {
            b'"' => out.put(b"\\\""),
            b'\\' => out.put(b"\\\\"),
            _ => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.put(b"\\u00");
                out.push(HEX[(b >> 4) as usize]);
                out.push(HEX[(b & 15) as usize]);
            }
        }
        start = i + 1;
    }
    out.put(&s[start..]);
}

/// [`escape_bytes`] of possibly invalid UTF-8 (invalid sequences become U+FFFD), at most
/// `cap` input bytes (cut at a character boundary; `...` marks the cut).
pub fn escape_lossy(s: &[u8], cap: usize, out: &mut Cursor<'_>) {
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
        out.put(b"...");
    }
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

/// The eight decimal digits of `v` < 10^8, leading zeros included, as ASCII in the bytes
/// of a little-endian u64 (most significant digit in the lowest byte). All lanes at once
/// (SWAR): the two halves of four digits in 32-bit lanes, split into 16-bit lanes of two
/// digits, then into bytes of one, each division by a multiply and shift that is exact
/// over its lane's range (x < 10^4: x * 10486 >> 20 = x / 100; x < 100: x * 103 >> 10 =
/// x / 10). About twenty instructions, no loop and no table.
#[inline(always)]
fn eight_digits(v: u32) -> u64 {
    debug_assert!(v < 100_000_000);
    let halves = u64::from(v / 10_000) | (u64::from(v % 10_000) << 32);
    let hundreds = ((halves * 10_486) >> 20) & 0x0000_007f_0000_007f;
    let pairs = (hundreds | ((halves - 100 * hundreds) << 16)) & 0x007f_007f_007f_007f;
    let tens = ((pairs * 103) >> 10) & 0x000f_000f_000f_000f;
    let digits = tens | ((pairs - 10 * tens) << 8);
    digits + 0x3030_3030_3030_3030
}

/// The `n` (1..=8) significant digits of `v` < 10^8, shifted down to the lowest bytes.
#[inline(always)]
fn leading_digits(v: u32, n: usize) -> u64 {
    eight_digits(v) >> (8 * (8 - n))
}

/// Decimal `v`: eight digits at a time ([`eight_digits`]), each block one fixed-size copy
/// (a copy of a variable number of bytes would cost a `memcpy` call per number).
#[inline(always)]
pub fn put_u64(out: &mut Cursor<'_>, v: u64) {
    const E8: u64 = 100_000_000;
    let n = decimal_digits(v);
    if n <= 8 {
        out.put_fixed(leading_digits(v as u32, n).to_le_bytes(), n);
    } else if n <= 16 {
        out.put_fixed(leading_digits((v / E8) as u32, n - 8).to_le_bytes(), n - 8);
        out.put_fixed(eight_digits((v % E8) as u32).to_le_bytes(), 8);
    } else {
        let (top, rest) = (v / (E8 * E8), v % (E8 * E8));
        out.put_fixed(leading_digits(top as u32, n - 16).to_le_bytes(), n - 16);
        out.put_fixed(eight_digits((rest / E8) as u32).to_le_bytes(), 8);
        out.put_fixed(eight_digits((rest % E8) as u32).to_le_bytes(), 8);
    }
}

#[inline]
pub fn put_i64(out: &mut Cursor<'_>, v: i64) {
    if v < 0 {
        out.push(b'-');
    }
    put_u64(out, v.unsigned_abs());
}

/// A double as a JSON number (shortest round-trip form); null when not finite, which
/// JSON cannot hold.
pub fn put_f64(out: &mut Cursor<'_>, v: f64) {
    if v.is_finite() {
        // Debug gives the shortest round-trip digits ("0.1", "1e-7", "1.0"), all JSON.
        out.with_vec(|b| write!(b, "{v:?}")).expect("writing to a Vec cannot fail");
    } else {
        out.put(b"null");
    }
}

/// Eight digits "abcdefgh" (as from [`eight_digits`]) as "abcde.fgh": nine bytes,
/// little-endian in a u128.
#[inline(always)]
fn with_point(digits: u64) -> u128 {
    let d = u128::from(digits);
    (d & 0xff_ffff_ffff) | (u128::from(b'.') << 40) | ((d >> 40) << 48)
}

/// Writes ps as "µs.nnn" (floored to ns), correct for negative values too. Under 10^7 ns
/// (most durations) the digits, leading zeros shifted out, take the point before their
/// last three in one 8-byte word; from there the last eight digits of the ns count take the
/// point after their fifth ([`with_point`]), and the digits before them come first.
#[inline(always)]
fn put_micros(out: &mut Cursor<'_>, ps: i64) {
    const E7: u64 = 10_000_000;
    const E8: u64 = 100_000_000;
    let v = if ps >= 0 {
        ps as u64 / 1000
    } else {
        out.push(b'-');
        ps.div_euclid(1000).unsigned_abs()
    };
    if v < E7 {
        // At least "0.000": four digits; the point after the first n - 3.
        let n = decimal_digits(v).max(4);
        let digits = leading_digits(v as u32, n);
        let k = 8 * (n - 3);
        let text = (digits & ((1 << k) - 1)) | (u64::from(b'.') << k) | ((digits >> k) << (k + 8));
        out.put_fixed(text.to_le_bytes(), n + 1);
    } else {
        if v >= E8 {
            put_u64(out, v / E8);
        }
        out.put_fixed(with_point(eight_digits((v % E8) as u32)).to_le_bytes(), 9);
    }
}

impl ChromeWriter {
    /// A fragment, written from `out`'s position on, whose first process gets pid
    /// `first_pid`.
    pub fn new(out: DirectWriter, first_pid: u64) -> Self {
        Self { start: out.pos(), out, next_pid: first_pid, events: 0, records: 0 }
    }

    /// Starts a record in the buffer; the record is written through the cursor returned.
    #[inline(always)]
    fn start_record(&mut self) -> Cursor<'_> {
        self.records += 1;
        let mut c = Cursor::new(self.out.buf());
        c.put(SEP);
        c
    }

    #[inline]
    fn maybe_flush(&mut self) -> io::Result<()> {
        self.out.maybe_flush()
    }

    /// Declares a process (one node's plane) and returns its pid.
    pub fn begin_process(&mut self, name: &str) -> io::Result<u64> {
        let pid = self.next_pid;
        self.next_pid += 1;
        let mut b = self.start_record();
        b.put(b"{\"ph\":\"M\",\"pid\":");
        put_u64(&mut b, pid);
        b.put(b",\"name\":\"process_name\",\"args\":{\"name\":\"");
        escape_bytes(name.as_bytes(), &mut b);
        b.put(b"\"}}");
        drop(b);
        let mut b = self.start_record();
        b.put(b"{\"ph\":\"M\",\"pid\":");
        put_u64(&mut b, pid);
        b.put(b",\"name\":\"process_sort_index\",\"args\":{\"sort_index\":");
        put_u64(&mut b, pid);
        b.put(b"}}");
        drop(b);
        self.maybe_flush()?;
        Ok(pid)
    }

    /// Names thread `tid` of process `pid` (a line; `line_id` is its XLine id, kept in
    /// the args) and sorts it by its tid.
    pub fn thread(&mut self, pid: u64, tid: u32, line_id: i64, name: &str) -> io::Result<()> {
        for sort in [false, true] {
            let mut b = self.start_record();
            b.put(b"{\"ph\":\"M\",\"pid\":");
            put_u64(&mut b, pid);
            b.put(b",\"tid\":");
            put_u64(&mut b, tid as u64);
            if sort {
                b.put(b",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":");
                put_u64(&mut b, tid as u64);
                b.put(b"}}");
            } else {
                b.put(b",\"name\":\"thread_name\",\"args\":{\"name\":\"");
                escape_bytes(name.as_bytes(), &mut b);
                b.put(b"\",\"xline_id\":");
                put_i64(&mut b, line_id);
                b.put(b"}}");
            }
        }
        self.maybe_flush()
    }

    /// What starts every complete event of thread `tid` of `pid`, up to its `ts` value.
    pub fn event_prefix(pid: u64, tid: u32) -> Vec<u8> {
        written(|b| {
            b.put(b"{\"ph\":\"X\",\"pid\":");
            put_u64(b, pid);
            b.put(b",\"tid\":");
            put_u64(b, tid as u64);
            b.put(b",\"ts\":");
        })
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
        args: impl FnOnce(&mut Cursor<'_>),
    ) -> io::Result<()> {
        self.events += 1;
        let mut b = self.start_record();
        b.put(prefix);
        put_micros(&mut b, ts_ps);
        b.put(b",\"dur\":");
        put_micros(&mut b, dur_ps);
        b.put(name_field);
        args(&mut b);
        b.push(b'}');
        drop(b);
        self.maybe_flush()
    }

    /// One point of flow `id` (a v1 flow event: phase `s` starts the flow, `t` steps it,
    /// `f` ends it) on thread `tid` of `pid` at `ts_ps`. Every point binds to the slice
    /// that encloses it (`"bp":"e"` says so for the end, whose default is the next slice).
    pub fn flow_point(&mut self, phase: u8, id: u64, pid: u64, tid: u32, ts_ps: i64, name: &[u8]) -> io::Result<()> {
        let mut b = self.start_record();
        b.put(b"{\"ph\":\"");
        b.push(phase);
        b.put(b"\",\"id\":");
        put_u64(&mut b, id);
        b.put(b",\"pid\":");
        put_u64(&mut b, pid);
        b.put(b",\"tid\":");
        put_u64(&mut b, u64::from(tid));
        b.put(b",\"ts\":");
        put_micros(&mut b, ts_ps);
        b.put(b",\"cat\":\"collective\",\"name\":\"");
        escape_bytes(name, &mut b);
        b.push(b'"');
        if phase == b'f' {
            b.put(b",\"bp\":\"e\"");
        }
        b.push(b'}');
        drop(b);
        self.maybe_flush()
    }

    /// The next free pid.
    pub fn next_pid(&self) -> u64 {
        self.next_pid
    }

    /// Ends the fragment: pads it with spaces to a whole number of blocks (the layout of
    /// `chrome_doc`) and writes it; returns its bytes in its region and what overflowed it.
    pub fn finish(mut self) -> io::Result<(Part, Option<Part>)> {
        let len = (self.out.pos() - self.start) as usize;
        let buf = self.out.buf();
        buf.resize(buf.len() + (len.next_multiple_of(ALIGN) - len), b' ');
        self.out.finish_region(self.start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_valid_json_with_relative_ns_timestamps_and_args() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("doc.json");
        let doc = super::super::chrome_doc::ChromeDoc::create(&path, Some(1_763_000_000_000_000_000), super::super::trace_out::TraceFormat::ChromeJson).unwrap();
        let region = doc.next_job(1, |_| 1_000).unwrap();
        let mut w = ChromeWriter::new(region.writer, 1);
        let pid = w.begin_process("node 1 \"h\" /host:CPU").unwrap();
        w.thread(pid, 7, -7_111_125_260_410_667_223, "python").unwrap();
        let prefix = ChromeWriter::event_prefix(pid, 7);
        w.complete(&prefix, 1_234_567_891, 999, b",\"name\":\"all-reduce\"", |b| {
            b.put(b",\"args\":{\"hlo_op\":\"all-reduce.1\",\"correlation_id\":");
            put_u64(b, u64::MAX);
            b.push(b'}');
        })
        .unwrap();
        w.complete(&prefix, 5_000, 2_000_001, b",\"name\":\"x\"", |_| {}).unwrap();
        w.complete(&prefix, -1_500_000, 0, b",\"name\":\"early\"", |_| {}).unwrap();
        assert_eq!(w.next_pid(), 2);
        doc.fragment_done(region.order, w.finish().unwrap());
        doc.commit().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("{\"traceEvents\":[") && !text.contains("displayTimeUnit"));
        assert!(text.ends_with("],\"metadata\":{\"baseTimeNanoseconds\":1763000000000000000,\"producer\":\"distprof merge\",\"highres-ticks\":true}}\n"));
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
    }

    #[test]
    fn numbers_and_strings_format_as_json() {
        for p in POW10 {
            for v in [p - 1, p, p + 1] {
                assert_eq!(decimal_digits(v), v.to_string().len(), "{v}");
            }
        }
        // µs with ns: every digit count, negative values, and ps floored to ns.
        let fractions = (0..3_000i64).map(|ns| ns * 1000 + 999);
        for ps in [0i64, 999, 1_000, 9_999, 12_345_678, 999_999_999, 1_000_000_000, 99_999_999_999, 100_000_000_000, 100_000_001_000, 123_456_789_012_345, i64::MAX, -1, -1_000, -1_001, -2_000_000_000, -100_000_000_000, i64::MIN].into_iter().chain(fractions) {
            let b = written(|c| put_micros(c, ps));
            let ns = ps.div_euclid(1000);
            let want = format!("{}{}.{:03}", if ns < 0 { "-" } else { "" }, ns.unsigned_abs() / 1000, ns.unsigned_abs() % 1000);
            assert_eq!(String::from_utf8(b).unwrap(), want, "{ps}");
        }
        // Every value up to 10^6, both sides of every power of ten, and a spread of values
        // of every length (each lane of the eight-digit blocks takes every digit).
        let spread = (0..20_000u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (i % 64));
        let edges = POW10.iter().flat_map(|&p| [p - 1, p, p + 1]);
        for v in (0..1_000_000u64).chain(edges).chain(spread).chain([u64::MAX]) {
            assert_eq!(String::from_utf8(written(|c| put_u64(c, v))).unwrap(), v.to_string());
        }
        for v in [i64::MIN, -1, 0, 42] {
            let b = written(|c| put_i64(c, v));
            assert_eq!(String::from_utf8(b).unwrap(), v.to_string());
        }
        for v in [0.1, 1e-7, 1e300, -2.5, 3.0] {
            let b = written(|c| put_f64(c, v));
            let back: f64 = serde_json::from_slice(&b).unwrap();
            assert_eq!(back, v);
        }
        assert_eq!(written(|c| put_f64(c, f64::NAN)), b"null");
        let b = written(|c| {
            c.push(b'"');
            escape_lossy(b"a\"b\\c\n\x01\xff\xe2\x82\xacz", 10, c);
            c.push(b'"');
        });
        let s: String = serde_json::from_slice(&b).unwrap();
        assert_eq!(s, "a\"b\\c\n\u{1}\u{fffd}...");
    }
}
