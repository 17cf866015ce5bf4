//! File-system helpers shared by the log (`wal`) and the store (`store`): a private
//! directory, and a file created whole or not at all. Below both, so neither imports the
//! other for them.

use std::path::Path;

/// Makes `dir` (and missing parents) readable by hookd's user alone: the directory 0700
/// and every file in it 0600, also when an older hookd or an operator made them wider. The
/// files hold payloads, headers and (unless sealed) signing secrets.
pub(crate) fn private_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let private = |path: &Path, mode: u32| -> std::io::Result<()> {
            let now = std::fs::metadata(path)?.permissions().mode() & 0o777;
            if now != mode {
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
            }
            Ok(())
        };
        private(dir, 0o700)?;
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                private(&entry.path(), 0o600)?;
            }
        }
        Ok(())
    }
    #[cfg(not(unix))]
    {
        std::fs::create_dir_all(dir)
    }
}

/// Creates the file at `path` so that a crash at any moment leaves either no file or a
/// complete one: `make` writes it under a temporary name in `dir` (a leftover from a crash
/// during an earlier creation is removed first), then it is made 0600, synced, and renamed
/// into place, and the rename is made durable by syncing the directory.
pub fn create_atomically<E: From<std::io::Error>>(
    dir: &Path,
    path: &Path,
    make: impl FnOnce(&Path) -> Result<(), E>,
) -> Result<(), E> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".to_owned());
    let temp = dir.join(format!("{name}.creating"));
    if temp.exists() {
        std::fs::remove_file(&temp)?;
    }
    make(&temp)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o600))?;
    }
    std::fs::File::open(&temp)?.sync_all()?;
    std::fs::rename(&temp, path)?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}
