//! The accept loop of every listener of the gateway and the node agent.

use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::framing::PageReads;
use crate::sendfile::{SendfileLane, SendfileSocket, WithLane};
use crate::tls::ServerTls;

/// Requests in flight at shutdown get this long to finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// How long a client may take to send a request's headers. hyper's header timer also runs
/// while a keep-alive connection waits for its next request, so an idle connection is closed
/// after as long: a client that connects and sends nothing, or trickles its headers, holds a
/// socket for at most this.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Accepts connections on `listener` and serves HTTP/1.1 and HTTP/2 with `service` until
/// `stop` turns true, then lets requests in flight finish (bounded). Headers must arrive
/// within `header_timeout` ([`HEADER_READ_TIMEOUT`]); HTTP/2 peers that stop answering pings
/// are dropped. Reads end on pages of request bodies ([`PageReads`]), so that large bodies
/// reach the local disk without a copy; HTTP/1 GET bodies leave it by `sendfile`
/// ([`SendfileSocket`]). Every plain listener of the gateway and the node agent.
pub async fn serve_http<S, B>(
    listener: TcpListener,
    service: S,
    header_timeout: Duration,
    stop: watch::Receiver<bool>,
) where
    S: hyper::service::Service<http::Request<Incoming>, Response = http::Response<B>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    serve(listener, None, service, header_timeout, stop).await;
}

/// [`serve_http`], over TLS when `tls` is given: the handshake (within `header_timeout`) in
/// the connection's own task, HTTP/2 by ALPN, and no sendfile lane (see [`crate::tls`]).
pub async fn serve<S, B>(
    listener: TcpListener,
    tls: Option<ServerTls>,
    service: S,
    header_timeout: Duration,
    mut stop: watch::Receiver<bool>,
) where
    S: hyper::service::Service<http::Request<Incoming>, Response = http::Response<B>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut http = auto::Builder::new(TokioExecutor::new());
    http.http1()
        // Body chunks go to the socket unflattened (see `sendfile`).
        .writev(true)
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    http.http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(header_timeout);
    let http = Arc::new(http);
    let graceful = GracefulShutdown::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (sock, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        continue;
                    }
                };
                let _ = sock.set_nodelay(true);
                let watcher = graceful.watcher();
                let http = Arc::clone(&http);
                let service = service.clone();
                if let Some(tls) = &tls {
                    let acceptor = tls.acceptor();
                    tokio::spawn(async move {
                        let handshake = tokio::time::timeout(header_timeout, acceptor.accept(sock));
                        let sock = match handshake.await {
                            Ok(Ok(s)) => s,
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                                return;
                            }
                            Err(_) => {
                                tracing::debug!(%peer, "TLS handshake timed out");
                                return;
                            }
                        };
                        // rustls reads every byte hyper writes: no lane (see `sendfile`).
                        let io = TokioIo::new(PageReads::new(sock));
                        let conn = watcher.watch(http.serve_connection(io, service).into_owned());
                        if let Err(e) = conn.await {
                            tracing::debug!(error = %e, "connection ended with an error");
                        }
                    });
                    continue;
                }
                // hyper must write straight into the `SendfileSocket` that holds this lane:
                // anything between them that reads the bytes (TLS, say) would read the
                // placeholders' zeros, so such a connection must not be offered a lane.
                let lane = SendfileLane::default();
                let io = TokioIo::new(PageReads::new(SendfileSocket::new(sock, lane.clone())));
                let service = WithLane { inner: service, lane };
                let conn = watcher.watch(http.serve_connection(io, service).into_owned());
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                });
            }
            _ = stop.changed() => break,
        }
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still in flight after the shutdown grace period");
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::io::{Read as _, Write as _};

    use std::net::SocketAddr;

    use super::*;

    /// A request's bytes until the server closes the connection; an error if it has not after
    /// 10 s (the timeouts under test are 200 ms).
    fn until_closed(addr: SocketAddr, request: &'static [u8]) -> std::io::Result<Vec<u8>> {
        let mut s = std::net::TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        s.write_all(request)?;
        let mut got = Vec::new();
        s.read_to_end(&mut got)?;
        Ok(got)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn trickled_headers_and_idle_keep_alive_connections_are_closed() -> std::io::Result<()> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let svc = hyper::service::service_fn(|_req| async {
            Ok::<_, Infallible>(http::Response::new(http_body_util::Full::new(
                bytes::Bytes::from_static(b"ok"),
            )))
        });
        let (stop, rx) = watch::channel(false);
        let server = tokio::spawn(serve_http(listener, svc, Duration::from_millis(200), rx));
        let (partial, idle) = tokio::task::spawn_blocking(move || {
            // Headers that never end.
            let partial = until_closed(addr, b"GET / HTTP/1.1\r\nHost: x\r\n")?;
            // A whole request, answered, then nothing: the connection waits for the next one.
            let idle = until_closed(addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")?;
            std::io::Result::Ok((partial, idle))
        })
        .await??;
        assert!(!partial.starts_with(b"HTTP/1.1 200"), "{partial:?}");
        let idle = String::from_utf8_lossy(&idle);
        assert!(
            idle.starts_with("HTTP/1.1 200") && idle.ends_with("ok"),
            "{idle}"
        );
        let _ = stop.send(true);
        let _ = server.await;
        Ok(())
    }
}
