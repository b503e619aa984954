//! The Perfetto output of the rewrite pass, in either of its formats: Perfetto's protobuf
//! trace (`pftrace`, the default) or the Chrome Trace Event JSON (`chrome`). The rewrite
//! calls these for every plane, line and event; each call goes to the one writer in use
//! (a branch that is predicted, not a virtual call).

use super::chrome::ChromeWriter;
use super::chrome_args::PlaneArgs;
use super::direct_io::Part;
use super::pftrace::{ProtoPlane, ProtoWriter};
use super::protobuf::Field;
use super::rewrite::RewriteError;
use std::io;

/// The format of the Perfetto output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceFormat {
    /// Perfetto's own protobuf trace (`merged.pftrace`).
    #[default]
    Pftrace,
    /// Chrome Trace Event JSON (`merged.trace.json`), for chrome://tracing and JSON tools.
    ChromeJson,
}

impl TraceFormat {
    /// The file name of the output in `--out`.
    pub fn default_file_name(self) -> &'static str {
        match self {
            TraceFormat::Pftrace => "merged.pftrace",
            TraceFormat::ChromeJson => "merged.trace.json",
        }
    }
}

/// Writes one fragment of the Perfetto output.
pub enum TraceWriter {
    Json(ChromeWriter),
    Proto(ProtoWriter),
}

/// One plane's names and args, rendered for the writer in use.
pub enum PlaneNames {
    Json(PlaneArgs),
    Proto(ProtoPlane),
}

/// What the writer needs of the line being written.
pub enum LineTrack {
    /// What starts every event of the line (`ChromeWriter::event_prefix`).
    Json(Vec<u8>),
    /// The writer's current track.
    Proto,
}

impl TraceWriter {
    /// Declares a process (one node's plane named `name`, whose fields other than lines are
    /// `fields`); returns its pid and the plane's rendered names.
    pub fn begin_plane(&mut self, name: &str, fields: &[Field<'_>]) -> Result<(u64, PlaneNames), RewriteError> {
        Ok(match self {
            TraceWriter::Json(w) => {
                let names = PlaneArgs::new(fields)?;
                (w.begin_process(name)?, PlaneNames::Json(names))
            }
            TraceWriter::Proto(w) => {
                let pid = w.begin_process(name)?;
                (pid, PlaneNames::Proto(ProtoPlane::new(fields)?))
            }
        })
    }

    /// Declares thread `tid` of process `pid`: a line, XLine id `line_id`, named `name`.
    pub fn thread(&mut self, pid: u64, tid: u32, line_id: i64, name: &str) -> io::Result<LineTrack> {
        match self {
            TraceWriter::Json(w) => {
                w.thread(pid, tid, line_id, name)?;
                Ok(LineTrack::Json(ChromeWriter::event_prefix(pid, tid)))
            }
            TraceWriter::Proto(w) => {
                w.thread(pid, tid, name)?;
                Ok(LineTrack::Proto)
            }
        }
    }

    /// Ends the line.
    pub fn end_thread(&mut self) -> io::Result<()> {
        match self {
            TraceWriter::Json(_) => Ok(()),
            TraceWriter::Proto(w) => w.end_thread(),
        }
    }

    /// One event of the line: at `ts_ps` from the origin, lasting `dur_ps`, with event
    /// metadata `meta` and XEvent fields `ev` (at least the run of its stats); `event` is
    /// its place among its line's events (from 0).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub fn slice(&mut self, track: &LineTrack, names: &PlaneNames, ts_ps: i64, dur_ps: i64, meta: i64, ev: &[u8], event: u32) -> io::Result<()> {
        match (self, track, names) {
            (TraceWriter::Json(w), LineTrack::Json(prefix), PlaneNames::Json(args)) => {
                w.complete(prefix, ts_ps, dur_ps, args.name_field(meta), |b| args.write_args(meta, ev, b))
            }
            (TraceWriter::Proto(w), LineTrack::Proto, PlaneNames::Proto(plane)) => w.slice(plane, ts_ps, dur_ps, meta, ev, event),
            _ => Err(io::Error::other("a plane's names were rendered for the other trace format")),
        }
    }

    /// The next free pid.
    pub fn next_pid(&self) -> u64 {
        match self {
            TraceWriter::Json(w) => w.next_pid(),
            TraceWriter::Proto(w) => w.next_pid(),
        }
    }

    /// Ends the fragment (`chrome_doc`'s layout).
    pub fn finish(self) -> io::Result<(Part, Option<Part>)> {
        match self {
            TraceWriter::Json(w) => w.finish(),
            TraceWriter::Proto(w) => w.finish(),
        }
    }
}
