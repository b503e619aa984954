//! Turns a panic inside a hook into the one log line `Plugin::disable` prints, instead of
//! the default multi-line panic message (and backtrace) on XLA's stderr.
//!
//! The panic hook is per copy of the Rust runtime: inside XLA that is our staticlib only.
//! The plugin's own threads (rendezvous, probe, sampler) catch their panics and report them
//! in the plugin's one line; they are marked (`distprof::plugin::mark_thread_panics_reported`)
//! and print nothing here either. Any other panic (e.g. in the `distprof` CLI) goes to the
//! previous hook.

use std::cell::{Cell, RefCell};
use std::sync::Once;

thread_local! {
    static IN_ENTRY: Cell<bool> = const { Cell::new(false) };
    static LAST: RefCell<Option<String>> = const { RefCell::new(None) };
}

pub fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            // Inside a hook, or on one of the plugin's own threads (which catch their
            // panics and report them in the plugin's one line): nothing on stderr here.
            if IN_ENTRY.with(Cell::get) || distprof::plugin::thread_panics_reported() {
                let payload = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "non-string panic payload".to_string());
                let location = info.location().map(|l| format!(" at {}:{}", l.file(), l.line()));
                LAST.with(|last| *last.borrow_mut() = Some(payload + &location.unwrap_or_default()));
            } else {
                previous(info);
            }
        }));
    });
}

/// Runs `f` with panics reported through [`take_last`] instead of the previous hook.
pub fn inside_entry<R>(f: impl FnOnce() -> R) -> R {
    let outer = IN_ENTRY.with(|c| c.replace(true));
    let r = f();
    IN_ENTRY.with(|c| c.set(outer));
    r
}

/// The message and location of the last panic caught on this thread.
pub fn take_last() -> String {
    LAST.with(|last| last.borrow_mut().take()).unwrap_or_else(|| "unknown panic".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static PREVIOUS_CALLS: AtomicUsize = AtomicUsize::new(0);

    /// One test for the whole process-wide hook: the plugin's marked threads and hook
    /// entries print nothing; any other thread's panic reaches the previous hook.
    #[test]
    fn only_unreported_panics_reach_the_previous_hook() {
        std::panic::set_hook(Box::new(|_| {
            PREVIOUS_CALLS.fetch_add(1, Ordering::SeqCst);
        }));
        install();
        let marked = std::thread::spawn(|| {
            distprof::plugin::mark_thread_panics_reported();
            std::panic::catch_unwind(|| panic!("caught on a plugin thread")).is_err()
        });
        assert!(marked.join().unwrap());
        assert!(inside_entry(|| std::panic::catch_unwind(|| panic!("in a hook")).is_err()));
        let last = take_last();
        assert!(last.starts_with("in a hook at rust/distprof-ffi/src/panic_report.rs:"), "{last}");
        assert_eq!(PREVIOUS_CALLS.load(Ordering::SeqCst), 0);
        let other = std::thread::spawn(|| std::panic::catch_unwind(|| panic!("elsewhere")).is_err());
        assert!(other.join().unwrap());
        assert_eq!(PREVIOUS_CALLS.load(Ordering::SeqCst), 1);
    }
}
