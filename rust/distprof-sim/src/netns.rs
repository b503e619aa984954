//! Network namespaces as separate hosts, joined by veth pairs (root only).
//!
//! Every namespace is deleted by name when its `Netns` is dropped, also during a panic
//! unwind, and a stale namespace of the same name is removed before one is created.
//! Deleting a namespace removes its veth ends.

use std::io;
use std::path::PathBuf;
use std::process::Command;

/// True when this process may create namespaces.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn ip(args: &[&str]) -> io::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot run `ip` (install iproute2): {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// A named network namespace, deleted on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates namespace `name` with its loopback up.
    pub fn create(name: &str) -> io::Result<Netns> {
        if !is_root() {
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, "network namespaces need root (CAP_NET_ADMIN)"));
        }
        let _ = ip(&["netns", "del", name]);
        ip(&["netns", "add", name])?;
        let ns = Netns { name: name.to_string() };
        ip(&["-n", name, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    fn path(&self) -> PathBuf {
        PathBuf::from("/var/run/netns").join(&self.name)
    }

    /// Runs `f` on a new thread that has entered this namespace; sockets `f` creates
    /// belong to the namespace and may be used from any thread afterwards.
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> io::Result<T> {
        let path = self.path();
        std::thread::spawn(move || -> io::Result<T> {
            let file = std::fs::File::open(&path)?;
            // SAFETY: a valid namespace fd; only this thread changes namespace.
            if unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&file), libc::CLONE_NEWNET) } != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(f())
        })
        .join()
        .map_err(|_| io::Error::other("thread inside the namespace panicked"))?
    }

    /// Adds `addr_cidr` (e.g. `10.77.1.1/24`) to interface `dev` and brings it up.
    pub fn add_addr(&self, dev: &str, addr_cidr: &str) -> io::Result<()> {
        ip(&["-n", &self.name, "addr", "add", addr_cidr, "dev", dev])?;
        ip(&["-n", &self.name, "link", "set", dev, "up"])
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(e) = ip(&["netns", "del", &self.name]) {
            tracing::warn!("could not delete network namespace {}: {e}", self.name);
        }
    }
}

/// Joins `a` and `b` with a veth pair (`a_dev` in a, `b_dev` in b), addressed and up.
pub fn veth(a: &Netns, a_dev: &str, a_cidr: &str, b: &Netns, b_dev: &str, b_cidr: &str) -> io::Result<()> {
    ip(&["link", "add", a_dev, "netns", a.name(), "type", "veth", "peer", "name", b_dev, "netns", b.name()])?;
    a.add_addr(a_dev, a_cidr)?;
    b.add_addr(b_dev, b_cidr)
}
