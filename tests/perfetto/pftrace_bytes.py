#!/usr/bin/env python3
"""Where the bytes of a `merged.pftrace` go, field by field: the measurement behind the
size figures of docs/merge.md, to rerun after any change to the encoder.

    pftrace_bytes.py MERGED.pftrace

Every byte of the file is counted once, under the field that holds it: a field's key and
length under "framing" of the message it is in, its value under its own name (a
TrackEvent's fields and a DebugAnnotation's fields each on their own line). The totals are
also given per slice (per TYPE_SLICE_BEGIN), the unit the merge writes. Packets deflated
into `compressed_packets` (the default) are counted as they inflate, and the first line
gives the file's bytes beside the inflated packets' (the compression's gain).
"""
import collections
import sys

from pftrace import field_bytes, fields, packets

PACKET_FIELDS = {6: "clock_snapshot", 8: "timestamp", 10: "trusted_packet_sequence_id", 11: "track_event",
                 12: "interned_data", 13: "sequence_flags", 59: "trace_packet_defaults",
                 60: "track_descriptor", 2047: "padding"}
EVENT_FIELDS = {4: "debug_annotations", 9: "type", 10: "name_iid", 11: "track_uuid", 36: "flow_ids"}
ANNOTATION_FIELDS = {1: "name_iid", 3: "uint_value", 4: "int_value", 5: "double_value", 6: "string_value",
                     10: "name"}


def varint_len(v):
    n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


def split(number, wire, value):
    """(key and length bytes, value bytes) of one field."""
    key = varint_len(number << 3 | wire)
    if wire == 0:
        return key, varint_len(value)
    if wire == 2:
        return key + varint_len(len(value)), len(value)
    return key, len(value)


def count(data):
    sizes = collections.Counter()
    slices = 0
    for num, wire, packet in fields(data):
        head, _ = split(num, wire, packet)
        sizes["TracePacket framing"] += head
        for n, w, v in fields(packet):
            head, body = split(n, w, v)
            if n != 11:
                sizes[PACKET_FIELDS.get(n, f"TracePacket field {n}")] += head + body
                continue
            sizes["TrackEvent framing"] += head
            for m, w2, x in fields(v):
                head2, body2 = split(m, w2, x)
                if m == 9 and x == 1:
                    slices += 1
                if m != 4:
                    sizes["TrackEvent." + EVENT_FIELDS.get(m, f"field {m}")] += head2 + body2
                    continue
                sizes["DebugAnnotation framing"] += head2
                for q, w3, y in fields(x):
                    head3, body3 = split(q, w3, y)
                    sizes["DebugAnnotation." + ANNOTATION_FIELDS.get(q, f"field {q}")] += head3 + body3
    return sizes, slices


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.split("\n\n")[1])
    with open(sys.argv[1], "rb") as f:
        stored = f.read()
    data = b"".join(field_bytes(1, bytes(p)) for p in packets(stored))
    sizes, slices = count(data)
    assert sum(sizes.values()) == len(data), "every byte is counted once"
    print(f"{sys.argv[1]}: {len(stored)} bytes, {slices} slices, {len(stored) / max(slices, 1):.1f} bytes per slice")
    if len(data) != len(stored):
        print(f"  its packets inflate to {len(data)} bytes, {len(data) / max(slices, 1):.1f} per slice: "
              f"deflated {len(data) / len(stored):.2f}x")
    for name, n in sizes.most_common():
        print(f"  {name:36} {n:>12} {100 * n / len(data):5.1f} % {n / max(slices, 1):6.2f} per slice")


if __name__ == "__main__":
    main()
