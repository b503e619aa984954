//! Sessions: every key of a run lives under a random per-run id, so a job restarted on a
//! reused store never reads the values of an earlier run.
//!
//! # How the session id is agreed
//!
//! The stores we run on offer only Get/TryGet/Set: no Delete, no compare-and-swap, no
//! atomic counter. So only the master (node 0) writes the one key that names a session,
//! and it never overwrites:
//!
//! ```text
//! distprof/round/<r>                  announcement by the master: session id and token,
//!                                     node count, config digest and shared config, graph
//!                                     parameters (r = 0, 1, 2, ...)
//! distprof/s/<session>/node/<i>       node i joins: nonce, probe address, hostname, digest
//! distprof/s/<session>/echo/<i>/<j>   node i has read node j's join: j's nonce
//! distprof/s/<session>/ack/<i>        node i is done (a standalone master waits for these
//!                                     before it stops serving the store)
//! ```
//!
//! The master opens round `r` = the first index whose key is absent, with a fresh random
//! session id. A node finds the highest existing round and treats it as stale, moving on
//! to round r+1, when (a) round r+1 exists, or (b) its own join key in round r exists
//! already: an earlier incarnation of this node joined it (a finished earlier run, or a
//! process that restarted). While it waits for its peers it keeps looking for round r+1,
//! so a round opened by a master that died is left behind as soon as the new master opens
//! the next one. A node trusts a peer only once the peer has echoed the nonce of this
//! node's join: a peer that died in an earlier run never echoes a nonce drawn now, so
//! stale joins in the store cannot pass for live peers, and a second process with the
//! same rank is caught (its peers echo the other process's nonce). This covers XLA's
//! cases: all processes restarting on a store that survived (a coordination service
//! outside the job), and one process creating several PJRT clients over the same store,
//! where each creation is a new round. Two jobs sharing one store and one prefix at the
//! same time are not supported (their masters would each open a round); give them
//! different prefixes.

use rand::RngCore;

/// Every key distprof writes starts with this, apart from callers' own prefixes (XLA's
/// wrappers add e.g. `gpu:`).
pub const KEY_PREFIX: &str = "distprof";

pub fn round_key(round: u64) -> String {
    format!("{KEY_PREFIX}/round/{round}")
}

pub fn join_key(session_id: &str, node: u32) -> String {
    format!("{KEY_PREFIX}/s/{session_id}/node/{node}")
}

pub fn echo_key(session_id: &str, from: u32, to: u32) -> String {
    format!("{KEY_PREFIX}/s/{session_id}/echo/{from}/{to}")
}

pub fn ack_key(session_id: &str, node: u32) -> String {
    format!("{KEY_PREFIX}/s/{session_id}/ack/{node}")
}

/// 64 random bits from the OS. Should the OS source fail, time, pid and a stack address
/// are mixed instead: weaker, but a restarted process still differs from its predecessor.
pub fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    if rand::rngs::OsRng.try_fill_bytes(&mut bytes).is_ok() {
        return u64::from_le_bytes(bytes);
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let local = 0u8;
    let mut g = crate::topology::SplitMix64::new(
        now ^ (std::process::id() as u64) << 32 ^ (&local as *const u8 as u64),
    );
    g.next_u64()
}

/// A new session id: 128 random bits as 32 hex digits.
pub fn new_session_id() -> String {
    format!("{:016x}{:016x}", random_u64(), random_u64())
}

/// A new session token for the wire protocol; never 0, which the wire reserves for "none".
pub fn new_session_token() -> u64 {
    loop {
        let t = random_u64();
        if t != 0 {
            return t;
        }
    }
}

/// A session id is 32 lowercase hex digits; anything else in an announcement is garbage.
pub fn is_valid_session_id(id: &str) -> bool {
    id.len() == 32
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_fresh_and_well_formed() {
        let a = new_session_id();
        let b = new_session_id();
        assert!(is_valid_session_id(&a) && is_valid_session_id(&b));
        assert_ne!(a, b);
        assert!(!is_valid_session_id("../x"));
        assert_ne!(new_session_token(), 0);
    }

    #[test]
    fn keys_live_under_the_prefix_and_session() {
        assert_eq!(round_key(3), "distprof/round/3");
        assert_eq!(join_key("ab", 7), "distprof/s/ab/node/7");
        assert_eq!(echo_key("ab", 3, 4), "distprof/s/ab/echo/3/4");
        assert_eq!(ack_key("ab", 2), "distprof/s/ab/ack/2");
    }
}
