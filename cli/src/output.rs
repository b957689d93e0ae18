//! Output files, checked before any work starts: a replay of a week of traffic must not end in
//! "cannot write". Each is written to a temporary file beside it, created at the start (which
//! proves the directory writable), and renamed over the target only once complete, so a failed
//! run leaves an existing file as it was. The file gets the permissions a plainly written file
//! would: an existing file's own, or those the umask leaves of `rw-rw-rw-` (not the temporary
//! file's `rw-------`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use kvreuse::trace::{Source, same_file};
use tempfile::NamedTempFile;

/// An output file being prepared. See the [module docs](self).
#[derive(Debug)]
pub(crate) struct OutputFile {
    path: PathBuf,
    temp: NamedTempFile,
}

impl OutputFile {
    /// Checks that `path` (given with `flag`) can be written and is none of the `inputs` (nor a
    /// file an input directory holds).
    pub(crate) fn prepare(path: &Path, flag: &str, inputs: &[PathBuf]) -> Result<OutputFile> {
        // An input that cannot be listed is reported when the trace is opened.
        let sources = Source::from_args(inputs).unwrap_or_default();
        let files = sources.iter().filter_map(|source| match source {
            Source::Path(file) => Some(file),
            _ => None,
        });
        if let Some(input) = files.into_iter().find(|input| same_file(path, input)) {
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
        let mut builder = tempfile::Builder::new();
        builder.prefix(".kvreuse-");
        #[cfg(unix)]
        builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
        let temp = builder.tempfile_in(dir).with_context(|| {
            format!("{flag} {}: cannot write in {}", path.display(), dir.display())
        })?;
        if let Ok(existing) = std::fs::metadata(path) {
            temp.as_file().set_permissions(existing.permissions()).with_context(|| {
                format!("{flag} {}: cannot give the new file its permissions", path.display())
            })?;
        }
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
