//! Inserts, verifies and regenerates distprof's hooks in an XLA source tree by anchor.
