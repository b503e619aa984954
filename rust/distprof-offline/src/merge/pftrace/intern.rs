//! Which interned names the current line's packets have given the trace processor.
//!
//! Every line starts its sequence afresh (`SEQ_INCREMENTAL_STATE_CLEARED`, so that its
//! track can be the sequence's default track), which forgets every name interned before.
//! A name is therefore interned again on each line that uses it, in the packet of its first
//! use there: a line interns the names it uses, not the plane's whole table.

use super::super::cursor::Cursor;
use super::super::protobuf;
use super::fields::INTERNED_DATA;

/// The `InternedData` entries of a plane by iid (index 0 unused: iids count from 1), each a
/// whole `EventName` or `DebugAnnotationName` field, key and length included.
pub type Entries = [Vec<u8>];

/// Where a name in use is reported: the writer's [`LineNames`], or a list of the iids that
/// a precomputed run of annotations uses.
pub trait NameUse {
    fn uses(&mut self, iid: u64, entries: &Entries);
}

/// The names interned on the current line, and those still to be written.
pub struct LineNames {
    /// The current line (a stamp: starting a line forgets every name at once).
    line: u32,
    /// By iid: the line on which the name was last interned.
    stamp: Vec<u32>,
    /// The entries of the names first used by the packet being written.
    pending: Vec<u8>,
}

impl LineNames {
    pub fn new() -> Self {
        Self { line: 1, stamp: Vec::new(), pending: Vec::new() }
    }

    /// A new line: no name is interned on it yet.
    pub fn next_line(&mut self) {
        if self.line == u32::MAX {
            self.stamp.fill(0);
            self.line = 0;
        }
        self.line += 1;
        self.pending.clear();
    }

    /// Appends the `InternedData` field that the packet being written must carry, if any
    /// of its names is new on the line: the names are interned once the packet is written.
    #[inline(always)]
    pub fn put_pending(&mut self, c: &mut Cursor<'_>) {
        if !self.pending.is_empty() {
            self.put_pending_field(c);
        }
    }

    #[inline(never)]
    fn put_pending_field(&mut self, c: &mut Cursor<'_>) {
        protobuf::write_len_header(c, INTERNED_DATA, self.pending.len());
        c.put(&self.pending);
        self.pending.clear();
    }
}

impl NameUse for LineNames {
    #[inline(always)]
    fn uses(&mut self, iid: u64, entries: &Entries) {
        let i = iid as usize;
        if self.stamp.get(i) == Some(&self.line) {
            return;
        }
        self.first_use(i, entries);
    }
}

impl LineNames {
    #[inline(never)]
    fn first_use(&mut self, i: usize, entries: &Entries) {
        let Some(entry) = entries.get(i) else { return };
        if self.stamp.len() <= i {
            self.stamp.resize(i + 1, 0);
        }
        self.stamp[i] = self.line;
        self.pending.extend_from_slice(entry);
    }
}

impl NameUse for Vec<u64> {
    fn uses(&mut self, iid: u64, _: &Entries) {
        if !self.contains(&iid) {
            self.push(iid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_pending_once_per_line_and_again_on_the_next_line() {
        let entries = vec![vec![], b"A".to_vec(), b"B".to_vec()];
        let mut n = LineNames::new();
        // The InternedData field that the packet carries: its key, its length, the entries.
        let pending = |n: &mut LineNames| {
            let mut out = Vec::new();
            n.put_pending(&mut Cursor::new(&mut out));
            out
        };
        let field = |entries: &[u8]| [&[(INTERNED_DATA << 3 | 2) as u8, entries.len() as u8], entries].concat();
        n.uses(2, &entries);
        n.uses(1, &entries);
        n.uses(2, &entries);
        assert_eq!(pending(&mut n), field(b"BA"));
        n.uses(1, &entries);
        assert_eq!(pending(&mut n), b"", "no new name, no field");
        n.next_line();
        n.uses(1, &entries);
        // An iid without an entry (a plane lacking the name) is left out.
        n.uses(7, &entries);
        assert_eq!(pending(&mut n), field(b"A"));
    }
}
