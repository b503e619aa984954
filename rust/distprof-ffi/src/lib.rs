//! The cxx bridge between XLA's hooks and the distprof core.
