//! Turns a panic inside a hook into the one log line `Plugin::disable` prints, instead of
//! the default multi-line panic message (and backtrace) on XLA's stderr.
//!
//! The panic hook is per copy of the Rust runtime: inside XLA that is our staticlib only.
//! Panics outside a hook entry (e.g. in the `distprof` CLI) go to the previous hook.

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
            if IN_ENTRY.with(Cell::get) {
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
