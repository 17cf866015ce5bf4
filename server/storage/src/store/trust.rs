//! Whether an open after an unclean stop may skip redb's integrity check.
//!
//! The check (every page of the committed trees read against its checksum) is there for
//! what a power cut or a failing disk can do to the file. It costs a full read of the
//! file: about 4 s at ten million pending messages, most of a restart. A process that
//! was only killed (kill -9, OOM, a panic) leaves nothing of the kind: every byte it
//! wrote is in the page cache, redb's two-phase commit with the allocator state recorded
//! (`Store::begin_write`) makes its last checkpoint whole, and the log replays the rest.
//!
//! So each open leaves a token in a tmpfs (`/dev/shm`), named after the data file's
//! device and inode, holding the boot id and a fresh nonce that the open marker beside
//! the file holds too. The next open skips the check only if the token is there with the
//! same boot id and the marker's nonce: a reboot (a power cut among them) empties the
//! tmpfs and changes the boot id; a storage failure removes the token at once
//! ([`Token::revoke`], from `Watermark::fail` and from the server when it stops on a
//! failure); a copied or restored directory has another inode or another nonce. Any
//! doubt (no tmpfs, no boot id, a token that cannot be written) means the check runs,
//! as it always did.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The filesystem magic of tmpfs (`statfs(2)`).
const TMPFS_MAGIC: u64 = 0x0102_1994;
/// Where tokens are kept: a tmpfs, which a reboot empties.
const TOKEN_DIR: &str = "/dev/shm";
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// One data file's token (see the module's doc).
#[derive(Debug, Clone)]
pub struct Token {
    path: PathBuf,
}

impl Token {
    /// The token of the data file `file`, if tokens can be kept on this machine.
    pub fn of(file: &Path) -> Option<Self> {
        Self::in_dir(Path::new(TOKEN_DIR), file)
    }

    fn in_dir(dir: &Path, file: &Path) -> Option<Self> {
        let fs = rustix::fs::statfs(dir).ok()?;
        #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
        let magic = fs.f_type as u64;
        if magic != TMPFS_MAGIC {
            return None;
        }
        let meta = std::fs::metadata(file).ok()?;
        use std::os::unix::fs::MetadataExt;
        Some(Self {
            path: dir.join(format!("hookd-{:x}-{:x}.trust", meta.dev(), meta.ino())),
        })
    }

    /// Whether the last open of this file left this token with `nonce`, in this boot, and
    /// nothing revoked it since.
    pub fn holds(&self, nonce: &str) -> bool {
        let (Ok(token), Some(boot)) = (std::fs::read_to_string(&self.path), boot_id()) else {
            return false;
        };
        let mut lines = token.lines();
        lines.next() == Some(boot.as_str()) && lines.next() == Some(nonce) && !nonce.is_empty()
    }

    /// Leaves the token for this open, after the marker holds `nonce` durably.
    pub fn grant(&self, nonce: &str) {
        let Some(boot) = boot_id() else { return };
        let written = (|| {
            let mut f = std::fs::File::create(&self.path)?;
            f.write_all(format!("{boot}\n{nonce}\n").as_bytes())
        })();
        if let Err(e) = written {
            tracing::debug!(error = %e, token = %self.path.display(), "cannot leave the trust token; the next unclean open checks integrity");
            self.revoke();
        }
    }

    /// The file may not be what redb last wrote: the next open checks its integrity.
    pub fn revoke(&self) {
        match std::fs::remove_file(&self.path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(error = %e, token = %self.path.display(), "cannot remove the trust token")
            }
        }
    }
}

fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string(BOOT_ID).ok()?;
    let id = id.trim();
    (!id.is_empty()).then(|| id.to_owned())
}

/// A fresh nonce for an open.
pub fn nonce() -> String {
    format!("{:032x}", rand::random::<u128>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_holds_only_its_own_nonce_until_revoked() {
        let Some(token_dir) = Some(Path::new(TOKEN_DIR)).filter(|d| {
            rustix::fs::statfs(*d).is_ok_and(|s| {
                #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
                let magic = s.f_type as u64;
                magic == TMPFS_MAGIC
            })
        }) else {
            panic!("{TOKEN_DIR} is not a tmpfs on this machine: the trust token is never kept");
        };
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("hookd.redb");
        std::fs::write(&file, b"x").unwrap();
        let token = Token::in_dir(token_dir, &file).unwrap();
        let nonce = nonce();
        assert!(!token.holds(&nonce), "no token before a grant");
        token.grant(&nonce);
        assert!(token.holds(&nonce));
        assert!(!token.holds(&super::nonce()), "another open's nonce");
        assert!(!token.holds(""));
        token.revoke();
        assert!(!token.holds(&nonce), "revoked");
        token.revoke();
    }

    #[test]
    fn a_token_of_another_boot_does_not_hold() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("hookd.redb");
        std::fs::write(&file, b"x").unwrap();
        let token = Token::of(&file).expect("tokens are kept on this machine");
        let nonce = nonce();
        std::fs::write(&token.path, format!("{}\n{nonce}\n", super::nonce())).unwrap();
        assert!(!token.holds(&nonce), "another boot id");
        token.grant(&nonce);
        assert!(token.holds(&nonce));
        token.revoke();
    }

    #[test]
    fn no_token_outside_a_tmpfs() {
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let on_disk = rustix::fs::statfs(dir.path()).unwrap();
        #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
        let magic = on_disk.f_type as u64;
        assert_ne!(
            magic, TMPFS_MAGIC,
            "the source tree is on a tmpfs: cannot test"
        );
        let file = dir.path().join("hookd.redb");
        std::fs::write(&file, b"x").unwrap();
        assert!(Token::in_dir(dir.path(), &file).is_none());
    }
}
