//! GPU discovery and clock information through HIP (`rocm` feature).
//!
//! hip-sys provides the link to libamdhip64; the functions are declared here with `i32`
//! returns because hip-sys models `hipError_t` as a Rust enum, and an error code from a
//! different ROCm version would be undefined behaviour there. Without a device (or a driver)
//! every call reports no GPU instead of failing.

use serde::Serialize;

/// One HIP device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuInfo {
    pub ordinal: i32,
    pub name: String,
    /// Peak shader clock, kHz (`hipDeviceAttributeClockRate`).
    pub clock_rate_khz: Option<i32>,
}

/// What HIP reports about this host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuReport {
    pub runtime_version: Option<i32>,
    /// `hipGetDeviceCount`'s error code when it failed (100 = hipErrorNoDevice).
    pub count_error: Option<i32>,
    pub devices: Vec<GpuInfo>,
}

#[cfg(feature = "rocm")]
mod ffi {
    // Make sure hip-sys (and its link to libamdhip64) is part of the build.
    #[allow(unused_imports)]
    use hip_sys as _;

    extern "C" {
        pub fn hipGetDeviceCount(count: *mut i32) -> i32;
        pub fn hipRuntimeGetVersion(version: *mut i32) -> i32;
        pub fn hipDeviceGetName(name: *mut std::os::raw::c_char, len: i32, device: i32) -> i32;
        pub fn hipDeviceGetAttribute(value: *mut i32, attr: i32, device: i32) -> i32;
    }
    pub const HIP_SUCCESS: i32 = 0;
    /// `hipDeviceAttributeClockRate` in the HIP >= 5.0 numbering.
    pub const ATTR_CLOCK_RATE: i32 = 5;
}

/// Lists HIP devices. Without the `rocm` feature there is nothing to ask: no devices.
pub fn discover() -> GpuReport {
    #[cfg(feature = "rocm")]
    {
        use ffi::*;
        let mut version = 0i32;
        // SAFETY: each call writes only through the out-pointers we pass, sized as declared.
        let runtime_version =
            (unsafe { hipRuntimeGetVersion(&mut version) } == HIP_SUCCESS).then_some(version);
        let mut count = 0i32;
        let rc = unsafe { hipGetDeviceCount(&mut count) };
        if rc != HIP_SUCCESS {
            return GpuReport {
                runtime_version,
                count_error: Some(rc),
                devices: Vec::new(),
            };
        }
        let devices = (0..count)
            .map(|ordinal| {
                let mut buf = [0 as std::os::raw::c_char; 256];
                let name =
                    if unsafe { hipDeviceGetName(buf.as_mut_ptr(), buf.len() as i32, ordinal) }
                        == HIP_SUCCESS
                    {
                        // SAFETY: HIP NUL-terminates within the length we gave it.
                        unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
                            .to_string_lossy()
                            .into_owned()
                    } else {
                        String::new()
                    };
                let mut khz = 0i32;
                let clock_rate_khz =
                    (unsafe { hipDeviceGetAttribute(&mut khz, ATTR_CLOCK_RATE, ordinal) }
                        == HIP_SUCCESS)
                        .then_some(khz);
                GpuInfo {
                    ordinal,
                    name,
                    clock_rate_khz,
                }
            })
            .collect();
        GpuReport {
            runtime_version,
            count_error: None,
            devices,
        }
    }
    #[cfg(not(feature = "rocm"))]
    GpuReport {
        runtime_version: None,
        count_error: None,
        devices: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn discovery_is_graceful_without_a_gpu() {
        let r = super::discover();
        eprintln!("{r:?}");
        // This machine has no AMD GPU: either no HIP at all (feature off) or HIP reporting
        // hipErrorNoDevice (100) / zero devices. A GPU machine lists named devices.
        if r.devices.is_empty() {
            assert!(
                r.count_error.is_none() || r.count_error == Some(100),
                "{r:?}"
            );
        } else {
            assert!(r.devices.iter().all(|d| !d.name.is_empty()), "{r:?}");
        }
    }
}
