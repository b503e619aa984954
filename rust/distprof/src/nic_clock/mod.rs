//! The NIC's PTP hardware clock (PHC) and its mapping to CLOCK_REALTIME.
//!
//! A hardware timestamp is a reading of the NIC's own clock: an arbitrary epoch, or TAI
//! (37 s ahead of UTC) where ptp4l disciplines it, running at its own rate. The probe engine
//! and everything after it work in the host's CLOCK_REALTIME, so every hardware stamp is
//! converted before use. The conversion is a line fitted to periodic samples of the PHC
//! against CLOCK_REALTIME (`mapping`), taken through a clock source (`PhcClock`): the real
//! device (`device`, the ioctls phc2sys uses) or, for tests, a simulated NIC clock
//! (`simulated`) with a known offset, drift and read jitter, and faults: steps and
//! frequency steps of the PHC, a leap second and a slew of the host clock, biased latch
//! reads, each a named scenario (`scenarios`) that replays through the mapping.

pub mod device;
pub mod hardware_stamps;
pub mod mapping;
pub mod scenarios;
pub mod simulated;

pub use device::DevicePhc;
pub use mapping::{Converted, MappingQuality, PhcMapping, Settlement};
pub use scenarios::{phc_scenario, PhcScenario, PHC_SCENARIOS};
pub use simulated::{ClockFault, SimulatedNicClock, SimulatedPhc};

use std::io;

/// Error of one hardware stamp itself, before the mapping's: the NIC stamps at the wire.
pub const HARDWARE_STAMP_ERROR_NS: i64 = 100;

/// One reading of the PHC bracketed by two reads of CLOCK_REALTIME: the PHC was read at
/// some instant between `sys_before_ns` and `sys_after_ns`. A cross-timestamp
/// (`PTP_SYS_OFFSET_PRECISE`) has both equal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PhcSample {
    pub sys_before_ns: i64,
    pub phc_ns: i64,
    pub sys_after_ns: i64,
}

impl PhcSample {
    /// Width of the bracket: how far apart the two system reads are, the sample's own
    /// uncertainty (the PHC read may lie anywhere inside).
    pub fn bracket_ns(&self) -> i64 {
        self.sys_after_ns - self.sys_before_ns
    }

    /// The system time taken as that of the PHC read: the bracket's midpoint.
    pub fn sys_mid_ns(&self) -> i64 {
        self.sys_before_ns + self.bracket_ns() / 2
    }
}

/// A source of PHC-versus-CLOCK_REALTIME samples: the seam between the mapping and the
/// hardware. Implementations never block longer than one ioctl (a few microseconds).
pub trait PhcClock: Send {
    /// The tightest of the readings one call gives (the narrowest bracket).
    fn sample(&mut self) -> io::Result<PhcSample>;
    /// What is read and how, for the meta line: e.g. `/dev/ptp0 (eth0) by PTP_SYS_OFFSET_PRECISE`.
    fn describe(&self) -> String;
    /// The PHC index of the device (ETHTOOL_GET_TS_INFO), `None` for a simulated clock.
    fn phc_index(&self) -> Option<u32>;
}
