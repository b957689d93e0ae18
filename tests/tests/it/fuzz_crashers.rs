//! Replays every input committed under `tests/fuzz-crashers/<target>/` (minimized crashers
//! the fuzzers found, and regression inputs for bugs they caught) through the target's
//! check, on stable Rust, so what was fixed stays fixed.

use std::path::Path;

#[test]
fn every_committed_crasher_passes_its_check() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz-crashers");
    let mut replayed = 0;
    for (target, check) in kvreuse_tests::TARGETS {
        let dir = root.join(target);
        assert!(dir.is_dir(), "{} is missing (one folder per fuzz target)", dir.display());
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            // Notes and placeholders that keep empty folders in git are not inputs.
            let name = path.file_name().unwrap().to_string_lossy();
            if name.starts_with('.') || name.ends_with(".md") {
                continue;
            }
            let data = std::fs::read(&path).unwrap();
            let outcome = std::panic::catch_unwind(|| check(&data));
            assert!(outcome.is_ok(), "{} fails its check again", path.display());
            replayed += 1;
        }
    }
    eprintln!("replayed {replayed} committed fuzz inputs");
}

/// The checks are not vacuous: each accepts inputs that exercise its surface (a smoke run on
/// fixed seeds of every length up to 2 KiB).
#[test]
fn checks_run_on_many_inputs() {
    let mut state = 0x243f_6a88_85a3_08d3u64;
    for (_, check) in kvreuse_tests::TARGETS {
        for len in (0..2048).step_by(7) {
            let data: Vec<u8> = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            check(&data);
        }
    }
}
