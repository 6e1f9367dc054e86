//! What is wrong when a TLS connection to etcd fails, said in an operator's words: a
//! wrong CA or an expired certificate is a configuration problem, not a blip, though
//! the connection keeps being retried (the files may be fixed, a Secret rotated).

use super::TlsFiles;
use rustls::{AlertDescription, CertificateError};
use std::fmt;
use std::path::PathBuf;

/// Why a TLS handshake with etcd failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsProblem {
    /// The server's certificate is not signed by the CA the configuration trusts.
    UntrustedServer {
        /// The `trusted-ca-file`, if any (else the system's roots).
        ca: Option<PathBuf>,
    },
    /// The server's certificate has expired.
    ServerExpired,
    /// The server's certificate is not valid yet (or this clock is wrong).
    ServerNotYetValid,
    /// The server's certificate does not name the endpoint's address.
    ServerWrongName,
    /// The server refused this client's certificate.
    ClientRefused {
        /// The `cert-file`, if any.
        cert: Option<PathBuf>,
        /// The server's alert (`CertificateExpired`, `BadCertificate`, ...).
        alert: String,
    },
    /// Another TLS failure, as the TLS library says it.
    Other(String),
}

impl fmt::Display for TlsProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = |p: &Option<PathBuf>| {
            p.as_ref()
                .map_or("none".into(), |p| p.display().to_string())
        };
        match self {
            TlsProblem::UntrustedServer { ca } => write!(
                f,
                "TLS: the server's certificate is not signed by the trusted CA (trusted-ca-file: {})",
                file(ca)
            ),
            TlsProblem::ServerExpired => f.write_str("TLS: the server's certificate has expired"),
            TlsProblem::ServerNotYetValid => {
                f.write_str("TLS: the server's certificate is not valid yet (or this node's clock is wrong)")
            }
            TlsProblem::ServerWrongName => {
                f.write_str("TLS: the server's certificate does not name the endpoint's address")
            }
            TlsProblem::ClientRefused { cert, alert } => write!(
                f,
                "TLS: the server refused this client's certificate ({alert}; cert-file: {})",
                file(cert)
            ),
            TlsProblem::Other(e) => write!(f, "TLS: {e}"),
        }
    }
}

/// The TLS problem behind `error`, if a TLS handshake is what failed.
pub(crate) fn problem(error: &etcd_client::Error, files: &TlsFiles) -> Option<TlsProblem> {
    let start: &(dyn std::error::Error + 'static) = match error {
        etcd_client::Error::GRpcStatus(status) => status,
        etcd_client::Error::TransportError(e) => e,
        etcd_client::Error::IoError(e) => e,
        _ => return None,
    };
    let tls = rustls_error(start)?;
    Some(match tls {
        rustls::Error::InvalidCertificate(e) => match e {
            CertificateError::BadSignature | CertificateError::UnknownIssuer => {
                TlsProblem::UntrustedServer {
                    ca: files.trusted_ca_file.clone(),
                }
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                TlsProblem::ServerExpired
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                TlsProblem::ServerNotYetValid
            }
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                TlsProblem::ServerWrongName
            }
            other => TlsProblem::Other(format!("the server's certificate: {other:?}")),
        },
        rustls::Error::AlertReceived(
            alert @ (AlertDescription::BadCertificate
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateRevoked
            | AlertDescription::CertificateUnknown
            | AlertDescription::CertificateRequired
            | AlertDescription::UnknownCA
            | AlertDescription::UnsupportedCertificate),
        ) => TlsProblem::ClientRefused {
            cert: files.cert_file.clone(),
            alert: format!("{alert:?}"),
        },
        other => TlsProblem::Other(other.to_string()),
    })
}

/// The rustls error in `error`'s chain; an I/O error carries it inside, not as its
/// source.
fn rustls_error<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        let inner = e
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            .and_then(|inner| inner.downcast_ref::<rustls::Error>());
        if inner.is_some() {
            return inner;
        }
        next = e.source();
    }
    None
}
