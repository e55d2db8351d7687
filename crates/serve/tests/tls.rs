//! TLS on a listener through the real [`serve`]: HTTP/1.1 and HTTP/2 (by ALPN), no sendfile
//! lane for a TLS connection (its placeholders would leave as zeros), no HTTP answer to plain
//! HTTP, and a certificate reloaded for new connections while a bad one is refused.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, ServerName};
use sluice_serve::sendfile::SendfileLane;
use sluice_serve::tls::ServerTls;
use sluice_serve::{HEADER_READ_TIMEOUT, serve};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_rustls::TlsConnector;

/// A private CA and what it signs, written as PEM files in a temporary directory.
struct Pki {
    dir: tempfile::TempDir,
    ca: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
}

impl Pki {
    fn new() -> Self {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = params.self_signed(&key).expect("CA");
        Self {
            dir: tempfile::tempdir().expect("tempdir"),
            ca: ca.der().clone(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A certificate for `localhost` signed by the CA: (its DER, cert path, key path).
    fn leaf(&self, name: &str) -> (CertificateDer<'static>, PathBuf, PathBuf) {
        let key = KeyPair::generate().expect("key");
        let cert = CertificateParams::new(vec!["localhost".to_owned()])
            .expect("params")
            .signed_by(&key, &self.issuer)
            .expect("sign");
        let (c, k) = (
            self.path(&format!("{name}.crt")),
            self.path(&format!("{name}.key")),
        );
        std::fs::write(&c, cert.pem()).expect("write cert");
        std::fs::write(&k, key.serialize_pem()).expect("write key");
        (cert.der().clone(), c, k)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn connector(&self, alpn: &[&[u8]]) -> TlsConnector {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca.clone()).expect("root");
        let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        TlsConnector::from(Arc::new(config))
    }
}

/// Serves, over TLS with `tls`, a responder that says whether the request carried a lane.
async fn start(tls: ServerTls) -> (std::net::SocketAddr, watch::Sender<bool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let svc = hyper::service::service_fn(|req: http::Request<hyper::body::Incoming>| async move {
        let lane = req.extensions().get::<SendfileLane>().is_some();
        let body = if lane { "a lane" } else { "no lane" };
        Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(
            body.as_bytes(),
        ))))
    });
    let (stop, rx) = watch::channel(false);
    tokio::spawn(serve(listener, Some(tls), svc, HEADER_READ_TIMEOUT, rx));
    (addr, stop)
}

/// The certificate the server presents to a new connection.
async fn presented(pki: &Pki, addr: std::net::SocketAddr) -> CertificateDer<'static> {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let name = ServerName::try_from("localhost").expect("name");
    let tls = pki
        .connector(&[])
        .connect(name, tcp)
        .await
        .expect("handshake");
    tls.get_ref().1.peer_certificates().expect("certs")[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_http1_and_h2_without_a_lane_and_plain_http_gets_no_http_answer() {
    let pki = Pki::new();
    let (_, cert, key) = pki.leaf("a");
    let (addr, _stop) = start(ServerTls::load("[gateway]", &cert, &key).expect("load")).await;
    let name = ServerName::try_from("localhost").expect("name");

    // HTTP/1.1: answered, and without a lane.
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let connector = pki.connector(&[b"http/1.1"]);
    let mut tls = connector
        .connect(name.clone(), tcp)
        .await
        .expect("handshake");
    tls.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .expect("write");
    let mut got = Vec::new();
    tls.read_to_end(&mut got).await.expect("read");
    let got = String::from_utf8_lossy(&got);
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(got.ends_with("no lane"), "{got}");

    // HTTP/2, chosen by ALPN.
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let tls = pki
        .connector(&[b"h2", b"http/1.1"])
        .connect(name, tcp)
        .await
        .expect("handshake");
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        TokioIo::new(tls),
    )
    .await
    .expect("h2 handshake");
    tokio::spawn(conn);
    let req = http::Request::get("https://localhost/")
        .body(http_body_util::Empty::<Bytes>::new())
        .expect("request");
    let resp = send.send_request(req).await.expect("h2 request");
    assert_eq!(resp.version(), http::Version::HTTP_2);
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(&body[..], b"no lane");

    // Plain HTTP to the TLS port: rustls takes it for a broken handshake and answers, if at
    // all, with a TLS alert record (content type 21), never with HTTP.
    let mut tcp = TcpStream::connect(addr).await.expect("connect");
    tcp.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    let mut got = Vec::new();
    let _ = tcp.read_to_end(&mut got).await;
    assert!(!got.starts_with(b"HTTP/"), "{got:?}");
    assert!(got.is_empty() || got[0] == 21, "{got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reloaded_certificate_is_presented_to_new_connections_and_a_bad_one_is_refused() {
    let pki = Pki::new();
    let (first, cert_a, key_a) = pki.leaf("a");
    let (second, cert_b, key_b) = pki.leaf("b");
    let tls = ServerTls::load("[agent]", &cert_a, &key_a).expect("load");
    let (addr, _stop) = start(tls.clone()).await;
    assert_eq!(presented(&pki, addr).await, first);

    tls.reload(&cert_b, &key_b).expect("reload");
    assert_eq!(presented(&pki, addr).await, second);

    // A key that is not the certificate's, a missing file, a file that is no PEM: each is
    // refused naming the key and the file, and the served certificate stays.
    let err = tls
        .reload(&cert_a, &key_b)
        .expect_err("mismatch")
        .to_string();
    assert!(
        err.starts_with(&format!(
            "`[agent] tls_key` {}: not the private key",
            key_b.display()
        )),
        "{err}"
    );
    let missing = pki.path("missing.crt");
    let err = tls
        .reload(&missing, &key_a)
        .expect_err("missing")
        .to_string();
    assert!(
        err.starts_with(&format!(
            "`[agent] tls_cert` {}: cannot read",
            missing.display()
        )),
        "{err}"
    );
    let junk = pki.path("junk.pem");
    std::fs::write(&junk, "not a certificate\n").expect("write");
    let err = tls.reload(&junk, &key_a).expect_err("junk").to_string();
    assert!(
        err.contains("`[agent] tls_cert`") && err.contains("no certificate"),
        "{err}"
    );
    let err = tls
        .reload(&cert_a, &junk)
        .expect_err("junk key")
        .to_string();
    assert!(
        err.contains("`[agent] tls_key`") && err.contains("no PEM private key"),
        "{err}"
    );
    assert_eq!(presented(&pki, addr).await, second);
}
