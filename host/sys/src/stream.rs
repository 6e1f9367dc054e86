//! A long-running TCP stream between two namespaces: the client writes a small message
//! every 20 ms, the server notes when data arrives. Its gaps are what a scenario
//! judges: a restart that drops nothing leaves none longer than a few writes.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the client writes; a capture that finds it outside a tunnel found plaintext.
pub const MARKER: &[u8] = b"WEFT-PLAINTEXT-MARKER";

/// A stream and what its server saw.
pub struct Stream {
    arrivals: Arc<Mutex<Vec<Instant>>>,
    errors: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Stream {
    /// Listens on `to` in the namespace `server`, connects from the namespace `client`
    /// (waiting up to 20 s: the first SYN may wait for a WireGuard handshake) and
    /// starts writing.
    ///
    /// # Errors
    /// When the listener cannot be bound or the connection is not accepted.
    pub fn open(client: &Path, server: &Path, to: SocketAddr) -> std::io::Result<Stream> {
        let listener = crate::netns::in_netns(Some(server), move || TcpListener::bind(to))
            .map_err(std::io::Error::other)??;
        let mut client = crate::netns::in_netns(Some(client), move || {
            TcpStream::connect_timeout(&to, Duration::from_secs(20))
        })
        .map_err(std::io::Error::other)??;
        let (mut server, _) = listener.accept()?;
        server.set_read_timeout(Some(Duration::from_millis(100)))?;
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (arrivals, errors, stop) = (arrivals.clone(), errors.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while !stop.load(Ordering::Relaxed) {
                    match server.read(&mut buf) {
                        Ok(0) => {
                            // The client closing at the end is no error.
                            if !stop.load(Ordering::Relaxed) {
                                let end = "the server saw the stream end".to_owned();
                                errors.lock().expect("errors lock").push(end);
                            }
                            return;
                        }
                        Ok(_) => arrivals.lock().expect("arrivals lock").push(Instant::now()),
                        Err(e)
                            if matches!(
                                e.kind(),
                                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                            ) => {}
                        Err(e) => {
                            errors
                                .lock()
                                .expect("errors lock")
                                .push(format!("server read: {e}"));
                            return;
                        }
                    }
                }
            })
        };
        let writer = {
            let (errors, stop) = (errors.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Err(e) = client.write_all(MARKER) {
                        errors
                            .lock()
                            .expect("errors lock")
                            .push(format!("client write: {e}"));
                        return;
                    }
                    // The stream's pace, not a synchronisation.
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        Ok(Stream {
            arrivals,
            errors,
            stop,
            threads: vec![reader, writer],
        })
    }

    /// How many reads returned data after `t`.
    pub fn arrived_since(&self, t: Instant) -> usize {
        self.arrivals
            .lock()
            .expect("arrivals lock")
            .iter()
            .filter(|a| **a > t)
            .count()
    }

    /// When data arrived.
    pub fn arrivals(&self) -> Vec<Instant> {
        self.arrivals.lock().expect("arrivals lock").clone()
    }

    /// The longest time without data between `from` and `to`.
    pub fn longest_gap(&self, from: Instant, to: Instant) -> Duration {
        let mut last = from;
        let mut gap = Duration::ZERO;
        for t in self
            .arrivals
            .lock()
            .expect("arrivals lock")
            .iter()
            .filter(|t| **t > from && **t <= to)
        {
            gap = gap.max(*t - last);
            last = *t;
        }
        gap.max(to.saturating_duration_since(last))
    }

    /// Stops both ends: the errors either saw.
    pub fn close(mut self) -> Vec<String> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.errors.lock().expect("errors lock").clone()
    }
}
