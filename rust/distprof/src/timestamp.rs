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
//! The error queue is drained completely on every call to `drain_tx_stamps`, so a late
//! stamp can never be credited to a later packet (the prior art read it once, racily).

use crate::config::TimestampMode;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::io;
use std::mem::{size_of, zeroed};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

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
    /// (environment.md §5): user-space wake-up after the kernel stamp is 58 to 190 us on
    /// veth; software stamps sit within a few us of the wire on loopback and veth.
    pub fn stamp_error_bound_ns(self) -> i64 {
        match self {
            StampMode::Hardware => 100,
            StampMode::Kernel => 5_000,
            StampMode::User => 200_000,
        }
    }
}

// Linux ABI constants not (all) exported by the libc crate. From linux/net_tstamp.h,
// linux/errqueue.h, linux/sockios.h.
const SOF_TIMESTAMPING_TX_HARDWARE: u32 = 1 << 0;
const SOF_TIMESTAMPING_TX_SOFTWARE: u32 = 1 << 1;
const SOF_TIMESTAMPING_RX_HARDWARE: u32 = 1 << 2;
const SOF_TIMESTAMPING_RX_SOFTWARE: u32 = 1 << 3;
const SOF_TIMESTAMPING_SOFTWARE: u32 = 1 << 4;
const SOF_TIMESTAMPING_RAW_HARDWARE: u32 = 1 << 6;
const SOF_TIMESTAMPING_OPT_ID: u32 = 1 << 7;
const SOF_TIMESTAMPING_OPT_TSONLY: u32 = 1 << 11;
const SO_EE_ORIGIN_TIMESTAMPING: u8 = 4;
const SIOCSHWTSTAMP: libc::c_ulong = 0x89b0;
const HWTSTAMP_TX_ON: i32 = 1;
const HWTSTAMP_FILTER_ALL: i32 = 1;

#[repr(C)]
struct HwTstampConfig {
    flags: i32,
    tx_type: i32,
    rx_filter: i32,
}

#[repr(C)]
struct SockExtendedErr {
    ee_errno: u32,
    ee_origin: u8,
    ee_type: u8,
    ee_code: u8,
    ee_pad: u8,
    ee_info: u32,
    ee_data: u32,
}

/// One received datagram.
#[derive(Debug, Clone, Copy)]
pub struct Received {
    pub len: usize,
    pub from: SocketAddr,
    /// Real receive time (CLOCK_REALTIME ns) in the socket's mode.
    pub rx_real_ns: i64,
}

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
    pub stats: StampStats,
    /// Why hardware stamping was not used (for the meta line), if it was tried.
    pub hardware_note: String,
}

impl StampedSocket {
    /// Configures `sock` (non-blocking) for `requested` stamping. `Hardware` fails when the
    /// interface cannot stamp; `Auto` falls back to kernel, then user stamps.
    pub fn new(sock: UdpSocket, requested: TimestampMode) -> io::Result<StampedSocket> {
        sock.set_nonblocking(true)?;
        let fd = sock.as_raw_fd();
        let mut hardware_note = String::new();
        let mut mode = StampMode::User;
        if matches!(requested, TimestampMode::Auto | TimestampMode::Hardware) {
            match enable_hardware(&sock) {
                Ok(()) => {
                    let flags = SOF_TIMESTAMPING_TX_HARDWARE
                        | SOF_TIMESTAMPING_RX_HARDWARE
                        | SOF_TIMESTAMPING_RAW_HARDWARE
                        | SOF_TIMESTAMPING_TX_SOFTWARE
                        | SOF_TIMESTAMPING_RX_SOFTWARE
                        | SOF_TIMESTAMPING_SOFTWARE
                        | SOF_TIMESTAMPING_OPT_ID
                        | SOF_TIMESTAMPING_OPT_TSONLY;
                    set_timestamping(fd, flags)?;
                    mode = StampMode::Hardware;
                }
                Err(e) => {
                    hardware_note = format!("hardware timestamping unavailable: {e}");
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
            let flags = SOF_TIMESTAMPING_TX_SOFTWARE
                | SOF_TIMESTAMPING_RX_SOFTWARE
                | SOF_TIMESTAMPING_SOFTWARE
                | SOF_TIMESTAMPING_OPT_ID
                | SOF_TIMESTAMPING_OPT_TSONLY;
            match set_timestamping(fd, flags) {
                Ok(()) => {
                    mode = StampMode::Kernel;
                    wait_for_rx_stamping();
                }
                Err(e) if requested == TimestampMode::Kernel => return Err(e),
                Err(e) => tracing::warn!("kernel timestamping unavailable ({e}); using user-space stamps"),
            }
        }
        Ok(StampedSocket::with_mode(sock, mode, hardware_note))
    }

    /// A socket whose timestamping is already set up as `mode` says.
    fn with_mode(sock: UdpSocket, mode: StampMode, hardware_note: String) -> StampedSocket {
        StampedSocket { sock, mode, next_tx_id: 0, user_tx: VecDeque::new(), stats: StampStats::default(), hardware_note }
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

    /// Moves every transmit stamp available now into `out` as (id, real ns). Reads the
    /// error queue until it is empty.
    pub fn drain_tx_stamps(&mut self, out: &mut Vec<(u32, i64)>) {
        if self.mode == StampMode::User {
            out.extend(self.user_tx.drain(..));
            return;
        }
        let fd = self.sock.as_raw_fd();
        loop {
            let mut data = [0u8; 64];
            match recvmsg_stamped(fd, &mut data, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT, self.mode) {
                Ok(msg) => {
                    if let (Some(id), Some(ns)) = (msg.ts_id, msg.stamp_ns) {
                        self.stats.tx_stamps += 1;
                        out.push((id, ns));
                    } else {
                        self.stats.tx_unmatched += 1;
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

    /// Receives one datagram if one is queued (non-blocking).
    pub fn try_recv(&mut self, buf: &mut [u8]) -> io::Result<Option<Received>> {
        let fd = self.sock.as_raw_fd();
        loop {
            match recvmsg_stamped(fd, buf, libc::MSG_DONTWAIT, self.mode) {
                Ok(msg) => {
                    let rx_real_ns = match (self.mode, msg.stamp_ns) {
                        (StampMode::User, _) => msg.user_ns,
                        (_, Some(ns)) => ns,
                        (_, None) => {
                            self.stats.rx_missing_stamp += 1;
                            msg.user_ns
                        }
                    };
                    let Some(from) = msg.from else { continue };
                    return Ok(Some(Received { len: msg.len, from, rx_real_ns }));
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

/// Longest wait for the kernel to start stamping received packets.
const RX_STAMPING_WARM_UP: Duration = Duration::from_secs(1);

/// The kernel switches receive stamping on for the whole stack lazily (a static key
/// flipped from a work queue when the first socket asks for it), so the first packets
/// after `SO_TIMESTAMPING` may arrive unstamped; on a busy machine this lasted ~200 ms.
/// Sends datagrams between two throw-away sockets until one arrives stamped (bounded).
fn wait_for_rx_stamping() {
    let attempt = || -> io::Result<bool> {
        let rx = UdpSocket::bind("127.0.0.1:0")?;
        let tx = UdpSocket::bind("127.0.0.1:0")?;
        rx.set_nonblocking(true)?;
        set_timestamping(rx.as_raw_fd(), SOF_TIMESTAMPING_RX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE)?;
        let deadline = std::time::Instant::now() + RX_STAMPING_WARM_UP;
        while std::time::Instant::now() < deadline {
            tx.send_to(b"warm-up", rx.local_addr()?)?;
            std::thread::sleep(Duration::from_millis(2));
            let mut buf = [0u8; 16];
            while let Ok(m) = recvmsg_stamped(rx.as_raw_fd(), &mut buf, libc::MSG_DONTWAIT, StampMode::Kernel) {
                if m.stamp_ns.is_some() {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    };
    match attempt() {
        Ok(true) => {}
        Ok(false) => tracing::warn!("kernel receive stamps still missing after {RX_STAMPING_WARM_UP:?}; unstamped packets get user-space stamps and are counted"),
        Err(e) => tracing::debug!("receive stamping warm-up skipped: {e}"),
    }
}

fn set_timestamping(fd: i32, flags: u32) -> io::Result<()> {
    // SAFETY: fd is a valid socket; the option value is a u32 of the given size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPING,
            &flags as *const u32 as *const libc::c_void,
            size_of::<u32>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Asks the NIC behind the bound address to stamp every packet (`SIOCSHWTSTAMP`). This
/// changes the interface's configuration for everyone, as ptp4l does; it is only tried
/// when the mode is `auto` or `hardware`.
fn enable_hardware(sock: &UdpSocket) -> io::Result<()> {
    let ip = sock.local_addr()?.ip();
    if ip.is_unspecified() {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "socket bound to the wildcard address, no single interface to configure",
        ));
    }
    let ifname = interface_of(ip)?;
    let mut cfg = HwTstampConfig { flags: 0, tx_type: HWTSTAMP_TX_ON, rx_filter: HWTSTAMP_FILTER_ALL };
    // SAFETY: ifreq is plain old data; we fill its name and point ifr_data at cfg, which
    // outlives the ioctl.
    let r = unsafe {
        let mut ifr: libc::ifreq = zeroed();
        for (d, s) in ifr.ifr_name.iter_mut().zip(ifname.as_bytes().iter().take(libc::IFNAMSIZ - 1)) {
            *d = *s as libc::c_char;
        }
        ifr.ifr_ifru.ifru_data = &mut cfg as *mut HwTstampConfig as *mut libc::c_char;
        libc::ioctl(sock.as_raw_fd(), SIOCSHWTSTAMP as _, &mut ifr)
    };
    if r == 0 {
        Ok(())
    } else {
        let e = io::Error::last_os_error();
        Err(io::Error::new(e.kind(), format!("SIOCSHWTSTAMP on `{ifname}`: {e}")))
    }
}

/// Name of the interface that holds `ip`.
fn interface_of(ip: std::net::IpAddr) -> io::Result<String> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills head with a list we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut found = None;
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: cur is a node of the list getifaddrs returned.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_addr points at a sockaddr of the family it declares.
            let addr = unsafe { sockaddr_to_std(ifa.ifa_addr as *const libc::sockaddr_storage) };
            if addr.map(|a| a.ip()) == Some(ip) {
                // SAFETY: ifa_name is a NUL-terminated string owned by the list.
                found = Some(unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }.to_string_lossy().into_owned());
                break;
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: head came from getifaddrs.
    unsafe { libc::freeifaddrs(head) };
    found.ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no interface holds {ip}")))
}

struct RawMsg {
    len: usize,
    from: Option<SocketAddr>,
    stamp_ns: Option<i64>,
    ts_id: Option<u32>,
    user_ns: i64,
}

fn recvmsg_stamped(fd: i32, buf: &mut [u8], flags: i32, mode: StampMode) -> io::Result<RawMsg> {
    // u64 array: the control buffer must be aligned for cmsghdr.
    let mut control = [0u64; 64];
    // SAFETY: all-zero is a valid sockaddr_storage and msghdr.
    let mut addr: libc::sockaddr_storage = unsafe { zeroed() };
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr() as *mut libc::c_void, iov_len: buf.len() };
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_name = &mut addr as *mut _ as *mut libc::c_void;
    msg.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: msg points at live buffers of the declared sizes.
    let n = unsafe { libc::recvmsg(fd, &mut msg, flags) };
    let user_ns = crate::clock::realtime_ns();
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = RawMsg { len: n as usize, from: None, stamp_ns: None, ts_id: None, user_ns };
    if msg.msg_namelen > 0 {
        // SAFETY: the kernel wrote a sockaddr of msg_namelen bytes.
        out.from = unsafe { sockaddr_to_std(&addr) };
    }
    // SAFETY: iterating the control messages the kernel wrote, with the libc macros.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            let c = &*cmsg;
            let data = libc::CMSG_DATA(cmsg);
            if c.cmsg_level == libc::SOL_SOCKET && c.cmsg_type == libc::SO_TIMESTAMPING {
                let ts = std::ptr::read_unaligned(data as *const [libc::timespec; 3]);
                let sw = ts[0].tv_sec as i64 * 1_000_000_000 + ts[0].tv_nsec as i64;
                let hw = ts[2].tv_sec as i64 * 1_000_000_000 + ts[2].tv_nsec as i64;
                // In hardware mode a packet the NIC did not stamp still has the software one.
                let pick = if mode == StampMode::Hardware && hw != 0 { hw } else { sw };
                if pick != 0 {
                    out.stamp_ns = Some(pick);
                }
            } else if (c.cmsg_level == libc::SOL_IP && c.cmsg_type == libc::IP_RECVERR)
                || (c.cmsg_level == libc::SOL_IPV6 && c.cmsg_type == libc::IPV6_RECVERR)
            {
                let ee = std::ptr::read_unaligned(data as *const SockExtendedErr);
                if ee.ee_origin == SO_EE_ORIGIN_TIMESTAMPING {
                    out.ts_id = Some(ee.ee_data);
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok(out)
}

/// # Safety
/// `ss` must point at a sockaddr whose family field tells its real size.
unsafe fn sockaddr_to_std(ss: *const libc::sockaddr_storage) -> Option<SocketAddr> {
    match (*ss).ss_family as i32 {
        libc::AF_INET => {
            let a = &*(ss as *const libc::sockaddr_in);
            let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddr::new(ip.into(), u16::from_be(a.sin_port)))
        }
        libc::AF_INET6 => {
            let a = &*(ss as *const libc::sockaddr_in6);
            let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(SocketAddr::new(ip.into(), u16::from_be(a.sin6_port)))
        }
        _ => None,
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
mod tests {
    use super::*;

    fn pair(mode: TimestampMode) -> (StampedSocket, StampedSocket) {
        let a = StampedSocket::new(UdpSocket::bind("127.0.0.1:0").unwrap(), mode).unwrap();
        let b = StampedSocket::new(UdpSocket::bind("127.0.0.1:0").unwrap(), mode).unwrap();
        (a, b)
    }

    fn exchange(mode: TimestampMode, expect: StampMode) {
        let (mut a, mut b) = pair(mode);
        assert_eq!(a.mode(), expect);
        let to = b.local_addr().unwrap();
        let mut sent = Vec::new();
        for i in 0..50u8 {
            let before = crate::clock::realtime_ns();
            let id = a.send_to(&[i; 48], to).unwrap();
            assert_eq!(id, i as u32);
            sent.push(before);
        }
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        let mut buf = [0u8; 64];
        while got.len() < 50 && std::time::Instant::now() < deadline {
            b.wait(Duration::from_millis(10)).unwrap();
            while let Some(r) = b.try_recv(&mut buf).unwrap() {
                assert_eq!(r.from, a.local_addr().unwrap());
                got.push((buf[0], r.rx_real_ns));
            }
        }
        assert_eq!(got.len(), 50);
        let mut stamps = Vec::new();
        while stamps.len() < 50 && std::time::Instant::now() < deadline {
            a.drain_tx_stamps(&mut stamps);
            std::thread::sleep(Duration::from_millis(1));
        }
        stamps.sort();
        assert_eq!(stamps.iter().map(|s| s.0).collect::<Vec<_>>(), (0..50).collect::<Vec<_>>());
        for (i, (id, tx)) in stamps.iter().enumerate() {
            let (_, rx) = got.iter().find(|g| g.0 as usize == i).unwrap();
            // Transmit stamp after the user-space time before the send, receive after transmit.
            assert!(*tx >= sent[i], "id {id}");
            assert!(rx >= tx, "id {id}: rx {rx} < tx {tx}");
            assert!(rx - tx < 50_000_000);
        }
        assert_eq!(a.stats.tx_unmatched, 0);
        assert_eq!(b.stats.rx_missing_stamp, 0);
    }

    #[test]
    fn kernel_stamps_match_every_send_by_id() {
        exchange(TimestampMode::Kernel, StampMode::Kernel);
    }

    #[test]
    fn auto_falls_back_to_kernel_on_loopback() {
        let (a, _) = pair(TimestampMode::Auto);
        assert_eq!(a.mode(), StampMode::Kernel);
        assert!(a.hardware_note.contains("SIOCSHWTSTAMP on `lo`"), "{}", a.hardware_note);
    }

    #[test]
    fn hardware_request_on_loopback_is_a_clear_error() {
        let e = StampedSocket::new(UdpSocket::bind("127.0.0.1:0").unwrap(), TimestampMode::Hardware)
            .err()
            .unwrap();
        assert!(e.to_string().contains("`auto` or `kernel`"), "{e}");
    }

    #[test]
    fn user_stamps_work_the_same_way() {
        exchange(TimestampMode::User, StampMode::User);
    }
}
