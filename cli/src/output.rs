//! Output files, checked before any work starts: a replay of a week of traffic must not end in
//! "cannot write". Each is written to a temporary file beside it, created at the start (which
//! proves the directory writable), and renamed over the target only once complete, so a failed
//! run leaves an existing file as it was.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use kvreuse::trace::same_file;
use tempfile::NamedTempFile;

/// An output file being prepared. See the [module docs](self).
#[derive(Debug)]
pub(crate) struct OutputFile {
    path: PathBuf,
    temp: NamedTempFile,
}

impl OutputFile {
    /// Checks that `path` (given with `flag`) can be written and is none of the `inputs`.
    pub(crate) fn prepare(path: &Path, flag: &str, inputs: &[PathBuf]) -> Result<OutputFile> {
        if let Some(input) = inputs.iter().find(|input| same_file(path, input)) {
            bail!(
                "{flag} {} is the input trace {}; give another file",
                path.display(),
                input.display()
            );
        }
        if path.is_dir() {
            bail!("{flag} {} is a directory; give a file name", path.display());
        }
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        let temp =
            tempfile::Builder::new().prefix(".kvreuse-").tempfile_in(dir).with_context(|| {
                format!("{flag} {}: cannot write in {}", path.display(), dir.display())
            })?;
        Ok(OutputFile { path: path.to_path_buf(), temp })
    }

    /// Where to write the contents.
    pub(crate) fn temp_path(&self) -> &Path {
        self.temp.path()
    }

    /// Puts the written file in place.
    pub(crate) fn commit(self) -> Result<()> {
        let path = self.path;
        self.temp.persist(&path).with_context(|| format!("cannot write {}", path.display()))?;
        Ok(())
    }
}
