//! The real PHC: `/dev/ptpN` of the interface, sampled against CLOCK_REALTIME.
//!
//! The PHC index comes from `ETHTOOL_GET_TS_INFO` on the interface. Samples are taken with
//! the best ioctl the driver offers, as phc2sys does: `PTP_SYS_OFFSET_PRECISE` (a
//! cross-timestamp made by the hardware, no bracket), else `PTP_SYS_OFFSET_EXTENDED`
//! (system reads right around the PHC read inside the driver), else `PTP_SYS_OFFSET`
//! (system reads around the whole driver call). The structures below follow the kernel's
//! UAPI `linux/ptp_clock.h` and `linux/ethtool.h` (layouts and request numbers are ABI).

use super::{PhcClock, PhcSample};
use std::fs::File;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::AsRawFd;

/// `struct ptp_clock_time`: seconds, nanoseconds, reserved (16 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PtpClockTime {
    sec: i64,
    nsec: u32,
    reserved: u32,
}

impl PtpClockTime {
    fn ns(&self) -> i64 {
        self.sec.saturating_mul(1_000_000_000).saturating_add(self.nsec as i64)
    }
}

/// Readings one call may ask for (`PTP_MAX_SAMPLES`).
const PTP_MAX_SAMPLES: usize = 25;
/// Readings asked for per sample: the narrowest bracket of them is kept.
const READINGS: u32 = 5;

/// `struct ptp_sys_offset`: `2n + 1` interleaved stamps, system, PHC, system, ...
#[repr(C)]
struct PtpSysOffset {
    n_samples: u32,
    rsv: [u32; 3],
    ts: [PtpClockTime; 2 * PTP_MAX_SAMPLES + 1],
}

/// `struct ptp_sys_offset_extended`: `n` triples [system, PHC, system]. The first reserved
/// word is the system clock id in newer kernels; 0 is CLOCK_REALTIME there too.
#[repr(C)]
struct PtpSysOffsetExtended {
    n_samples: u32,
    rsv: [u32; 3],
    ts: [[PtpClockTime; 3]; PTP_MAX_SAMPLES],
}

/// `struct ptp_sys_offset_precise`: device time and the system times at the same instant.
#[repr(C)]
struct PtpSysOffsetPrecise {
    device: PtpClockTime,
    sys_realtime: PtpClockTime,
    sys_monoraw: PtpClockTime,
    rsv: [u32; 4],
}

/// `struct ethtool_ts_info`.
#[repr(C)]
struct EthtoolTsInfo {
    cmd: u32,
    so_timestamping: u32,
    phc_index: i32,
    tx_types: u32,
    tx_reserved: [u32; 3],
    rx_filters: u32,
    rx_reserved: [u32; 3],
}

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GET_TS_INFO: u32 = 0x41;

/// `_IOC(dir, type, nr, size)` of asm-generic/ioctl.h: dir in bits 30-31 (1 write, 2 read),
/// size in 16-29, type in 8-15, number in 0-7.
const fn ioc(dir: u64, nr: u64, size: usize) -> libc::c_ulong {
    const PTP_CLK_MAGIC: u64 = b'=' as u64;
    ((dir << 30) | ((size as u64) << 16) | (PTP_CLK_MAGIC << 8) | nr) as libc::c_ulong
}
const IOW: u64 = 1;
const IOWR: u64 = 3;
const PTP_SYS_OFFSET: libc::c_ulong = ioc(IOW, 5, size_of::<PtpSysOffset>());
const PTP_SYS_OFFSET_PRECISE: libc::c_ulong = ioc(IOWR, 8, size_of::<PtpSysOffsetPrecise>());
const PTP_SYS_OFFSET_EXTENDED: libc::c_ulong = ioc(IOWR, 9, size_of::<PtpSysOffsetExtended>());

/// The ioctl a device answers, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleMethod {
    Precise,
    Extended,
    Basic,
}

impl SampleMethod {
    pub fn name(self) -> &'static str {
        match self {
            SampleMethod::Precise => "PTP_SYS_OFFSET_PRECISE",
            SampleMethod::Extended => "PTP_SYS_OFFSET_EXTENDED",
            SampleMethod::Basic => "PTP_SYS_OFFSET",
        }
    }
}

/// An open `/dev/ptpN` and the ioctl that samples it.
pub struct DevicePhc {
    file: File,
    path: String,
    index: u32,
    interface: String,
    method: SampleMethod,
}

/// The PHC index of `ifname` (ETHTOOL_GET_TS_INFO through the socket `fd`).
pub fn phc_index_of(fd: i32, ifname: &str) -> io::Result<u32> {
    let mut info = EthtoolTsInfo {
        cmd: ETHTOOL_GET_TS_INFO,
        so_timestamping: 0,
        phc_index: -1,
        tx_types: 0,
        tx_reserved: [0; 3],
        rx_filters: 0,
        rx_reserved: [0; 3],
    };
    // SAFETY: ifreq is plain old data; ifr_data points at `info`, which outlives the ioctl.
    let r = unsafe {
        let mut ifr: libc::ifreq = zeroed();
        for (d, s) in ifr.ifr_name.iter_mut().zip(ifname.as_bytes().iter().take(libc::IFNAMSIZ - 1)) {
            *d = *s as libc::c_char;
        }
        ifr.ifr_ifru.ifru_data = &mut info as *mut EthtoolTsInfo as *mut libc::c_char;
        libc::ioctl(fd, SIOCETHTOOL as _, &mut ifr)
    };
    if r != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("ETHTOOL_GET_TS_INFO on `{ifname}`: {e}")));
    }
    u32::try_from(info.phc_index).map_err(|_| {
        io::Error::new(
            io::ErrorKind::Unsupported,
            format!("interface `{ifname}` has no PTP hardware clock (ETHTOOL_GET_TS_INFO phc_index = {})", info.phc_index),
        )
    })
}

impl DevicePhc {
    /// Opens the PHC of `ifname` (found through the socket `fd`) and picks the best ioctl
    /// it answers. Every failure names the interface or device and the call.
    pub fn for_interface(fd: i32, ifname: &str) -> io::Result<DevicePhc> {
        let index = phc_index_of(fd, ifname)?;
        DevicePhc::open(&format!("/dev/ptp{index}"), index, ifname)
    }

    /// Opens `path` (a `/dev/ptpN`) and finds the ioctl it answers.
    pub fn open(path: &str, index: u32, interface: &str) -> io::Result<DevicePhc> {
        let file = File::open(path).map_err(|e| io::Error::new(e.kind(), format!("cannot open `{path}`: {e}")))?;
        let mut dev = DevicePhc { file, path: path.to_string(), index, interface: interface.to_string(), method: SampleMethod::Precise };
        let mut errors = Vec::new();
        for method in [SampleMethod::Precise, SampleMethod::Extended, SampleMethod::Basic] {
            dev.method = method;
            match dev.sample() {
                Ok(_) => return Ok(dev),
                Err(e) => errors.push(e.to_string()),
            }
        }
        Err(io::Error::new(io::ErrorKind::Unsupported, format!("`{path}` answers none of the sampling ioctls: {}", errors.join("; "))))
    }

    pub fn method(&self) -> SampleMethod {
        self.method
    }

    fn ioctl<T>(&self, request: libc::c_ulong, arg: &mut T) -> io::Result<()> {
        // SAFETY: `arg` is the structure `request` names, alive across the call.
        let r = unsafe { libc::ioctl(self.file.as_raw_fd(), request as _, arg as *mut T) };
        if r == 0 {
            Ok(())
        } else {
            let e = io::Error::last_os_error();
            Err(io::Error::new(e.kind(), format!("{} on `{}`: {e}", self.method.name(), self.path)))
        }
    }
}

impl PhcClock for DevicePhc {
    fn sample(&mut self) -> io::Result<PhcSample> {
        match self.method {
            SampleMethod::Precise => {
                // SAFETY: all-zero is a valid request (reserved words must be zero).
                let mut p: PtpSysOffsetPrecise = unsafe { zeroed() };
                self.ioctl(PTP_SYS_OFFSET_PRECISE, &mut p)?;
                let sys = p.sys_realtime.ns();
                Ok(PhcSample { sys_before_ns: sys, phc_ns: p.device.ns(), sys_after_ns: sys })
            }
            SampleMethod::Extended => {
                // SAFETY: as above; clock id 0 (CLOCK_REALTIME).
                let mut p: PtpSysOffsetExtended = unsafe { zeroed() };
                p.n_samples = READINGS;
                self.ioctl(PTP_SYS_OFFSET_EXTENDED, &mut p)?;
                let triples = p.ts[..READINGS as usize].iter().map(|t| PhcSample {
                    sys_before_ns: t[0].ns(),
                    phc_ns: t[1].ns(),
                    sys_after_ns: t[2].ns(),
                });
                tightest(triples).ok_or_else(|| io::Error::other("PTP_SYS_OFFSET_EXTENDED gave no reading"))
            }
            SampleMethod::Basic => {
                // SAFETY: as above.
                let mut p: PtpSysOffset = unsafe { zeroed() };
                p.n_samples = READINGS;
                self.ioctl(PTP_SYS_OFFSET, &mut p)?;
                let readings = (0..READINGS as usize).map(|i| PhcSample {
                    sys_before_ns: p.ts[2 * i].ns(),
                    phc_ns: p.ts[2 * i + 1].ns(),
                    sys_after_ns: p.ts[2 * i + 2].ns(),
                });
                tightest(readings).ok_or_else(|| io::Error::other("PTP_SYS_OFFSET gave no reading"))
            }
        }
    }

    fn describe(&self) -> String {
        format!("{} ({}) by {}", self.path, self.interface, self.method.name())
    }

    fn phc_index(&self) -> Option<u32> {
        Some(self.index)
    }
}

/// The reading with the narrowest bracket (a reading whose bracket runs backwards, a
/// clock step between the reads, is no reading).
fn tightest(readings: impl Iterator<Item = PhcSample>) -> Option<PhcSample> {
    readings.filter(|s| s.bracket_ns() >= 0).min_by_key(|s| s.bracket_ns())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request numbers as the kernel headers define them (`_IOW('=', 5, 832 bytes)`, ...):
    /// a wrong size would make every ioctl fail with ENOTTY.
    #[test]
    fn request_numbers_match_the_kernel_abi() {
        assert_eq!(size_of::<PtpClockTime>(), 16);
        assert_eq!(size_of::<PtpSysOffset>(), 832);
        assert_eq!(size_of::<PtpSysOffsetExtended>(), 1216);
        assert_eq!(size_of::<PtpSysOffsetPrecise>(), 64);
        assert_eq!(size_of::<EthtoolTsInfo>(), 44);
        assert_eq!(PTP_SYS_OFFSET, 0x4340_3d05);
        assert_eq!(PTP_SYS_OFFSET_PRECISE, 0xc040_3d08);
        assert_eq!(PTP_SYS_OFFSET_EXTENDED, 0xc4c0_3d09);
    }

    #[test]
    fn the_narrowest_bracket_wins() {
        let s = |b: i64, a: i64| PhcSample { sys_before_ns: b, phc_ns: 0, sys_after_ns: a };
        assert_eq!(tightest([s(0, 900), s(10, 250), s(20, 19), s(30, 600)].into_iter()), Some(s(10, 250)));
    }

    /// Loopback has no PHC: the kernel's default ts_info says phc_index -1, and the error
    /// names the interface and the call.
    #[test]
    fn loopback_has_no_phc_and_says_so() {
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let e = DevicePhc::for_interface(sock.as_raw_fd(), "lo").err().unwrap().to_string();
        assert!(e.contains("`lo`") && e.contains("phc_index = -1"), "{e}");
    }

    /// A real PTP clock where this machine has one (`/dev/ptp0`, e.g. from the kernel's
    /// ptp_mock or netdevsim): opened, sampled with the best ioctl, mapped. Skipped with the
    /// reason where there is none (the project's CI VM has no PHC and no loadable modules).
    #[test]
    fn a_real_phc_is_sampled_and_mapped_where_present() {
        let Some(path) = (0..8).map(|i| format!("/dev/ptp{i}")).find(|p| std::path::Path::new(p).exists()) else {
            println!("skipped: no /dev/ptpN on this machine (no PHC; ptp_mock/netdevsim cannot be loaded here)");
            return;
        };
        let mut dev = DevicePhc::open(&path, 0, "(direct)").unwrap();
        let mut map = crate::nic_clock::PhcMapping::new();
        for _ in 0..20 {
            map.add(dev.sample().unwrap());
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let q = map.quality().unwrap();
        println!("{}: {q:?}", dev.describe());
        // Converting a fresh sample's PHC reading lands inside its bracket, give or take
        // the mapping's own stated error.
        let s = dev.sample().unwrap();
        let host = map.to_host_ns(s.phc_ns).unwrap();
        let err = q.error_bound_ns as i64 + s.bracket_ns();
        assert!(host >= s.sys_before_ns - err && host <= s.sys_after_ns + err, "{host} vs {s:?}, error {err}");
    }
}
