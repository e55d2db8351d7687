//! How [`Upstream`] classifies what the upstream answers: by status, whatever the text says,
//! against a loopback server that answers every request with one fixed status and body.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use object_store::{GetOptions, GetRange};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;

/// Answers every request on a loopback port with `status` and `body` (none to a HEAD), and
/// counts the requests; returns the endpoint.
async fn answering(status: u16, body: &'static str) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let count = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&count);
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            seen.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(answer(sock, status, body));
        }
    });
    (format!("http://{addr}"), count)
}

/// Reads one request (head and `Content-Length` body), answers, closes.
async fn answer(mut sock: TcpStream, status: u16, body: &'static str) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        let Ok(n) = sock.read(&mut chunk).await else {
            return;
        };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut have = buf.len() - head_end;
    while have < length {
        match sock.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => have += n,
        }
    }
    let body = if head.starts_with("head ") { "" } else { body };
    let resp = format!(
        "HTTP/1.1 {status} Fixed\r\ncontent-type: application/xml\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = sock.write_all(resp.as_bytes()).await;
    let _ = sock.shutdown().await;
}

fn upstream(endpoint: &str) -> Upstream {
    let creds = HashMap::from([(
        "t".to_owned(),
        Credentials {
            access_key: "AKT".into(),
            secret_key: "secret".into(),
        },
    )]);
    Upstream::new(endpoint, "us-east-1", creds).expect("client")
}

fn s3_error(code: &str, message: &str) -> &'static str {
    Box::leak(
        format!(
            "<?xml version=\"1.0\"?><Error><Code>{code}</Code><Message>{message}</Message></Error>"
        )
        .into_boxed_str(),
    )
}

async fn put(u: &Upstream) -> Result<Option<String>, UpstreamError> {
    let object = ObjectRecord::default();
    UpstreamStore::put(u, "t", "b", "k", PutPayload::from_static(b"body"), &object).await
}

#[tokio::test]
async fn error_answers_are_classified_by_their_status_whatever_their_text_says() {
    // A 500 that says "SlowDown" and "503" in its text is still a 500; a 403 naming 503 is
    // still a refusal.
    let cases: [(u16, &str, UpstreamError); 7] = [
        (
            503,
            s3_error("SlowDown", "Please reduce your request rate."),
            UpstreamError::SlowDown("SlowDown: Please reduce your request rate.".into()),
        ),
        (429, "", UpstreamError::SlowDown("Too Many Requests".into())),
        (
            500,
            s3_error("InternalError", "SlowDown 503"),
            UpstreamError::Unavailable("InternalError: SlowDown 503".into()),
        ),
        (502, "", UpstreamError::Unavailable("Bad Gateway".into())),
        (
            403,
            s3_error("QuotaExceeded", "503 bytes over"),
            UpstreamError::Refused {
                status: 403,
                message: "QuotaExceeded: 503 bytes over".into(),
            },
        ),
        (
            400,
            s3_error("InvalidArgument", "no"),
            UpstreamError::Refused {
                status: 400,
                message: "InvalidArgument: no".into(),
            },
        ),
        (
            404,
            s3_error("NoSuchBucket", "none"),
            UpstreamError::NotFound,
        ),
    ];
    for (status, body, expected) in cases {
        let (endpoint, _) = answering(status, body).await;
        let u = upstream(&endpoint);
        assert_eq!(
            put(&u).await,
            Err(expected.clone()),
            "PUT answered {status}"
        );
        let created = UpstreamStore::create_bucket(&u, "t", "b").await;
        assert_eq!(
            created,
            Err(expected.clone()),
            "CreateBucket answered {status}"
        );
        let completed =
            UpstreamStore::complete_multipart(&u, "t", "b", "k", "id", vec!["e".into()]).await;
        assert_eq!(
            completed,
            Err(expected),
            "CompleteMultipartUpload answered {status}"
        );
    }
}

#[tokio::test]
async fn a_refusal_reads_as_what_the_upstream_said_with_its_status() {
    let (endpoint, _) = answering(403, s3_error("QuotaExceeded", "tenant t is full")).await;
    let e = put(&upstream(&endpoint)).await.expect_err("refused");
    assert!(e.is_permanent());
    assert_eq!(
        e.to_string(),
        "upstream refused: QuotaExceeded: tenant t is full (403)"
    );
}

#[tokio::test]
async fn object_store_does_not_retry_an_error_answer_the_drain_retries_it() {
    let (endpoint, count) = answering(503, s3_error("SlowDown", "later")).await;
    let e = put(&upstream(&endpoint)).await.expect_err("throttled");
    assert!(matches!(e, UpstreamError::SlowDown(_)), "{e}");
    assert_eq!(count.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn head_of_an_absent_key_is_none_and_a_throttled_head_is_an_error() {
    let (endpoint, _) = answering(404, "").await;
    assert_eq!(
        UpstreamStore::head(&upstream(&endpoint), "t", "b", "k").await,
        Ok(None)
    );
    let (endpoint, _) = answering(503, "").await;
    let e = UpstreamStore::head(&upstream(&endpoint), "t", "b", "k").await;
    assert!(matches!(e, Err(UpstreamError::SlowDown(_))), "{e:?}");
}

#[tokio::test]
async fn a_range_outside_the_object_is_range_not_satisfiable() {
    let (endpoint, _) = answering(416, s3_error("InvalidRange", "out of range")).await;
    let options = GetOptions {
        range: Some(GetRange::Bounded(100..200)),
        ..GetOptions::default()
    };
    let got = upstream(&endpoint).get("t", "b", "k", options).await;
    assert!(
        matches!(got, Err(UpstreamError::RangeNotSatisfiable)),
        "{:?}",
        got.err()
    );
}

#[tokio::test]
async fn a_bucket_already_ours_is_created_and_one_taken_by_another_is_refused() {
    let (endpoint, _) = answering(409, s3_error("BucketAlreadyOwnedByYou", "yours")).await;
    assert_eq!(
        UpstreamStore::create_bucket(&upstream(&endpoint), "t", "b").await,
        Ok(())
    );
    let (endpoint, _) = answering(409, s3_error("BucketAlreadyExists", "taken")).await;
    let e = UpstreamStore::create_bucket(&upstream(&endpoint), "t", "b").await;
    assert_eq!(
        e,
        Err(UpstreamError::Refused {
            status: 409,
            message: "BucketAlreadyExists: taken".into()
        })
    );
    let (endpoint, _) = answering(404, "").await;
    assert_eq!(upstream(&endpoint).bucket_exists("t", "b").await, Ok(false));
}

#[tokio::test]
async fn no_answer_is_unavailable_and_a_tenant_without_keys_is_refused() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let u = upstream(&format!("http://{addr}"));
    let e = put(&u).await.expect_err("nothing listens");
    assert!(matches!(e, UpstreamError::Unavailable(_)), "{e}");
    let e = UpstreamStore::delete(&u, "nobody", "b", "k").await;
    assert!(
        matches!(e, Err(UpstreamError::Refused { status: 403, .. })),
        "{e:?}"
    );
}

#[test]
fn list_buckets_answers_parse() {
    let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<ListAllMyBucketsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Buckets><Bucket><Name>ckpt</Name><CreationDate>2026-11-29T18:30:29.000Z</CreationDate><BucketRegion>us-east-1</BucketRegion></Bucket><Bucket><Name>data</Name></Bucket></Buckets><Owner><ID>alice</ID><DisplayName>alice</DisplayName></Owner></ListAllMyBucketsResult>"#;
    let parsed: ListAllMyBucketsResult = quick_xml::de::from_str(xml).expect("parses");
    let names: Vec<_> = parsed
        .buckets
        .bucket
        .iter()
        .map(|b| b.name.as_str())
        .collect();
    assert_eq!(names, ["ckpt", "data"]);
    assert_eq!(
        parsed.buckets.bucket[0].creation_date.as_deref(),
        Some("2026-11-29T18:30:29.000Z")
    );
    let empty = r"<ListAllMyBucketsResult><Buckets></Buckets></ListAllMyBucketsResult>";
    let parsed: ListAllMyBucketsResult = quick_xml::de::from_str(empty).expect("parses");
    assert!(parsed.buckets.bucket.is_empty());
}
