//! Mutual challenge–response authentication with a shared secret, in the
//! way of Slurm's MUNGE key: every node of a job reads the same file of
//! random bytes (usually from a home directory shared across the cluster),
//! and a client and a server each prove to the other that they hold it.
//!
//! ```text
//! client                                   server
//!   Auth { cn }                  ──►        (cn: 32 fresh random bytes)
//!                                ◄──  AuthChallenge { sn, HMAC(K, "farmem server" ‖ cn ‖ sn) }
//!   check the server's proof
//!   AuthProof { HMAC(K, "farmem client" ‖ cn ‖ sn) } ──►
//!                                ◄──  AuthOk, or Error(AuthFailed) and close
//! ```
//!
//! HMAC-SHA256 (RustCrypto's `hmac` and `sha2`). The secret never crosses
//! the wire; each side's nonce is fresh, so a recorded handshake is useless
//! on a new connection (the server's new `sn` changes the proof it wants);
//! the two proofs carry different labels, so one side's proof can never be
//! reflected back as the other's; proofs are compared in constant time.
//!
//! Both nonces also give the connection its own session key, under which
//! every later frame is sealed ([`crate::seal`]).
//!
//! This authenticates the peers. It does not encrypt: page data crosses the
//! network in the clear (see docs/configuration.md).

use crate::seal::SessionKey;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// The handshake's sizes, which the frame layout checks too.
pub use crate::{MAC_LEN, NONCE_LEN};
/// Bytes `farmem secret init` writes.
pub const SECRET_LEN: usize = 32;
/// The shortest secret accepted: 128 bits.
pub const MIN_SECRET_LEN: usize = 16;
/// The longest secret file read.
pub const MAX_SECRET_LEN: usize = 4096;

/// The default secret file, under the user's home directory (shared across
/// a cluster's nodes, like `~/.ssh`): `$HOME/.config/farmem/secret`.
pub fn default_path(home: &Path) -> PathBuf {
    home.join(".config/farmem/secret")
}

/// The secret a process uses: the file named explicitly (`--secret-file`,
/// `FARMEM_SECRET_FILE`), which must then be usable; else the default file
/// under `home` if it exists; else none (no authentication).
pub fn find(explicit: Option<&Path>, home: Option<&Path>) -> Result<Option<Secret>, SecretError> {
    if let Some(p) = explicit {
        return Secret::load(p).map(Some);
    }
    match home.map(default_path) {
        Some(p) if p.exists() => Secret::load(&p).map(Some),
        _ => Ok(None),
    }
}

/// Why a secret file cannot be used.
#[derive(Debug, Error)]
pub enum SecretError {
    #[error("cannot read the secret file {path}: {source} (make one with `farmem secret init`)")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the secret file {path} is readable by other users (mode {mode:o}); run `chmod 600 {path}`"
    )]
    Exposed { path: PathBuf, mode: u32 },
    #[error("the secret file {path} holds {len} bytes; it needs {MIN_SECRET_LEN} to {MAX_SECRET_LEN} (make a new one with `farmem secret init --force`)")]
    Length { path: PathBuf, len: usize },
    #[error("{path} is not a regular file")]
    NotFile { path: PathBuf },
    #[error("{path} already exists; pass --force to replace it (every node and client must then get the new file)")]
    Exists { path: PathBuf },
    #[error("cannot write the secret file {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A shared secret, read from its file. Its bytes are never printed.
pub struct Secret {
    key: Vec<u8>,
    path: PathBuf,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({})", self.path.display())
    }
}

type HmacSha256 = Hmac<Sha256>;

const SERVER_LABEL: &[u8] = b"farmem v1 server proof";
const CLIENT_LABEL: &[u8] = b"farmem v1 client proof";
const SESSION_LABEL: &[u8] = b"farmem v1 session key";

impl Secret {
    /// Read a secret file: a regular file of 16 to 4096 bytes that no other
    /// user may read (mode 0600 or stricter).
    pub fn load(path: &Path) -> Result<Secret, SecretError> {
        let read = |source| SecretError::Read {
            path: path.to_path_buf(),
            source,
        };
        let mut f = File::open(path).map_err(read)?;
        let meta = f.metadata().map_err(read)?;
        if !meta.is_file() {
            return Err(SecretError::NotFile {
                path: path.to_path_buf(),
            });
        }
        let mode = meta.mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(SecretError::Exposed {
                path: path.to_path_buf(),
                mode,
            });
        }
        let mut key = Vec::new();
        Read::by_ref(&mut f)
            .take(MAX_SECRET_LEN as u64 + 1)
            .read_to_end(&mut key)
            .map_err(read)?;
        Secret::from_bytes(key, path)
    }

    /// A secret from bytes already in hand (tests, and `load`).
    pub fn from_bytes(key: Vec<u8>, path: &Path) -> Result<Secret, SecretError> {
        if !(MIN_SECRET_LEN..=MAX_SECRET_LEN).contains(&key.len()) {
            return Err(SecretError::Length {
                path: path.to_path_buf(),
                len: key.len(),
            });
        }
        Ok(Secret {
            key,
            path: path.to_path_buf(),
        })
    }

    /// The file this secret came from, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn mac(&self, label: &[u8], cn: &[u8; NONCE_LEN], sn: &[u8; NONCE_LEN]) -> HmacSha256 {
        let mut m = HmacSha256::new_from_slice(&self.key).expect("HMAC takes a key of any length");
        m.update(label);
        m.update(cn);
        m.update(sn);
        m
    }

    /// A key of its own for `label`, derived from the secret
    /// (HMAC-SHA256(secret, "farmem derive\0" ‖ label)): a purpose-bound
    /// value no handshake message can equal, since every handshake MAC
    /// starts with another label.
    pub fn derive(&self, label: &[u8]) -> [u8; MAC_LEN] {
        let mut m = HmacSha256::new_from_slice(&self.key).expect("HMAC takes a key of any length");
        m.update(b"farmem derive\0");
        m.update(label);
        m.finalize().into_bytes().into()
    }

    /// The key that seals the frames of the connection whose handshake
    /// used nonces `cn` and `sn` (see [`crate::seal`]): a fourth label, so
    /// it equals no proof and no derived key.
    pub fn session_key(&self, cn: &[u8; NONCE_LEN], sn: &[u8; NONCE_LEN]) -> SessionKey {
        SessionKey::from_bytes(
            self.mac(SESSION_LABEL, cn, sn)
                .finalize()
                .into_bytes()
                .into(),
        )
    }

    /// The server's proof for nonces `cn` (client's) and `sn` (server's).
    pub fn server_proof(&self, cn: &[u8; NONCE_LEN], sn: &[u8; NONCE_LEN]) -> [u8; MAC_LEN] {
        self.mac(SERVER_LABEL, cn, sn)
            .finalize()
            .into_bytes()
            .into()
    }

    /// The client's proof for the same nonces.
    pub fn client_proof(&self, cn: &[u8; NONCE_LEN], sn: &[u8; NONCE_LEN]) -> [u8; MAC_LEN] {
        self.mac(CLIENT_LABEL, cn, sn)
            .finalize()
            .into_bytes()
            .into()
    }

    /// Check a server's proof, in constant time.
    pub fn verify_server(&self, cn: &[u8; NONCE_LEN], sn: &[u8; NONCE_LEN], proof: &[u8]) -> bool {
        self.mac(SERVER_LABEL, cn, sn).verify_slice(proof).is_ok()
    }

    /// Check a client's proof, in constant time.
    pub fn verify_client(&self, cn: &[u8; NONCE_LEN], sn: &[u8; NONCE_LEN], proof: &[u8]) -> bool {
        self.mac(CLIENT_LABEL, cn, sn).verify_slice(proof).is_ok()
    }
}

/// Write a new secret file holding `bytes` (random, from the caller), mode
/// 0600, creating its directory (mode 0700). An existing file is replaced
/// only with `force`.
pub fn write_secret(path: &Path, bytes: &[u8], force: bool) -> Result<(), SecretError> {
    let write = |source| SecretError::Write {
        path: path.to_path_buf(),
        source,
    };
    if bytes.len() < MIN_SECRET_LEN {
        return Err(SecretError::Length {
            path: path.to_path_buf(),
            len: bytes.len(),
        });
    }
    if path.exists() && !force {
        return Err(SecretError::Exists {
            path: path.to_path_buf(),
        });
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::create_dir_all(dir).map_err(write)?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(write)?;
        }
    }
    // Write a fresh file beside it and rename it into place: a reader never
    // sees half a secret, and the new file is 0600 from its creation.
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(write)?;
    let r = f.write_all(bytes).and_then(|()| f.sync_all());
    drop(f);
    if let Err(e) = r.and_then(|()| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(write(e));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(b: u8) -> Secret {
        Secret::from_bytes(vec![b; 32], Path::new("test")).unwrap()
    }

    #[test]
    fn proofs_verify_only_with_the_same_secret_and_nonces() {
        let (k, other) = (secret(1), secret(2));
        let (cn, sn) = ([3u8; NONCE_LEN], [4u8; NONCE_LEN]);
        let sp = k.server_proof(&cn, &sn);
        assert!(k.verify_server(&cn, &sn, &sp));
        assert!(!other.verify_server(&cn, &sn, &sp), "another secret");
        assert!(
            !k.verify_server(&cn, &[5; NONCE_LEN], &sp),
            "a fresh server nonce"
        );
        assert!(!k.verify_server(&cn, &sn, &sp[..31]), "a truncated proof");
        // A server's proof is not a client's: no reflection.
        assert!(!k.verify_client(&cn, &sn, &sp));
        let cp = k.client_proof(&cn, &sn);
        assert!(k.verify_client(&cn, &sn, &cp));
        assert_ne!(cp, sp);
    }

    #[test]
    fn secret_files_are_private_and_long_enough() {
        let dir = std::env::temp_dir().join(format!("farmem-secret-{}", std::process::id()));
        let p = dir.join("sub/secret");
        write_secret(&p, &[7; SECRET_LEN], false).unwrap();
        let meta = std::fs::metadata(&p).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600);
        assert_eq!(
            std::fs::metadata(p.parent().unwrap()).unwrap().mode() & 0o777,
            0o700
        );
        assert!(Secret::load(&p).is_ok());
        let e = write_secret(&p, &[8; SECRET_LEN], false).unwrap_err();
        assert!(e.to_string().contains("--force"), "{e}");
        write_secret(&p, &[8; SECRET_LEN], true).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = Secret::load(&p).unwrap_err().to_string();
        assert!(e.contains("chmod 600"), "{e}");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&p, b"short").unwrap();
        let e = Secret::load(&p).unwrap_err().to_string();
        assert!(e.contains("5 bytes"), "{e}");
        let e = Secret::load(&dir.join("none")).unwrap_err().to_string();
        assert!(e.contains("farmem secret init"), "{e}");
        assert!(format!("{:?}", secret(9)).starts_with("Secret("));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
