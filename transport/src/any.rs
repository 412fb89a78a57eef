//! Backend selection: the closed enum of fabric backends and the run-time choice
//! between them ([`FabricKind`], from a flag or the `COHORT_FABRIC` environment variable).

use std::fmt;
use std::str::FromStr;

use bytes::Bytes;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::{Fabric, FabricConfig, FabricError, FabricEvent, NodeId, TcpFabric};

/// Environment variable that forces a backend (`auto` or `tcp`).
pub const BACKEND_ENV: &str = "COHORT_FABRIC";

/// Which backend to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FabricKind {
    /// The fastest usable backend. Today that is always TCP; once the verbs backend
    /// exists, verbs when a usable RDMA device is present.
    #[default]
    Auto,
    /// TCP over tokio.
    Tcp,
}

impl FabricKind {
    /// Reads [`BACKEND_ENV`]; unset or empty means [`FabricKind::Auto`].
    pub fn from_env() -> Result<FabricKind, FabricError> {
        match std::env::var(BACKEND_ENV) {
            Ok(v) if !v.trim().is_empty() => v.parse(),
            _ => Ok(FabricKind::Auto),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            FabricKind::Auto => "auto",
            FabricKind::Tcp => "tcp",
        }
    }
}

impl FromStr for FabricKind {
    type Err = FabricError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(FabricKind::Auto),
            "tcp" => Ok(FabricKind::Tcp),
            _ => Err(FabricError::UnknownBackend {
                name: s.to_string(),
            }),
        }
    }
}

impl fmt::Display for FabricKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One of the backends, chosen at run time; implements [`Fabric`] by delegation.
/// Cloning is cheap and every clone drives the same fabric.
#[derive(Clone, Debug)]
pub enum AnyFabric {
    Tcp(TcpFabric),
}

impl AnyFabric {
    /// Starts the backend `kind` selects. Must be called inside a tokio runtime with
    /// I/O and time enabled; the fabric's tasks run on that runtime.
    pub async fn bind(
        kind: FabricKind,
        cfg: FabricConfig,
    ) -> std::io::Result<(AnyFabric, UnboundedReceiver<FabricEvent>)> {
        let (fabric, events) = match kind {
            FabricKind::Auto | FabricKind::Tcp => {
                let (f, events) = TcpFabric::bind(cfg).await?;
                (AnyFabric::Tcp(f), events)
            }
        };
        tracing::info!(requested = %kind, backend = fabric.backend(), "fabric backend selected");
        Ok((fabric, events))
    }

    /// [`Fabric::close`], then waits until every goodbye was acknowledged (or
    /// [`CLOSE_GRACE`](crate::CLOSE_GRACE) passed), so exiting afterwards cannot make
    /// peers report this node lost.
    pub async fn shutdown(&self) {
        match self {
            AnyFabric::Tcp(f) => f.shutdown().await,
        }
    }
}

impl From<TcpFabric> for AnyFabric {
    fn from(f: TcpFabric) -> Self {
        AnyFabric::Tcp(f)
    }
}

impl Fabric for AnyFabric {
    fn backend(&self) -> &'static str {
        match self {
            AnyFabric::Tcp(f) => f.backend(),
        }
    }
    fn node(&self) -> NodeId {
        match self {
            AnyFabric::Tcp(f) => f.node(),
        }
    }
    fn local_addr(&self) -> String {
        match self {
            AnyFabric::Tcp(f) => f.local_addr(),
        }
    }
    fn set_peers(&self, peers: Vec<String>) {
        match self {
            AnyFabric::Tcp(f) => f.set_peers(peers),
        }
    }
    fn send(&self, to: NodeId, payload: Bytes) -> Result<(), FabricError> {
        match self {
            AnyFabric::Tcp(f) => f.send(to, payload),
        }
    }
    fn close(&self) {
        match self {
            AnyFabric::Tcp(f) => f.close(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_parses_and_names() {
        assert_eq!("TCP".parse::<FabricKind>().unwrap(), FabricKind::Tcp);
        assert_eq!(" auto ".parse::<FabricKind>().unwrap(), FabricKind::Auto);
        let e = "ib".parse::<FabricKind>().unwrap_err();
        assert!(e.to_string().contains("\"ib\""), "{e}");
        assert_eq!(FabricKind::Tcp.to_string(), "tcp");
    }
}
