//! How two node servers prove to each other that they hold the same per-job secret
//! without sending it ([`cohort_proto::auth`]), in the fabric's handshake:
//!
//! 1. The connector's [`Hello`](crate::wire::Hello) carries its nonce (and no secret).
//! 2. The acceptor answers with a [`Challenge`]: its own nonce and its proof over the
//!    hello and that nonce.
//! 3. The connector checks that proof (a peer that does not know the secret cannot
//!    make it) and sends its own over the same.
//! 4. The acceptor checks it and accepts (or refuses) as before.

pub use cohort_proto::auth::{nonce, Nonce, Proof, NONCE_LEN, PROOF_LEN};
use cohort_proto::auth::{prove, proves};

use crate::NodeId;

/// The acceptor's answer to an acceptable hello.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Challenge {
    /// The acceptor's node id.
    pub node: NodeId,
    pub nonce: Nonce,
    pub proof: Proof,
}

const ACCEPTOR: &[u8] = b"cohort fabric acceptor v1";
const CONNECTOR: &[u8] = b"cohort fabric connector v1";

/// The acceptor's proof for `hello` (its encoded bytes), made by node `node` with
/// `nonce`.
pub fn acceptor_proof(secret: &[u8], hello: &[u8], node: NodeId, nonce: &Nonce) -> Proof {
    prove(secret, ACCEPTOR, &[hello, &node.to_le_bytes(), nonce])
}

/// The connector's proof, answering `challenge` to `hello`.
pub fn connector_proof(secret: &[u8], hello: &[u8], challenge: &Challenge) -> Proof {
    let node = challenge.node.to_le_bytes();
    prove(secret, CONNECTOR, &[hello, &node, &challenge.nonce])
}

/// Whether `challenge`'s proof shows that the acceptor holds `secret`.
pub fn acceptor_holds(secret: &[u8], hello: &[u8], challenge: &Challenge) -> bool {
    let node = challenge.node.to_le_bytes();
    let parts: [&[u8]; 3] = [hello, &node, &challenge.nonce];
    proves(secret, ACCEPTOR, &parts, &challenge.proof)
}

/// Whether `proof` shows that the connector holds `secret`.
pub fn connector_holds(secret: &[u8], hello: &[u8], challenge: &Challenge, proof: &Proof) -> bool {
    let node = challenge.node.to_le_bytes();
    proves(secret, CONNECTOR, &[hello, &node, &challenge.nonce], proof)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
