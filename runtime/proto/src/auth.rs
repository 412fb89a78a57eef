//! Proving that two parties hold the same per-job secret without sending it: each
//! side sends the other a fresh nonce and answers the other's with a proof, the
//! HMAC-SHA256 of the exchange under the secret and a label naming its role. Node
//! servers prove it to each other this way on the fabric (`cohort_transport::auth`),
//! and a node server and the launcher on the control channel ([`crate::control`]).
//!
//! Both nonces enter both proofs, so nothing recorded from an earlier exchange
//! answers a new one; the labels keep a proof from being reflected to the side that
//! made it. Someone watching the network learns neither the secret nor anything that
//! lets them take part.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Bytes of a nonce.
pub const NONCE_LEN: usize = 16;
/// Bytes of a proof (an HMAC-SHA256 tag).
pub const PROOF_LEN: usize = 32;

pub type Nonce = [u8; NONCE_LEN];
pub type Proof = [u8; PROOF_LEN];

fn tag(secret: &[u8], label: &[u8], parts: &[&[u8]]) -> Hmac<Sha256> {
    // HMAC takes keys of any length (longer ones are hashed first).
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC accepts any key length");
    // Each part with its length, so that no two different sequences read alike.
    for part in std::iter::once(&label).chain(parts) {
        mac.update(&(part.len() as u32).to_le_bytes());
        mac.update(part);
    }
    mac
}

/// The proof, under `secret`, of the exchange `parts` by the side `label` names.
pub fn prove(secret: &[u8], label: &[u8], parts: &[&[u8]]) -> Proof {
    tag(secret, label, parts).finalize().into_bytes().into()
}

/// Whether `proof` is that proof (compared in constant time).
pub fn proves(secret: &[u8], label: &[u8], parts: &[&[u8]], proof: &[u8]) -> bool {
    tag(secret, label, parts).verify_slice(proof).is_ok()
}

/// A fresh nonce from the kernel's random source.
pub fn nonce() -> std::io::Result<Nonce> {
    let bytes = crate::env::random_bytes(NONCE_LEN)?;
    Ok(bytes.try_into().expect("NONCE_LEN bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The primitive is HMAC-SHA256: RFC 4231's test case 2.
    #[test]
    fn hmac_sha256_matches_rfc_4231() {
        let mut mac = Hmac::<Sha256>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        let hex: String = mac
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn a_proof_fits_only_its_secret_label_and_parts() {
        let p = prove(b"secret", b"side a", &[b"x", b"yz"]);
        assert!(proves(b"secret", b"side a", &[b"x", b"yz"], &p));
        assert!(!proves(b"other", b"side a", &[b"x", b"yz"], &p));
        assert!(!proves(b"secret", b"side b", &[b"x", b"yz"], &p));
        // Lengths are part of the input: moving a byte across parts changes the proof.
        assert!(!proves(b"secret", b"side a", &[b"xy", b"z"], &p));
        assert!(!proves(b"secret", b"side a", &[b"x", b"yz"], &p[..31]));
    }

    #[test]
    fn nonces_are_fresh() {
        assert_ne!(nonce().unwrap(), nonce().unwrap());
    }
}
