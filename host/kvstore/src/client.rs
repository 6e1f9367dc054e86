//! An etcd client with request limits and timeouts.

use super::{Config, Error, Limits};
use etcd_client::{
    Certificate, Compare, CompareOp, ConnectOptions, GetOptions, GetResponse, Identity, KvClient,
    PutOptions, SortOrder, SortTarget, TlsOptions, Txn, TxnOp, WatchClient, WatchOptions,
    WatchStream,
};
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

/// Where an etcd is and how to trust it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Endpoints {
    /// `http://host:port` or `https://host:port` URLs.
    pub urls: Vec<String>,
    /// TLS material, when the endpoints use `https`.
    pub tls: TlsFiles,
}

/// TLS files of an etcd client configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TlsFiles {
    /// The CA that signed the server's certificate.
    pub trusted_ca_file: Option<PathBuf>,
    /// The client certificate.
    pub cert_file: Option<PathBuf>,
    /// The client certificate's key.
    pub key_file: Option<PathBuf>,
}

/// A cheap-to-clone etcd client whose requests share one set of [`Limits`].
#[derive(Clone)]
pub struct Client {
    inner: etcd_client::Client,
    /// Lists and watches decode responses up to `config.max_response_bytes`.
    kv: KvClient,
    watch: WatchClient,
    limits: Limits,
    config: Config,
    /// The TLS files, to name in a TLS failure.
    tls: TlsFiles,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("config", &self.config)
            .finish()
    }
}

impl Client {
    /// Connects lazily to `endpoints`: the connection is made, and remade after a
    /// failure, by the first request that needs it.
    ///
    /// # Errors
    /// [`Error::NoEndpoints`], [`Error::TlsFile`], or [`Error::Request`] for a bad URL.
    pub async fn connect(endpoints: &Endpoints, config: &Config) -> Result<Self, Error> {
        if endpoints.urls.is_empty() {
            return Err(Error::NoEndpoints);
        }
        let mut options = ConnectOptions::new()
            .with_keep_alive(config.keep_alive.0, config.keep_alive.1)
            .with_keep_alive_while_idle(true)
            .with_connect_timeout(Duration::from_secs(5));
        if let Some(tls) = tls_options(&endpoints.tls)? {
            options = options.with_tls(tls);
        }
        let inner = etcd_client::Client::connect(&endpoints.urls, Some(options))
            .await
            .map_err(|source| Error::Request {
                op: "connect",
                key: endpoints.urls.join(","),
                source,
            })?;
        let kv = inner
            .kv_client()
            .max_decoding_message_size(config.max_response_bytes);
        let watch = inner
            .watch_client()
            .max_decoding_message_size(config.max_response_bytes);
        Ok(Self {
            inner,
            kv,
            watch,
            limits: Limits::new(config.max_in_flight, config.qps),
            config: config.clone(),
            tls: endpoints.tls.clone(),
        })
    }

    /// This client's configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Runs one limited, timed request.
    async fn call<T, F, Fut>(&self, op: &'static str, key: &str, f: F) -> Result<T, Error>
    where
        F: FnOnce(etcd_client::Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let _permit = self.limits.acquire().await;
        let timeout = self.config.request_timeout;
        match tokio::time::timeout(timeout, f(self.inner.clone())).await {
            Ok(r) => r.map_err(|source| self.request_error(op, key, source)),
            Err(_) => Err(Error::Timeout {
                op,
                key: key.to_owned(),
                timeout,
            }),
        }
    }

    /// A request's error; a response over the decode limit is [`Error::TooLarge`].
    pub(crate) fn request_error(
        &self,
        op: &'static str,
        key: &str,
        source: etcd_client::Error,
    ) -> Error {
        match &source {
            // tonic's decoder refuses a message over the limit with `OutOfRange`.
            etcd_client::Error::GRpcStatus(status)
                if status.code() == tonic::Code::OutOfRange
                    && status.message().contains("too large") =>
            {
                Error::TooLarge {
                    op,
                    key: key.to_owned(),
                    limit: self.config.max_response_bytes,
                }
            }
            _ => match super::tls::problem(&source, &self.tls) {
                Some(problem) => Error::Tls {
                    op,
                    key: key.to_owned(),
                    problem,
                },
                None => Error::Request {
                    op,
                    key: key.to_owned(),
                    source,
                },
            },
        }
    }

    /// Reads one key.
    ///
    /// # Errors
    /// [`Error::Request`] or [`Error::Timeout`].
    pub async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, Error> {
        let k = key.to_owned();
        let resp = self
            .call("get", key, |mut c| async move { c.get(k, None).await })
            .await?;
        Ok(resp.kvs().first().map(|kv| kv.value().to_vec()))
    }

    /// Reads one page of `[start, end)` at `revision` (0 = the current one).
    ///
    /// # Errors
    /// [`Error::Request`] or [`Error::Timeout`].
    pub async fn range_page(
        &self,
        start: Vec<u8>,
        end: Vec<u8>,
        revision: i64,
    ) -> Result<GetResponse, Error> {
        self.range_page_of(start, end, revision, self.config.page_size)
            .await
    }

    /// [`Client::range_page`] with at most `limit` keys (0 = no limit). Responses up
    /// to `max_response_bytes` are decoded; a larger one is [`Error::TooLarge`].
    ///
    /// # Errors
    /// [`Error::Request`], [`Error::Timeout`] or [`Error::TooLarge`].
    pub async fn range_page_of(
        &self,
        start: Vec<u8>,
        end: Vec<u8>,
        revision: i64,
        limit: u32,
    ) -> Result<GetResponse, Error> {
        let key = String::from_utf8_lossy(&start).into_owned();
        let mut options = GetOptions::new().with_range(end);
        if limit > 0 {
            options = options.with_limit(i64::from(limit));
        }
        if revision > 0 {
            options = options.with_revision(revision);
        }
        let kv = self.kv.clone();
        self.call("list", &key, |_| async move {
            let mut kv = kv;
            kv.get(start, Some(options)).await
        })
        .await
    }

    /// The first key of `[start, end)` at `revision`, without its value: how a list
    /// names a value too large to read.
    ///
    /// # Errors
    /// [`Error::Request`] or [`Error::Timeout`].
    pub async fn first_key(
        &self,
        start: Vec<u8>,
        end: Vec<u8>,
        revision: i64,
    ) -> Result<Option<Vec<u8>>, Error> {
        let key = String::from_utf8_lossy(&start).into_owned();
        let mut options = GetOptions::new()
            .with_range(end)
            .with_limit(1)
            .with_keys_only();
        if revision > 0 {
            options = options.with_revision(revision);
        }
        let resp = self
            .call("list keys", &key, |mut c| async move {
                c.get(start, Some(options)).await
            })
            .await?;
        Ok(resp.kvs().first().map(|kv| kv.key().to_vec()))
    }

    /// Writes `key`, attached to `lease` when not 0.
    ///
    /// # Errors
    /// [`Error::Request`] or [`Error::Timeout`].
    pub async fn put(&self, key: &str, value: impl Into<Vec<u8>>, lease: i64) -> Result<(), Error> {
        let (k, v) = (key.to_owned(), value.into());
        let options = (lease != 0).then(|| PutOptions::new().with_lease(lease));
        self.call(
            "put",
            key,
            |mut c| async move { c.put(k, v, options).await },
        )
        .await
        .map(drop)
    }

    /// Writes `key` only if it does not exist (an etcd transaction comparing its
    /// create revision with 0); `true` when it was written.
    ///
    /// # Errors
    /// [`Error::Request`] or [`Error::Timeout`].
    pub async fn create(
        &self,
        key: &str,
        value: impl Into<Vec<u8>>,
        lease: i64,
    ) -> Result<bool, Error> {
        let (k, v) = (key.to_owned(), value.into());
        let options = (lease != 0).then(|| PutOptions::new().with_lease(lease));
        let txn = Txn::new()
            .when([Compare::create_revision(k.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(k, v, options)]);
        let resp = self
            .call("create", key, |mut c| async move { c.txn(txn).await })
            .await?;
        Ok(resp.succeeded())
    }

    /// The key under `prefix` created first (lowest create revision), if any: the
    /// holder of an etcd mutex on `prefix`.
    ///
    /// # Errors
    /// [`Error::Request`] or [`Error::Timeout`].
    pub async fn first_created(&self, prefix: &str) -> Result<Option<String>, Error> {
        let options = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(1)
            .with_keys_only();
        let key = prefix.to_owned();
        let resp = self
            .call("first created", prefix, |mut c| async move {
                c.get(key, Some(options)).await
            })
            .await?;
        Ok(resp
            .kvs()
            .first()
            .map(|kv| String::from_utf8_lossy(kv.key()).into_owned()))
    }

    /// Every key under `prefix` with its value, read page by page at one revision.
    ///
    /// # Errors
    /// [`Error::Request`] or [`Error::Timeout`].
    pub async fn list_prefix(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, Error> {
        let end = super::prefix_range_end(prefix);
        let mut start = prefix.as_bytes().to_vec();
        let mut revision = 0;
        let mut all = Vec::new();
        loop {
            let page = self
                .range_page(start.clone(), end.clone(), revision)
                .await?;
            if revision == 0 {
                revision = page.header().map_or(0, |h| h.revision());
            }
            for kv in page.kvs() {
                all.push((
                    String::from_utf8_lossy(kv.key()).into_owned(),
                    kv.value().to_vec(),
                ));
            }
            match page.kvs().last() {
                Some(last) if page.more() => {
                    start = last.key().to_vec();
                    start.push(0);
                }
                _ => return Ok(all),
            }
        }
    }

    /// Deletes `key`.
    ///
    /// # Errors
    /// [`Error::Request`] or [`Error::Timeout`].
    pub async fn delete(&self, key: &str) -> Result<(), Error> {
        let k = key.to_owned();
        self.call(
            "delete",
            key,
            |mut c| async move { c.delete(k, None).await },
        )
        .await
        .map(drop)
    }

    /// Grants a lease of `ttl` seconds and returns its ID.
    ///
    /// # Errors
    /// [`Error::Request`] or [`Error::Timeout`].
    pub async fn grant_lease(&self, ttl: i64) -> Result<i64, Error> {
        let resp = self
            .call("lease-grant", "", |mut c| async move {
                c.lease_grant(ttl, None).await
            })
            .await?;
        Ok(resp.id())
    }

    /// Refreshes lease `id` once.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when etcd no longer knows the lease, or a request error.
    pub async fn keep_alive_once(&self, id: i64) -> Result<(), Error> {
        let ttl = self
            .call("lease-keep-alive", "", |mut c| async move {
                let (mut keeper, mut stream) = c.lease_keep_alive(id).await?;
                keeper.keep_alive().await?;
                Ok(stream.message().await?.map(|r| r.ttl()).unwrap_or(0))
            })
            .await?;
        if ttl <= 0 {
            return Err(Error::LeaseLost { id });
        }
        Ok(())
    }

    /// Opens a watch on `[prefix, end)` from `revision`. Not counted against the
    /// in-flight limit once open: a watch lives as long as the stream.
    ///
    /// # Errors
    /// [`Error::Request`] or [`Error::Timeout`].
    pub async fn watch(&self, prefix: &str, revision: i64) -> Result<WatchStream, Error> {
        let p = prefix.to_owned();
        let options = WatchOptions::new()
            .with_range(super::prefix_range_end(prefix))
            .with_start_revision(revision);
        let watch = self.watch.clone();
        self.call("watch", prefix, |_| async move {
            let mut watch = watch;
            watch.watch(p, Some(options)).await
        })
        .await
    }
}

fn tls_options(files: &TlsFiles) -> Result<Option<TlsOptions>, Error> {
    let read = |path: &PathBuf| {
        std::fs::read(path).map_err(|source| Error::TlsFile {
            path: path.display().to_string(),
            source,
        })
    };
    let mut tls = None;
    if let Some(ca) = &files.trusted_ca_file {
        tls = Some(TlsOptions::new().ca_certificate(Certificate::from_pem(read(ca)?)));
    }
    if let (Some(cert), Some(key)) = (&files.cert_file, &files.key_file) {
        let identity = Identity::from_pem(read(cert)?, read(key)?);
        tls = Some(tls.unwrap_or_default().identity(identity));
    }
    Ok(tls)
}
