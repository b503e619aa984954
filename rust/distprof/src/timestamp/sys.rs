//! The kernel's timestamping interface, as the socket of `timestamp` uses it: the
//! `SO_TIMESTAMPING` option and its warm-up, `SIOCSHWTSTAMP` on the interface of an
//! address, `recvmsg`/`recvmmsg` with the stamps and error-queue ids of their control
//! messages, and C socket addresses.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

// Linux ABI constants not (all) exported by the libc crate. From linux/net_tstamp.h,
// linux/errqueue.h, linux/sockios.h.
pub(super) const SOF_TIMESTAMPING_TX_HARDWARE: u32 = 1 << 0;
pub(super) const SOF_TIMESTAMPING_TX_SOFTWARE: u32 = 1 << 1;
pub(super) const SOF_TIMESTAMPING_RX_HARDWARE: u32 = 1 << 2;
pub(super) const SOF_TIMESTAMPING_RX_SOFTWARE: u32 = 1 << 3;
pub(super) const SOF_TIMESTAMPING_SOFTWARE: u32 = 1 << 4;
pub(super) const SOF_TIMESTAMPING_RAW_HARDWARE: u32 = 1 << 6;
pub(super) const SOF_TIMESTAMPING_OPT_ID: u32 = 1 << 7;
pub(super) const SOF_TIMESTAMPING_OPT_TSONLY: u32 = 1 << 11;
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

/// Longest wait for the kernel to start stamping received packets.
const RX_STAMPING_WARM_UP: Duration = Duration::from_secs(1);

/// The kernel switches receive stamping on for the whole stack lazily (a static key
/// flipped from a work queue when the first socket asks for it), so the first packets
/// after `SO_TIMESTAMPING` may arrive unstamped; on a busy machine this lasted ~200 ms.
/// Sends datagrams between two throw-away sockets until one arrives stamped (bounded).
pub(super) fn wait_for_rx_stamping() {
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
            while let Ok(m) = recvmsg_stamped(rx.as_raw_fd(), &mut buf, libc::MSG_DONTWAIT) {
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

pub(super) fn set_timestamping(fd: i32, flags: u32) -> io::Result<()> {
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
pub(super) fn enable_hardware(sock: &UdpSocket) -> io::Result<String> {
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
        // The driver writes back what it set up: one that can only stamp PTP packets
        // answers with a narrower filter, and would leave every probe unstamped.
        if cfg.rx_filter != HWTSTAMP_FILTER_ALL || cfg.tx_type != HWTSTAMP_TX_ON {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("SIOCSHWTSTAMP on `{ifname}`: the NIC stamps only some packets (rx_filter {}, tx_type {})", cfg.rx_filter, cfg.tx_type),
            ));
        }
        Ok(ifname)
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

pub(super) struct RawMsg {
    pub(super) len: usize,
    pub(super) from: Option<SocketAddr>,
    /// The kernel's software and NIC stamps (raw: the NIC's is in the NIC's clock).
    pub(super) sw_ns: Option<i64>,
    pub(super) hw_ns: Option<i64>,
    /// The stamp in force, host clock (set by the socket from the two above).
    pub(super) stamp_ns: Option<i64>,
    /// Hardware mode: no NIC stamp (the datagram is dropped).
    pub(super) unstamped: bool,
    pub(super) ts_id: Option<u32>,
    pub(super) user_ns: i64,
}

pub(super) fn recvmsg_stamped(fd: i32, buf: &mut [u8], flags: i32) -> io::Result<RawMsg> {
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
    let mut out = RawMsg { len: n as usize, from: None, sw_ns: None, hw_ns: None, stamp_ns: None, unstamped: false, ts_id: None, user_ns };
    if msg.msg_namelen > 0 {
        // SAFETY: the kernel wrote a sockaddr of msg_namelen bytes.
        out.from = unsafe { sockaddr_to_std(&addr) };
    }
    // SAFETY: the kernel filled msg's control buffer in the call above.
    (out.sw_ns, out.hw_ns, out.ts_id) = unsafe { parse_control(&msg) };
    out.stamp_ns = out.sw_ns;
    Ok(out)
}

/// The software stamp, the NIC stamp and the error-queue id in the control messages of a
/// received `msg` (a zero stamp is absent).
///
/// # Safety
/// `msg` must be the header of a completed `recvmsg`/`recvmmsg`, its control buffer alive.
unsafe fn parse_control(msg: &libc::msghdr) -> (Option<i64>, Option<i64>, Option<u32>) {
    let (mut sw_ns, mut hw_ns, mut ts_id) = (None, None, None);
    let mut cmsg = libc::CMSG_FIRSTHDR(msg);
    while !cmsg.is_null() {
        let c = &*cmsg;
        let data = libc::CMSG_DATA(cmsg);
        if c.cmsg_level == libc::SOL_SOCKET && c.cmsg_type == libc::SO_TIMESTAMPING {
            let ts = std::ptr::read_unaligned(data as *const [libc::timespec; 3]);
            let sw = ts[0].tv_sec as i64 * 1_000_000_000 + ts[0].tv_nsec as i64;
            let hw = ts[2].tv_sec as i64 * 1_000_000_000 + ts[2].tv_nsec as i64;
            sw_ns = (sw != 0).then_some(sw);
            hw_ns = (hw != 0).then_some(hw);
        } else if (c.cmsg_level == libc::SOL_IP && c.cmsg_type == libc::IP_RECVERR)
            || (c.cmsg_level == libc::SOL_IPV6 && c.cmsg_type == libc::IPV6_RECVERR)
        {
            let ee = std::ptr::read_unaligned(data as *const SockExtendedErr);
            if ee.ee_origin == SO_EE_ORIGIN_TIMESTAMPING {
                ts_id = Some(ee.ee_data);
            }
        }
        cmsg = libc::CMSG_NXTHDR(msg, cmsg);
    }
    (sw_ns, hw_ns, ts_id)
}

/// Most datagrams (or error-queue stamps) one `recvmmsg` reads: a tick's burst at the
/// default out-degree (8 probers x 2 forward + 8 peers x 3 reverse packets) in two calls.
pub const RECV_BATCH: usize = 32;
/// Bytes kept of each datagram: any probe packet fits, and anything cut here still
/// shows a length other than `PACKET_LEN`.
pub(super) const SLOT_LEN: usize = 128;
/// Control bytes per datagram (u64 words, aligned for cmsghdr): an `SO_TIMESTAMPING`
/// message (64 bytes) and an IPv6 `RECVERR` one (64 bytes) with room to spare.
const CONTROL_WORDS: usize = 40;

/// Buffers for one `recvmmsg` of up to `RECV_BATCH` datagrams, allocated once per socket.
pub(super) struct RecvBatch {
    pub(super) data: Box<[[u8; SLOT_LEN]; RECV_BATCH]>,
    pub(super) control: Box<[[u64; CONTROL_WORDS]; RECV_BATCH]>,
    pub(super) addrs: Box<[libc::sockaddr_storage; RECV_BATCH]>,
    pub(super) msgs: Vec<RawMsg>,
}

impl RecvBatch {
    pub(super) fn new() -> RecvBatch {
        RecvBatch {
            data: Box::new([[0; SLOT_LEN]; RECV_BATCH]),
            control: Box::new([[0; CONTROL_WORDS]; RECV_BATCH]),
            // SAFETY: all-zero is a valid sockaddr_storage.
            addrs: Box::new(unsafe { zeroed() }),
            msgs: Vec::with_capacity(RECV_BATCH),
        }
    }

    /// One `recvmmsg` with `flags`; returns how many messages it read (into `msgs`).
    pub(super) fn recv(&mut self, fd: i32, flags: i32) -> io::Result<usize> {
        let mut iovs: [libc::iovec; RECV_BATCH] = std::array::from_fn(|i| libc::iovec {
            iov_base: self.data[i].as_mut_ptr() as *mut libc::c_void,
            iov_len: SLOT_LEN,
        });
        // SAFETY: all-zero is a valid mmsghdr.
        let mut hdrs: [libc::mmsghdr; RECV_BATCH] = unsafe { zeroed() };
        for (i, (h, iov)) in hdrs.iter_mut().zip(iovs.iter_mut()).enumerate() {
            h.msg_hdr.msg_name = &mut self.addrs[i] as *mut _ as *mut libc::c_void;
            h.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_hdr.msg_iov = iov;
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_control = self.control[i].as_mut_ptr() as *mut libc::c_void;
            h.msg_hdr.msg_controllen = size_of::<[u64; CONTROL_WORDS]>() as _;
        }
        // SAFETY: every header points at live buffers of the declared sizes.
        let n = unsafe { libc::recvmmsg(fd, hdrs.as_mut_ptr(), RECV_BATCH as libc::c_uint, flags, std::ptr::null_mut()) };
        let user_ns = crate::clock::realtime_ns();
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        self.msgs.clear();
        for (i, h) in hdrs[..n as usize].iter().enumerate() {
            let mut m = RawMsg { len: h.msg_len as usize, from: None, sw_ns: None, hw_ns: None, stamp_ns: None, unstamped: false, ts_id: None, user_ns };
            if h.msg_hdr.msg_namelen > 0 {
                // SAFETY: the kernel wrote a sockaddr of msg_namelen bytes.
                m.from = unsafe { sockaddr_to_std(&self.addrs[i]) };
            }
            // SAFETY: the kernel filled this header's control buffer in the call above.
            (m.sw_ns, m.hw_ns, m.ts_id) = unsafe { parse_control(&h.msg_hdr) };
            m.stamp_ns = m.sw_ns;
            self.msgs.push(m);
        }
        Ok(n as usize)
    }
}

/// `addr` as a C socket address and its length.
pub(super) fn std_to_sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage; we write one sockaddr_in(6) into it,
    // which it is large and aligned enough to hold.
    unsafe {
        let mut ss: libc::sockaddr_storage = zeroed();
        let len = match addr {
            SocketAddr::V4(a) => {
                let sin = &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in);
                sin.sin_family = libc::AF_INET as libc::sa_family_t;
                sin.sin_port = a.port().to_be();
                sin.sin_addr.s_addr = u32::from(*a.ip()).to_be();
                size_of::<libc::sockaddr_in>()
            }
            SocketAddr::V6(a) => {
                let sin6 = &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in6);
                sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                sin6.sin6_port = a.port().to_be();
                sin6.sin6_addr.s6_addr = a.ip().octets();
                sin6.sin6_flowinfo = a.flowinfo();
                sin6.sin6_scope_id = a.scope_id();
                size_of::<libc::sockaddr_in6>()
            }
        };
        (ss, len as libc::socklen_t)
    }
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
