//! GET bodies sent from the page cache by the kernel (`sendfile`), never copied through ours:
//! both ends of the placeholder contract live here. [`SendfileLane`] is the body's end (a response
//! body queues a file stretch and carries a placeholder for it); [`SendfileSocket`] is the
//! connection's end (the writer under hyper that sends the stretch for the placeholder).

mod lane;
mod socket;

pub use lane::{PLACEHOLDER_MAX, Send, SendfileLane, bytes_stood_in};
pub use socket::{ROOM_WAIT, SEND_WAIT, SendfileSocket, WithLane, stalls};

/// The process's sendfile counters in Prometheus text (`# TYPE` lines included), for the
/// gateway's and the agent's metrics endpoints.
pub fn render_metrics() -> String {
    format!(
        "# HELP sluice_sendfile_bytes_total Bytes of GET bodies sent from the page cache by sendfile.\n\
         # TYPE sluice_sendfile_bytes_total counter\n\
         sluice_sendfile_bytes_total {}\n\
         # HELP sluice_sendfile_handbacks_total Sends handed back to the runtime because the client made no room in time.\n\
         # TYPE sluice_sendfile_handbacks_total counter\n\
         sluice_sendfile_handbacks_total {}\n",
        bytes_stood_in(),
        stalls()
    )
}
