//! What differs between the two stores, as the engine sees it: the record
//! body, the private key, the policy and the key states. The traits here
//! are sealed: they cannot be named outside the crate.

use std::path::Path;

use serde::de::DeserializeOwned;

use zrtt_proto::crypto::X25519KeyPair;
use zrtt_proto::provenance::verifier_id_for;
use zrtt_proto::record::VerifierKeyBody;
use zrtt_proto::record::{key_id_for, RecordBody, RecordKind, RecordSigner, SignedRecord};
use zrtt_proto::RecordError;

use crate::verifier_store::VerifierPrivateKey;

use super::{KeyState, KeyStoreError, KeyStoreRandom, Schedule, Store};

/// The engine's side of a [`super::Kind`]: a store's policy, which says
/// what keys the store keeps and how they rotate.
pub trait Engine: Clone + core::fmt::Debug + PartialEq + Eq + DeserializeOwned + 'static {
    /// The record body (`RecordBody`, `VerifierKeyBody`).
    type Body: KeyBody;
    /// File and message names.
    const NAMES: Names;

    /// The policy file for `name`.
    fn to_file(&self, name: &str) -> String;
    /// Check the policy's rules.
    fn check(&self) -> Result<(), KeyStoreError>;
    /// The policy as a schedule.
    fn schedule(&self) -> Schedule;
    /// The status's policy line (after `policy: `), with the TTL records
    /// are served with now.
    fn summary(&self, record_ttl: u32, name: &str) -> String;
    /// The body of a new key.
    fn new_body(&self, key: NewKey<'_>) -> Self::Body;
    /// Every key's state at `now`, oldest first.
    fn states(store: &Store<Self>, now: u64) -> Vec<KeyState>;
    /// The kind's own warnings at `now` (the engine adds the shared ones).
    fn warnings(store: &Store<Self>, states: &[KeyState], now: u64) -> Vec<String>;
}

/// What a new key's body is made of.
pub struct NewKey<'a> {
    /// Its public key.
    pub(crate) public_key: [u8; 32],
    /// Start of validity.
    pub(crate) not_before: u64,
    /// End of validity.
    pub(crate) not_after: u64,
    /// The store's name.
    pub(crate) name: &'a str,
    /// The certificate that signs it.
    pub(crate) cert_der: &'a [u8],
}

/// The names a kind of store goes by in files, messages and its status.
#[derive(Clone, Copy, Debug)]
pub struct Names {
    /// The policy file in the store's directory.
    pub(crate) config_file: &'static str,
    /// What the `name` in the policy file is.
    pub(crate) name_is: &'static str,
    /// The store type's name in `Debug` output.
    pub(crate) debug_name: &'static str,
    /// What a key is called in messages ("key", "verifier key"); its
    /// store is the "… store" of the status.
    pub(crate) key: &'static str,
    /// The heading of the status's id column.
    pub(crate) id_heading: &'static str,
    /// Width of the status's state column.
    pub(crate) state_width: usize,
    /// The command an operator runs to rotate.
    pub(crate) rotate_command: &'static str,
}

impl Names {
    /// All the names, in the order of the fields.
    pub(crate) const fn new(
        config_file: &'static str,
        name_is: &'static str,
        debug_name: &'static str,
        key: &'static str,
        id_heading: &'static str,
        state_width: usize,
        rotate_command: &'static str,
    ) -> Self {
        Self {
            config_file,
            name_is,
            debug_name,
            key,
            id_heading,
            state_width,
            rotate_command,
        }
    }
}

/// A record body a store keeps: its id, public key and signing
/// certificate, and how it is signed.
pub trait KeyBody: RecordKind {
    /// The private key whose public key the body carries.
    type Private: PrivateKey;
    /// The body's id.
    fn id(&self) -> u32;
    /// The id a public key gets.
    fn id_for(public: &[u8; 32]) -> u32;
    /// The public key.
    fn public_key(&self) -> &[u8; 32];
    /// Point the body at another signing certificate.
    fn set_cert_sha256(&mut self, cert_sha256: [u8; 32]);
    /// Sign the body with a certificate key.
    fn sign_with(
        self,
        signer: &RecordSigner,
        rng: &dyn ring::rand::SecureRandom,
    ) -> Result<SignedRecord<Self>, RecordError>;
}

/// The two bodies share their field names but for the id.
macro_rules! key_body {
    ($body:ty, $id:ident, $id_for:path, $private:ty) => {
        impl KeyBody for $body {
            type Private = $private;
            fn id(&self) -> u32 {
                self.$id
            }
            fn id_for(public: &[u8; 32]) -> u32 {
                $id_for(public)
            }
            fn public_key(&self) -> &[u8; 32] {
                &self.public_key
            }
            fn set_cert_sha256(&mut self, cert_sha256: [u8; 32]) {
                self.cert_sha256 = cert_sha256;
            }
            fn sign_with(
                self,
                signer: &RecordSigner,
                rng: &dyn ring::rand::SecureRandom,
            ) -> Result<SignedRecord<Self>, RecordError> {
                self.sign(signer, rng)
            }
        }
    };
}

key_body!(RecordBody, key_id, key_id_for, X25519KeyPair);
key_body!(
    VerifierKeyBody,
    verifier_id,
    verifier_id_for,
    VerifierPrivateKey
);

/// A private key a store keeps in `keys/<id>.key` (mode 0600).
pub trait PrivateKey: Sized {
    /// A new key.
    fn generate(rng: &dyn KeyStoreRandom) -> Result<Self, KeyStoreError>;
    /// Its public key.
    fn public_key(&self) -> [u8; 32];
    /// Read a key file.
    fn read(path: &Path) -> Result<Self, KeyStoreError>;
    /// Write a key file, atomically, mode 0600.
    fn write(&self, path: &Path) -> Result<(), KeyStoreError>;
}
