//! A request body its handler left unread, read to its end before the response leaves.
//!
//! A handler may answer before it has read the body: a PUT over quota is refused from its
//! `Content-Length`, a bad signature from its headers. hyper then sends the response and,
//! the body unread, closes the HTTP/1 connection; the client is still sending, and a socket
//! closed with bytes in its receive queue is reset (RST), not ended. The reset reaches the
//! client while it writes, or before it has read the response out of its own queue: it sees
//! "connection reset" or "error sending request" in place of `QuotaExceeded`, and retries a
//! request that will be refused again (object_store did exactly that, in CI).
//!
//! So the rest of a body the handler dropped is read and thrown away before the response is
//! handed to hyper, when what is left is at most [`LINGER_MAX`] bytes and arrives within
//! [`LINGER_FOR`]; the client then finishes sending, reads the refusal, and keeps its
//! connection. A body larger than that, or slower, is not waited for: the response goes with
//! `Connection: close` (the reset remains possible; S3 does the same with its 400s on huge
//! bodies). A request that sent `Expect: 100-continue` and whose body was never asked for has
//! sent nothing to drain: it is answered at once, as RFC 9110 intends, and its connection
//! closed. HTTP/2 needs none of this: a stream is reset on its own, the connection stays.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};

/// The most of a left body that is read before a response, rather than the connection closed.
pub const LINGER_MAX: u64 = 16 * 1024 * 1024;

/// How long the rest of a left body is waited for.
pub const LINGER_FOR: Duration = Duration::from_secs(5);

/// What the body was when its handler let go of it.
struct Left {
    body: Incoming,
    polled: bool,
}

/// A request body that, dropped before its end, hands itself back through `slot`.
pub(crate) struct Returning {
    body: Option<Incoming>,
    polled: bool,
    slot: Arc<Mutex<Option<Left>>>,
}

/// The other end of a [`Returning`]: where a body dropped unread comes back.
pub(crate) struct Slot(Arc<Mutex<Option<Left>>>);

/// `body` as the handler gets it, and the slot it returns to if left unread.
pub(crate) fn returning(body: Incoming) -> (Returning, Slot) {
    let slot = Arc::new(Mutex::new(None));
    (
        Returning {
            body: Some(body),
            polled: false,
            slot: Arc::clone(&slot),
        },
        Slot(slot),
    )
}

impl Body for Returning {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        self.polled = true;
        match self.body.as_mut() {
            Some(body) => Pin::new(body).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.body
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
    }
}

impl Drop for Returning {
    fn drop(&mut self) {
        if let Some(body) = self.body.take()
            && !body.is_end_stream()
            && let Ok(mut slot) = self.slot.lock()
        {
            *slot = Some(Left {
                body,
                polled: self.polled,
            });
        }
    }
}

/// Whether a response may leave on a connection that stays open.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Settled {
    /// The body was read to its end, by its handler or here.
    Read,
    /// The rest is not waited for: the response closes the connection.
    Close,
}

impl Slot {
    /// Reads to its end what the handler left of the body, within [`LINGER_MAX`] and
    /// [`LINGER_FOR`]. Called once the response is decided (its handler has let the body go).
    pub(crate) async fn settle(self, expects_continue: bool) -> Settled {
        let left = self.0.lock().ok().and_then(|mut slot| slot.take());
        let Some(Left { mut body, polled }) = left else {
            return Settled::Read;
        };
        if expects_continue && !polled {
            return Settled::Close;
        }
        let known = body.size_hint().upper().unwrap_or(u64::MAX);
        if known > LINGER_MAX {
            return Settled::Close;
        }
        let drain = async {
            let mut read = 0u64;
            while let Some(frame) =
                std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
            {
                let Ok(frame) = frame else {
                    return Settled::Close;
                };
                if let Some(data) = frame.data_ref() {
                    read += data.len() as u64;
                    if read > LINGER_MAX {
                        return Settled::Close;
                    }
                }
            }
            Settled::Read
        };
        tokio::time::timeout(LINGER_FOR, drain)
            .await
            .unwrap_or(Settled::Close)
    }
}
