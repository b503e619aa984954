//! Refused and evicted connections of the store, summed into one log line per interval: a
//! flood of rejected connections costs the log at most one line per
//! [`REFUSAL_LOG_INTERVAL`], and a lone misconfigured rank is still seen at once.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// Refusals and evictions are summed over this interval into one WARN line.
pub const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(5);
/// Peer addresses remembered per summary (the count of distinct ones stops growing there).
const SUMMARY_ADDRESSES: usize = 256;

/// Refusals since the last summary line.
#[derive(Default)]
pub(super) struct Refusals {
    /// Count by reason (a short fixed phrase).
    by_reason: Vec<(&'static str, u64)>,
    addresses: HashSet<IpAddr>,
    /// One example: the peer and the full message it was given.
    example: Option<(String, String)>,
    since: Option<Instant>,
    last_line: Option<Instant>,
    total: u64,
}

impl Refusals {
    /// Counts one refusal (or eviction) of `peer`, told `message`, for the next line.
    pub(super) fn note(&mut self, reason: &'static str, peer: SocketAddr, message: &str) {
        match self.by_reason.iter_mut().find(|(why, _)| *why == reason) {
            Some((_, n)) => *n += 1,
            None => self.by_reason.push((reason, 1)),
        }
        if self.addresses.len() < SUMMARY_ADDRESSES {
            self.addresses.insert(peer.ip());
        }
        if self.example.is_none() {
            self.example = Some((peer.to_string(), message.to_string()));
        }
        self.since.get_or_insert_with(Instant::now);
        self.total += 1;
    }

    /// The summary line of the refusals noted since the last one, and a fresh count, when
    /// there are any and the last line is at least [`REFUSAL_LOG_INTERVAL`] old (or `now`).
    pub(super) fn take_summary(&mut self, now: bool) -> Option<String> {
        let count: u64 = self.by_reason.iter().map(|(_, n)| n).sum();
        if count == 0 || !(now || self.last_line.is_none_or(|t| t.elapsed() >= REFUSAL_LOG_INTERVAL)) {
            return None;
        }
        let reasons: Vec<String> = self.by_reason.iter().map(|(why, n)| format!("{n} {why}")).collect();
        let addresses = self.addresses.len();
        let more = if addresses >= SUMMARY_ADDRESSES { "+" } else { "" };
        let (peer, message) = self.example.clone().unwrap_or_default();
        let over = self.since.map_or(0.0, |t| t.elapsed().as_secs_f64());
        let line = format!(
            "key-value store: refused or closed {count} connections in {over:.1} s ({}) from {addresses}{more} addresses, e.g. {peer}: {message}; {} since start{}",
            reasons.join(", "),
            self.total,
            if count > 1 { format!("; one line per {} s at most", REFUSAL_LOG_INTERVAL.as_secs()) } else { String::new() }
        );
        *self = Refusals { last_line: Some(Instant::now()), total: self.total, ..Refusals::default() };
        Some(line)
    }
}
