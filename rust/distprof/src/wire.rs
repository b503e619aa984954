//! The probe packet format: a fixed, versioned, little-endian layout.
//!
//! ```text
//! offset size field
//!      0    4 magic          b"DPRB"
//!      4    1 version        PROTOCOL_VERSION
//!      5    1 kind           PacketKind
//!      6    2 reserved       must be zero (room for flags in a later version)
//!      8    8 session_token  random per run; packets of other runs are dropped
//!     16    4 src            sending node
//!     20    4 dst            receiving node
//!     24    4 seq            probe sequence number of the edge src->dst or dst->src
//!     28    4 reserved       must be zero
//!     32    8 stamp0_ns      embedded timestamps (meaning depends on `kind`)
//!     40    8 stamp1_ns
//! ```
//!
//! One probe on edge A->B (A is the prober) is five packets:
//! `Fwd1`, `Fwd2` (A->B, `packet_spacing_us` apart, no stamps), then B answers with
//! `Rev1` (carrying B's receive stamps of Fwd1 and Fwd2), `Rev2` (`packet_spacing_us`
//! after Rev1, no stamps) and `RevFollowUp` (carrying B's kernel transmit stamps of Rev1
//! and Rev2, which only exist after the two were sent). The record is kept by the prober
//! only, so A never needs to send its own transmit stamps: 5 packets instead of the prior
//! art's 3 + 3, with the same 8 stamps per probe.

/// First four bytes of every probe packet.
pub const MAGIC: [u8; 4] = *b"DPRB";
/// Bumped whenever the layout or the meaning of a field changes.
pub const PROTOCOL_VERSION: u8 = 1;
/// Every packet is exactly this long.
pub const PACKET_LEN: usize = 48;
/// Marks a timestamp that is not known (never a real CLOCK_REALTIME value).
pub const NO_STAMP: i64 = i64::MIN;

/// What a packet is in the 5-packet exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PacketKind {
    /// First forward packet, prober -> peer.
    Fwd1 = 1,
    /// Second forward packet, `packet_spacing_us` after Fwd1.
    Fwd2 = 2,
    /// First reverse packet; stamps = peer's receive times of Fwd1, Fwd2.
    Rev1 = 3,
    /// Second reverse packet, `packet_spacing_us` after Rev1.
    Rev2 = 4,
    /// Follow-up; stamps = peer's transmit times of Rev1, Rev2.
    RevFollowUp = 5,
}

impl PacketKind {
    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Self::Fwd1,
            2 => Self::Fwd2,
            3 => Self::Rev1,
            4 => Self::Rev2,
            5 => Self::RevFollowUp,
            _ => return None,
        })
    }
}

/// A decoded packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet {
    pub kind: PacketKind,
    pub session_token: u64,
    pub src: u32,
    pub dst: u32,
    pub seq: u32,
    pub stamps_ns: [i64; 2],
}

/// Why a datagram was not accepted; each reason has its own counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reject {
    WrongLength,
    BadMagic,
    UnsupportedVersion,
    UnknownKind,
    NonZeroReserved,
}

impl Reject {
    pub const ALL: [Reject; 5] = [
        Reject::WrongLength,
        Reject::BadMagic,
        Reject::UnsupportedVersion,
        Reject::UnknownKind,
        Reject::NonZeroReserved,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Reject::WrongLength => "wrong_length",
            Reject::BadMagic => "bad_magic",
            Reject::UnsupportedVersion => "unsupported_version",
            Reject::UnknownKind => "unknown_kind",
            Reject::NonZeroReserved => "nonzero_reserved",
        }
    }
}

impl Packet {
    pub fn encode(&self) -> [u8; PACKET_LEN] {
        let mut b = [0u8; PACKET_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4] = PROTOCOL_VERSION;
        b[5] = self.kind as u8;
        b[8..16].copy_from_slice(&self.session_token.to_le_bytes());
        b[16..20].copy_from_slice(&self.src.to_le_bytes());
        b[20..24].copy_from_slice(&self.dst.to_le_bytes());
        b[24..28].copy_from_slice(&self.seq.to_le_bytes());
        b[32..40].copy_from_slice(&self.stamps_ns[0].to_le_bytes());
        b[40..48].copy_from_slice(&self.stamps_ns[1].to_le_bytes());
        b
    }

    /// Parses a datagram. Never panics, whatever the bytes.
    pub fn decode(b: &[u8]) -> Result<Packet, Reject> {
        if b.len() != PACKET_LEN {
            return Err(Reject::WrongLength);
        }
        if b[0..4] != MAGIC {
            return Err(Reject::BadMagic);
        }
        if b[4] != PROTOCOL_VERSION {
            return Err(Reject::UnsupportedVersion);
        }
        let kind = PacketKind::from_u8(b[5]).ok_or(Reject::UnknownKind)?;
        if b[6] != 0 || b[7] != 0 || b[28..32] != [0, 0, 0, 0] {
            return Err(Reject::NonZeroReserved);
        }
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(a)
        };
        Ok(Packet {
            kind,
            session_token: u64_at(8),
            src: u32_at(16),
            dst: u32_at(20),
            seq: u32_at(24),
            stamps_ns: [u64_at(32) as i64, u64_at(40) as i64],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn sample() -> Packet {
        Packet {
            kind: PacketKind::Rev1,
            session_token: 0xDEAD_BEEF_0123_4567,
            src: 7,
            dst: 4_000_000_000,
            seq: 123_456,
            stamps_ns: [1_700_000_000_123_456_789, NO_STAMP],
        }
    }

    #[test]
    fn round_trips_every_kind() {
        for kind in [
            PacketKind::Fwd1,
            PacketKind::Fwd2,
            PacketKind::Rev1,
            PacketKind::Rev2,
            PacketKind::RevFollowUp,
        ] {
            let p = Packet { kind, ..sample() };
            assert_eq!(Packet::decode(&p.encode()), Ok(p));
        }
    }

    #[test]
    fn layout_is_little_endian_at_documented_offsets() {
        let b = sample().encode();
        assert_eq!(&b[0..4], b"DPRB");
        assert_eq!(b[4], 1);
        assert_eq!(b[5], 3);
        assert_eq!(b[16..20], [7, 0, 0, 0]);
        assert_eq!(u64::from_le_bytes(b[8..16].try_into().unwrap()), 0xDEAD_BEEF_0123_4567);
        assert_eq!(i64::from_le_bytes(b[32..40].try_into().unwrap()), 1_700_000_000_123_456_789);
    }

    #[test]
    fn rejects_each_reason() {
        let good = sample().encode();
        assert_eq!(Packet::decode(&good[..47]), Err(Reject::WrongLength));
        let mut long = good.to_vec();
        long.push(0);
        assert_eq!(Packet::decode(&long), Err(Reject::WrongLength));
        let mut b = good;
        b[0] = b'X';
        assert_eq!(Packet::decode(&b), Err(Reject::BadMagic));
        let mut b = good;
        b[4] = 2;
        assert_eq!(Packet::decode(&b), Err(Reject::UnsupportedVersion));
        let mut b = good;
        b[5] = 0;
        assert_eq!(Packet::decode(&b), Err(Reject::UnknownKind));
        let mut b = good;
        b[5] = 6;
        assert_eq!(Packet::decode(&b), Err(Reject::UnknownKind));
        let mut b = good;
        b[7] = 1;
        assert_eq!(Packet::decode(&b), Err(Reject::NonZeroReserved));
        let mut b = good;
        b[30] = 1;
        assert_eq!(Packet::decode(&b), Err(Reject::NonZeroReserved));
    }

    /// Bounded randomized fuzzing of the decoder (the `fuzz/` target does the same
    /// unbounded): random lengths and bytes, and single-byte mutations of a valid packet.
    /// Never panics; whatever decodes re-encodes to the same bytes.
    #[test]
    fn decoder_survives_random_input() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
        let good = sample().encode();
        let mut accepted = 0;
        for i in 0..60_000 {
            let bytes: Vec<u8> = if i % 2 == 0 {
                let len = rng.gen_range(0..100);
                (0..len).map(|_| rng.gen()).collect()
            } else {
                let mut b = good.to_vec();
                for _ in 0..rng.gen_range(1..4) {
                    let at = rng.gen_range(0..PACKET_LEN);
                    b[at] = rng.gen();
                }
                b
            };
            if let Ok(p) = Packet::decode(&bytes) {
                accepted += 1;
                assert_eq!(&p.encode()[..], &bytes[..]);
            }
        }
        // Mutations of stamps, token and ids are valid packets: the fuzzer must reach them.
        assert!(accepted > 3_000, "accepted {accepted}");
    }
}
