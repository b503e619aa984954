//! A process whose clock libfaketime fakes: user-space stamps see the fake clock, kernel
//! socket stamps never do, so the stamping mode must know (`StampedSocket::new`).

/// Why this process's clock is faked, if it is: libfaketime loaded (in `/proc/self/maps`),
/// named in `LD_PRELOAD`, or `FAKETIME` set (the variable the library reads). libfaketime
/// wraps libc's `clock_gettime`, which user-space stamps read; the kernel's stamps never see it.
pub fn fake_clock() -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let preload = std::env::var("LD_PRELOAD").unwrap_or_default();
    let faketime = std::env::var_os("FAKETIME").map(|v| v.to_string_lossy().into_owned());
    fake_clock_from(&maps, &preload, faketime.as_deref())
}

/// [`fake_clock`] on given inputs (for tests).
fn fake_clock_from(maps: &str, preload: &str, faketime: Option<&str>) -> Option<String> {
    if let Some(path) = maps.lines().filter_map(|l| l.split_whitespace().nth(5)).find(|p| p.contains("libfaketime")) {
        return Some(format!("libfaketime is loaded in this process (`{path}`)"));
    }
    if let Some(lib) = preload.split([':', ' ']).find(|p| p.contains("libfaketime")) {
        return Some(format!("LD_PRELOAD names libfaketime (`{lib}`)"));
    }
    faketime.map(|v| format!("FAKETIME is set (`{v}`)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_faked_clock_is_found_in_maps_preload_or_faketime_and_named() {
        let maps = "7f00-7f01 r-xp 00000000 08:01 123 /usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1\n7f02-7f03 r--p 0 0:0 0 [vdso]";
        let why = fake_clock_from(maps, "", None).unwrap();
        assert!(why.contains("libfaketimeMT.so.1") && why.contains("loaded"), "{why}");
        let why = fake_clock_from("", "/lib/libother.so:/usr/lib/faketime/libfaketime.so.1", None).unwrap();
        assert!(why.contains("LD_PRELOAD") && why.contains("/usr/lib/faketime/libfaketime.so.1"), "{why}");
        let why = fake_clock_from("", "", Some("+2s")).unwrap();
        assert!(why.contains("FAKETIME") && why.contains("+2s"), "{why}");
        assert_eq!(fake_clock_from("7f00-7f01 r-xp 0 0:0 0 /usr/lib/libc.so.6", "/usr/lib/libjemalloc.so", None), None);
    }
}
