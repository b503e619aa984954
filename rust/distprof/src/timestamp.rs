//! Timestamped UDP I/O: one socket per node, with the precise send and receive times of
//! every datagram.
//!
//! Modes, best first: NIC hardware stamps (after a successful `SIOCSHWTSTAMP` on the
//! interface of the bound address), kernel software stamps (`SO_TIMESTAMPING`; receive
//! stamps from the `SCM_TIMESTAMPING` control message, transmit stamps from the error
//! queue, matched to the send by the `SOF_TIMESTAMPING_OPT_ID` counter), and user-space
//! stamps (`clock_gettime` next to `sendmsg`/`recvmsg`, the fallback). Every stamp is in
//! real CLOCK_REALTIME nanoseconds; the caller applies the node's clock.
//!
//! A hardware stamp is a reading of the NIC's clock, not of CLOCK_REALTIME: the socket
//! samples that clock (`nic_clock`), keeps the fitted mapping current and converts every
//! hardware stamp before handing it out. A packet the NIC did not stamp is dropped, never
//! given a software stamp in its place, so a node's stamps of one probe all come from one
//! source; when the NIC clock cannot be read any more, the socket switches to kernel
//! software stamps for good and says why (`take_switch`).
//!
//! The error queue is drained completely on every call to `drain_tx_stamps`, so a late
//! stamp can never be credited to a later packet.

use crate::config::TimestampMode;
use crate::nic_clock::hardware_stamps::HardwareStamps;
pub use crate::nic_clock::hardware_stamps::NicClockInfo;
use crate::nic_clock::{DevicePhc, SimulatedNicClock, SimulatedPhc, HARDWARE_STAMP_ERROR_NS};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::io;
use std::mem::zeroed;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};
use crate::wire::PACKET_LEN;

mod fake_clock;
mod sys;

pub use fake_clock::fake_clock;
pub use sys::RECV_BATCH;
use sys::{
    enable_hardware, recvmsg_stamped, set_timestamping, std_to_sockaddr, wait_for_rx_stamping, RecvBatch,
    SLOT_LEN, SOF_TIMESTAMPING_OPT_ID, SOF_TIMESTAMPING_OPT_TSONLY, SOF_TIMESTAMPING_RAW_HARDWARE,
    SOF_TIMESTAMPING_RX_HARDWARE, SOF_TIMESTAMPING_RX_SOFTWARE, SOF_TIMESTAMPING_SOFTWARE,
    SOF_TIMESTAMPING_TX_HARDWARE, SOF_TIMESTAMPING_TX_SOFTWARE,
};

/// The timestamping actually in force on a socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StampMode {
    Hardware,
    Kernel,
    User,
}

impl StampMode {
    /// Error a single stamp of this mode can carry, as documented for this machine
    /// (measured on this project's machines): user-space wake-up after the kernel stamp is 58 to 190 us on
    /// veth; software stamps sit within a few us of the wire on loopback and veth.
    pub fn stamp_error_bound_ns(self) -> i64 {
        match self {
            StampMode::Hardware => HARDWARE_STAMP_ERROR_NS,
            StampMode::Kernel => 5_000,
            StampMode::User => 200_000,
        }
    }
}

impl StampMode {
    /// The asymmetry per hop the uncertainty assumes for stamps taken in this mode, ns:
    /// `config`'s `asymmetry_allowance_ns` when set, else this mode's default. The mode in
    /// force, not the one asked for: `auto` assumes kernel stamps, but a node that fell
    /// back to user-space stamps (a faked clock, a socket refusing `SO_TIMESTAMPING`) has
    /// the user mode's asymmetry, ten times kernel's.
    pub fn asymmetry_allowance_ns(self, config: &crate::config::Config) -> u64 {
        if config.asymmetry_allowance_ns != 0 {
            return config.asymmetry_allowance_ns;
        }
        let requested = match self {
            StampMode::Hardware => TimestampMode::Hardware,
            StampMode::Kernel => TimestampMode::Kernel,
            StampMode::User => TimestampMode::User,
        };
        requested.default_asymmetry_allowance_ns()
    }
}

/// The timestamping of a node's run as every output states it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimestampQuality {
    pub mode: StampMode,
    /// Error one stamp may carry, the NIC clock mapping's included (worst so far).
    pub stamp_error_bound_ns: i64,
    /// Why a better mode was not used, or why hardware stamps stopped; empty if none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic_clock: Option<NicClockInfo>,
}

impl TimestampQuality {
    /// Takes in a closed window's NIC clock figures (`None`: no hardware stamps in it).
    pub fn absorb_window(&mut self, w: Option<&NicClockInfo>) {
        let Some(w) = w else { return };
        let nic = self.nic_clock.get_or_insert_with(|| NicClockInfo { source: w.source.clone(), phc_index: w.phc_index, ..Default::default() });
        nic.absorb(w);
        self.stamp_error_bound_ns = self.stamp_error_bound_ns.max(nic.stamp_error_bound_ns());
        if !w.switched_to_software.is_empty() {
            self.mode = StampMode::Kernel;
            self.note = w.switched_to_software.clone();
            // Stamps after the switch are kernel stamps; the bound covers both.
            self.stamp_error_bound_ns = self.stamp_error_bound_ns.max(StampMode::Kernel.stamp_error_bound_ns());
        }
    }

    /// One line for people: `hardware (NIC clock /dev/ptp0 ..., mapping error <= 40 ns, ...)`.
    pub fn describe(&self) -> String {
        let mode = serde_json::to_value(self.mode).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
        let mut out = format!("{mode}, stamp error <= {} ns", self.stamp_error_bound_ns);
        if let Some(n) = &self.nic_clock {
            out += &format!("; NIC clock {}", n.source);
            if let Some(m) = &n.mapping {
                out += &format!(
                    ": mapping residual {:.0} ns rms ({} of {} samples), error <= {:.0} ns, host - NIC {:.3} s, {:+.3} ppm",
                    m.residual_rms_ns, m.samples_used, m.samples_taken, n.mapping_error_max_ns, m.offset_ns * 1e-9, m.drift_ppm
                );
            }
            if let Some(m) = n.mapping.as_ref().filter(|m| m.breaks > 0) {
                out += &format!("; {} clock break(s) detected (steps, rate changes), {} stamps converted across one", m.breaks, n.stamps_across_break);
            }
            if n.unstamped_dropped > 0 {
                out += &format!("; {} packets without a hardware stamp dropped", n.unstamped_dropped);
            }
        }
        if !self.note.is_empty() {
            out += &format!(" ({})", self.note);
        }
        out
    }
}

/// One received datagram.
#[derive(Debug, Clone, Copy)]
pub struct Received {
    pub len: usize,
    pub from: SocketAddr,
    /// Real receive time (CLOCK_REALTIME ns) in the socket's mode.
    pub rx_real_ns: i64,
    /// Hardware mode: the NIC did not stamp this datagram. Its `rx_real_ns` is a user-space
    /// time and must not be used; the engine drops it.
    pub unstamped: bool,
}

/// Software stamping flags: kernel mode, and the simulated NIC (which makes its hardware
/// stamps from these).
const SOFTWARE_FLAGS: u32 = SOF_TIMESTAMPING_TX_SOFTWARE
    | SOF_TIMESTAMPING_RX_SOFTWARE
    | SOF_TIMESTAMPING_SOFTWARE
    | SOF_TIMESTAMPING_OPT_ID
    | SOF_TIMESTAMPING_OPT_TSONLY;
/// Hardware stamping flags: NIC stamps only. No software stamps are asked for, so none
/// can stand in for a missing hardware one (on transmit, the kernel would otherwise queue
/// a software stamp under the same id before the NIC's).
const HARDWARE_FLAGS: u32 = SOF_TIMESTAMPING_TX_HARDWARE
    | SOF_TIMESTAMPING_RX_HARDWARE
    | SOF_TIMESTAMPING_RAW_HARDWARE
    | SOF_TIMESTAMPING_OPT_ID
    | SOF_TIMESTAMPING_OPT_TSONLY;
/// Unstamped packets in a window, and more than stamped ones, at which hardware stamps are
/// given up: a few unstamped packets are dropped, a NIC that stamps few is not used.
const MIN_UNSTAMPED_TO_SWITCH: u64 = 20;

/// Counters of the timestamping path.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct StampStats {
    pub tx_stamps: u64,
    /// Error-queue stamps whose id matched no send (should stay zero).
    pub tx_unmatched: u64,
    /// Received datagrams that carried no kernel stamp (user-space time used instead).
    pub rx_missing_stamp: u64,
}

/// A UDP socket with timestamps.
pub struct StampedSocket {
    sock: UdpSocket,
    mode: StampMode,
    /// Next `SOF_TIMESTAMPING_OPT_ID` value: the kernel counts every datagram sent since
    /// the option was set, starting at 0, so counting successful sends predicts the id.
    next_tx_id: u32,
    /// User mode: the send times, handed out by `drain_tx_stamps` like kernel stamps.
    user_tx: VecDeque<(u32, i64)>,
    /// Buffers of `recv_batch` and `drain_tx_stamps`: one `recvmmsg` reads many datagrams.
    batch: RecvBatch,
    pub stats: StampStats,
    /// Why a better mode was not used (hardware stamping tried and failed, or a faked clock
    /// chose user-space stamps), or a warning about the mode in force: for the meta line.
    pub hardware_note: String,
    /// Hardware mode: the NIC clock and its mapping.
    hw: Option<HardwareStamps>,
    /// Why the socket left hardware stamps mid-run, until `take_switch` hands it out.
    switched: Option<String>,
    /// The figures of the window in which hardware stamps ended, for `window_nic_clock`.
    switched_window: Option<NicClockInfo>,
}

impl StampedSocket {
    /// Configures `sock` (non-blocking) for `requested` stamping. `Hardware` fails when the
    /// interface cannot stamp; `Auto` falls back to kernel, then user stamps.
    pub fn new(sock: UdpSocket, requested: TimestampMode) -> io::Result<StampedSocket> {
        sock.set_nonblocking(true)?;
        let fd = sock.as_raw_fd();
        let mut hardware_note = String::new();
        let mut mode = StampMode::User;
        let mut hw = None;
        // Kernel and NIC stamps are taken on the real clock: under a faked clock they
        // would measure the real clocks' offsets, not the ones the trace was taken on.
        let faked = fake_clock();
        if let Some(why) = &faked {
            if requested == TimestampMode::Auto {
                hardware_note = format!("user-space stamps chosen: {why}, and kernel and NIC stamps cannot see a faked clock");
                tracing::info!("{hardware_note}");
                return Ok(StampedSocket::with_mode(sock, StampMode::User, hardware_note));
            }
            if requested != TimestampMode::User {
                let asked = if requested == TimestampMode::Kernel { "kernel" } else { "hardware" };
                hardware_note = format!(
                    "{asked} stamps as configured, but {why}: they see the real clock, not the faked one, so the offsets measured are the real clocks'; set `timestamping` to `user` (or `auto`) to measure the faked clock"
                );
                tracing::warn!("{hardware_note}");
            }
        }
        if matches!(requested, TimestampMode::Auto | TimestampMode::Hardware) {
            match enable_hardware(&sock) {
                // The NIC stamps; its clock must be readable too, or the stamps cannot be
                // put on the host clock: then software stamps, whichever mode was asked for.
                Ok(ifname) => match DevicePhc::for_interface(fd, &ifname)
                    .and_then(|dev| HardwareStamps::new(Box::new(dev), None))
                    .and_then(|h| set_timestamping(fd, HARDWARE_FLAGS).map(|()| h))
                {
                    Ok(h) => {
                        mode = StampMode::Hardware;
                        hw = Some(h);
                    }
                    Err(e) => {
                        hardware_note = format!("hardware stamps not used: the NIC clock of `{ifname}` cannot be read ({e})");
                        tracing::warn!("{hardware_note}; using kernel software stamps");
                    }
                },
                Err(e) => {
                    let under = std::mem::take(&mut hardware_note);
                    hardware_note = format!("hardware timestamping unavailable: {e}");
                    if !under.is_empty() {
                        hardware_note = format!("{under}; {hardware_note}");
                    }
                    if requested == TimestampMode::Hardware {
                        return Err(io::Error::new(
                            e.kind(),
                            format!("{hardware_note}; set `timestamping` to `auto` or `kernel`"),
                        ));
                    }
                }
            }
        }
        if mode == StampMode::User && requested != TimestampMode::User {
            match set_timestamping(fd, SOFTWARE_FLAGS) {
                Ok(()) => {
                    mode = StampMode::Kernel;
                    wait_for_rx_stamping();
                }
                Err(e) if requested == TimestampMode::Kernel => return Err(e),
                Err(e) => tracing::warn!("kernel timestamping unavailable ({e}); using user-space stamps"),
            }
        }
        let mut out = StampedSocket::with_mode(sock, mode, hardware_note);
        out.hw = hw;
        Ok(out)
    }

    /// A socket in hardware mode whose NIC is simulated (tests, `distprof local`): kernel
    /// software stamps are turned into NIC stamps by `nic`, and from there go the same way
    /// as real hardware stamps (sampled mapping, conversion, unstamped packets dropped).
    pub fn with_simulated_nic(sock: UdpSocket, nic: SimulatedNicClock) -> io::Result<StampedSocket> {
        sock.set_nonblocking(true)?;
        set_timestamping(sock.as_raw_fd(), SOFTWARE_FLAGS)?;
        wait_for_rx_stamping();
        // Two clocks of the same parameters: one is sampled, one stamps packets.
        let seed = sock.local_addr().map_or(0, |a| a.port() as u64);
        let hw = HardwareStamps::new(Box::new(SimulatedPhc::new(nic, seed)), Some(SimulatedPhc::new(nic, seed + 1)))?;
        let mut out = StampedSocket::with_mode(sock, StampMode::Hardware, String::new());
        out.hw = Some(hw);
        Ok(out)
    }

    /// A socket whose timestamping is already set up as `mode` says.
    fn with_mode(sock: UdpSocket, mode: StampMode, hardware_note: String) -> StampedSocket {
        StampedSocket {
            sock,
            mode,
            next_tx_id: 0,
            user_tx: VecDeque::new(),
            batch: RecvBatch::new(),
            stats: StampStats::default(),
            hardware_note,
            hw: None,
            switched: None,
            switched_window: None,
        }
    }

    /// The timestamping in force, as the meta line and the summaries state it.
    pub fn quality(&self) -> TimestampQuality {
        let nic_clock = self.hw.as_ref().map(HardwareStamps::current);
        let stamp_error_bound_ns = nic_clock.as_ref().map_or(self.mode.stamp_error_bound_ns(), NicClockInfo::stamp_error_bound_ns);
        TimestampQuality { mode: self.mode, stamp_error_bound_ns, note: self.hardware_note.clone(), nic_clock }
    }

    /// Keeps the NIC clock mapping current (hardware mode; cheap when no sample is due).
    /// Call before reading stamps. When the NIC clock keeps failing, switches the socket
    /// to kernel software stamps (see `take_switch`).
    pub fn maintain_clock(&mut self) {
        let Some(hw) = &mut self.hw else { return };
        let Err(why) = hw.maintain(Instant::now()) else { return };
        let last = hw.take_window();
        self.switched_window = Some(self.switch_to_software(last, why));
    }

    /// Leaves hardware stamps for kernel software stamps for the rest of the run, because
    /// of `why`: one warning, the note, and `last` (the closing window's figures) marked.
    fn switch_to_software(&mut self, mut last: NicClockInfo, why: String) -> NicClockInfo {
        tracing::warn!("{why}");
        last.switched_to_software = why.clone();
        self.hw = None;
        if let Err(e) = set_timestamping(self.sock.as_raw_fd(), SOFTWARE_FLAGS) {
            // Not even software stamps: user-space times, which need no socket option.
            tracing::warn!("kernel software stamps refused too ({e}); using user-space stamps");
            self.mode = StampMode::User;
        } else {
            self.mode = StampMode::Kernel;
        }
        self.hardware_note = why.clone();
        self.switched = Some(why);
        last
    }

    /// Why the socket left hardware stamps since the last call, once. Stamps taken before
    /// and after differ in source: the caller drops what is in flight.
    pub fn take_switch(&mut self) -> Option<String> {
        self.switched.take()
    }

    /// Hardware mode (or the window in which it ended): the NIC clock figures of the
    /// window now closing; the counters start again. A NIC that left most packets of the
    /// window unstamped (one that stamps only PTP packets, say) loses nearly every probe:
    /// the socket switches to kernel software stamps from the next window on, for good.
    pub fn window_nic_clock(&mut self) -> Option<NicClockInfo> {
        let Some(hw) = &mut self.hw else { return self.switched_window.take() };
        let w = hw.take_window();
        if w.unstamped_dropped >= MIN_UNSTAMPED_TO_SWITCH && w.unstamped_dropped > w.stamped {
            let why = format!(
                "the NIC left {} of {} packets of a window without a hardware stamp; switched to kernel software stamps",
                w.unstamped_dropped,
                w.unstamped_dropped + w.stamped
            );
            return Some(self.switch_to_software(w, why));
        }
        Some(w)
    }

    /// Kernel receive stamps only (no transmit stamps, so no error queue to drain): for a
    /// forwarder such as the test relay, which must time a datagram from its arrival in
    /// the kernel rather than from when its thread got to run. Falls back to user-space
    /// receive times where the kernel refuses.
    pub fn rx_only(sock: UdpSocket) -> io::Result<StampedSocket> {
        sock.set_nonblocking(true)?;
        let mode = match set_timestamping(sock.as_raw_fd(), SOF_TIMESTAMPING_RX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE) {
            Ok(()) => {
                wait_for_rx_stamping();
                StampMode::Kernel
            }
            Err(e) => {
                tracing::warn!("kernel receive stamps unavailable ({e}); using user-space receive times");
                StampMode::User
            }
        };
        Ok(StampedSocket::with_mode(sock, mode, String::new()))
    }

    pub fn mode(&self) -> StampMode {
        self.mode
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    /// Sends one datagram; returns the id under which its transmit stamp will appear in
    /// `drain_tx_stamps`.
    pub fn send_to(&mut self, buf: &[u8], to: SocketAddr) -> io::Result<u32> {
        let user_ns = crate::clock::realtime_ns();
        self.sock.send_to(buf, to)?;
        let id = self.next_tx_id;
        self.next_tx_id = self.next_tx_id.wrapping_add(1);
        if self.mode == StampMode::User {
            self.user_tx.push_back((id, user_ns));
        }
        Ok(id)
    }

    /// Sends every datagram of `pkts` (`sendmmsg`, one system call for the lot) and
    /// pushes, for each in order, the id of its transmit stamp (as `send_to`) or `None`
    /// when that one could not be sent. In user-space mode each is sent on its own, so that
    /// every send time is taken right before its own send.
    pub fn send_batch(&mut self, pkts: &[([u8; PACKET_LEN], SocketAddr)], ids: &mut Vec<Option<u32>>) {
        if self.mode == StampMode::User {
            for (buf, to) in pkts {
                ids.push(self.send_to(buf, *to).ok());
            }
            return;
        }
        for chunk in pkts.chunks(RECV_BATCH) {
            self.send_chunk(chunk, ids);
        }
    }

    /// `send_batch` of at most `RECV_BATCH` datagrams, with its headers on the stack.
    fn send_chunk(&mut self, pkts: &[([u8; PACKET_LEN], SocketAddr)], ids: &mut Vec<Option<u32>>) {
        let mut addrs: [(libc::sockaddr_storage, libc::socklen_t); RECV_BATCH] =
            // SAFETY: all-zero is a valid sockaddr_storage (unused slots).
            std::array::from_fn(|i| pkts.get(i).map_or_else(|| (unsafe { zeroed() }, 0), |p| std_to_sockaddr(p.1)));
        let mut iovs: [libc::iovec; RECV_BATCH] = std::array::from_fn(|i| libc::iovec {
            iov_base: pkts.get(i).map_or(std::ptr::null_mut(), |p| p.0.as_ptr() as *mut libc::c_void),
            iov_len: PACKET_LEN,
        });
        // SAFETY: all-zero is a valid mmsghdr; every pointer set below outlives the call.
        let mut msgs: [libc::mmsghdr; RECV_BATCH] = unsafe { zeroed() };
        for ((m, iov), (addr, len)) in msgs.iter_mut().zip(iovs.iter_mut()).zip(addrs.iter_mut()) {
            m.msg_hdr.msg_name = addr as *mut _ as *mut libc::c_void;
            m.msg_hdr.msg_namelen = *len;
            m.msg_hdr.msg_iov = iov;
            m.msg_hdr.msg_iovlen = 1;
        }
        let fd = self.sock.as_raw_fd();
        let mut at = 0;
        while at < pkts.len() {
            let rest = &mut msgs[at..pkts.len()];
            // SAFETY: `rest` is a slice of initialised mmsghdr pointing at live buffers.
            let r = unsafe { libc::sendmmsg(fd, rest.as_mut_ptr(), rest.len() as libc::c_uint, 0) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                // The first of the rest failed (a full buffer, an unreachable peer): that
                // one is lost, the others are still tried.
                tracing::debug!("send to {} failed: {e}", pkts[at].1);
                ids.push(None);
                at += 1;
                continue;
            }
            for _ in 0..r {
                ids.push(Some(self.next_tx_id));
                self.next_tx_id = self.next_tx_id.wrapping_add(1);
            }
            at += r as usize;
        }
    }

    /// Moves every transmit stamp available now into `out` as (id, real ns). Reads the
    /// error queue until it is empty, many stamps per system call.
    pub fn drain_tx_stamps(&mut self, out: &mut Vec<(u32, i64)>) {
        if self.mode == StampMode::User {
            out.extend(self.user_tx.drain(..));
            return;
        }
        let fd = self.sock.as_raw_fd();
        loop {
            match self.batch.recv(fd, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) {
                Ok(n) => {
                    for msg in &self.batch.msgs[..n] {
                        let stamp = match &mut self.hw {
                            Some(hw) => hw.host_stamp(msg.sw_ns, msg.hw_ns),
                            None => msg.sw_ns,
                        };
                        match (msg.ts_id, stamp) {
                            (Some(id), Some(ns)) => {
                                self.stats.tx_stamps += 1;
                                out.push((id, ns));
                            }
                            // Unstamped by the NIC: counted by `host_stamp`; the probe is lost.
                            (Some(_), None) if self.hw.is_some() => {}
                            _ => self.stats.tx_unmatched += 1,
                        }
                    }
                    if n < RECV_BATCH {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::debug!("error queue read failed: {e}");
                    return;
                }
            }
        }
    }

    /// Reads the datagrams queued now, up to `RECV_BATCH` in one system call
    /// (non-blocking); returns how many, 0 when none. `received(i)` hands out each; call
    /// again until it returns 0.
    pub fn recv_batch(&mut self) -> io::Result<usize> {
        let fd = self.sock.as_raw_fd();
        loop {
            match self.batch.recv(fd, libc::MSG_DONTWAIT) {
                Ok(n) => {
                    for msg in &mut self.batch.msgs[..n] {
                        msg.stamp_ns = match (self.mode, &mut self.hw) {
                            (StampMode::User, _) => None,
                            (_, Some(hw)) => {
                                let host = hw.host_stamp(msg.sw_ns, msg.hw_ns);
                                msg.unstamped = host.is_none();
                                host
                            }
                            (_, None) => msg.sw_ns,
                        };
                        if self.mode == StampMode::Kernel && msg.stamp_ns.is_none() {
                            self.stats.rx_missing_stamp += 1;
                        }
                    }
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // As in `try_recv`: an earlier send's ICMP error says nothing of this socket.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Datagram `i` of the last `recv_batch` (`i` below what it returned): its bytes
    /// (cut at `SLOT_LEN`, so an oversized one still shows a wrong length) and its
    /// receive time in the socket's mode. `None` for one without a sender address.
    pub fn received(&self, i: usize) -> Option<(&[u8], Received)> {
        let msg = &self.batch.msgs[i];
        let from = msg.from?;
        let rx_real_ns = msg.stamp_ns.unwrap_or(msg.user_ns);
        let r = Received { len: msg.len, from, rx_real_ns, unstamped: msg.unstamped };
        Some((&self.batch.data[i][..msg.len.min(SLOT_LEN)], r))
    }

    /// Receives one datagram if one is queued (non-blocking).
    pub fn try_recv(&mut self, buf: &mut [u8]) -> io::Result<Option<Received>> {
        let fd = self.sock.as_raw_fd();
        loop {
            match recvmsg_stamped(fd, buf, libc::MSG_DONTWAIT) {
                Ok(msg) => {
                    let stamp = match &mut self.hw {
                        Some(hw) => hw.host_stamp(msg.sw_ns, msg.hw_ns),
                        None => msg.sw_ns,
                    };
                    let unstamped = self.hw.is_some() && stamp.is_none();
                    let rx_real_ns = match (self.mode, stamp) {
                        (StampMode::User, _) => msg.user_ns,
                        (_, Some(ns)) => ns,
                        (_, None) => {
                            if !unstamped {
                                self.stats.rx_missing_stamp += 1;
                            }
                            msg.user_ns
                        }
                    };
                    let Some(from) = msg.from else { continue };
                    return Ok(Some(Received { len: msg.len, from, rx_real_ns, unstamped }));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // An ICMP error of an earlier send surfacing here says nothing about this
                // socket's health; the liveness logic notices silent peers.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Waits up to `timeout` until a datagram or a transmit stamp is available. Returns
    /// early on readiness (then `true`); never waits longer than `timeout`.
    pub fn wait(&self, timeout: Duration) -> io::Result<bool> {
        let mut pfd = libc::pollfd { fd: self.sock.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: one valid pollfd; a valid timespec; no signal mask change.
        let r = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        Ok(r > 0)
    }
}

/// Sleeps until the monotonic instant `deadline` with the thread's timer slack made small
/// (see `precise_timer_slack`), so that a pair gap of tens of microseconds is kept
/// without spinning.
pub fn sleep_until(deadline: std::time::Instant) {
    let now = std::time::Instant::now();
    if deadline > now {
        std::thread::sleep(deadline - now);
    }
}

/// Lowers this thread's timer slack from the default 50 us to 1 us: the kernel may
/// otherwise delay every timed wake-up by up to 50 us, as long as the whole pair gap.
pub fn precise_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer and only affects this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1_000 as libc::c_ulong, 0, 0, 0) };
}

#[cfg(test)]
mod tests;
