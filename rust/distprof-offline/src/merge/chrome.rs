//! Streaming Chrome Trace Event JSON writer (loads in Perfetto and chrome://tracing).
//!
//! `displayTimeUnit` comes first (Perfetto's streaming parser only sees it in the first
//! chunk); `ts` is relative to the global origin, in µs with three decimals (ns), because
//! epoch µs in a double cannot hold ns. The origin is in `metadata.baseTimeNanoseconds`.
//! Every (node, plane) gets its own pid, every line its own tid: the line's place in its
//! plane (1, 2, ...), which fits the 32 bits Perfetto reads, named by `thread_name`
//! metadata (the XLine's display name, its XLine id in the args) and ordered by
//! `thread_sort_index` as XProf orders the lines.

use std::io::{self, Write};

pub struct ChromeWriter {
    out: Box<dyn Write>,
    next_pid: u64,
    first: bool,
    pub events: u64,
    line: Vec<u8>,
}

/// JSON string escaping (without the quotes).
pub fn escape(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
}

/// Writes ps as "µs.nnn" (floored to ns), correct for negative values too.
fn put_micros(out: &mut Vec<u8>, ps: i64) {
    let ns = ps.div_euclid(1000);
    if ns < 0 {
        out.push(b'-');
    }
    let a = ns.unsigned_abs();
    put_u64(out, a / 1000);
    let f = a % 1000;
    out.extend_from_slice(&[
        b'.',
        b'0' + (f / 100) as u8,
        b'0' + (f / 10 % 10) as u8,
        b'0' + (f % 10) as u8,
    ]);
}

fn put_u64(out: &mut Vec<u8>, mut v: u64) {
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&tmp[i..]);
}

impl ChromeWriter {
    /// Starts the document. `base_ns` is the global origin (epoch ns on G).
    pub fn new(mut out: Box<dyn Write>, base_ns: i64) -> io::Result<Self> {
        writeln!(
            out,
            "{{\"displayTimeUnit\":\"ns\",\"metadata\":{{\"baseTimeNanoseconds\":{base_ns},\"producer\":\"distprof merge\",\"highres-ticks\":true}},\"traceEvents\":["
        )?;
        Ok(Self {
            out,
            next_pid: 1,
            first: true,
            events: 0,
            line: Vec::with_capacity(256),
        })
    }

    fn sep(&mut self) -> io::Result<()> {
        if !self.first {
            self.out.write_all(b",\n")?;
        }
        self.first = false;
        Ok(())
    }

    /// Declares a process (one node's plane) and returns its pid.
    pub fn begin_process(&mut self, name: &str) -> io::Result<u64> {
        let pid = self.next_pid;
        self.next_pid += 1;
        let mut n = String::new();
        escape(name, &mut n);
        self.sep()?;
        writeln!(self.out, "{{\"ph\":\"M\",\"pid\":{pid},\"name\":\"process_name\",\"args\":{{\"name\":\"{n}\"}}}},")?;
        write!(self.out, "{{\"ph\":\"M\",\"pid\":{pid},\"name\":\"process_sort_index\",\"args\":{{\"sort_index\":{pid}}}}}")?;
        Ok(pid)
    }

    /// Names thread `tid` of process `pid` (a line; `line_id` is its XLine id, kept in
    /// the args) and sorts it by its tid.
    pub fn thread(&mut self, pid: u64, tid: u32, line_id: i64, name: &str) -> io::Result<()> {
        let mut n = String::new();
        escape(name, &mut n);
        self.sep()?;
        writeln!(
            self.out,
            "{{\"ph\":\"M\",\"pid\":{pid},\"tid\":{tid},\"name\":\"thread_name\",\"args\":{{\"name\":\"{n}\",\"xline_id\":{line_id}}}}},"
        )?;
        write!(self.out, "{{\"ph\":\"M\",\"pid\":{pid},\"tid\":{tid},\"name\":\"thread_sort_index\",\"args\":{{\"sort_index\":{tid}}}}}")
    }

    /// One complete ("X") event; `ts_ps` relative to the origin; `name_escaped` already
    /// JSON-escaped (see [`escape`]), since names repeat and are escaped once per plane.
    pub fn complete(
        &mut self,
        pid: u64,
        tid: u32,
        name_escaped: &str,
        ts_ps: i64,
        dur_ps: i64,
    ) -> io::Result<()> {
        let b = &mut self.line;
        b.clear();
        if !self.first {
            b.extend_from_slice(b",\n");
        }
        self.first = false;
        self.events += 1;
        b.extend_from_slice(b"{\"ph\":\"X\",\"pid\":");
        put_u64(b, pid);
        b.extend_from_slice(b",\"tid\":");
        put_u64(b, tid as u64);
        b.extend_from_slice(b",\"ts\":");
        put_micros(b, ts_ps);
        b.extend_from_slice(b",\"dur\":");
        put_micros(b, dur_ps);
        b.extend_from_slice(b",\"name\":\"");
        b.extend_from_slice(name_escaped.as_bytes());
        b.extend_from_slice(b"\"}");
        self.out.write_all(b)
    }

    pub fn finish(mut self) -> io::Result<()> {
        self.out.write_all(b"\n]}\n")?;
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn writes_valid_json_with_relative_ns_timestamps() {
        let buf = Buf::default();
        let mut w = ChromeWriter::new(Box::new(buf.clone()), 1_763_000_000_000_000_000).unwrap();
        let pid = w.begin_process("node 1 \"h\" /host:CPU").unwrap();
        w.thread(pid, 7, -7_111_125_260_410_667_223, "python").unwrap();
        w.complete(pid, 7, "all-reduce", 1_234_567_891, 999)
            .unwrap();
        w.complete(pid, 7, "x", 5_000, 2_000_001).unwrap();
        w.complete(pid, 7, "early", -1_500_000, 0).unwrap();
        w.finish().unwrap();
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert!(text.starts_with("{\"displayTimeUnit\":\"ns\""));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let ev = &v["traceEvents"];
        assert_eq!(ev[2]["args"]["xline_id"].as_i64().unwrap(), -7_111_125_260_410_667_223);
        assert_eq!(ev[3]["name"], "thread_sort_index");
        assert_eq!(ev[4]["ts"].as_f64().unwrap(), 1234.567);
        assert_eq!(ev[4]["dur"].as_f64().unwrap(), 0.0);
        assert_eq!(ev[5]["dur"].as_f64().unwrap(), 2.0);
        assert_eq!(ev[6]["ts"].as_f64().unwrap(), -1.5);
        assert_eq!(ev[0]["args"]["name"], "node 1 \"h\" /host:CPU");
    }
}
