//! A TCP proxy on loopback that a test can cut, to break a client's connections while
//! the server stays up.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Forwards a loopback port to `target`; [`Proxy::cut`] drops every connection and
/// refuses new ones until [`Proxy::restore`].
pub struct Proxy {
    pub port: u16,
    up: Arc<AtomicBool>,
    generation: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::serve(listener, target)
    }

    /// Forwards `port` on the loopback of `ns` to the same port on this namespace's
    /// loopback: a server of the test (an etcd) reached from inside the namespace at
    /// the address it has here. The listening socket is made in `ns` (a socket keeps
    /// the namespace it was made in); the connections onwards are made here.
    pub async fn bridge(ns: &super::netns::Netns, port: u16) -> Proxy {
        let listener = ns.run(move || {
            let l = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
            l.set_nonblocking(true).unwrap();
            l
        });
        Self::serve(TcpListener::from_std(listener).unwrap(), port)
    }

    fn serve(listener: TcpListener, target: u16) -> Proxy {
        let port = listener.local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let (generation, _) = watch::channel(0u64);
        let (u, g) = (up.clone(), generation.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                if !u.load(Ordering::SeqCst) {
                    continue; // dropped: refused
                }
                let mut cut = g.subscribe();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(("127.0.0.1", target)).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Proxy {
            port,
            up,
            generation,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Drops every proxied connection and refuses new ones.
    pub fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    /// Accepts connections again.
    pub fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
