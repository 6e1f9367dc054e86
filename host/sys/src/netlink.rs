//! rtnetlink, the way the agent uses it: a handle opened inside a network namespace
//! on a thread of its own (a netlink socket belongs to the namespace its thread was in
//! when it was opened, and entering one must not move the agent's other threads), and
//! the link lookups every user needs.

use crate::netns::{self, NetnsError};
use futures::TryStreamExt as _;
use rtnetlink::packet_route::link::{LinkAttribute, LinkMessage};
use rtnetlink::{Handle, LinkUnspec};
use std::path::Path;

/// What a netlink step can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The namespace cannot be opened or entered.
    #[error(transparent)]
    Netns(#[from] NetnsError),
    /// A netlink request failed.
    #[error("{what}: {}", kernel_answer(source))]
    Netlink {
        /// The step, naming the interface.
        what: String,
        /// The kernel's answer.
        #[source]
        source: rtnetlink::Error,
    },
    /// The kernel answered, but not with what the step needs (no such device, an
    /// address missing after it was added).
    #[error("{what}: {found}")]
    Unexpected {
        /// The step, naming the interface.
        what: String,
        /// What was found instead.
        found: String,
    },
    /// The thread or runtime that talks netlink could not run.
    #[error("{what}: {source}")]
    Thread {
        /// The step.
        what: &'static str,
        /// The system's answer.
        #[source]
        source: std::io::Error,
    },
}

/// The kernel's answer in `e`, as the kernel's error (`No such device (os error 19)`)
/// when it is one.
fn kernel_answer(e: &rtnetlink::Error) -> String {
    match e {
        rtnetlink::Error::NetlinkError(m) => m.to_io().to_string(),
        e => e.to_string(),
    }
}

/// Runs `f` with a netlink handle opened inside `netns` (the agent's own when `None`),
/// on a thread of its own: the socket belongs to the namespace the thread was in when
/// it was opened, and entering a namespace must not move the agent's other threads.
///
/// # Errors
/// [`Error::Netns`] when the namespace cannot be entered, or `f`'s error.
pub async fn in_namespace<T, F, Fut>(netns: Option<&Path>, f: F) -> Result<T, Error>
where
    T: Send + 'static,
    F: FnOnce(Handle) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    let file = match netns {
        Some(path) => Some((path.to_owned(), netns::open(path)?)),
        None => None,
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("weft-netlink".into())
        .spawn(move || {
            let run = || -> Result<T, Error> {
                if let Some((path, file)) = &file {
                    netns::enter(path, file)?;
                }
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|source| Error::Thread {
                        what: "start a netlink runtime",
                        source,
                    })?;
                rt.block_on(async move {
                    let (conn, handle, _) =
                        rtnetlink::new_connection().map_err(|source| Error::Thread {
                            what: "open a netlink socket",
                            source,
                        })?;
                    tokio::spawn(conn);
                    f(handle).await
                })
            };
            let _ = tx.send(run());
        })
        .map_err(|source| Error::Thread {
            what: "start a netlink thread",
            source,
        })?;
    rx.await.map_err(|_| Error::Thread {
        what: "netlink thread",
        source: std::io::Error::other("it ended without an answer"),
    })?
}

/// Maps a netlink error to [`Error::Netlink`] naming the step `what`.
pub fn failed(what: String) -> impl FnOnce(rtnetlink::Error) -> Error {
    move |source| Error::Netlink { what, source }
}

/// Whether `e` says there is no such device.
fn no_such_device(e: &rtnetlink::Error) -> bool {
    matches!(e, rtnetlink::Error::NetlinkError(m) if m.raw_code() == -(nix::errno::Errno::ENODEV as i32))
}

/// The link `name`, if there is one.
///
/// # Errors
/// [`Error::Netlink`] when the kernel refuses.
pub async fn find_link(h: &Handle, name: &str) -> Result<Option<LinkMessage>, Error> {
    let found = h
        .link()
        .get()
        .match_name(name.to_owned())
        .execute()
        .try_next()
        .await;
    match found {
        Ok(l) => Ok(l),
        Err(e) if no_such_device(&e) => Ok(None),
        Err(e) => Err(failed(format!("find {name}"))(e)),
    }
}

/// The link `name`.
///
/// # Errors
/// [`Error::Unexpected`] when there is none, [`Error::Netlink`] when the kernel refuses.
pub async fn link(h: &Handle, name: &str) -> Result<LinkMessage, Error> {
    find_link(h, name).await?.ok_or_else(|| Error::Unexpected {
        what: format!("find {name}"),
        found: "no such device".into(),
    })
}

/// Deletes the link `name`; nothing when there is none.
///
/// # Errors
/// [`Error::Netlink`] when the kernel refuses.
pub async fn delete_link(h: &Handle, name: &str) -> Result<(), Error> {
    let Some(l) = find_link(h, name).await? else {
        return Ok(());
    };
    match h.link().del(l.header.index).execute().await {
        Ok(()) => Ok(()),
        Err(e) if no_such_device(&e) => Ok(()),
        Err(e) => Err(failed(format!("delete {name}"))(e)),
    }
}

/// The link's name.
pub fn name(l: &LinkMessage) -> Option<String> {
    l.attributes.iter().find_map(|a| match a {
        LinkAttribute::IfName(n) => Some(n.clone()),
        _ => None,
    })
}

/// The link's MAC as `aa:bb:…`, empty when it has none.
pub fn mac(l: &LinkMessage) -> String {
    l.attributes
        .iter()
        .find_map(|a| match a {
            LinkAttribute::Address(b) => Some(
                b.iter()
                    .map(|x| format!("{x:02x}"))
                    .collect::<Vec<_>>()
                    .join(":"),
            ),
            _ => None,
        })
        .unwrap_or_default()
}

/// [`in_namespace`] for callers outside the async runtime: blocks until done.
///
/// # Errors
/// As [`in_namespace`].
pub fn blocking<T, F, Fut>(netns: Option<&Path>, f: F) -> Result<T, Error>
where
    T: Send + 'static,
    F: FnOnce(Handle) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    let netns = netns.map(Path::to_owned);
    std::thread::scope(|s| {
        s.spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .build()
                .map_err(|source| Error::Thread {
                    what: "start a netlink runtime",
                    source,
                })?
                .block_on(in_namespace(netns.as_deref(), f))
        })
        .join()
        .map_err(|_| Error::Thread {
            what: "netlink thread",
            source: std::io::Error::other("it panicked"),
        })?
    })
}

/// The MTU of link `name`.
///
/// # Errors
/// [`Error::Unexpected`] when there is no such link or it has no MTU.
pub async fn mtu(h: &Handle, name: &str) -> Result<u32, Error> {
    link(h, name)
        .await?
        .attributes
        .iter()
        .find_map(|a| match a {
            LinkAttribute::Mtu(m) => Some(*m),
            _ => None,
        })
        .ok_or_else(|| Error::Unexpected {
            what: format!("MTU of {name}"),
            found: "the kernel did not say".into(),
        })
}

/// Sets link `name` up when `up`, and its MTU when `mtu` is given.
///
/// # Errors
/// [`Error::Netlink`] when there is no such link or the kernel refuses.
pub async fn configure(h: &Handle, name: &str, up: bool, mtu: Option<u32>) -> Result<(), Error> {
    let index = link(h, name).await?.header.index;
    let mut msg = LinkUnspec::new_with_index(index);
    if up {
        msg = msg.up();
    }
    if let Some(mtu) = mtu {
        msg = msg.mtu(mtu);
    }
    h.link()
        .set(msg.build())
        .execute()
        .await
        .map_err(failed(format!("configure {name} (up: {up}, MTU {mtu:?})")))
}
