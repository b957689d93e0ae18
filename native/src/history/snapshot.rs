//! Saving a history's ids to a file and loading them back, so a restarted router does not
//! start blind. The format is [`kvreuse_core::snapshot`]'s.
//!
//! Saving copies the ids under the writer lock (a memory copy, no I/O while locked), then
//! streams them to a temporary file in the target's folder, syncs it, renames it over the
//! target and syncs the folder: a crash leaves the old snapshot or the new one, never a mix.
//! Loading reads and checks the whole file before it touches the history, so a truncated or
//! corrupt file leaves the history as it was.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use kvreuse_core::history::Storage;
use kvreuse_core::snapshot::{self, Checksum, Header};

use super::SharedHistory;
use crate::error::{Error, Result};

/// What a load did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loaded {
    /// Ids the history now holds from the snapshot.
    pub loaded: usize,
    /// The snapshot's oldest ids left out because the history is smaller than the snapshot.
    pub dropped: usize,
}

impl<S: Storage> SharedHistory<S> {
    /// Saves the ids, oldest first, to `path` (atomically replacing it); returns how many.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<usize> {
        self.save_in_domain(path, 0)
    }

    /// [`save`](Self::save), recording the ids' domain digest
    /// ([`Domain::digest`](kvreuse_core::message::Domain::digest)).
    pub fn save_in_domain(&self, path: impl AsRef<Path>, domain: u64) -> Result<usize> {
        let path = path.as_ref();
        let ids = self.oldest_first();
        let io = |error| Error::Io { path: path.to_path_buf(), error };
        let temporary = temporary_path(path);
        let written = write_snapshot(&temporary, domain, &ids)
            .and_then(|()| std::fs::rename(&temporary, path))
            .and_then(|()| sync_parent(path));
        if written.is_err() {
            let _ = std::fs::remove_file(&temporary);
        }
        written.map_err(io)?;
        Ok(ids.len())
    }

    /// Replaces the ids with a snapshot's (any domain). When the snapshot holds more ids than
    /// the capacity, the newest are kept. On any error the history is unchanged.
    pub fn load(&self, path: impl AsRef<Path>) -> Result<Loaded> {
        self.load_checked(path.as_ref(), None)
    }

    /// [`load`](Self::load), refusing a snapshot recorded for another domain.
    pub fn load_in_domain(&self, path: impl AsRef<Path>, domain: u64) -> Result<Loaded> {
        self.load_checked(path.as_ref(), Some(domain))
    }

    fn load_checked(&self, path: &Path, domain: Option<u64>) -> Result<Loaded> {
        let io = |error| Error::Io { path: path.to_path_buf(), error };
        let invalid = |error| Error::Snapshot { path: path.to_path_buf(), error };
        let mut file = File::open(path).map_err(io)?;
        let bytes = file.metadata().map_err(io)?.len();
        // The header first: a bad file is rejected before its announced size is allocated.
        let mut head = [0u8; snapshot::HEADER_BYTES];
        let read = read_up_to(&mut file, &mut head).map_err(io)?;
        snapshot::decode_header(&head[..read], bytes).map_err(invalid)?;
        let mut contents = head[..read].to_vec();
        file.read_to_end(&mut contents).map_err(io)?;
        let decoded = snapshot::decode(&contents).map_err(invalid)?;
        drop(contents);
        if let Some(expected) = domain.filter(|&d| d != decoded.domain) {
            return Err(Error::ForeignSnapshot {
                path: path.to_path_buf(),
                expected,
                found: decoded.domain,
            });
        }
        let keep = decoded.ids.len().min(self.capacity());
        let newest = &decoded.ids[decoded.ids.len() - keep..];
        let mut writer = self.lock();
        writer.clear();
        writer.insert_all(newest);
        Ok(Loaded { loaded: writer.history.len(), dropped: decoded.ids.len() - keep })
    }
}

/// A fresh name beside `path` for the file being written.
fn temporary_path(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let nonce = std::hash::BuildHasher::hash_one(&std::hash::RandomState::new(), path);
    path.with_file_name(format!(".{name}.{}-{nonce:016x}.tmp", std::process::id()))
}

fn write_snapshot(path: &Path, domain: u64, ids: &[u64]) -> std::io::Result<()> {
    let file = File::options().write(true).create_new(true).open(path)?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let mut checksum = Checksum::default();
    let mut put = |out: &mut BufWriter<File>, bytes: &[u8]| {
        checksum.update(bytes);
        out.write_all(bytes)
    };
    put(&mut out, &Header { domain, count: ids.len() as u64 }.encode())?;
    let mut chunk = Vec::with_capacity(64 << 10);
    for ids in ids.chunks(8 << 10) {
        chunk.clear();
        ids.iter().for_each(|id| chunk.extend_from_slice(&id.to_le_bytes()));
        put(&mut out, &chunk)?;
    }
    out.write_all(&checksum.finish())?;
    let file = out.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()
}

/// Makes a rename in `path`'s folder durable.
fn sync_parent(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        File::open(parent)?.sync_all()?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// Reads until `buf` is full or the input ends; returns how much was read.
fn read_up_to(reader: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}
