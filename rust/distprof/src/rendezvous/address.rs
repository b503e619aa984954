//! Which local address the probe socket binds: the interface named by the configuration,
//! else by `NCCL_SOCKET_IFNAME`, else the interface of the default route.
//!
//! Interface specs follow NCCL's syntax, which users of these clusters already write:
//! a comma-separated list of name prefixes (`eth,ib` matches `eth0`, `ib1`); a leading
//! `^` excludes the listed prefixes instead (`^docker,lo`); a leading `=` (after `^` if
//! both) asks for exact names (`=eth0`). Within the chosen interface an IPv4 address is
//! preferred, then a global IPv6 address, then a link-local IPv6 one (with its scope id).
//! Several processes on one host share the address and differ by port, which the kernel
//! assigns when `probe_port` is 0.

use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};

/// The environment variable NCCL reads for the same choice.
pub const NCCL_SOCKET_IFNAME: &str = "NCCL_SOCKET_IFNAME";

/// One address of one local interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceAddr {
    pub interface: String,
    pub ip: IpAddr,
    /// IPv6 scope id (interface index), needed to bind a link-local address.
    pub scope_id: u32,
    pub loopback: bool,
}

/// The address chosen for the probe socket and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChosenAddr {
    pub interface: String,
    /// Bind this with the configured port.
    pub addr: SocketAddr,
    /// `config`, `NCCL_SOCKET_IFNAME`, `default route` or `loopback fallback`.
    pub source: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error("{origin} = `{spec}` matches no interface with an address (interfaces here: {available}); fix the value or unset it")]
    NoMatch {
        origin: &'static str,
        spec: String,
        available: String,
    },
    #[error("{origin} = `{spec}` is not a valid interface list: {reason}")]
    BadSpec {
        origin: &'static str,
        spec: String,
        reason: String,
    },
    #[error("cannot list network interfaces: {0}")]
    System(String),
}

/// A parsed NCCL-style interface list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfaceSpec {
    pub exclude: bool,
    pub exact: bool,
    pub names: Vec<String>,
}

impl IfaceSpec {
    pub fn parse(spec: &str) -> Result<Self, String> {
        let mut s = spec.trim();
        let exclude = s.starts_with('^');
        if exclude {
            s = &s[1..];
        }
        let exact = s.starts_with('=');
        if exact {
            s = &s[1..];
        }
        let names: Vec<String> = s
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(String::from)
            .collect();
        if names.is_empty() {
            return Err("no interface name in it (example: `eth0`, `ib,eth`, `^docker,lo`)".into());
        }
        Ok(Self {
            exclude,
            exact,
            names,
        })
    }

    pub fn matches(&self, interface: &str) -> bool {
        let hit = self.names.iter().any(|n| {
            if self.exact {
                interface == n
            } else {
                interface.starts_with(n.as_str())
            }
        });
        hit != self.exclude
    }
}

/// Every address of every interface that is up, in the kernel's order.
pub fn local_addresses() -> Result<Vec<InterfaceAddr>, AddressError> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(AddressError::System(
            std::io::Error::last_os_error().to_string(),
        ));
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list returned by getifaddrs, valid until freeifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        let flags = ifa.ifa_flags;
        if flags & (libc::IFF_UP as u32) == 0 {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: ifa_addr is non-null; its family says which sockaddr it is.
        let family = unsafe { (*ifa.ifa_addr).sa_family } as i32;
        let (ip, scope_id) = match family {
            libc::AF_INET => {
                // SAFETY: family AF_INET means a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                (
                    IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr))),
                    0,
                )
            }
            libc::AF_INET6 => {
                // SAFETY: family AF_INET6 means a sockaddr_in6.
                let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                (
                    IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)),
                    sin6.sin6_scope_id,
                )
            }
            _ => continue,
        };
        let loopback = flags & (libc::IFF_LOOPBACK as u32) != 0;
        out.push(InterfaceAddr {
            interface: name,
            ip,
            scope_id,
            loopback,
        });
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// The default-route interface from `/proc/net/route` (IPv4, lowest metric), else from
/// `/proc/net/ipv6_route` (::/0, lowest metric, not `lo`).
pub fn default_route_interface() -> Option<String> {
    let v4 = std::fs::read_to_string("/proc/net/route")
        .ok()
        .and_then(|t| parse_ipv4_default_route(&t));
    v4.or_else(|| {
        std::fs::read_to_string("/proc/net/ipv6_route")
            .ok()
            .and_then(|t| parse_ipv6_default_route(&t))
    })
}

/// `Iface Destination Gateway Flags RefCnt Use Metric Mask ...`, hex fields.
pub fn parse_ipv4_default_route(text: &str) -> Option<String> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 8 || f[1] != "00000000" || f[7] != "00000000" {
                return None;
            }
            let flags = u32::from_str_radix(f[3], 16).ok()?;
            const RTF_UP: u32 = 0x1;
            if flags & RTF_UP == 0 {
                return None;
            }
            Some((f[6].parse::<u32>().unwrap_or(u32::MAX), f[0].to_string()))
        })
        .min()
        .map(|(_, iface)| iface)
}

/// `dest plen src splen next_hop metric refcnt use flags iface`, hex fields.
pub fn parse_ipv6_default_route(text: &str) -> Option<String> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10
                || f[0] != "00000000000000000000000000000000"
                || f[1] != "00"
                || f[9] == "lo"
            {
                return None;
            }
            // Unreachable/reject routes (RTF_REJECT 0x0200) are how the kernel says "no route".
            let flags = u32::from_str_radix(f[8], 16).ok()?;
            if flags & 0x0200 != 0 {
                return None;
            }
            Some((
                u32::from_str_radix(f[5], 16).unwrap_or(u32::MAX),
                f[9].to_string(),
            ))
        })
        .min()
        .map(|(_, iface)| iface)
}

/// The best address of the first interface (in the kernel's order) accepted by `accept`.
fn pick(
    addrs: &[InterfaceAddr],
    accept: impl Fn(&InterfaceAddr) -> bool,
) -> Option<&InterfaceAddr> {
    let first_iface = addrs.iter().find(|a| accept(a))?.interface.clone();
    let mine = || addrs.iter().filter(|a| a.interface == first_iface);
    let rank = |a: &InterfaceAddr| match a.ip {
        IpAddr::V4(_) => 0,
        IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) != 0xfe80 => 1,
        IpAddr::V6(_) => 2,
    };
    mine().min_by_key(|a| rank(a))
}

fn to_socket_addr(a: &InterfaceAddr, port: u16) -> SocketAddr {
    match a.ip {
        IpAddr::V4(v4) => SocketAddr::from((v4, port)),
        IpAddr::V6(v6) => SocketAddr::V6(SocketAddrV6::new(v6, port, 0, a.scope_id)),
    }
}

/// Chooses the probe address from explicit inputs (so it can be tested without touching
/// the process environment): the configured interface spec, the `NCCL_SOCKET_IFNAME`
/// value, the default-route interface, and the local addresses.
pub fn choose_address(
    config_interface: &str,
    nccl_socket_ifname: Option<&str>,
    default_route: Option<&str>,
    addrs: &[InterfaceAddr],
    port: u16,
) -> Result<ChosenAddr, AddressError> {
    let available = || {
        let mut names: Vec<&str> = addrs.iter().map(|a| a.interface.as_str()).collect();
        names.dedup();
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    };
    let explicit = [
        ("config `interface`", config_interface),
        (NCCL_SOCKET_IFNAME, nccl_socket_ifname.unwrap_or("")),
    ];
    for (origin, spec) in explicit {
        if spec.trim().is_empty() {
            continue;
        }
        let parsed = IfaceSpec::parse(spec).map_err(|reason| AddressError::BadSpec {
            origin,
            spec: spec.to_string(),
            reason,
        })?;
        // NCCL skips loopback unless it is asked for by name; an exclusion list never selects it.
        let found = pick(addrs, |a| {
            parsed.matches(&a.interface) && (!a.loopback || !parsed.exclude)
        });
        return match found {
            Some(a) => Ok(ChosenAddr {
                interface: a.interface.clone(),
                addr: to_socket_addr(a, port),
                source: origin,
            }),
            None => Err(AddressError::NoMatch {
                origin,
                spec: spec.to_string(),
                available: available(),
            }),
        };
    }
    if let Some(iface) = default_route {
        if let Some(a) = pick(addrs, |a| a.interface == iface) {
            return Ok(ChosenAddr {
                interface: a.interface.clone(),
                addr: to_socket_addr(a, port),
                source: "default route",
            });
        }
    }
    // No default route (an isolated host or a bare network namespace): the first
    // non-loopback interface, else loopback, which still serves one-host runs.
    if let Some(a) = pick(addrs, |a| !a.loopback).or_else(|| pick(addrs, |_| true)) {
        return Ok(ChosenAddr {
            interface: a.interface.clone(),
            addr: to_socket_addr(a, port),
            source: "loopback fallback",
        });
    }
    Err(AddressError::NoMatch {
        origin: "default route",
        spec: String::new(),
        available: available(),
    })
}

/// [`choose_address`] with this host's interfaces, routes and environment.
pub fn discover(config_interface: &str, port: u16) -> Result<ChosenAddr, AddressError> {
    let addrs = local_addresses()?;
    let nccl = std::env::var(NCCL_SOCKET_IFNAME).ok();
    let route = default_route_interface();
    choose_address(
        config_interface,
        nccl.as_deref(),
        route.as_deref(),
        &addrs,
        port,
    )
}

/// This host's name, as recorded in the run context.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its full length; gethostname NUL-terminates on
    // success when the name fits, and we bound the read by the buffer anyway.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if rc != 0 {
        return "unknown".to_string();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ia(name: &str, ip: &str, loopback: bool) -> InterfaceAddr {
        InterfaceAddr {
            interface: name.into(),
            ip: ip.parse().unwrap(),
            scope_id: if ip.starts_with("fe80") { 3 } else { 0 },
            loopback,
        }
    }

    fn host() -> Vec<InterfaceAddr> {
        vec![
            ia("lo", "127.0.0.1", true),
            ia("lo", "::1", true),
            ia("eth0", "fe80::1", false),
            ia("eth0", "10.0.0.5", false),
            ia("docker0", "172.17.0.1", false),
            ia("ib0", "fe80::2", false),
            ia("ib0", "2001:db8::7", false),
            ia("ib1", "192.168.1.9", false),
        ]
    }

    #[test]
    fn spec_parsing_follows_nccl() {
        assert_eq!(
            IfaceSpec::parse("eth,ib").unwrap(),
            IfaceSpec {
                exclude: false,
                exact: false,
                names: vec!["eth".into(), "ib".into()]
            }
        );
        assert_eq!(
            IfaceSpec::parse("^=docker0,lo").unwrap(),
            IfaceSpec {
                exclude: true,
                exact: true,
                names: vec!["docker0".into(), "lo".into()]
            }
        );
        assert!(IfaceSpec::parse("^").is_err());
        let s = IfaceSpec::parse("=eth0").unwrap();
        assert!(s.matches("eth0") && !s.matches("eth01"));
        let s = IfaceSpec::parse("eth").unwrap();
        assert!(s.matches("eth0") && s.matches("eth12") && !s.matches("ib0"));
        let s = IfaceSpec::parse("^docker,lo").unwrap();
        assert!(!s.matches("docker0") && !s.matches("lo") && s.matches("eth0"));
    }

    #[test]
    fn config_wins_over_nccl_and_route() {
        let c = choose_address("ib1", Some("eth"), Some("eth0"), &host(), 7000).unwrap();
        assert_eq!(
            (c.interface.as_str(), c.addr, c.source),
            (
                "ib1",
                "192.168.1.9:7000".parse().unwrap(),
                "config `interface`"
            )
        );
    }

    #[test]
    fn nccl_prefix_list_and_ipv6_preference() {
        // `ib` prefix: ib0 comes first; it has no IPv4, so its global IPv6 wins over link-local.
        let c = choose_address("", Some("ib"), Some("eth0"), &host(), 0).unwrap();
        assert_eq!(c.interface, "ib0");
        assert_eq!(c.addr, "[2001:db8::7]:0".parse().unwrap());
        assert_eq!(c.source, NCCL_SOCKET_IFNAME);
    }

    #[test]
    fn nccl_exclusion_skips_listed_and_loopback() {
        let c = choose_address("", Some("^eth,docker"), None, &host(), 0).unwrap();
        assert_eq!(c.interface, "ib0");
        let c = choose_address("", Some("^=eth0"), None, &host(), 0).unwrap();
        assert_eq!(c.interface, "docker0");
    }

    #[test]
    fn default_route_prefers_ipv4_and_link_local_carries_scope() {
        let c = choose_address("", None, Some("eth0"), &host(), 1).unwrap();
        assert_eq!(c.addr, "10.0.0.5:1".parse().unwrap());
        let only_ll = vec![ia("eth0", "fe80::1", false)];
        let c = choose_address("", None, Some("eth0"), &only_ll, 1).unwrap();
        match c.addr {
            SocketAddr::V6(a) => assert_eq!(a.scope_id(), 3),
            other => panic!("{other}"),
        }
    }

    #[test]
    fn no_match_names_source_spec_and_available_interfaces() {
        let err = choose_address("", Some("=eth9"), None, &host(), 0).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("NCCL_SOCKET_IFNAME = `=eth9`")
                && text.contains("eth0")
                && text.contains("ib1"),
            "{text}"
        );
        let err = choose_address("", Some(","), None, &host(), 0).unwrap_err();
        assert!(matches!(err, AddressError::BadSpec { .. }), "{err}");
    }

    #[test]
    fn without_default_route_falls_back() {
        let c = choose_address("", None, None, &host(), 0).unwrap();
        assert_eq!(c.interface, "eth0");
        let lo_only = vec![ia("lo", "127.0.0.1", true)];
        assert_eq!(
            choose_address("", None, None, &lo_only, 0).unwrap().addr,
            "127.0.0.1:0".parse().unwrap()
        );
    }

    #[test]
    fn route_tables_parse() {
        let v4 =
            "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
                  eth1\t00000000\t0101A8C0\t0003\t0\t0\t200\t00000000\t0\t0\t0\n\
                  eth0\t00000000\t0100000A\t0003\t0\t0\t100\t00000000\t0\t0\t0\n\
                  eth0\t0000000A\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0\n";
        assert_eq!(parse_ipv4_default_route(v4).as_deref(), Some("eth0"));
        assert_eq!(
            parse_ipv4_default_route("Iface\tDestination\n").as_deref(),
            None
        );
        let v6 = "00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo\n\
                  00000000000000000000000000000000 00 00000000000000000000000000000000 00 fe800000000000000000000000000001 00000400 00000001 00000000 00000003     ens5\n\
                  20010db8000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     ens5\n";
        assert_eq!(parse_ipv6_default_route(v6).as_deref(), Some("ens5"));
    }

    #[test]
    fn this_host_has_interfaces_and_a_name() {
        let addrs = local_addresses().unwrap();
        assert!(
            addrs
                .iter()
                .any(|a| a.ip == IpAddr::V4(Ipv4Addr::LOCALHOST)),
            "{addrs:?}"
        );
        assert!(!hostname().is_empty());
        let lo = choose_address("=lo", None, None, &addrs, 0).unwrap();
        assert!(lo.addr.ip().is_loopback());
    }
}
