//! Serving HTTP for both processes, the gateway and the node agent: the accept loop
//! ([`serve_http`]), the reads under hyper ([`framing`]), the writes under hyper
//! ([`sendfile`]), the connection rules S3 clients need ([`connection`]), TLS with a
//! certificate reloadable while serving ([`tls`]) and what each request is to its client and
//! to the logs: an id, a span, one line ([`request`]).
//!
//! # The contract with hyper
//!
//! Two things here work only because of how hyper 1 drives a connection's I/O, and both are
//! pinned by tests in this crate (`tests/hyper_contract.rs`), so that an upgrade of hyper that
//! changes them fails the suite instead of corrupting a response:
//!
//! 1. **Writes.** With `http1().writev(true)`, hyper queues each body chunk as the `Bytes` it
//!    was given and hands the queue to the socket with `poll_write_vectored`, unflattened: a
//!    chunk reaches [`sendfile::SendfileSocket`] at the address it was created with. That is
//!    how a placeholder (a slice of one static run of zeros) is recognised and replaced by the
//!    file stretch its [`sendfile::SendfileLane`] names. If hyper ever copied chunks into a
//!    buffer of its own, placeholders would arrive at other addresses, as plain zeros: the
//!    socket then meets a write without the placeholder of a stretch still queued, fails it,
//!    and the connection breaks (the client sees a short body, never zeros). The tests serve
//!    placeholder bodies of many shapes through [`serve_http`] and check that the client
//!    receives the file's bytes, that an unaccounted placeholder breaks the connection, that
//!    so does a server that flattens bodies (`writev(false)`), and that HTTP/2 gets no lane.
//! 2. **Reads.** hyper reads from the connection into its own buffer and hands body pieces on
//!    in the order and with the boundaries of those reads. [`framing::PageReads`] ends every
//!    read inside a body on a 4 KiB page of it, so that with page-aligned buffers (the binary's
//!    allocator, `sluice-alloc`) pieces arrive in phase for `O_DIRECT` writes
//!    (`sluice_store::LocalDisk`). This is a performance contract only: pieces out of phase
//!    are copied, never lost (`tests/in_phase.rs`).
//!
//! A placeholder must never leave as zeros: anything that reads the bytes between hyper and
//! the socket (TLS, say) must not be offered a lane, and HTTP/2 never is ([`sendfile::WithLane`]);
//! a TLS connection never is either ([`serve`]).

pub mod connection;
pub mod framing;
mod listener;
pub mod request;
pub mod sendfile;
pub mod tls;
pub mod unread;

pub use connection::{HEADER_SECTION_MAX, HttpService};
pub use listener::{HEADER_READ_TIMEOUT, serve, serve_http};
pub use request::{DEFAULT_LOG_FILTER, RequestId};
