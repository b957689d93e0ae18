//! Snapshots: a round trip restores the ids in order, a damaged file is rejected with a clear
//! error and leaves the history untouched, and a smaller history keeps the newest ids.

use std::path::Path;

use kvreuse::history::Loaded;
use kvreuse::{Error, SharedHistory};

fn history(capacity: usize, ids: impl IntoIterator<Item = u64>) -> SharedHistory {
    let h = SharedHistory::with_capacity(capacity).unwrap();
    h.insert_all(&ids.into_iter().collect::<Vec<_>>());
    h
}

/// Ids with eviction behind them: the snapshot must hold what is present, oldest first.
fn saved(dir: &Path) -> (std::path::PathBuf, Vec<u64>) {
    let h = history(500, (0..800u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15)));
    let path = dir.join("history.kvrsnap");
    assert_eq!(h.save(&path).unwrap(), 500);
    (path, h.oldest_first())
}

#[test]
fn a_round_trip_restores_every_id_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (path, ids) = saved(dir.path());
    let restored = history(500, [1, 2, 3]);
    assert_eq!(restored.load(&path).unwrap(), Loaded { loaded: 500, dropped: 0 });
    assert_eq!(restored.oldest_first(), ids);
    assert_eq!(restored.seen_prefix_len(&ids), ids.len());
    assert!(!restored.contains(1), "loading replaces what was there");
    // Saving again replaces the file atomically and leaves no temporary file behind.
    restored.insert_all(&[42]);
    restored.save(&path).unwrap();
    let names: Vec<_> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["history.kvrsnap"]);
    let again = history(500, []);
    again.load(&path).unwrap();
    assert_eq!(again.oldest_first(), restored.oldest_first());
}

#[test]
fn a_smaller_history_keeps_the_newest_ids() {
    let dir = tempfile::tempdir().unwrap();
    let (path, ids) = saved(dir.path());
    let small = history(120, []);
    assert_eq!(small.load(&path).unwrap(), Loaded { loaded: 120, dropped: 380 });
    assert_eq!(small.oldest_first(), ids[380..]);
}

fn assert_rejected(bytes: &[u8], expect: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.kvrsnap");
    std::fs::write(&path, bytes).unwrap();
    let h = history(100, [7, 8, 9]);
    let err = h.load(&path).unwrap_err();
    assert!(matches!(err, Error::Snapshot { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.starts_with(&path.display().to_string()), "{message}");
    assert!(message.contains(expect), "{message:?} should say {expect:?}");
    assert_eq!(h.oldest_first(), [7, 8, 9], "a rejected file must not touch the history");
}

#[test]
fn truncated_files_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = saved(dir.path());
    let bytes = std::fs::read(&path).unwrap();
    assert_rejected(&bytes[..0], "truncated");
    assert_rejected(&bytes[..20], "truncated");
    for cut in [40, 41, bytes.len() / 2, bytes.len() - 8, bytes.len() - 1] {
        assert_rejected(&bytes[..cut], "truncated or damaged");
    }
}

#[test]
fn flipped_bytes_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = saved(dir.path());
    let bytes = std::fs::read(&path).unwrap();
    let flip = |at: usize| {
        let mut b = bytes.clone();
        b[at] ^= 0x10;
        b
    };
    assert_rejected(&flip(0), "bad magic");
    assert_rejected(&flip(8), "unsupported snapshot version");
    assert_rejected(&flip(13), "unknown snapshot flags");
    assert_rejected(&flip(24), "truncated or damaged");
    for at in [16, 32, 100, bytes.len() / 2, bytes.len() - 9, bytes.len() - 1] {
        assert_rejected(&flip(at), "checksum mismatch");
    }
    // A header announcing an absurd count is rejected before anything is allocated for it.
    let mut absurd = bytes.clone();
    absurd[24..32].copy_from_slice(&(u64::MAX / 16).to_le_bytes());
    assert_rejected(&absurd, "truncated or damaged");
}

#[test]
fn other_domains_and_missing_files_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.kvrsnap");
    history(10, [1, 2]).save_in_domain(&path, 0xabc).unwrap();
    let h = history(10, [5]);
    let err = h.load_in_domain(&path, 0xdef).unwrap_err();
    assert!(matches!(err, Error::ForeignSnapshot { expected: 0xdef, found: 0xabc, .. }), "{err}");
    assert_eq!(h.oldest_first(), [5]);
    assert_eq!(h.load_in_domain(&path, 0xabc).unwrap().loaded, 2);
    let missing = h.load(dir.path().join("missing")).unwrap_err();
    assert!(matches!(missing, Error::Io { .. }) && missing.to_string().contains("missing"));
    let unwritable = h.save(dir.path().join("no/such/dir/x")).unwrap_err();
    assert!(matches!(unwritable, Error::Io { .. }), "{unwritable}");
}
