//! A site's long-term identity: an Ed25519 key pair whose private half
//! stays in the data owner's key file, and which signs the site's key of
//! every secure-aggregation session.
//!
//! The coordinator relays the session keys of a secure round; without
//! signatures, it could invent participants whose secrets it holds and
//! unmask a site's state. A site that lists its peers' identity keys
//! (`[policy] peers`) masks only with keys signed by listed peers (see
//! [`crate::site::release::secure::check_participants`]).
//!
//! The key file is a PKCS#8 `PRIVATE KEY` in PEM, as
//! `openssl genpkey -algorithm ed25519` writes it; a worker creates one on
//! first start. Public keys are written as base64 of their 32 bytes.

use std::io::Write;
use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ring::signature::{Ed25519KeyPair, KeyPair};

use crate::error::{FedError, Result};
use crate::protocol::secure::{SignedKey, signed_message};

const PEM_BEGIN: &str = "-----BEGIN PRIVATE KEY-----";
const PEM_END: &str = "-----END PRIVATE KEY-----";

/// A site's identity key pair.
pub struct SiteIdentity {
    pair: Ed25519KeyPair,
}

impl std::fmt::Debug for SiteIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SiteIdentity({})", self.public_key_text())
    }
}

impl SiteIdentity {
    /// A fresh identity and its PKCS#8 document.
    pub fn generate() -> Result<(Self, Vec<u8>)> {
        let rng = ring::rand::SystemRandom::new();
        let document = Ed25519KeyPair::generate_pkcs8(&rng)
            .map_err(|_| FedError::Internal("cannot generate an Ed25519 key".into()))?;
        let pair = Ed25519KeyPair::from_pkcs8(document.as_ref())
            .map_err(|e| FedError::Internal(format!("a generated key was rejected: {e}")))?;
        Ok((Self { pair }, document.as_ref().to_vec()))
    }

    /// The identity in a PEM key file.
    pub fn from_pem(text: &str) -> Result<Self> {
        let body: String = text
            .lines()
            .map(str::trim)
            .skip_while(|l| *l != PEM_BEGIN)
            .skip(1)
            .take_while(|l| *l != PEM_END)
            .collect();
        let document = STANDARD.decode(body.as_bytes()).map_err(|_| {
            FedError::InvalidArgument(
                "an identity key file holds one PEM `PRIVATE KEY` (PKCS#8 Ed25519)".into(),
            )
        })?;
        let pair = Ed25519KeyPair::from_pkcs8_maybe_unchecked(&document)
            .map_err(|e| FedError::InvalidArgument(format!("not an Ed25519 private key: {e}")))?;
        Ok(Self { pair })
    }

    /// The identity in `path`, created (readable by its owner only) when
    /// the file does not exist; says whether it was created.
    pub fn load_or_create(path: &Path) -> Result<(Self, bool)> {
        let cannot = |what: &str, e: std::io::Error| {
            FedError::InvalidArgument(format!(
                "cannot {what} identity key {}: {e}",
                path.display()
            ))
        };
        match std::fs::read_to_string(path) {
            Ok(text) => Ok((
                Self::from_pem(&text).map_err(|e| {
                    FedError::InvalidArgument(format!("identity key {}: {e}", path.display()))
                })?,
                false,
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let (identity, document) = Self::generate()?;
                let mut pem = format!("{PEM_BEGIN}\n");
                let encoded = STANDARD.encode(&document);
                for line in encoded.as_bytes().chunks(64) {
                    pem.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
                    pem.push('\n');
                }
                pem.push_str(PEM_END);
                pem.push('\n');
                let mut options = std::fs::OpenOptions::new();
                options.write(true).create_new(true);
                #[cfg(unix)]
                std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
                let mut file = options.open(path).map_err(|e| cannot("create", e))?;
                file.write_all(pem.as_bytes())
                    .map_err(|e| cannot("write", e))?;
                Ok((identity, true))
            }
            Err(e) => Err(cannot("read", e)),
        }
    }

    /// The public key (32 bytes).
    pub fn public_key(&self) -> [u8; 32] {
        self.pair
            .public_key()
            .as_ref()
            .try_into()
            .expect("an Ed25519 public key is 32 bytes")
    }

    /// The public key as the other sites list it in `[policy] peers`.
    pub fn public_key_text(&self) -> String {
        STANDARD.encode(self.public_key())
    }

    /// This site's signature of its key for a session.
    pub fn sign(&self, session: &[u8; 16], public_key: &[u8; 32]) -> SignedKey {
        let signature = self.pair.sign(&signed_message(session, public_key));
        SignedKey {
            identity: self.public_key(),
            signature: signature
                .as_ref()
                .try_into()
                .expect("an Ed25519 signature is 64 bytes"),
        }
    }
}

/// A peer's identity key as written in `[policy] peers` (base64 of 32 bytes).
pub fn parse_peer(text: &str) -> Result<[u8; 32]> {
    STANDARD
        .decode(text.trim().as_bytes())
        .ok()
        .and_then(|bytes| <[u8; 32]>::try_from(bytes.as_slice()).ok())
        .ok_or_else(|| {
            FedError::InvalidArgument(format!(
                "peer `{text}`: a peer is the base64 of a 32-byte Ed25519 public key, as `fedsql worker --identity-key FILE --show-identity` prints it"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_file_is_created_once_and_signs_verifiably() {
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join("site.key");
        let (made, created) = SiteIdentity::load_or_create(&path).unwrap();
        assert!(created);
        let (read, created) = SiteIdentity::load_or_create(&path).unwrap();
        assert!(!created);
        assert_eq!(made.public_key(), read.public_key());
        assert_eq!(
            parse_peer(&made.public_key_text()).unwrap(),
            made.public_key()
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "the key file is its owner's only");
        }
        let signed = read.sign(&[1; 16], &[2; 32]);
        assert!(signed.verifies(&[1; 16], &[2; 32]));
        assert!(!signed.verifies(&[3; 16], &[2; 32]), "another session");
        assert!(!signed.verifies(&[1; 16], &[4; 32]), "another key");
        assert!(parse_peer("not base64!").is_err());
        assert!(parse_peer(&STANDARD.encode([1u8; 31])).is_err());
        assert!(SiteIdentity::from_pem("garbage").is_err());
    }
}
