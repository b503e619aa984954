//! Which XLA ops are collectives, and of which kind, by what XLA records about them.
//!
//! The op names in a trace are the HLO instruction names, and those are JAX's choice, not
//! XLA's: a `psum` is the all-reduce `psum.7` (`psum_invariant.7` inside a shard_map), a
//! `ppermute` the collective-permute `ppermute.3`. So the kind comes, in this order, from:
//!
//! 1. the HLO opcode of the instruction, from the module's `HloProto` that XLA stores in the
//!    `/host:metadata` plane (JAX's CPU and GPU traces carry it), keyed by module and op;
//! 2. the `hlo_category` stat (XLA's GPU traces put the op's category there);
//! 3. the opcode in the `long_name` stat (`%psum.7 = f32[4]{0} all-reduce(...)`);
//! 4. the op name itself, with JAX's primitive names (`psum`, `all_gather`, `ppermute`...)
//!    known as aliases of their opcode;
//! 5. for events without an HLO op, a collective library's kernel (`nccl`/`rccl` in the
//!    event name).
//!
//! Async collectives are two ops, `<kind>-start` and `<kind>-done`; each half is its own
//! kind here (`all-reduce-start`), so that both halves are counted and checked.

use crate::merge::protobuf::{Fields, WireError, LEN};
use std::collections::HashMap;

/// The collective opcodes of HLO, each with JAX's primitive names that lower to it.
const KINDS: &[(&str, &[&str])] = &[
    ("all-reduce", &["psum", "pmax", "pmin", "psum-invariant", "pmean"]),
    ("all-gather", &["all-gather-invariant"]),
    ("reduce-scatter", &["psum-scatter"]),
    ("all-to-all", &[]),
    ("ragged-all-to-all", &[]),
    ("collective-permute", &["ppermute"]),
    ("collective-broadcast", &[]),
    ("send", &[]),
    ("recv", &[]),
];

/// The kind of a collective op (`all-reduce`, `all-gather-start`, ...) from an opcode or an
/// op name: ASCII case and `_`/`-` are not told apart, a `%` before and `.N` suffixes after
/// the name are dropped. None for every other op.
pub fn kind_of(name: &str) -> Option<String> {
    let mut n = name.trim().trim_start_matches('%').to_ascii_lowercase().replace('_', "-");
    // `.N` suffixes, possibly several (`all-gather.3.1`); not a `.` inside the name.
    while let Some(dot) = n.rfind('.') {
        if n.len() > dot + 1 && n[dot + 1..].bytes().all(|b| b.is_ascii_digit()) {
            n.truncate(dot);
        } else {
            break;
        }
    }
    let (base, phase) = match (n.strip_suffix("-start"), n.strip_suffix("-done")) {
        (Some(b), _) => (b, "-start"),
        (_, Some(b)) => (b, "-done"),
        _ => (n.as_str(), ""),
    };
    KINDS
        .iter()
        .find(|(op, aliases)| *op == base || aliases.contains(&base))
        .map(|(op, _)| format!("{op}{phase}"))
}

/// The opcode in an HLO text line (`long_name`): the word before the first `(` that follows
/// ` = ` and a space (`%x.1 = (f32[4], u32[]) all-reduce-start(%p), ...` gives
/// `all-reduce-start`).
pub fn opcode_in_text(text: &str) -> Option<&str> {
    let rhs = &text[text.find(" = ")? + 3..];
    let b = rhs.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        if c != b'(' {
            continue;
        }
        let word_start = b[..i].iter().rposition(|&c| !(c.is_ascii_alphanumeric() || c == b'-' || c == b'_')).map_or(0, |p| p + 1);
        if word_start > 0 && b[word_start - 1] == b' ' && word_start < i {
            return Some(&rhs[word_start..i]);
        }
    }
    None
}

/// True for a collective library's kernel name (`ncclDevKernel_AllReduce`, `rccl...`).
pub fn is_ccl_kernel(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.contains("nccl") || n.contains("rccl")
}

/// The collectives' opcodes by (module, instruction) from the HLO protos of one trace's
/// `/host:metadata` plane; other instructions are left out (the map stays small).
#[derive(Debug, Default)]
pub struct HloOpcodes {
    collectives: HashMap<(String, String), String>,
    modules: std::collections::HashSet<String>,
}

impl HloOpcodes {
    /// Reads the `Hlo Proto` stats of a metadata plane (`plane`: the XPlane's bytes).
    pub fn add_plane(&mut self, plane: &[u8]) -> Result<(), WireError> {
        let mut stat_names: HashMap<i64, Vec<u8>> = HashMap::new();
        let mut event_metadata = Vec::new();
        let mut f = Fields::new(plane, 0);
        while let Some(x) = f.next_field()? {
            match x.number {
                4 => event_metadata.push(x.bytes),
                5 => {
                    let (k, v) = entry_value(x.bytes)?;
                    stat_names.insert(k, named(v)?.to_vec());
                }
                _ => {}
            }
        }
        let hlo_proto = stat_names.iter().find(|(_, n)| n.as_slice() == b"Hlo Proto").map(|(k, _)| *k);
        let Some(hlo_proto) = hlo_proto else { return Ok(()) };
        for e in event_metadata {
            let (_, md) = entry_value(e)?;
            let mut mf = Fields::new(md, 0);
            while let Some(s) = mf.next_field()? {
                if s.number != 5 || s.wire_type != LEN {
                    continue;
                }
                let (mut id, mut bytes) = (0i64, None);
                let mut sf = Fields::new(s.bytes, 0);
                while let Some(z) = sf.next_field()? {
                    match z.number {
                        1 => id = z.int as i64,
                        6 => bytes = Some(z.bytes),
                        _ => {}
                    }
                }
                if let (true, Some(b)) = (id == hlo_proto, bytes) {
                    self.add_hlo_proto(b)?;
                }
            }
        }
        Ok(())
    }

    /// HloProto { hlo_module = 1: HloModuleProto { name = 1, computations = 3:
    /// HloComputationProto { instructions = 2: HloInstructionProto { name = 1, opcode = 2 } } } }
    fn add_hlo_proto(&mut self, proto: &[u8]) -> Result<(), WireError> {
        let mut f = Fields::new(proto, 0);
        while let Some(m) = f.next_field()? {
            if m.number != 1 || m.wire_type != LEN {
                continue;
            }
            let (mut module, mut computations) = (String::new(), Vec::new());
            let mut mf = Fields::new(m.bytes, 0);
            while let Some(x) = mf.next_field()? {
                match (x.number, x.wire_type) {
                    (1, LEN) => module = String::from_utf8_lossy(x.bytes).into_owned(),
                    (3, LEN) => computations.push(x.bytes),
                    _ => {}
                }
            }
            self.modules.insert(module.clone());
            for c in computations {
                let mut cf = Fields::new(c, 0);
                while let Some(i) = cf.next_field()? {
                    if i.number != 2 || i.wire_type != LEN {
                        continue;
                    }
                    let (mut name, mut opcode) = (&b""[..], &b""[..]);
                    let mut inf = Fields::new(i.bytes, 0);
                    while let Some(z) = inf.next_field()? {
                        match (z.number, z.wire_type) {
                            (1, LEN) => name = z.bytes,
                            (2, LEN) => opcode = z.bytes,
                            _ => {}
                        }
                    }
                    let opcode = String::from_utf8_lossy(opcode);
                    if kind_of(&opcode).is_some() {
                        self.collectives.insert((module.clone(), String::from_utf8_lossy(name).into_owned()), opcode.into_owned());
                    }
                }
            }
        }
        Ok(())
    }

    /// What the HLO of `module` says of `op`: None when the trace carries no HLO for the
    /// module (the kind must come from elsewhere), Some(None) when the op is no collective
    /// there whatever its name, Some(Some(opcode)) for a collective.
    pub fn lookup(&self, module: &str, op: &str) -> Option<Option<&str>> {
        if !self.modules.contains(module) {
            return None;
        }
        Some(self.collectives.get(&(module.to_string(), op.to_string())).map(String::as_str))
    }
}

/// (key, value bytes) of a protobuf map entry.
pub(super) fn entry_value(entry: &[u8]) -> Result<(i64, &[u8]), WireError> {
    let (mut key, mut value) = (0i64, &b""[..]);
    let mut f = Fields::new(entry, 0);
    while let Some(x) = f.next_field()? {
        match x.number {
            1 => key = x.int as i64,
            2 => value = x.bytes,
            _ => {}
        }
    }
    Ok((key, value))
}

/// The name (field 2) of an event or stat metadata message.
pub(super) fn named(md: &[u8]) -> Result<&[u8], WireError> {
    let mut f = Fields::new(md, 0);
    while let Some(x) = f.next_field()? {
        if x.number == 2 && x.wire_type == LEN {
            return Ok(x.bytes);
        }
    }
    Ok(b"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_from_opcodes_jax_names_and_async_halves() {
        for (name, kind) in [
            ("all-reduce", "all-reduce"),
            ("psum.7", "all-reduce"),
            ("psum_invariant.7", "all-reduce"),
            ("all_gather.3", "all-gather"),
            ("All-Gather-Start", "all-gather-start"),
            ("all-gather-done.2", "all-gather-done"),
            ("reduce_scatter.7", "reduce-scatter"),
            ("psum_scatter.1", "reduce-scatter"),
            ("ppermute.3", "collective-permute"),
            ("collective-permute-start.1", "collective-permute-start"),
            ("all-to-all", "all-to-all"),
            ("%all-reduce.5", "all-reduce"),
            ("send.1", "send"),
            ("recv-done.4", "recv-done"),
            ("all-gather.3.1", "all-gather"),
        ] {
            assert_eq!(kind_of(name).as_deref(), Some(kind), "{name}");
        }
        for name in ["fusion.2", "add_bitcast_fusion", "wrapped_slice", "reduce_sum.58", "all-reduce-fusion", "sendfile", "end: psum.7", "", "psum.x"] {
            assert_eq!(kind_of(name), None, "{name}");
        }
    }

    #[test]
    fn opcode_from_hlo_text() {
        assert_eq!(opcode_in_text("%psum.7 = f32[4]{0} all-reduce(f32[4]{0} %p), replica_groups={}"), Some("all-reduce"));
        assert_eq!(opcode_in_text("%a.1 = (f32[4], u32[]) all-reduce-start(%p), to_apply=%add"), Some("all-reduce-start"));
        assert_eq!(opcode_in_text("fusion.2"), None);
        assert_eq!(kind_of(opcode_in_text("%x = f32[] add(%a, %b)").unwrap()), None);
    }

    #[test]
    fn library_kernels() {
        assert!(is_ccl_kernel("ncclDevKernel_AllReduce_Sum_f32"));
        assert!(is_ccl_kernel("rccl_kernel"));
        assert!(!is_ccl_kernel("fusion_1"));
    }
}
