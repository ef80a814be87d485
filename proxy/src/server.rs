//! Listeners and connections: frames in, frames out, in order.
//!
//! One listener per broker, Kroxylicious's port-per-broker scheme: the
//! bootstrap listener at `listen` connects to the configured bootstrap;
//! broker node `N` is served at `listen`'s port + 1 + `N`, connecting to
//! that broker's address as the last response that named it said. A node's
//! listener is bound the first time a response names the node, before that
//! response reaches the client.
//!
//! Each connection keeps a FIFO of what its client is owed, in request
//! order: a response to read from the broker (with what to do to it), or a
//! response the proxy wrote itself (a refused Produce). Produce with
//! acks=0 owes nothing.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use kafka_protocol::protocol::StrBytes;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Semaphore};

use crate::api::{self, Refused};
use crate::budget::Budget;
use crate::config::{Policies, ProxyConfig};
use crate::dispatch::{self, Answered, Pending, Routed};
use crate::error::ProxyError;
use crate::frame::{read_frame_held, write_frame, FrameError};
use crate::hooks::Hooks;
use crate::stats::{self, Event};
use crate::wipe::Wiped;
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// A running proxy's listeners, before [`Proxy::run`].
#[derive(Debug)]
pub struct Proxy {
    shared: Arc<Shared>,
    bootstrap: TcpListener,
    stop: watch::Sender<bool>,
    alive: mpsc::Receiver<()>,
}

#[derive(Debug)]
struct Shared {
    upstream_bootstrap: String,
    bind_ip: IpAddr,
    advertised_host: StrBytes,
    base_port: u16,
    max_frame: usize,
    /// Whether admin requests that name a key-store topic pass.
    key_store_admin: bool,
    /// How long a connection may send no whole request, or take no
    /// response, before it is closed.
    idle: std::time::Duration,
    /// What decoding one request (or Fetch response) may take.
    request_budget: usize,
    /// What decoding may take, all requests in flight together.
    pool: Arc<crate::budget::Pool>,
    /// The bytes of request frames in hand past each one's first block,
    /// all connections together (`max_buffered_bytes`).
    requests_in_hand: Arc<Semaphore>,
    /// The same for response frames from the brokers, and for the answers
    /// the proxy makes itself past each connection's first 64 KiB of them:
    /// a pool of their own, so that a response is never kept waiting by
    /// requests that wait on the broker to take them.
    responses_in_hand: Arc<Semaphore>,
    /// The size of each pool (`max_buffered_bytes`).
    in_hand_max: usize,
    /// Idempotent producers' sequences, where the write rule grew a batch.
    sequences: crate::sequences::Sequences,
    /// Topic ids to names, from the broker's Metadata responses.
    topic_ids: crate::topic_ids::TopicIds,
    policies: Policies,
    hooks: Hooks,
    /// TLS on the listeners.
    acceptor: Option<Tls<TlsAcceptor>>,
    /// TLS to the brokers, and the name their certificates must hold
    /// (default: each broker's host).
    connector: Option<(Tls<TlsConnector>, Option<String>)>,
    /// Each broker node's address, as the last response that named it said,
    /// and whether its listener is bound.
    nodes: Mutex<HashMap<i32, (String, bool)>>,
    stopping: watch::Receiver<bool>,
    /// Held by every connection; dropped (taken) when shutting down.
    alive: Mutex<Option<mpsc::Sender<()>>>,
}

/// A TLS acceptor or connector (`Debug` shows only that TLS is on).
struct Tls<T>(T);

impl<T> std::fmt::Debug for Tls<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls(..)")
    }
}

/// What a listener serves.
#[derive(Clone, Copy, Debug)]
enum Target {
    Bootstrap,
    Node(i32),
}

impl Proxy {
    /// Binds the bootstrap listener of `config`, with `policies`.
    ///
    /// # Errors
    /// [`ProxyError::Bind`] when the address cannot be bound;
    /// [`ProxyError::Config`] for limits out of range (see
    /// [`ProxyConfig::check_limits`]).
    pub async fn bind(config: &ProxyConfig, policies: Policies) -> Result<Proxy, ProxyError> {
        config.check_limits()?;
        let bootstrap =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| ProxyError::Bind {
                    addr: config.listen.to_string(),
                    source,
                })?;
        let local = bootstrap.local_addr()?;
        let (stop, stopping) = watch::channel(false);
        let (alive_tx, alive) = mpsc::channel(1);
        let advertised = config
            .advertised_host
            .clone()
            .unwrap_or_else(|| local.ip().to_string());
        let acceptor = config
            .tls
            .as_ref()
            .map(|t| crate::tls::acceptor(t).map(Tls))
            .transpose()?;
        let connector = config
            .upstream_tls
            .as_ref()
            .map(|t| Ok::<_, ProxyError>((Tls(crate::tls::connector(t)?), t.server_name.clone())))
            .transpose()?;
        let shared = Arc::new(Shared {
            upstream_bootstrap: config.bootstrap.clone(),
            bind_ip: local.ip(),
            advertised_host: StrBytes::from_string(advertised),
            base_port: local.port(),
            max_frame: config.max_frame_bytes(),
            key_store_admin: config.key_store_admin,
            idle: std::time::Duration::from_millis(config.connections_max_idle_ms()),
            request_budget: config.max_decoded_bytes_per_request(),
            pool: crate::budget::Pool::new(config.max_decoded_bytes()),
            requests_in_hand: Arc::new(Semaphore::new(config.max_buffered_bytes())),
            responses_in_hand: Arc::new(Semaphore::new(config.max_buffered_bytes())),
            in_hand_max: config.max_buffered_bytes(),
            sequences: crate::sequences::Sequences::default(),
            topic_ids: crate::topic_ids::TopicIds::new(),
            policies,
            hooks: Hooks::default(),
            acceptor,
            connector,
            nodes: Mutex::new(HashMap::new()),
            stopping,
            alive: Mutex::new(Some(alive_tx)),
        });
        Ok(Proxy {
            shared,
            bootstrap,
            stop,
            alive,
        })
    }

    /// The bootstrap listener's address (its port chosen by the system when
    /// `listen` said port 0).
    ///
    /// # Errors
    /// The socket's address cannot be read.
    pub fn local_addr(&self) -> Result<SocketAddr, ProxyError> {
        Ok(self.bootstrap.local_addr()?)
    }

    /// The same proxy with broken behaviours, for negative controls.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    #[must_use]
    pub fn with_hooks(mut self, hooks: Hooks) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.hooks = hooks;
        }
        self
    }

    /// Serves until `shutdown` completes, then stops accepting, stops
    /// reading requests, and waits for every connection to be answered
    /// what it was owed (at most `drain` long).
    ///
    /// # Errors
    /// None yet; the result is there for listeners that fail for good.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()>,
        drain: std::time::Duration,
    ) -> Result<(), ProxyError> {
        let Proxy {
            shared,
            bootstrap,
            stop,
            mut alive,
        } = self;
        let accept = tokio::spawn(accept_loop(shared.clone(), bootstrap, Target::Bootstrap));
        shutdown.await;
        tracing::info!("shutting down: no new connections or requests; finishing in-flight ones");
        let _ = stop.send(true);
        drop(shared.alive.lock().map(|mut a| a.take()));
        let _ = accept.await;
        if tokio::time::timeout(drain, alive.recv()).await.is_err() {
            tracing::warn!("in-flight requests still unanswered after {drain:?}: closing");
        }
        Ok(())
    }
}

impl Shared {
    /// The proxy's address for broker `node` (at `host:port` upstream),
    /// its listener bound if it was not.
    fn node_address(self: &Arc<Self>, node: i32, host: &str, port: i32) -> Option<(StrBytes, i32)> {
        let ours = u16::try_from(node)
            .ok()
            .and_then(|n| self.base_port.checked_add(1)?.checked_add(n))?;
        let mut nodes = self.nodes.lock().ok()?;
        let entry = nodes.entry(node).or_insert_with(|| (String::new(), false));
        entry.0 = format!("{host}:{port}");
        if !entry.1 {
            if *self.stopping.borrow() {
                return None;
            }
            let listener = std::net::TcpListener::bind((self.bind_ip, ours))
                .and_then(|l| l.set_nonblocking(true).map(|()| l))
                .and_then(TcpListener::from_std);
            match listener {
                Ok(l) => {
                    tracing::info!(
                        "broker node {node} ({host}:{port}) served at {}:{ours}",
                        self.bind_ip
                    );
                    tokio::spawn(accept_loop(self.clone(), l, Target::Node(node)));
                    entry.1 = true;
                }
                Err(e) => {
                    tracing::error!(
                        "cannot listen for broker node {node} on {}:{ours}: {e}",
                        self.bind_ip
                    );
                    return None;
                }
            }
        }
        Some((self.advertised_host.clone(), i32::from(ours)))
    }

    /// What dispatching a request or a response reads.
    fn context(&self) -> dispatch::Context<'_> {
        dispatch::Context {
            policies: &self.policies,
            hooks: &self.hooks,
            sequences: &self.sequences,
            topic_ids: &self.topic_ids,
            key_store_admin: self.key_store_admin,
        }
    }

    fn upstream_of(&self, target: Target) -> Option<String> {
        match target {
            Target::Bootstrap => Some(self.upstream_bootstrap.clone()),
            Target::Node(n) => self.nodes.lock().ok()?.get(&n).map(|(a, _)| a.clone()),
        }
    }
}

async fn accept_loop(shared: Arc<Shared>, listener: TcpListener, target: Target) {
    let mut stopping = shared.stopping.clone();
    loop {
        if *stopping.borrow() {
            return;
        }
        tokio::select! {
            _ = stopping.changed() => return,
            accepted = listener.accept() => match accepted {
                Ok((socket, peer)) => {
                    let alive = shared.alive.lock().ok().and_then(|a| a.clone());
                    let Some(alive) = alive else { return };
                    tokio::spawn(connection(shared.clone(), socket, peer, target, alive));
                }
                Err(e) => {
                    tracing::warn!("accepting a connection: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            },
        }
    }
}

async fn connection(
    shared: Arc<Shared>,
    client: TcpStream,
    peer: SocketAddr,
    target: Target,
    _alive: mpsc::Sender<()>,
) {
    let Some(addr) = shared.upstream_of(target) else {
        tracing::warn!("client {peer}: no broker address known for {target:?}: connection closed");
        return;
    };
    let _ = client.set_nodelay(true);
    let client: Box<dyn Io> = match &shared.acceptor {
        None => Box::new(client),
        Some(acceptor) => match tokio::time::timeout(HANDSHAKE, acceptor.0.accept(client)).await {
            Ok(Ok(tls)) => Box::new(tls),
            Ok(Err(e)) => {
                tracing::warn!("client {peer}: TLS handshake: {e}: connection closed");
                return;
            }
            Err(_) => {
                tracing::warn!(
                    "client {peer}: no TLS handshake within {HANDSHAKE:?}: connection closed"
                );
                return;
            }
        },
    };
    let upstream = match connect_upstream(&shared, &addr).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(
                "client {peer}: connecting to the broker {addr}: {e}: connection closed"
            );
            return;
        }
    };
    let (cr, cw) = tokio::io::split(client);
    let (ur, uw) = tokio::io::split(upstream);
    let (tx, rx) = mpsc::channel::<Owed>(256);
    let mut reader = tokio::spawn(read_requests(shared.clone(), cr, uw, tx, peer));
    let mut writer = tokio::spawn(write_responses(shared, ur, cw, rx, peer, addr));
    tokio::select! {
        _ = &mut writer => reader.abort(),
        done = &mut reader => match done {
            Ok(End::Finished) => { let _ = writer.await; }
            _ => writer.abort(),
        },
    }
}

/// How long a TLS handshake may take, with a client or a broker.
const HANDSHAKE: std::time::Duration = std::time::Duration::from_secs(10);

/// A connection's byte stream: TCP, or TLS over TCP.
trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

type ReadHalf = tokio::io::ReadHalf<Box<dyn Io>>;
type WriteHalf = tokio::io::WriteHalf<Box<dyn Io>>;

/// Connects to the broker at `addr`, with TLS when the configuration says
/// so.
async fn connect_upstream(shared: &Shared, addr: &str) -> Result<Box<dyn Io>, String> {
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let _ = tcp.set_nodelay(true);
    let Some((connector, name)) = &shared.connector else {
        return Ok(Box::new(tcp));
    };
    let name = crate::tls::server_name(addr, name.as_deref())?;
    match tokio::time::timeout(HANDSHAKE, connector.0.connect(name, tcp)).await {
        Ok(Ok(tls)) => Ok(Box::new(tls)),
        Ok(Err(e)) => Err(format!("TLS handshake: {e}")),
        Err(_) => Err(format!("no TLS handshake within {HANDSHAKE:?}")),
    }
}

/// How the reading half of a connection ended.
enum End {
    /// The client closed, or the proxy is shutting down: answer what is owed.
    Finished,
    /// A refused frame or a broken connection: close now.
    Closed,
}

/// What a connection's client is owed, in order, and for an answer the
/// proxy made itself, what it holds until it is written
/// ([`crate::frame::hold_answer`]).
type Owed = (
    Pending,
    Option<(
        tokio::sync::OwnedSemaphorePermit,
        Option<tokio::sync::OwnedSemaphorePermit>,
    )>,
);

async fn read_requests(
    shared: Arc<Shared>,
    mut client: ReadHalf,
    mut upstream: WriteHalf,
    owed: mpsc::Sender<Owed>,
    peer: SocketAddr,
) -> End {
    let mut stopping = shared.stopping.clone();
    // The first 64 KiB of the answers this connection has queued; the rest
    // is held in the responses' pool.
    let answers = Arc::new(Semaphore::new(crate::frame::FIRST_READ));
    loop {
        if *stopping.borrow() {
            return End::Finished;
        }
        // A client that sends nothing (or trickles a frame) for the idle
        // time has its connection closed, and the broker connection with
        // it: idle connections do not pile up.
        let frame = tokio::select! {
            _ = stopping.changed() => return End::Finished,
            frame = tokio::time::timeout(
                shared.idle,
                read_frame_held(&mut client, shared.max_frame, &shared.requests_in_hand),
            ) => {
                match frame {
                    Ok(frame) => frame,
                    Err(_) => {
                        tracing::debug!(
                            "client {peer}: no whole request for {:?}: connection closed",
                            shared.idle
                        );
                        return End::Closed;
                    }
                }
            }
        };
        // The client's frame (a Produce's plaintext records): wiped when
        // this iteration ends, once every slice of it is dropped (it was
        // encrypted and forwarded, forwarded as it came, or refused). Its
        // bytes in hand are let go after it (`_held`, declared first).
        let (_held, frame) = match frame {
            Ok((f, held)) => (held, Wiped::new(f, shared.hooks.wipes())),
            Err(FrameError::Closed) => return End::Finished,
            Err(e @ FrameError::TooLong { .. }) => {
                stats::add(Event::FramesRefused, 1);
                tracing::warn!("client {peer}: refused: {e}: connection closed");
                return End::Closed;
            }
            Err(FrameError::Io(e)) if e.kind() == std::io::ErrorKind::OutOfMemory => {
                stats::add(Event::FramesRefused, 1);
                tracing::warn!("client {peer}: refused: {e}: connection closed");
                return End::Closed;
            }
            Err(FrameError::Io(e)) => {
                tracing::debug!("client {peer}: {e}");
                return End::Closed;
            }
        };
        let head = match dispatch::head(&frame) {
            Ok(head) => head,
            Err(refusal) => {
                tracing::warn!("client {peer}: refused {refusal}: connection closed");
                return End::Closed;
            }
        };
        let (key, version, correlation) = head;
        // A span per request: its API key, version and correlation id
        // (the partitions' spans, topic and partition, nest in it).
        let span =
            tracing::debug_span!("request", api_key = key, api_version = version, correlation);
        let cx = shared.context();
        // What decoding this request may take, given back once it is
        // routed: never held while a peer is slow (the encrypted frame
        // waiting for the broker is this connection's one request in hand).
        let routed = in_place(
            dispatch::request_is_heavy(&cx, key) && !shared.hooks.kms_on_the_worker,
            || {
                let budget = Budget::new(&shared.pool, shared.request_budget, shared.max_frame);
                span.in_scope(|| dispatch::route(&cx, &frame, head, &budget))
            },
        );
        let Routed {
            owe,
            send,
            answered,
        } = match routed {
            Ok(routed) => routed,
            Err(refusal) => {
                tracing::warn!(
                    "client {peer}: refused {refusal}: connection closed, nothing forwarded"
                );
                return End::Closed;
            }
        };
        match answered {
            Answered::Nothing => {}
            Answered::Partitions(refused) => log_refused(peer, &refused),
            Answered::KeyStoreAdmin(api) => tracing::warn!(
                "client {peer}: refused a {api:?} (correlation id {correlation}) that names a \
                 key-store topic: answered TOPIC_AUTHORIZATION_FAILED, nothing forwarded"
            ),
        }
        // What goes to the broker: the client's frame (a handle, dropped
        // first: declared after it) or the encrypted one.
        let send = send.map(|b| Wiped::new(b, shared.hooks.wipes()));
        if let Some(owe) = owe {
            // An answer the proxy made itself is held until it is written,
            // as a broker's response is: a client that asks for many large
            // answers and never reads them cannot grow the process with
            // them.
            let held = match &owe {
                Pending::Local(answer) => {
                    let hold = crate::frame::hold_answer(
                        answer.len(),
                        &answers,
                        &shared.responses_in_hand,
                        shared.in_hand_max,
                    );
                    let held = tokio::select! {
                        _ = stopping.changed() => return End::Finished,
                        held = hold => held,
                    };
                    match held {
                        Ok(held) => Some(held),
                        Err(e) => {
                            stats::add(Event::FramesRefused, 1);
                            tracing::warn!(
                                "client {peer}: an answer of the proxy's own: {e}: connection closed"
                            );
                            return End::Closed;
                        }
                    }
                }
                Pending::Upstream { .. } => None,
            };
            if owed.send((owe, held)).await.is_err() {
                return End::Closed;
            }
        }
        if let Some(send) = send {
            if let Err(e) = write_frame(&mut upstream, &send).await {
                tracing::debug!("client {peer}: writing to the broker: {e}");
                return End::Closed;
            }
        }
    }
}

/// The most partitions of one request or response logged one by one; the
/// rest are counted in one line. A request of 64 KiB can name 10,000
/// partitions: a line each would be megabytes of log per request.
const LOGGED_PER_REQUEST: usize = 8;

/// Logs the first [`LOGGED_PER_REQUEST`] of `items` with `line`, and how
/// many more there were with `rest`.
fn log_bounded<T>(items: &[T], line: impl Fn(&T), rest: impl FnOnce(usize)) {
    for item in items.iter().take(LOGGED_PER_REQUEST) {
        line(item);
    }
    if items.len() > LOGGED_PER_REQUEST {
        rest(items.len() - LOGGED_PER_REQUEST);
    }
}

fn log_refused(peer: SocketAddr, refused: &[Refused]) {
    log_bounded(
        refused,
        |r| {
            tracing::warn!(
                "client {peer}: refused a Produce to {}-{}: {}: answered error code {}, \
                 nothing written",
                r.topic.as_str(),
                r.partition,
                r.reason,
                r.code
            )
        },
        |more| {
            tracing::warn!(
                "client {peer}: refused {more} more partitions of that Produce, nothing written"
            )
        },
    );
}

async fn write_responses(
    shared: Arc<Shared>,
    mut upstream: ReadHalf,
    mut client: WriteHalf,
    mut owed: mpsc::Receiver<Owed>,
    peer: SocketAddr,
    broker: String,
) {
    let map_shared = shared.clone();
    let map = move |node: i32, host: &str, port: i32| map_shared.node_address(node, host, port);
    while let Some((pending, _answer_held)) = owed.recv().await {
        // The frame to write (the connection's one response in hand), and
        // the broker's frame's bytes in hand, let go once it is written.
        let (_held, out) = match pending {
            Pending::Local(frame) => (None, frame),
            Pending::Upstream { correlation, then } => {
                let read =
                    read_frame_held(&mut upstream, shared.max_frame, &shared.responses_in_hand);
                let (frame, held) = match read.await {
                    Ok(f) => f,
                    Err(FrameError::Closed) => {
                        tracing::debug!("client {peer}: the broker {broker} closed the connection");
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(
                            "client {peer}: from the broker {broker}: {e}: connection closed"
                        );
                        return;
                    }
                };
                if api::response_correlation(&frame) != Some(correlation) {
                    tracing::warn!(
                        "client {peer}: the broker {broker} answered out of order \
                         (correlation id {:?}, {correlation} expected): connection closed",
                        api::response_correlation(&frame)
                    );
                    return;
                }
                let span = tracing::debug_span!("response", correlation);
                // The decoding's budget is given back once the response is
                // made, never held while the client is slow to read it.
                let cx = shared.context();
                let handed = in_place(
                    dispatch::response_is_heavy(&cx, &then) && !shared.hooks.kms_on_the_worker,
                    || {
                        let budget =
                            Budget::new(&shared.pool, shared.request_budget, shared.max_frame);
                        span.in_scope(|| dispatch::respond(&cx, frame, then, &map, &budget))
                    },
                );
                match handed {
                    Ok((out, failed)) => {
                        log_bounded(
                            &failed,
                            |f| {
                                tracing::warn!(
                                    "client {peer}: refused to hand on {}-{} of a Fetch: {}: \
                                     answered CORRUPT_MESSAGE, no records",
                                    f.topic,
                                    f.partition,
                                    f.reason
                                )
                            },
                            |more| {
                                tracing::warn!(
                                    "client {peer}: refused to hand on {more} more partitions \
                                     of that Fetch"
                                )
                            },
                        );
                        (Some(held), out)
                    }
                    Err(reason) => {
                        tracing::warn!(
                            "client {peer}: a response from the broker {broker} cannot be \
                             handed on: {reason}: connection closed"
                        );
                        return;
                    }
                }
            }
        };
        // Written, then wiped: a Fetch response holds the decrypted records.
        // (tokio hands it to the socket; rustls copies it into its own
        // buffers first, which this cannot reach.)
        let out = Wiped::new(out, shared.hooks.wipes());
        match tokio::time::timeout(shared.idle, write_frame(&mut client, &out)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::debug!("client {peer}: writing to the client: {e}");
                return;
            }
            Err(_) => {
                tracing::debug!(
                    "client {peer}: took no response for {:?}: connection closed",
                    shared.idle
                );
                return;
            }
        }
    }
    let _ = tokio::io::AsyncWriteExt::shutdown(&mut client).await;
}

/// Runs `work` where it stands; when it may call a KMS or holds the CPU
/// for long (`heavy`: a Produce or a Fetch response of policy topics, which
/// may take up to the request's decoding budget), on a multi-thread
/// runtime in `block_in_place`, so the worker hands its other connections
/// to another thread meanwhile (the library's typed clients do the same
/// for KMS calls): a client's large requests do not hold up the others'.
/// On a current-thread runtime it runs inline. Never moved to another
/// task: a connection's requests stay in order.
fn in_place<T>(heavy: bool, work: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(runtime) if heavy && runtime.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_of_many_refused_partitions_logs_a_bounded_number_of_lines() {
        let lines = std::cell::Cell::new(0);
        let mut rest = None;
        let partitions: Vec<i32> = (0..10_900).collect();
        log_bounded(
            &partitions,
            |_| lines.set(lines.get() + 1),
            |n| rest = Some(n),
        );
        assert_eq!(
            (lines.get(), rest),
            (LOGGED_PER_REQUEST, Some(10_900 - LOGGED_PER_REQUEST))
        );
        let (lines, mut rest) = (std::cell::Cell::new(0), None);
        log_bounded(
            &partitions[..3],
            |_| lines.set(lines.get() + 1),
            |n| rest = Some(n),
        );
        assert_eq!((lines.get(), rest), (3, None));
    }
}
