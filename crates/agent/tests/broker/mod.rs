//! A stand-in key broker for the agent's tests: the Confidential Data Hub's resource API
//! (`GET /cdh/resource/<repository>/<type>/<tag>`, the resource's raw bytes) on loopback,
//! releasing a resource only to a request whose `sluice-evidence` header is the expected
//! token (403 otherwise), 404 for a resource it does not hold. A test can add and remove
//! resources (removal: crypto-shred at the broker) and change the expected token. The real
//! CDH attests to the Trustee KBS itself; this machine has no TEE, so a token stands in.
//! `tests/e2e/keybroker.py` is the same broker for the Python end-to-end tests.

#![allow(dead_code)] // each test file uses part of it

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub const PREFIX: &str = "/cdh/resource/";

#[derive(Default)]
struct State {
    resources: HashMap<String, Vec<u8>>,
    evidence: String,
    /// Requests answered, by status.
    answered: HashMap<u16, u64>,
}

pub struct Broker {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Broker {
    /// A broker on a free loopback port that releases only to `evidence`.
    pub async fn start(evidence: &str) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the broker");
        let addr = listener.local_addr().expect("address");
        let state = Arc::new(Mutex::new(State {
            evidence: evidence.to_owned(),
            ..State::default()
        }));
        let shared = Arc::clone(&state);
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let state = Arc::clone(&shared);
                tokio::spawn(answer(stream, state));
            }
        });
        Self { addr, state, task }
    }

    /// The resource's URL (`repository/type/tag`).
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{PREFIX}{path}", self.addr)
    }

    pub fn put(&self, path: &str, bytes: &[u8]) {
        self.lock()
            .resources
            .insert(path.to_owned(), bytes.to_vec());
    }

    /// Removes the resource: from then on the broker answers 404 for it.
    pub fn remove(&self, path: &str) {
        self.lock().resources.remove(path);
    }

    pub fn expect_evidence(&self, evidence: &str) {
        evidence.clone_into(&mut self.lock().evidence);
    }

    /// How many requests were answered with `status`.
    pub fn answered(&self, status: u16) -> u64 {
        self.lock().answered.get(&status).copied().unwrap_or(0)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("broker state")
    }
}

/// One request on one connection (closed after the answer).
async fn answer(mut stream: tokio::net::TcpStream, state: Arc<Mutex<State>>) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&head);
    let mut lines = text.split("\r\n");
    let mut request = lines.next().unwrap_or_default().split(' ');
    let (method, target) = (request.next().unwrap_or(""), request.next().unwrap_or(""));
    let evidence = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("sluice-evidence"))
        .map(|(_, v)| v.trim().to_owned());
    let (status, body): (u16, Vec<u8>) = {
        let mut s = state.lock().expect("broker state");
        let answer = match (method, target.strip_prefix(PREFIX)) {
            ("GET", Some(path)) if evidence.as_deref() == Some(s.evidence.as_str()) => {
                match s.resources.get(path) {
                    Some(bytes) => (200, bytes.clone()),
                    None => (404, format!("no resource {path}").into_bytes()),
                }
            }
            ("GET", Some(_)) => (403, b"the evidence does not satisfy the policy".to_vec()),
            _ => (404, b"not a resource request".to_vec()),
        };
        *s.answered.entry(answer.0).or_default() += 1;
        answer
    };
    let reason = match status {
        200 => "OK",
        403 => "Forbidden",
        _ => "Not Found",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/octet-stream\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(&body).await;
    let _ = stream.shutdown().await;
}
