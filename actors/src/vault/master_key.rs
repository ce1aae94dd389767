//! The master keys: the one that wraps data keys now, and earlier ones that may still have
//! wrapped some (until `rotate-keys` re-wraps them). A master key is derived with HKDF-SHA-256
//! from a configured secret of at least [`MIN_SECRET_CHARS`] characters, so a key file or an
//! environment variable may hold any long random text. Its id is a hash of the derived key,
//! stored beside each wrapped data key so that unwrapping picks the right master key, or
//! says which one is missing.

use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};

/// The shortest secret a master key is derived from.
pub const MIN_SECRET_CHARS: usize = 32;

/// One master key.
pub struct MasterKey {
    id: String,
    key: LessSafeKey,
}

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MasterKey").field("id", &self.id).finish()
    }
}

impl MasterKey {
    /// The key derived from `secret`, or why the secret is not fit.
    pub fn derive(secret: &str) -> Result<MasterKey, String> {
        let secret = secret.trim();
        if secret.chars().count() < MIN_SECRET_CHARS {
            return Err(format!(
                "a master key must be at least {MIN_SECRET_CHARS} characters of random text"
            ));
        }
        let prk = ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, b"butler-memory master key v1")
            .extract(secret.as_bytes());
        let mut raw = [0u8; 32];
        prk.expand(&[b"aes-256-gcm"], &AES_256_GCM)
            .and_then(|okm| okm.fill(&mut raw))
            .map_err(|_| "the master key cannot be derived".to_owned())?;
        let digest = ring::digest::digest(
            &ring::digest::SHA256,
            &[b"butler-memory master key id\x1f".as_slice(), &raw].concat(),
        );
        let id = crate::domain::text::hex(&digest.as_ref()[..8]);
        let key = LessSafeKey::new(
            UnboundKey::new(&AES_256_GCM, &raw).map_err(|_| "the master key is unusable")?,
        );
        Ok(MasterKey { id, key })
    }

    /// Which key this is, as stored with what it wrapped.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// `data_key` (32 bytes) wrapped for `(tenant, version)`: nonce, ciphertext, tag.
    pub fn wrap(&self, tenant_id: &str, version: i32, data_key: &[u8]) -> Vec<u8> {
        seal(&self.key, &wrap_aad(tenant_id, version), data_key)
    }

    /// The data key `wrapped` holds for `(tenant, version)`, or `None` when this key did not
    /// wrap it (or it was altered).
    pub fn unwrap(&self, tenant_id: &str, version: i32, wrapped: &[u8]) -> Option<Vec<u8>> {
        open(&self.key, &wrap_aad(tenant_id, version), wrapped)
    }
}

/// What binds a wrapped data key to its tenant and version: a wrapped key copied to another
/// row does not unwrap.
fn wrap_aad(tenant_id: &str, version: i32) -> Vec<u8> {
    format!("butler-memory data key\x1f{tenant_id}\x1f{version}").into_bytes()
}

/// AES-256-GCM with a random nonce: `nonce || ciphertext || tag`. Random 96-bit nonces are
/// safe for far more messages than one data key seals (rotation starts a new key).
pub(super) fn seal(key: &LessSafeKey, aad: &[u8], plaintext: &[u8]) -> Vec<u8> {
    let mut nonce = [0u8; NONCE_LEN];
    SystemRandom::new()
        .fill(&mut nonce)
        .expect("the operating system's random source works");
    let mut sealed = plaintext.to_vec();
    key.seal_in_place_append_tag(
        Nonce::assume_unique_for_key(nonce),
        Aad::from(aad),
        &mut sealed,
    )
    .expect("AES-GCM seals any message of this size");
    [nonce.as_slice(), &sealed].concat()
}

/// The plaintext of [`seal`]'s output, or `None` when it does not authenticate under `key`
/// and `aad`.
pub(super) fn open(key: &LessSafeKey, aad: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
    if sealed.len() < NONCE_LEN + AES_256_GCM.tag_len() {
        return None;
    }
    let (nonce, body) = sealed.split_at(NONCE_LEN);
    let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
    let mut body = body.to_vec();
    let plain = key.open_in_place(nonce, Aad::from(aad), &mut body).ok()?;
    Some(plain.to_vec())
}

/// 32 random bytes: a new data key.
pub(super) fn random_key() -> [u8; 32] {
    let mut key = [0u8; 32];
    SystemRandom::new()
        .fill(&mut key)
        .expect("the operating system's random source works");
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "a long random master secret for the tests only!!";

    #[test]
    fn a_short_secret_is_refused() {
        assert!(MasterKey::derive("short").is_err());
    }

    #[test]
    fn the_same_secret_derives_the_same_key_and_id() {
        let a = MasterKey::derive(SECRET).unwrap();
        let b = MasterKey::derive(SECRET).unwrap();
        assert_eq!(a.id(), b.id());
        let wrapped = a.wrap("t", 1, &[7u8; 32]);
        assert_eq!(b.unwrap("t", 1, &wrapped).unwrap(), vec![7u8; 32]);
    }

    #[test]
    fn a_wrapped_key_opens_only_with_its_master_tenant_and_version() {
        let master = MasterKey::derive(SECRET).unwrap();
        let other = MasterKey::derive(&SECRET.replace('!', "?")).unwrap();
        assert_ne!(master.id(), other.id());
        let wrapped = master.wrap("tenant-a", 1, &[1u8; 32]);
        assert!(other.unwrap("tenant-a", 1, &wrapped).is_none());
        assert!(master.unwrap("tenant-b", 1, &wrapped).is_none());
        assert!(master.unwrap("tenant-a", 2, &wrapped).is_none());
        let mut altered = wrapped.clone();
        *altered.last_mut().unwrap() ^= 1;
        assert!(master.unwrap("tenant-a", 1, &altered).is_none());
        assert!(master.unwrap("tenant-a", 1, &wrapped[..10]).is_none());
    }
}
