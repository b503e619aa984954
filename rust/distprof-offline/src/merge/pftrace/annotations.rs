//! One `DebugAnnotation` (the args of a slice), encoded: its name interned or inline, its
//! value an integer, a double or a string cut as the Chrome JSON cuts it.

use super::super::chrome_args::STR_CAP_BYTES;
use super::super::cursor::Cursor;
use super::super::protobuf::{self, write_varint};
use super::fields::*;

/// A string value of an annotation: `text` (lossy UTF-8), cut as the Chrome JSON cuts it.
pub fn cut_text(text: &[u8], cap: usize) -> Vec<u8> {
    let s = String::from_utf8_lossy(text);
    if s.len() <= cap {
        return s.into_owned().into_bytes();
    }
    let mut end = cap;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let mut v = s[..end].as_bytes().to_vec();
    v.extend_from_slice(b"...");
    v
}

/// The value of one debug annotation.
pub enum Value<'a> {
    Uint(u64),
    Int(i64),
    Double(f64),
    /// Valid UTF-8 within the cap.
    Text(&'a [u8]),
    /// Text to be made valid and cut.
    Raw(&'a [u8]),
}

/// The annotation's name: interned, or inline (a stat without metadata).
pub enum Name<'a> {
    Iid(u64),
    Inline(&'a [u8]),
}

/// Appends `DebugAnnotation` (field 4 of TrackEvent) `name` = `value`.
pub fn put_annotation(c: &mut Cursor<'_>, name: Name<'_>, value: Value<'_>) {
    let owned;
    let value = match value {
        Value::Raw(b) if b.len() <= STR_CAP_BYTES && std::str::from_utf8(b).is_ok() => Value::Text(b),
        Value::Raw(b) => {
            owned = cut_text(b, STR_CAP_BYTES);
            Value::Text(&owned)
        }
        v => v,
    };
    let name_len = match name {
        Name::Iid(iid) => varint_field_len(ANNOTATION_NAME_IID, iid),
        Name::Inline(n) => protobuf::len_field_len(ANNOTATION_NAME, n.len()),
    };
    let value_len = match value {
        Value::Uint(v) => varint_field_len(ANNOTATION_UINT, v),
        Value::Int(v) => varint_field_len(ANNOTATION_INT, v as u64),
        Value::Double(_) => 9,
        Value::Text(t) | Value::Raw(t) => protobuf::len_field_len(ANNOTATION_STRING, t.len()),
    };
    protobuf::write_len_header(c, EVENT_ANNOTATIONS, name_len + value_len);
    match name {
        Name::Iid(iid) => put_varint_field(c, ANNOTATION_NAME_IID, iid),
        Name::Inline(n) => put_bytes_field(c, ANNOTATION_NAME, n),
    }
    match value {
        Value::Uint(v) => put_varint_field(c, ANNOTATION_UINT, v),
        Value::Int(v) => put_varint_field(c, ANNOTATION_INT, v as u64),
        Value::Double(v) => {
            write_varint(c, key(ANNOTATION_DOUBLE, protobuf::FIXED64));
            c.put_fixed(v.to_le_bytes(), 8);
        }
        Value::Text(t) | Value::Raw(t) => put_bytes_field(c, ANNOTATION_STRING, t),
    }
}
