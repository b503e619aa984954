"""Reads a Perfetto protobuf trace (`merged.pftrace`) the way its format defines it, without
distprof and without Perfetto: the expectations that check_merged.py holds Perfetto's trace
processor to.

Field numbers are those of Perfetto's published protos (protos/perfetto/trace/): Trace,
TracePacket, TrackDescriptor, ProcessDescriptor, ThreadDescriptor, TrackEvent,
DebugAnnotation, InternedData, ClockSnapshot, TracePacketDefaults. Only what a merged trace
uses is read; anything else is refused, so that a writer change shows here first.
"""
import collections
import gzip
import struct
import zlib


def varint(buf, pos):
    v = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            return v, pos
        shift += 7


def fields(buf):
    """Every field of a message: (number, wire type, value: int or bytes)."""
    pos, out = 0, []
    while pos < len(buf):
        key, pos = varint(buf, pos)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, pos = varint(buf, pos)
        elif wire == 1:
            v, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            n, pos = varint(buf, pos)
            v, pos = buf[pos:pos + n], pos + n
        elif wire == 5:
            v, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"wire type {wire}")
        out.append((num, wire, v))
    return out


def one(msg, num, default=None):
    vals = [v for n, _, v in fields(msg) if n == num] if isinstance(msg, (bytes, memoryview)) else \
        [v for n, _, v in msg if n == num]
    return vals[-1] if vals else default


def signed(v):
    return v - (1 << 64) if v >= 1 << 63 else v


def annotation(a, names, string_values):
    """(key, value) of a DebugAnnotation; value None when it has none."""
    f = fields(a)
    key = None
    value = None
    for n, w, v in f:
        if n == 1:
            key = names[v]
        elif n == 10:
            key = bytes(v).decode()
        elif n == 3:
            value = v if v < 1 << 63 else signed(v)  # Perfetto keeps a uint as an int64
        elif n == 4:
            value = signed(v)
        elif n == 5:
            value = struct.unpack("<d", v)[0]
        elif n == 6:
            value = bytes(v).decode()
        elif n == 17:  # string_value_iid (newer than v20.1; merge does not write it)
            value = string_values[v]
        elif n == 2:
            value = v
        else:
            raise ValueError(f"DebugAnnotation field {n}")
    return key, value


def field_bytes(number, value):
    """A length-delimited field: its key, its length and `value`."""
    def varint_bytes(v):
        out = bytearray()
        while True:
            b, v = v & 0x7F, v >> 7
            out.append(b | (0x80 if v else 0))
            if not v:
                return bytes(out)
    return varint_bytes(number << 3 | 2) + varint_bytes(len(value)) + value


def packets(data):
    """The TracePackets of a Trace (`data`), in file order, each as its bytes; a packet that
    holds `compressed_packets` (field 50, a zlib stream of Trace.packet fields) stands for
    the packets it inflates to, as the trace processor reads it."""
    for num, wire, packet in fields(data):
        if num != 1 or wire != 2:
            raise ValueError(f"Trace field {num}")
        compressed = [v for n, w, v in fields(packet) if n == 50]
        if not compressed:
            yield packet
            continue
        if len(fields(packet)) != 1:
            raise ValueError("a compressed packet with other fields")
        yield from packets(zlib.decompress(bytes(compressed[0])))


def read(path):
    """(names, slices, flows) of the trace at `path`:
    names {("process", pid) | ("thread", pid, tid): name};
    slices {(pid, tid): [(ts, dur, name, args)]}, ts in ns on the trace's clock;
    flows [(flow id, (pid, tid, ts) of each slice it passes, in time order)]."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":  # a gzip file: every member, as the format defines it
        data = gzip.decompress(data)
    tracks = {}  # uuid -> (pid, tid)
    names = {}
    seq_state = {}  # sequence id -> dict
    events = collections.defaultdict(list)  # track uuid -> [(ts, order, type, name, args, flows, ends)]
    order = 0
    for packet in packets(data):
        p = fields(packet)
        seq = one(p, 10)
        flags = one(p, 13, 0)
        if seq is not None and (flags & 1 or seq not in seq_state):
            seq_state[seq] = {"event_names": {}, "annotation_names": {}, "clock": None, "inc": {}, "track": None,
                            "string_values": {}}
        st = seq_state.get(seq)
        for n, w, v in p:
            if n == 59:  # TracePacketDefaults: timestamp_clock_id, TrackEventDefaults.track_uuid
                st["clock"] = one(v, 58)
                st["track"] = one(one(v, 11, b""), 11)
            elif n == 12:  # InternedData
                for m, _, entry in fields(v):
                    table = {2: "event_names", 3: "annotation_names", 29: "string_values"}.get(m)
                    if table is None:
                        raise ValueError(f"InternedData field {m}")
                    st[table][one(entry, 1)] = bytes(one(entry, 2, b"")).decode()
            elif n == 6:  # ClockSnapshot: this trace maps its incremental clock to BOOTTIME
                clocks = {one(c, 1): (one(c, 2, 0), one(c, 3, 0)) for m, _, c in fields(v) if m == 1}
                for cid, (ts, inc) in clocks.items():
                    if inc:
                        boot = clocks.get(6)
                        st["inc"][cid] = [ts, boot[0] - ts]  # value, offset to BOOTTIME
            elif n == 60:  # TrackDescriptor
                uuid = one(v, 1)
                proc, thread = one(v, 3), one(v, 4)
                if proc is not None:
                    pid = one(proc, 1)
                    tracks[uuid] = (pid, None)
                    names[("process", pid)] = bytes(one(proc, 6, b"")).decode()
                if thread is not None:
                    pid, tid = one(thread, 1), one(thread, 2)
                    tracks[uuid] = (pid, tid)
                    names[("thread", pid, tid)] = bytes(one(thread, 5, b"")).decode()
        ts = one(p, 8)
        te = one(p, 11)
        if ts is not None:
            clock = one(p, 58, st["clock"] if st else None)
            if clock in (st or {}).get("inc", {}):
                c = st["inc"][clock]
                c[0] += ts
                ts = c[0] + c[1]
            elif clock not in (None, 6):
                raise ValueError(f"clock {clock} without a snapshot")
        if te is None:
            continue
        t = fields(te)
        kind = one(t, 9)
        uuid = one(t, 11, st["track"])
        name_iid = one(t, 10)
        args = dict(annotation(a, st["annotation_names"], st["string_values"]) for n, _, a in t if n == 4)
        # flow_ids: 36 (varint, the field v20.1 reads; `flow_ids_old` today) or 47 (fixed64,
        # newer than v20.1).
        flow = [v for n, _, v in t if n == 36] + [int.from_bytes(v, "little") for n, w, v in t if n == 47 and w == 1]
        ending = [v for n, _, v in t if n == 42]
        name = st["event_names"].get(name_iid) if name_iid is not None else None
        events[uuid].append((ts, order, kind, name, args, flow, ending))
        order += 1
    slices = collections.defaultdict(list)
    flow_points = collections.defaultdict(list)
    for uuid, evs in events.items():
        pid, tid = tracks[uuid]
        stack = []
        # Perfetto sorts by time; events of one time keep their order in the file.
        for ts, _, kind, name, args, flow, ending in sorted(evs, key=lambda e: (e[0], e[1])):
            if kind == 1:
                stack.append((ts, name, {k: v for k, v in args.items() if v is not None}))
                for fid in flow:
                    flow_points[fid].append((ts, (pid, tid, ts), False))
                for fid in ending:
                    flow_points[fid].append((ts, (pid, tid, ts), True))
            elif kind == 2:
                start, name, args = stack.pop()
                slices[(pid, tid)].append((start, ts - start, name, args))
            else:
                raise ValueError(f"TrackEvent type {kind}")
        if stack:
            raise ValueError(f"track {uuid}: {len(stack)} slices never end")
    flows = [(fid, [where for _, where, _ in sorted(points)]) for fid, points in flow_points.items()]
    return names, slices, flows
