//! The seal secret a store keeps and a sealed snapshot is authenticated with.

use std::fmt;

/// Bytes of a [`SealSecret`].
pub const SEAL_SECRET_LEN: usize = 32;

/// The secret a store keeps as its seal ([`Store::SEALS`](crate::guard::Store::SEALS)): 32 random
/// bytes drawn from the operating system's generator at each
/// [`seal`](crate::guard::CacheGuard::seal).
///
/// The sealed snapshot file carries only the secret's public [`id`](Self::id) and a MAC of the
/// whole file keyed by the secret (keyed BLAKE3); a restart trusts the file only if the MAC
/// checks out under the secret the store still holds. Whoever can read the store's seal can
/// forge a file, so keep the seal as private as the rows. `Debug` shows the id, never the
/// bytes.
///
/// A store adapter keeps the bytes ([`as_bytes`](Self::as_bytes)) and reads them back with
/// [`from_slice`](Self::from_slice), which refuses anything but 32 bytes (a seal written by
/// an older build, say): such a seal reads as none, so no file is trusted with it.
///
/// # Examples
///
/// ```
/// use cuckoo_guard::guard::SealSecret;
///
/// let secret = SealSecret::random()?;
/// let stored = secret.as_bytes().to_vec();
/// let read = SealSecret::from_slice(&stored).expect("32 bytes");
/// assert_eq!(read.id(), secret.id());
/// assert!(SealSecret::from_slice(&42i64.to_le_bytes()).is_none());
/// assert!(format!("{secret:?}").starts_with("SealSecret { id: "));
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone)]
pub struct SealSecret([u8; SEAL_SECRET_LEN]);

impl SealSecret {
    /// A new secret from the operating system's random number generator.
    ///
    /// # Errors
    ///
    /// The generator failed (no entropy source available).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::SealSecret;
    ///
    /// let (a, b) = (SealSecret::random()?, SealSecret::random()?);
    /// assert_ne!(a.id(), b.id());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn random() -> std::io::Result<Self> {
        let mut bytes = [0u8; SEAL_SECRET_LEN];
        getrandom::fill(&mut bytes).map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(SealSecret(bytes))
    }

    /// The secret of these bytes (a store adapter's stored seal, say).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::SealSecret;
    ///
    /// let secret = SealSecret::from_bytes([7; 32]);
    /// assert_eq!(secret.as_bytes(), &[7; 32]);
    /// ```
    pub fn from_bytes(bytes: [u8; SEAL_SECRET_LEN]) -> Self {
        SealSecret(bytes)
    }

    /// The secret stored as `bytes`, or `None` if they are not 32 bytes (a seal in another
    /// format, which no file is trusted with).
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::SealSecret;
    ///
    /// assert!(SealSecret::from_slice(&[1; 32]).is_some());
    /// assert!(SealSecret::from_slice(&[1; 8]).is_none());
    /// ```
    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(SealSecret)
    }

    /// The secret's bytes, for a store adapter to keep.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::SealSecret;
    ///
    /// assert_eq!(SealSecret::from_bytes([1; 32]).as_bytes().len(), 32);
    /// ```
    pub fn as_bytes(&self) -> &[u8; SEAL_SECRET_LEN] {
        &self.0
    }

    /// The secret's public id: the first 8 bytes (little-endian) of its unkeyed BLAKE3 hash,
    /// never 0. A sealed snapshot carries it in its header, to tell which seal the file was
    /// written under ([`Restart::OtherSeal`](crate::guard::Restart::OtherSeal)); it proves nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// use cuckoo_guard::guard::SealSecret;
    ///
    /// assert_ne!(SealSecret::from_bytes([0; 32]).id(), 0);
    /// ```
    pub fn id(&self) -> u64 {
        let hash = blake3::hash(&self.0);
        let first: [u8; 8] = hash.as_bytes()[..8].try_into().expect("8 bytes");
        // 0 is "unsealed" in a snapshot's header.
        u64::from_le_bytes(first).max(1)
    }
}

impl fmt::Debug for SealSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SealSecret")
            .field("id", &format_args!("{:#018x}", self.id()))
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(cuckoo_loom)))]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_the_id_not_the_bytes() {
        let secret = SealSecret::from_bytes([0xAB; 32]);
        let shown = format!("{secret:?}");
        assert!(shown.contains(&format!("{:#018x}", secret.id())), "{shown}");
        assert!(!shown.to_lowercase().contains("abab"), "{shown}");
        assert!(!shown.contains("171"), "{shown}");
    }

    #[test]
    fn random_secrets_differ() {
        let a = SealSecret::random().expect("OS generator");
        let b = SealSecret::random().expect("OS generator");
        assert_ne!(a.as_bytes(), b.as_bytes());
    }
}
