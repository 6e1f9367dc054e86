//! A remote cluster's file in the clustermesh config directory (etcd client format).

use serde::Deserialize;
use std::path::{Path, PathBuf};
use weft_kvstore::{Endpoints, TlsFiles};

/// Why a cluster's config file was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not the etcd client YAML format.
    #[error("{path} is not a valid etcd client config")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The YAML error.
        #[source]
        source: serde_yaml::Error,
    },
    /// The file names no endpoint.
    #[error("{path} lists no endpoints")]
    NoEndpoints {
        /// The file.
        path: PathBuf,
    },
    /// An endpoint is not an `http://` or `https://` URL.
    #[error("{path}: endpoint {endpoint:?} is not an http:// or https:// URL")]
    BadEndpoint {
        /// The file.
        path: PathBuf,
        /// The endpoint at fault.
        endpoint: String,
    },
    /// A client certificate without its key, or a key without its certificate: the
    /// connection would go out without the client identity the config asks for.
    #[error("{path}: {present} without {missing}")]
    HalfIdentity {
        /// The file.
        path: PathBuf,
        /// The field given.
        present: &'static str,
        /// The field missing.
        missing: &'static str,
    },
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct File {
    #[serde(default)]
    endpoints: Vec<String>,
    trusted_ca_file: Option<PathBuf>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
}

/// Parses the contents of `path`.
///
/// # Errors
/// [`ConfigError`] naming `path` and what is wrong.
///
/// # Example
/// ```
/// let e = weft_clustermesh::parse_config_file(
///     "/etc/weft/mesh/cluster2".as_ref(),
///     "endpoints:\n- http://127.0.0.1:2379\n",
/// ).unwrap();
/// assert_eq!(e.urls, ["http://127.0.0.1:2379"]);
/// ```
pub fn parse_config_file(path: &Path, text: &str) -> Result<Endpoints, ConfigError> {
    let file: File = serde_yaml::from_str(text).map_err(|source| ConfigError::Parse {
        path: path.to_owned(),
        source,
    })?;
    if file.endpoints.is_empty() {
        return Err(ConfigError::NoEndpoints {
            path: path.to_owned(),
        });
    }
    if let Some(bad) = file
        .endpoints
        .iter()
        .find(|e| !(e.starts_with("http://") || e.starts_with("https://")))
    {
        return Err(ConfigError::BadEndpoint {
            path: path.to_owned(),
            endpoint: bad.clone(),
        });
    }
    let half = match (&file.cert_file, &file.key_file) {
        (Some(_), None) => Some(("cert-file", "key-file")),
        (None, Some(_)) => Some(("key-file", "cert-file")),
        _ => None,
    };
    if let Some((present, missing)) = half {
        return Err(ConfigError::HalfIdentity {
            path: path.to_owned(),
            present,
            missing,
        });
    }
    Ok(Endpoints {
        urls: file.endpoints,
        tls: TlsFiles {
            trusted_ca_file: file.trusted_ca_file,
            cert_file: file.cert_file,
            key_file: file.key_file,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_without_its_key_or_a_key_without_its_certificate_is_refused() {
        let path = Path::new("/etc/weft/mesh/c2");
        for (text, said) in [
            (
                "endpoints: [https://c2:2379]\ncert-file: /c.crt\n",
                "/etc/weft/mesh/c2: cert-file without key-file",
            ),
            (
                "endpoints: [https://c2:2379]\nkey-file: /c.key\n",
                "/etc/weft/mesh/c2: key-file without cert-file",
            ),
        ] {
            let e = parse_config_file(path, text).unwrap_err();
            assert_eq!(e.to_string(), said);
        }
    }

    #[test]
    fn the_established_format_with_tls() {
        let text = "endpoints:\n- https://c1.mesh:2379\ntrusted-ca-file: /ca.crt\n\
                    key-file: /c.key\ncert-file: /c.crt\n";
        let e = parse_config_file(Path::new("c1"), text).unwrap();
        assert_eq!(e.tls.trusted_ca_file.as_deref(), Some(Path::new("/ca.crt")));
        assert_eq!(e.tls.key_file.as_deref(), Some(Path::new("/c.key")));
    }

    #[test]
    fn errors_name_the_file_and_the_fault() {
        let err = parse_config_file(Path::new("/d/c1"), "endpoints: []\n").unwrap_err();
        assert!(matches!(err, ConfigError::NoEndpoints { .. }));
        assert!(err.to_string().contains("/d/c1"));
        let err = parse_config_file(Path::new("/d/c1"), "endpoints: [ftp://x]\n").unwrap_err();
        assert!(err.to_string().contains("ftp://x"));
        let err = parse_config_file(Path::new("/d/c1"), "endpoints: [\n").unwrap_err();
        assert!(matches!(err, ConfigError::Parse { .. }));
    }
}
