//! Hardware stamps on a socket: the NIC clock behind them, its mapping to CLOCK_REALTIME kept
//! current, each stamp converted, and the figures of the open window. The socket
//! (`timestamp::StampedSocket`) owns one while it uses hardware stamps.

use super::mapping::SAMPLE_EVERY;
use super::{MappingQuality, PhcClock, PhcMapping, SimulatedPhc, HARDWARE_STAMP_ERROR_NS};
use serde::{Deserialize, Serialize};
use std::io;
use std::time::{Duration, Instant};

/// The NIC clock behind hardware stamps and how well it maps to CLOCK_REALTIME, over a
/// window (in the window line) or over the run so far (meta line, summaries, trace plane).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NicClockInfo {
    /// What is sampled and how: `/dev/ptp0 (eth0) by PTP_SYS_OFFSET_PRECISE`, or the
    /// simulated clock of a test.
    pub source: String,
    /// PHC index from ETHTOOL_GET_TS_INFO (absent for a simulated clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phc_index: Option<u32>,
    /// The mapping now (at the window's close).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mapping: Option<MappingQuality>,
    /// The largest error a stamp converted in the window carries from the mapping, ns: as
    /// settled by the samples around it (`mapping` module comment), and never less than
    /// the mapping's provisional bound at any sample of the window.
    pub mapping_error_max_ns: f64,
    /// Stamps converted across a detected break of the clocks (a step, a frequency change,
    /// a slew): used, with the break's size in `mapping_error_max_ns`.
    #[serde(default)]
    pub stamps_across_break: u64,
    /// Packets (and transmit stamps) with a hardware stamp, converted.
    #[serde(default)]
    pub stamped: u64,
    /// Packets without a hardware stamp: dropped, never stamped in software instead.
    pub unstamped_dropped: u64,
    /// Set in the window in which the node left hardware stamps for kernel software stamps
    /// (the NIC clock failed, or the NIC left most packets unstamped): why.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub switched_to_software: String,
}

impl NicClockInfo {
    /// Error one converted hardware stamp may carry: the stamp's own plus the mapping's.
    pub fn stamp_error_bound_ns(&self) -> i64 {
        HARDWARE_STAMP_ERROR_NS.saturating_add(self.mapping_error_max_ns.ceil() as i64)
    }

    /// Adds a later window's figures: counts summed, worst error kept, newest mapping.
    pub fn absorb(&mut self, later: &NicClockInfo) {
        self.mapping = later.mapping.clone().or(self.mapping.take());
        self.mapping_error_max_ns = self.mapping_error_max_ns.max(later.mapping_error_max_ns);
        self.unstamped_dropped += later.unstamped_dropped;
        self.stamps_across_break += later.stamps_across_break;
        self.stamped += later.stamped;
        if !later.switched_to_software.is_empty() {
            self.switched_to_software = later.switched_to_software.clone();
        }
    }
}

/// NIC clock samples taken before the socket is handed out, `WARM_UP_GAP` apart, so that
/// the first stamps already convert with a fitted drift (100 ms, once per run).
const WARM_UP_SAMPLES: u32 = 10;
const WARM_UP_GAP: Duration = Duration::from_millis(10);
/// Samples a window's close may take to settle its last stamps: a tight one (half are)
/// states a tighter error than whatever the first gives.
const CLOSING_SAMPLES: u32 = 3;
/// Consecutive failed samples after which the NIC clock is given up (150 ms at the
/// sampling rate): a mapping older than that is not trusted any more.
const MAX_SAMPLE_FAILURES: u32 = 3;

/// Hardware stamps: the NIC clock, its mapping, and the window's figures.
pub(crate) struct HardwareStamps {
    clock: Box<dyn PhcClock>,
    /// Set for a simulated NIC: hardware stamps are made from the kernel's software
    /// stamps through this clock.
    simulated: Option<SimulatedPhc>,
    map: PhcMapping,
    next_sample: Instant,
    failures: u32,
    /// Stamps converted after the newest sample: the next sample settles their error.
    unsettled: u64,
    /// The open window's figures, handed out and reset by `window_nic_clock`.
    window: NicClockInfo,
}

impl HardwareStamps {
    pub(crate) fn new(clock: Box<dyn PhcClock>, simulated: Option<SimulatedPhc>) -> io::Result<HardwareStamps> {
        let mut hw = HardwareStamps {
            window: NicClockInfo { source: clock.describe(), phc_index: clock.phc_index(), ..Default::default() },
            clock,
            simulated,
            map: PhcMapping::new(),
            next_sample: Instant::now(),
            failures: 0,
            unsettled: 0,
        };
        for k in 0..WARM_UP_SAMPLES {
            if k > 0 {
                std::thread::sleep(WARM_UP_GAP);
            }
            hw.map.add(hw.clock.sample()?);
        }
        hw.note_error_bound();
        hw.next_sample = Instant::now() + SAMPLE_EVERY;
        Ok(hw)
    }

    fn note_error_bound(&mut self) {
        if let Some(q) = self.map.quality() {
            self.window.mapping_error_max_ns = self.window.mapping_error_max_ns.max(q.error_bound_ns);
        }
    }

    /// The host time of a datagram whose kernel stamps were `sw` (software) and `hw`
    /// (NIC); `None` when the NIC did not stamp it (counted).
    pub(crate) fn host_stamp(&mut self, sw: Option<i64>, hw: Option<i64>) -> Option<i64> {
        let hw = match &mut self.simulated {
            Some(sim) => sw.and_then(|s| sim.stamp(s)),
            None => hw,
        };
        let Some(c) = hw.and_then(|h| self.map.convert(h)) else {
            self.window.unstamped_dropped += 1;
            return None;
        };
        self.window.stamped += 1;
        match c.error_ns {
            Some(e) => self.note_settled(e, c.across_break, 1),
            None => self.unsettled += 1,
        }
        Some(c.host_ns)
    }

    /// `stamps` converted stamps carry `error_ns` from the mapping.
    fn note_settled(&mut self, error_ns: f64, across_break: bool, stamps: u64) {
        self.window.mapping_error_max_ns = self.window.mapping_error_max_ns.max(error_ns);
        if across_break {
            self.window.stamps_across_break += stamps;
        }
    }

    /// Samples the NIC clock once: the mapping refits and settles the stamps converted
    /// since its last settling sample (`settle`: whatever this sample's bracket).
    fn sample_now(&mut self, settle: bool) -> io::Result<()> {
        let s = self.clock.sample()?;
        let settled = if settle { self.map.add_settling(s) } else { self.map.add(s) };
        if let Some(settled) = settled {
            let n = std::mem::take(&mut self.unsettled);
            if n > 0 {
                self.note_settled(settled.error_ns, settled.across_break, n);
            }
        }
        self.note_error_bound();
        Ok(())
    }

    /// Samples the NIC clock when due. `Err` once it failed `MAX_SAMPLE_FAILURES` times in
    /// a row: the reason to stop using hardware stamps.
    pub(crate) fn maintain(&mut self, now: Instant) -> Result<(), String> {
        if now < self.next_sample {
            return Ok(());
        }
        self.next_sample = now + SAMPLE_EVERY;
        match self.sample_now(false) {
            Ok(()) => {
                self.failures = 0;
                Ok(())
            }
            Err(e) => {
                self.failures += 1;
                if self.failures >= MAX_SAMPLE_FAILURES {
                    Err(format!("NIC clock {} failed {} times in a row ({e}); switched to kernel software stamps", self.window.source, self.failures))
                } else {
                    Ok(())
                }
            }
        }
    }

    /// The open window's figures with the mapping as of now, left running.
    pub(crate) fn current(&self) -> NicClockInfo {
        NicClockInfo { mapping: self.map.quality(), ..self.window.clone() }
    }

    /// The open window's figures (mapping as of now); the counters start again. Samples
    /// taken now settle the window's last stamps: up to `CLOSING_SAMPLES` until a tight
    /// one does, the last whatever its bracket; if sampling fails they keep the mapping's
    /// provisional bound (the window's floor).
    pub(crate) fn take_window(&mut self) -> NicClockInfo {
        for k in 1..=CLOSING_SAMPLES {
            if self.unsettled == 0 {
                break;
            }
            if self.sample_now(k == CLOSING_SAMPLES).is_err() {
                self.unsettled = 0;
            }
        }
        let mapping = self.map.quality();
        let error_now = mapping.as_ref().map_or(0.0, |q| q.error_bound_ns);
        let fresh = NicClockInfo { source: self.window.source.clone(), phc_index: self.window.phc_index, mapping_error_max_ns: error_now, ..Default::default() };
        NicClockInfo { mapping, ..std::mem::replace(&mut self.window, fresh) }
    }
}

