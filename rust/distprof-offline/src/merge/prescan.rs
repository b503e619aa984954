//! The prescan: what merge and validate learn about a node's XSpace before touching its
//! events (profile start and stop, the distprof plane, host names, plane count, whether the
//! file is a merge output already), from a buffer or streamed from a file.

use super::protobuf::{self, Fields, WireError};
use super::xspace_fields::*;
use distprof::distprof_plane::{DISTPROF_APPLIED_PLANE, DISTPROF_PLANE};
use distprof::xplane::{XPlane, PROFILE_START_STAT, PROFILE_STOP_STAT, TASK_ENV_PLANE};
use prost::Message;
use std::io;

/// The prescan's read buffer. Every plane it seeks past costs one buffer's read at the
/// field after it, so this is most of what a trace costs the solve step (`plan`): 8 KiB
/// holds the head of a plane (its name is within the first 512 bytes) and the small
/// planes whole, where 64 KiB read 95 kB of each 1.5 MB `bench merge` trace for 3 planes.
const PRESCAN_BUFFER_BYTES: usize = 8 << 10;

/// What the prescan learns about a node's XSpace without touching its events.
#[derive(Debug, Clone, Default)]
pub struct SpaceInfo {
    /// `Task Environment` profile start/stop, epoch ns in S.
    pub profile_start_ns: Option<i64>,
    pub profile_stop_ns: Option<i64>,
    /// The decoded distprof plane, if the node wrote one.
    pub distprof: Option<XPlane>,
    pub hostnames: Vec<String>,
    pub planes: usize,
    /// The file is a merge output: its events are on G already.
    pub already_merged: bool,
    /// Planes whose events merge maps ([`is_event_plane`]): none means nothing to merge.
    pub event_planes: usize,
    /// Planes named `/device:*` ([`is_device_plane`]): merge numbers them apart from the
    /// others, so a node's first plane ids follow from the counts of the nodes before it.
    pub device_planes: usize,
    /// Bytes [`prescan_file`] read from the file (what the small planes cost against the
    /// file's size; 0 from the in-memory [`prescan`]).
    pub read_bytes: u64,
}

/// True for the planes merge maps R -> S -> G and numbers as devices.
pub fn is_device_plane(name: &[u8]) -> bool {
    name.starts_with(b"/device:")
}

/// True for planes whose events merge maps (not the distprof plane, not Task Environment).
pub fn is_event_plane(name: &[u8]) -> bool {
    name != TASK_ENV_PLANE.as_bytes()
        && name != DISTPROF_PLANE.as_bytes()
        && name != DISTPROF_APPLIED_PLANE.as_bytes()
}

/// Name of a plane: field 2, which encoders write right after the id.
pub fn plane_name(plane: &[u8]) -> Result<&[u8], WireError> {
    let mut f = Fields::new(plane, 0);
    while let Some(x) = f.next_field()? {
        if x.number == PLANE_NAME && x.wire_type == protobuf::LEN {
            return Ok(x.bytes);
        }
    }
    Ok(b"")
}

pub fn prescan(buf: &[u8]) -> Result<SpaceInfo, WireError> {
    let mut info = SpaceInfo::default();
    let mut f = Fields::new(buf, 0);
    while let Some(x) = f.next_field()? {
        match (x.number, x.wire_type) {
            (SPACE_PLANES, protobuf::LEN) => {
                info.planes += 1;
                let name = plane_name(x.bytes)?;
                info.event_planes += usize::from(is_event_plane(name));
                info.device_planes += usize::from(is_device_plane(name));
                if name == TASK_ENV_PLANE.as_bytes() {
                    let p = XPlane::decode(x.bytes).map_err(|_| WireError {
                        at: f.offset_of(x.bytes),
                        what: "undecodable Task Environment plane",
                    })?;
                    info.profile_start_ns = p.stat_u64(PROFILE_START_STAT).map(|v| v as i64);
                    info.profile_stop_ns = p.stat_u64(PROFILE_STOP_STAT).map(|v| v as i64);
                } else if name == DISTPROF_PLANE.as_bytes() {
                    let p = XPlane::decode(x.bytes).map_err(|_| WireError {
                        at: f.offset_of(x.bytes),
                        what: "undecodable distprof plane",
                    })?;
                    info.distprof = Some(p);
                } else if name == DISTPROF_APPLIED_PLANE.as_bytes() {
                    info.already_merged = true;
                }
            }
            (SPACE_HOSTNAMES, protobuf::LEN) => info
                .hostnames
                .push(String::from_utf8_lossy(x.bytes).into_owned()),
            _ => {}
        }
    }
    Ok(info)
}

/// [`prescan`] without reading the whole file: top-level fields are skipped by seeking and only
/// the small planes it needs are read. Keeps merge at one full read per input.
pub fn prescan_file(path: &std::path::Path) -> io::Result<Result<SpaceInfo, WireError>> {
    use std::io::{BufRead, Read};
    let file = std::fs::File::open(path)?;
    let file_len = file.metadata()?.len();
    let mut r = io::BufReader::with_capacity(PRESCAN_BUFFER_BYTES, Counted { file, read: 0 });
    let mut pos = 0u64;
    /// The first name of a plane whose head did not hold it, walked field by field with
    /// seeks from the plane's start (at most 64 bytes of it: enough to tell the planes
    /// merge treats apart); returns it and the bytes walked.
    fn walk_plane_name(r: &mut io::BufReader<Counted>, len: u64) -> io::Result<(Vec<u8>, u64)> {
        let mut p = 0u64;
        while p < len {
            let Ok(Some(key)) = varint(r, &mut p) else { break };
            let (number, wt) = ((key >> 3) as u32, (key & 7) as u8);
            match wt {
                protobuf::VARINT => {
                    if varint(r, &mut p).ok().flatten().is_none() {
                        break;
                    }
                }
                protobuf::FIXED64 | protobuf::FIXED32 => {
                    let n = if wt == protobuf::FIXED64 { 8 } else { 4 };
                    r.seek_relative(n)?;
                    p += n as u64;
                }
                protobuf::LEN => {
                    let Ok(Some(l)) = varint(r, &mut p) else { break };
                    if l > len - p.min(len) {
                        break;
                    }
                    if number == PLANE_NAME {
                        let mut name = vec![0u8; l.min(64) as usize];
                        r.read_exact(&mut name)?;
                        r.seek_relative(l as i64 - name.len() as i64)?;
                        return Ok((name, p + l));
                    }
                    r.seek_relative(l as i64)?;
                    p += l;
                }
                _ => break,
            }
        }
        Ok((Vec::new(), p))
    }
    fn varint(r: &mut impl BufRead, pos: &mut u64) -> io::Result<Option<u64>> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let mut b = [0u8; 1];
            if r.read(&mut b)? == 0 {
                return if shift == 0 {
                    Ok(None)
                } else {
                    Err(io::ErrorKind::UnexpectedEof.into())
                };
            }
            *pos += 1;
            v |= ((b[0] & 0x7f) as u64) << shift;
            if b[0] < 0x80 {
                return Ok(Some(v));
            }
        }
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "varint longer than 10 bytes",
        ))
    }
    let bad = |at: u64, what: &'static str| {
        Ok(Err(WireError {
            at: at as usize,
            what,
        }))
    };
    let mut info = SpaceInfo::default();
    loop {
        let at = pos;
        let key = match varint(&mut r, &mut pos) {
            Ok(Some(k)) => k,
            Ok(None) => break,
            Err(_) => return bad(at, "truncated field key"),
        };
        let (number, wt) = ((key >> 3) as u32, (key & 7) as u8);
        match wt {
            protobuf::VARINT => {
                if varint(&mut r, &mut pos).ok().flatten().is_none() {
                    return bad(at, "truncated varint");
                }
            }
            protobuf::FIXED64 | protobuf::FIXED32 => {
                let n = if wt == protobuf::FIXED64 { 8 } else { 4 };
                r.seek_relative(n)?;
                pos += n as u64;
            }
            protobuf::LEN => {
                let len = match varint(&mut r, &mut pos) {
                    Ok(Some(l)) => l,
                    _ => return bad(at, "truncated length"),
                };
                // A corrupt length must not allocate it, nor seek backwards (a length near
                // 2^64 wrapped to a negative seek and re-read the same field forever).
                if len > file_len.saturating_sub(pos) {
                    return bad(pos, "length past end of file");
                }
                if number == SPACE_PLANES || number == SPACE_HOSTNAMES {
                    let head_len = len.min(512) as usize;
                    let mut body = vec![0u8; head_len];
                    if r.read_exact(&mut body).is_err() {
                        return bad(pos, "length past end of file");
                    }
                    let name = if number == SPACE_PLANES {
                        let mut f = Fields::new(&body, pos as usize);
                        let mut name = None;
                        while let Ok(Some(x)) = f.next_field() {
                            if x.number == PLANE_NAME && x.wire_type == protobuf::LEN {
                                name = Some(x.bytes.to_vec());
                                break;
                            }
                        }
                        match name {
                            Some(n) => n,
                            None if (head_len as u64) < len => {
                                // The name lies past the head (an unusual field order):
                                // walk to it, then come back, so the counts of device
                                // planes agree with what the rewrite sees.
                                r.seek_relative(-(head_len as i64))?;
                                let (n, walked) = walk_plane_name(&mut r, len)?;
                                r.seek_relative(-(walked as i64))?;
                                r.read_exact(&mut body)?;
                                n
                            }
                            None => Vec::new(),
                        }
                    } else {
                        Vec::new()
                    };
                    let wanted = number == SPACE_HOSTNAMES
                        || name == TASK_ENV_PLANE.as_bytes()
                        || name == DISTPROF_PLANE.as_bytes()
                        || name == DISTPROF_APPLIED_PLANE.as_bytes();
                    if wanted {
                        body.resize(len as usize, 0);
                        if r.read_exact(&mut body[head_len..]).is_err() {
                            return bad(pos, "length past end of file");
                        }
                        // Re-encode as a one-field XSpace and reuse the in-memory prescan.
                        let mut one = Vec::with_capacity(body.len() + 12);
                        protobuf::put_len_header(&mut one, number, body.len());
                        one.extend_from_slice(&body);
                        let sub = match prescan(&one) {
                            Ok(s) => s,
                            Err(e) => return Ok(Err(e)),
                        };
                        info.profile_start_ns = info.profile_start_ns.or(sub.profile_start_ns);
                        info.profile_stop_ns = info.profile_stop_ns.or(sub.profile_stop_ns);
                        info.distprof = info.distprof.take().or(sub.distprof);
                        info.already_merged |= sub.already_merged;
                        info.hostnames.extend(sub.hostnames);
                    } else {
                        r.seek_relative(len as i64 - head_len as i64)?;
                    }
                    info.planes += (number == SPACE_PLANES) as usize;
                    info.event_planes += usize::from(number == SPACE_PLANES && is_event_plane(&name));
                    info.device_planes += usize::from(number == SPACE_PLANES && is_device_plane(&name));
                } else {
                    r.seek_relative(len as i64)?;
                }
                pos += len;
            }
            _ => return bad(at, "unsupported wire type"),
        }
    }
    info.read_bytes = r.get_ref().read;
    Ok(Ok(info))
}

/// A file that counts the bytes read from it.
struct Counted {
    file: std::fs::File,
    read: u64,
}

impl io::Read for Counted {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = io::Read::read(&mut self.file, buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

impl io::Seek for Counted {
    fn seek(&mut self, pos: io::SeekFrom) -> io::Result<u64> {
        io::Seek::seek(&mut self.file, pos)
    }
}
