//! Writes the generated seed inputs of the `xspace` fuzz target into `fuzz/corpus/xspace/`
//! (the other targets' seeds are text, written by `fuzz/make_seeds.py`).
//!
//!     cargo run -p distprof-testkit --example fuzz_seeds
use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/xspace");
    std::fs::create_dir_all(&dir)?;
    for (name, bytes) in distprof_testkit::fuzz::xspace_seeds() {
        std::fs::write(dir.join(name), &bytes)?;
        eprintln!("{} ({} bytes)", dir.join(name).display(), bytes.len());
    }
    Ok(())
}
