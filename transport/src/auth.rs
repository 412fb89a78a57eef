//! How two node servers prove to each other that they hold the same per-job secret
//! without sending it: a mutual challenge-response with HMAC-SHA256, keyed by the
//! secret, over fresh nonces from both sides.
//!
//! 1. The connector's [`Hello`](crate::wire::Hello) carries its nonce (and no secret).
//! 2. The acceptor answers with a [`Challenge`]: its own nonce and its proof, the MAC
//!    of the hello and that nonce under the acceptor's label.
//! 3. The connector checks that proof (a peer that does not know the secret cannot
//!    make it) and sends its own, the MAC of the same under the connector's label.
//! 4. The acceptor checks it and accepts (or refuses) as before.
//!
//! Both nonces enter both proofs, so nothing recorded from an earlier connection
//! answers a new one; the labels keep a proof from being reflected to the side that
//! made it. Someone watching the network learns neither the secret nor anything that
//! lets them join.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::NodeId;

/// Bytes of a nonce.
pub const NONCE_LEN: usize = 16;
/// Bytes of a proof (an HMAC-SHA256 tag).
pub const PROOF_LEN: usize = 32;

/// The acceptor's answer to an acceptable hello.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Challenge {
    /// The acceptor's node id.
    pub node: NodeId,
    pub nonce: [u8; NONCE_LEN],
    pub proof: [u8; PROOF_LEN],
}

const ACCEPTOR: &[u8] = b"cohort fabric acceptor v1";
const CONNECTOR: &[u8] = b"cohort fabric connector v1";

fn tag(secret: &[u8], label: &[u8], hello: &[u8], node: NodeId, nonce: &[u8]) -> Hmac<Sha256> {
    // HMAC takes keys of any length (longer ones are hashed first).
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC accepts any key length");
    for part in [label, hello, &node.to_le_bytes(), nonce] {
        mac.update(&(part.len() as u32).to_le_bytes());
        mac.update(part);
    }
    mac
}

/// The acceptor's proof for `hello` (its encoded bytes), made by node `node` with
/// `nonce`.
pub fn acceptor_proof(secret: &[u8], hello: &[u8], node: NodeId, nonce: &[u8]) -> [u8; PROOF_LEN] {
    tag(secret, ACCEPTOR, hello, node, nonce)
        .finalize()
        .into_bytes()
        .into()
}

/// The connector's proof, answering `challenge` to `hello`.
pub fn connector_proof(secret: &[u8], hello: &[u8], challenge: &Challenge) -> [u8; PROOF_LEN] {
    tag(secret, CONNECTOR, hello, challenge.node, &challenge.nonce)
        .finalize()
        .into_bytes()
        .into()
}

/// Whether `challenge`'s proof shows that the acceptor holds `secret` (compared in
/// constant time).
pub fn acceptor_holds(secret: &[u8], hello: &[u8], challenge: &Challenge) -> bool {
    tag(secret, ACCEPTOR, hello, challenge.node, &challenge.nonce)
        .verify_slice(&challenge.proof)
        .is_ok()
}

/// Whether `proof` shows that the connector holds `secret` (constant time).
pub fn connector_holds(
    secret: &[u8],
    hello: &[u8],
    challenge: &Challenge,
    proof: &[u8; PROOF_LEN],
) -> bool {
    tag(secret, CONNECTOR, hello, challenge.node, &challenge.nonce)
        .verify_slice(proof)
        .is_ok()
}

/// A fresh nonce from the kernel's random source.
pub fn nonce() -> std::io::Result<[u8; NONCE_LEN]> {
    let bytes = cohort_proto::env::random_bytes(NONCE_LEN)?;
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

    fn challenge(secret: &[u8], hello: &[u8]) -> Challenge {
        let nonce = [7u8; NONCE_LEN];
        Challenge {
            node: 3,
            nonce,
            proof: acceptor_proof(secret, hello, 3, &nonce),
        }
    }

    #[test]
    fn each_side_proves_the_secret_and_nothing_else_passes() {
        let hello = b"hello bytes with the connector's nonce";
        let c = challenge(b"job secret", hello);
        assert!(acceptor_holds(b"job secret", hello, &c));
        assert!(!acceptor_holds(b"other secret", hello, &c));
        let proof = connector_proof(b"job secret", hello, &c);
        assert!(connector_holds(b"job secret", hello, &c, &proof));
        assert!(!connector_holds(b"other secret", hello, &c, &proof));
        // A proof made for another hello, another nonce or another acceptor fails.
        assert!(!connector_holds(
            b"job secret",
            b"another hello",
            &c,
            &proof
        ));
        let renonced = Challenge {
            nonce: [8u8; NONCE_LEN],
            ..c
        };
        assert!(!connector_holds(b"job secret", hello, &renonced, &proof));
        let elsewhere = Challenge { node: 4, ..c };
        assert!(!connector_holds(b"job secret", hello, &elsewhere, &proof));
        // The acceptor's own proof, reflected back, is not a connector's proof.
        assert!(!connector_holds(b"job secret", hello, &c, &c.proof));
    }

    #[test]
    fn nonces_are_fresh() {
        assert_ne!(nonce().unwrap(), nonce().unwrap());
    }
}
