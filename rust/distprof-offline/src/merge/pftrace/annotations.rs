//! One `DebugAnnotation` (the args of a slice), encoded: its name interned or inline, its
//! value an integer, a double or a string cut as the Chrome JSON cuts it.

use super::super::chrome_args::STR_CAP_BYTES;
use super::super::cursor::Cursor;
use super::super::protobuf::{self, varint_len, write_varint};
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

/// Appends `DebugAnnotation` (field 4 of TrackEvent) `name` = `value`. Most annotations
/// (an interned name below 128, an integer or a short string) are written in two or three
/// moves of their bytes: a merge writes one or more per event.
#[inline(always)]
pub fn put_annotation(c: &mut Cursor<'_>, name: Name<'_>, value: Value<'_>) {
    const ANNOTATION: u8 = key(EVENT_ANNOTATIONS, protobuf::LEN) as u8;
    const NAME_IID: u8 = key(ANNOTATION_NAME_IID, protobuf::VARINT) as u8;
    if let Name::Iid(iid @ 0..0x80) = name {
        let int = match value {
            Value::Uint(v) => Some((key(ANNOTATION_UINT, protobuf::VARINT) as u8, v)),
            Value::Int(v) => Some((key(ANNOTATION_INT, protobuf::VARINT) as u8, v as u64)),
            _ => None,
        };
        if let Some((value_key, v)) = int {
            // The name's key and iid, the value's key and the value: at most 13 bytes.
            c.put_fixed([ANNOTATION, (3 + varint_len(v)) as u8, NAME_IID, iid as u8, value_key], 5);
            return write_varint(c, v);
        }
        if let Value::Text(t) = value {
            if t.len() < 0x80 - 4 {
                c.put_fixed([ANNOTATION, (4 + t.len()) as u8, NAME_IID, iid as u8, key(ANNOTATION_STRING, protobuf::LEN) as u8, t.len() as u8], 6);
                return c.put(t);
            }
        }
    }
    put_annotation_general(c, name, value)
}

/// [`put_annotation`] field by field, for any name and value.
#[inline(never)]
fn put_annotation_general(c: &mut Cursor<'_>, name: Name<'_>, value: Value<'_>) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_short_forms_write_what_the_general_form_writes() {
        let long = "x".repeat(200);
        let texts = ["", "all-reduce.1", &long[..123], &long[..124], &long];
        for iid in [0, 1, 127, 128, 300] {
            let mut values: Vec<Value<'_>> = [0, 1, 127, 128, 1 << 40, u64::MAX].into_iter().flat_map(|v| [Value::Uint(v), Value::Int(v as i64)]).collect();
            values.extend(texts.iter().map(|t| Value::Text(t.as_bytes())));
            values.push(Value::Double(0.5));
            for value in values {
                let copy = match value {
                    Value::Uint(v) => Value::Uint(v),
                    Value::Int(v) => Value::Int(v),
                    Value::Double(v) => Value::Double(v),
                    Value::Text(t) => Value::Text(t),
                    Value::Raw(t) => Value::Raw(t),
                };
                let (mut fast, mut general) = (Vec::new(), Vec::new());
                put_annotation(&mut Cursor::new(&mut fast), Name::Iid(iid), value);
                put_annotation_general(&mut Cursor::new(&mut general), Name::Iid(iid), copy);
                assert_eq!(fast, general, "iid {iid}");
            }
        }
    }
}
