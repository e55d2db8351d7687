//! The pool over in-memory gateways behind fault injectors, in paused tokio time (a rest ends
//! by advancing the clock, never by sleeping). Gateways of one shared tier are modelled as
//! fault injectors in front of one twin (a shared catalog); the spreading test gives each
//! gateway its own twin to see where calls went.

use std::sync::Arc;
use std::time::Duration;

use md5::{Digest, Md5};
use object_store::PutPayload;
use sluice_meta::ObjectRecord;
use tokio::time::Instant;

use super::{FIRST_REST, MAX_REST, Pool};
use crate::upstream::faults::{Fault, Faulty};
use crate::upstream::memory::InMemoryUpstream;
use crate::upstream::{UpstreamError, UpstreamStore};

const T: &str = "t";
const B: &str = "b";

type Gw = Faulty<Arc<InMemoryUpstream>>;

fn down() -> UpstreamError {
    UpstreamError::Unavailable("connection refused".into())
}

/// Every call to `gw` fails as a dead gateway's would, until `clear`.
fn kill(gw: &Gw) {
    gw.randomly(1, 1.0, vec![Fault::Fail(down())]);
}

/// Two gateways in front of one twin.
fn shared() -> (Arc<InMemoryUpstream>, [Arc<Gw>; 2], Pool<Gw>) {
    let twin = Arc::new(InMemoryUpstream::new());
    let gws = [
        Arc::new(Faulty::new(Arc::clone(&twin))),
        Arc::new(Faulty::new(Arc::clone(&twin))),
    ];
    let pool = Pool::new(gws.to_vec());
    (twin, gws, pool)
}

/// A key whose calls go to gateway `i` first.
fn key_on<U: UpstreamStore>(pool: &Pool<U>, i: usize) -> String {
    (0..10_000)
        .map(|n| format!("k{n}"))
        .find(|k| pool.order((T, B, k), Instant::now())[0] == i)
        .expect("some key hashes to every gateway")
}

fn md5_hex(b: &[u8]) -> String {
    sluice_s3::blob::hex(&Md5::digest(b))
}

#[tokio::test(start_paused = true)]
async fn objects_spread_over_the_gateways_and_one_object_stays_on_one() {
    let twins = [
        Arc::new(InMemoryUpstream::new()),
        Arc::new(InMemoryUpstream::new()),
    ];
    let pool = Pool::new(twins.to_vec());
    for t in &twins {
        t.create_bucket(T, B).await.expect("bucket");
    }
    for n in 0..64 {
        let key = format!("ckpt/shard-{n}");
        let rec = ObjectRecord::default();
        let id = pool
            .create_multipart(T, B, &key, &rec)
            .await
            .expect("create");
        let part = PutPayload::from(vec![1u8; 10]);
        let etag = pool.put_part(T, B, &key, &id, 0, part).await.expect("part");
        pool.complete_multipart(T, B, &key, &id, vec![etag])
            .await
            .expect("every step on the gateway that holds the upload");
        assert!(pool.head(T, B, &key).await.expect("head").is_some());
    }
    let counts = twins.map(|t| t.keys(T, B).len());
    assert_eq!(counts[0] + counts[1], 64);
    assert!(counts.iter().all(|&c| c >= 16), "{counts:?}");
}

#[tokio::test(start_paused = true)]
async fn a_gateway_dying_mid_multipart_hands_the_upload_to_the_other() {
    let (twin, gws, pool) = shared();
    pool.create_bucket(T, B).await.expect("bucket");
    let key = key_on(&pool, 0);
    let rec = ObjectRecord::default();
    let id = pool
        .create_multipart(T, B, &key, &rec)
        .await
        .expect("create");
    let parts: Vec<Vec<u8>> = (0..4u8).map(|i| vec![i; 100]).collect();
    let mut etags = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        if i == 2 {
            kill(&gws[0]);
        }
        let etag = pool
            .put_part(T, B, &key, &id, i, PutPayload::from(p.clone()))
            .await
            .expect("a part goes up through the live gateway");
        assert_eq!(etag, md5_hex(p));
        etags.push(etag);
    }
    pool.complete_multipart(T, B, &key, &id, etags)
        .await
        .expect("complete on the other gateway");
    let whole: Vec<u8> = parts.concat();
    assert_eq!(twin.object(T, B, &key).as_deref(), Some(whole.as_slice()));
    let states = pool.states();
    assert!(!states[0].up && states[1].up, "{states:?}");
    assert_eq!(states[0].consecutive_failures, 1, "skipped while resting");
    assert!(
        states[0]
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("connection refused")),
        "{states:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_resting_gateway_is_skipped_then_probed_with_growing_rests() {
    let (_twin, gws, pool) = shared();
    pool.create_bucket(T, B).await.expect("bucket");
    let key = key_on(&pool, 0);
    // Its first three calls fail: each would count if the pool called it.
    gws[0].fail_after(0, 3, &Fault::Fail(down()));
    let body = || PutPayload::from(b"x".to_vec());
    let rec = ObjectRecord::default();
    pool.put(T, B, &key, body(), &rec)
        .await
        .expect("failed over");
    assert_eq!(pool.states()[0].consecutive_failures, 1);
    pool.put(T, B, &key, body(), &rec).await.expect("skipped");
    assert_eq!(pool.states()[0].consecutive_failures, 1, "not called");
    let rest = pool.states()[0].retry_in_seconds.expect("resting");
    assert!((rest - FIRST_REST.as_secs_f64()).abs() < 1e-6, "{rest}");
    tokio::time::advance(FIRST_REST).await;
    assert!(pool.states()[0].up, "its rest is over");
    pool.put(T, B, &key, body(), &rec)
        .await
        .expect("probe fails over");
    let s = &pool.states()[0];
    assert_eq!(s.consecutive_failures, 2);
    assert!(!s.up);
    assert!((s.retry_in_seconds.expect("resting") - 2.0).abs() < 1e-6);
    tokio::time::advance(Duration::from_secs(2)).await;
    pool.put(T, B, &key, body(), &rec).await.expect("probe");
    assert_eq!(pool.states()[0].consecutive_failures, 3);
    tokio::time::advance(Duration::from_secs(4)).await;
    pool.put(T, B, &key, body(), &rec).await.expect("back");
    let s = &pool.states()[0];
    assert!(
        s.up && s.consecutive_failures == 0 && s.failures_total == 3,
        "{s:?}"
    );
    assert!(pool.states()[1].up);
}

#[tokio::test(start_paused = true)]
async fn rests_grow_to_a_cap() {
    let (_twin, gws, pool) = shared();
    kill(&gws[0]);
    kill(&gws[1]);
    for _ in 0..12 {
        let _ = pool.delete(T, B, "k").await;
        tokio::time::advance(MAX_REST).await;
    }
    let _ = pool.delete(T, B, "k").await;
    for s in pool.states() {
        let rest = s.retry_in_seconds.expect("resting");
        assert!((rest - MAX_REST.as_secs_f64()).abs() < 1e-6, "{s:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn both_down_fails_the_call_then_one_back_carries_it() {
    let (twin, gws, pool) = shared();
    pool.create_bucket(T, B).await.expect("bucket");
    kill(&gws[0]);
    kill(&gws[1]);
    let rec = ObjectRecord::default();
    let put = |body: &'static [u8]| pool.put(T, B, "k", PutPayload::from_static(body), &rec);
    let Err(UpstreamError::Unavailable(m)) = put(b"one").await else {
        panic!("every gateway down must be Unavailable");
    };
    assert!(m.contains("connection refused"), "{m}");
    assert!(pool.states().iter().all(|s| !s.up));
    // Both resting: a call still tries them (soonest rest end first) rather than failing
    // without asking, so a gateway back up is found at once.
    gws[1].clear();
    assert_eq!(put(b"two").await, Ok(Some(md5_hex(b"two"))));
    assert_eq!(twin.object(T, B, "k").as_deref(), Some(&b"two"[..]));
    let states = pool.states();
    assert!(states[1].up && !states[0].up, "{states:?}");
}

#[tokio::test(start_paused = true)]
async fn answers_of_the_shared_tier_are_not_retried_elsewhere() {
    let (_twin, gws, pool) = shared();
    pool.create_bucket(T, B).await.expect("bucket");
    let key = key_on(&pool, 0);
    let quota = UpstreamError::Refused {
        status: 403,
        message: "QuotaExceeded".into(),
    };
    let slow = UpstreamError::SlowDown("503 SlowDown".into());
    for answer in [quota, UpstreamError::NotFound, slow] {
        gws[0].fail_after(0, 1, &Fault::Fail(answer.clone()));
        // Were the other gateway called, this would be its failure.
        gws[1].fail_after(0, 1, &Fault::Fail(down()));
        let got = pool
            .put(
                T,
                B,
                &key,
                PutPayload::from_static(b"x"),
                &ObjectRecord::default(),
            )
            .await;
        assert_eq!(got, Err(answer));
        let states = pool.states();
        assert!(
            states.iter().all(|s| s.up && s.failures_total == 0),
            "{states:?}"
        );
        gws[1].clear();
    }
}

#[tokio::test(start_paused = true)]
async fn a_lost_answer_is_repeated_on_the_other_gateway_harmlessly() {
    let (twin, gws, pool) = shared();
    pool.create_bucket(T, B).await.expect("bucket");
    let key = key_on(&pool, 0);
    let rec = ObjectRecord::default();
    let id = pool
        .create_multipart(T, B, &key, &rec)
        .await
        .expect("create");
    let etag = pool
        .put_part(T, B, &key, &id, 0, PutPayload::from_static(b"part"))
        .await
        .expect("part");
    // The complete is carried out, then its answer lost: the other gateway is asked again
    // and finds the upload gone; the object is whole all the same.
    gws[0].fail_after(0, 1, &Fault::LoseAnswer(down()));
    let got = pool.complete_multipart(T, B, &key, &id, vec![etag]).await;
    assert_eq!(got, Err(UpstreamError::NotFound));
    assert_eq!(twin.object(T, B, &key).as_deref(), Some(&b"part"[..]));
    let head = pool.head(T, B, &key).await.expect("head").expect("there");
    assert_eq!(head.size, 4);
}

#[tokio::test(start_paused = true)]
async fn status_names_every_gateway_in_order() {
    let twins = [
        Arc::new(InMemoryUpstream::new()),
        Arc::new(InMemoryUpstream::new()),
    ];
    let pool = Pool::new(twins.to_vec());
    let names: Vec<String> = pool.gateways().into_iter().map(|g| g.endpoint).collect();
    let one = twins[0].endpoint().to_owned();
    assert_eq!(names, [one.clone(), one.clone()]);
    assert_eq!(pool.endpoint(), format!("{one}, {one}"));
}

/// A gateway on a loopback port that answers every request with `status` (200 unless set:
/// an `ETag` and no body, and `x-sluice-dmclock-reserved: <reserved>` when set) and keeps
/// each request's head, lowercased.
struct Recorder {
    endpoint: String,
    heads: Arc<std::sync::Mutex<Vec<String>>>,
    status: Arc<std::sync::atomic::AtomicU16>,
    reserved: Arc<std::sync::Mutex<Option<String>>>,
}

impl Recorder {
    async fn start() -> Self {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let endpoint = format!("http://{}", listener.local_addr().expect("addr"));
        let heads = Arc::new(std::sync::Mutex::new(Vec::new()));
        let status = Arc::new(std::sync::atomic::AtomicU16::new(200));
        let reserved = Arc::new(std::sync::Mutex::new(None::<String>));
        let (seen, answer, by_reservation) = (
            Arc::clone(&heads),
            Arc::clone(&status),
            Arc::clone(&reserved),
        );
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 16 * 1024];
                let end = loop {
                    let Ok(n) = sock.read(&mut chunk).await else {
                        break None;
                    };
                    if n == 0 {
                        break None;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break Some(i + 4);
                    }
                };
                let Some(end) = end else { continue };
                let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                let mut have = buf.len() - end;
                while have < length {
                    match sock.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => have += n,
                    }
                }
                seen.lock().expect("heads").push(head);
                let code = answer.swap(200, std::sync::atomic::Ordering::SeqCst);
                let reserved = by_reservation
                    .lock()
                    .expect("reserved")
                    .as_ref()
                    .map(|r| format!("x-sluice-dmclock-reserved: {r}\r\n"))
                    .unwrap_or_default();
                let resp = format!(
                    "HTTP/1.1 {code} Fixed\r\netag: \"e\"\r\n{reserved}content-length: 0\r\nconnection: close\r\n\r\n"
                );
                let _ = sock.write_all(resp.as_bytes()).await;
                let _ = sock.shutdown().await;
            }
        });
        Self {
            endpoint,
            heads,
            status,
            reserved,
        }
    }

    /// The dmClock δ the last request carried, if any.
    fn last_delta(&self) -> Option<String> {
        self.last("x-sluice-dmclock-delta:")
    }

    /// The dmClock ρ the last request carried, if any.
    fn last_rho(&self) -> Option<String> {
        self.last("x-sluice-dmclock-rho:")
    }

    fn last(&self, header: &str) -> Option<String> {
        let heads = self.heads.lock().expect("heads");
        let last = heads.last().expect("a request arrived");
        last.lines()
            .find_map(|l| l.strip_prefix(header))
            .map(|v| v.trim().to_owned())
    }

    /// Its answers say it served `reserved` (`requests bytes`) by reservation.
    fn answer_reserved(&self, reserved: Option<&str>) {
        *self.reserved.lock().expect("reserved") = reserved.map(str::to_owned);
    }
}

/// Two recording gateways and a pool over them for tenant `T`.
async fn recorded_pair() -> ([Recorder; 2], Pool<crate::upstream::Upstream>) {
    let gws = [Recorder::start().await, Recorder::start().await];
    let creds = std::collections::HashMap::from([(
        T.to_owned(),
        crate::upstream::Credentials {
            access_key: "AKT".into(),
            secret_key: "secret".into(),
        },
    )]);
    let endpoints = gws.each_ref().map(|g| g.endpoint.clone());
    let pool = Pool::connect(&endpoints, "us-east-1", &creds, &[]).expect("pool");
    (gws, pool)
}

/// dmClock's δ over real clients: a request to one gateway carries what the other served the
/// tenant since its previous request here (requests and bytes), once; a request the gateway
/// did not admit (503) serves nothing, and the δ it carried goes with the next request.
#[tokio::test]
async fn requests_carry_what_the_other_gateway_served_since_the_last_one_here() {
    let (gws, pool) = recorded_pair().await;
    let (on0, on1) = (key_on(&pool, 0), key_on(&pool, 1));
    let put = |key: String, len: usize| {
        let pool = &pool;
        async move {
            let rec = ObjectRecord::default();
            pool.put(T, B, &key, PutPayload::from(vec![7u8; len]), &rec)
                .await
        }
    };

    put(on0.clone(), 1000).await.expect("put");
    assert_eq!(gws[0].last_delta(), None, "nothing served elsewhere yet");
    put(on0.clone(), 3000).await.expect("put");
    assert_eq!(
        gws[0].last_delta(),
        None,
        "its own service is not reported to it"
    );
    put(on1.clone(), 500).await.expect("put");
    assert_eq!(gws[1].last_delta().as_deref(), Some("2 4000"));
    put(on1.clone(), 10).await.expect("put");
    assert_eq!(gws[1].last_delta(), None, "reported once");

    gws[0]
        .status
        .store(503, std::sync::atomic::Ordering::SeqCst);
    let refused = put(on0.clone(), 7).await;
    assert!(
        matches!(refused, Err(UpstreamError::SlowDown(_))),
        "{refused:?}"
    );
    assert_eq!(gws[0].last_delta().as_deref(), Some("2 510"));
    put(on0.clone(), 7).await.expect("put");
    assert_eq!(
        gws[0].last_delta().as_deref(),
        Some("2 510"),
        "a refused request's δ is owed again"
    );
    put(on1, 1).await.expect("put");
    assert_eq!(
        gws[1].last_delta().as_deref(),
        Some("1 7"),
        "the refused request served nothing"
    );
}

/// dmClock's ρ over real clients: what a gateway's answers say it served by reservation is
/// carried to the other gateway (never back to it), once, cut to what the request was served
/// (ρ ≤ δ), and an answer that does not say, or says nonsense, adds nothing to it.
#[tokio::test]
async fn requests_carry_what_the_other_gateway_served_by_reservation() {
    let (gws, pool) = recorded_pair().await;
    let (on0, on1) = (key_on(&pool, 0), key_on(&pool, 1));
    let put = |key: String, len: usize| {
        let pool = &pool;
        async move {
            let rec = ObjectRecord::default();
            pool.put(T, B, &key, PutPayload::from(vec![7u8; len]), &rec)
                .await
        }
    };

    // Gateway 0 serves a PUT of 1000 bytes, its operation and 600 of its bytes by
    // reservation; then one it claims 5000 bytes of (more than the request): cut to its 300.
    gws[0].answer_reserved(Some("1 600"));
    put(on0.clone(), 1000).await.expect("put");
    gws[0].answer_reserved(Some("3 5000"));
    put(on0.clone(), 300).await.expect("put");
    assert_eq!(
        gws[0].last_rho(),
        None,
        "its own service is not reported to it"
    );
    // Then two answers that add nothing: no header, and one that is not two numbers.
    gws[0].answer_reserved(None);
    put(on0.clone(), 50).await.expect("put");
    gws[0].answer_reserved(Some("lots"));
    put(on0.clone(), 50).await.expect("put");

    put(on1.clone(), 10).await.expect("put");
    assert_eq!(gws[1].last_delta().as_deref(), Some("4 1400"));
    assert_eq!(gws[1].last_rho().as_deref(), Some("2 900"));
    put(on1.clone(), 10).await.expect("put");
    assert_eq!(gws[1].last_rho(), None, "reported once");

    // Gateway 1's own reservation service goes to gateway 0, not back to gateway 1.
    gws[1].answer_reserved(Some("1 10"));
    put(on1.clone(), 10).await.expect("put");
    assert_eq!(gws[1].last_rho(), None);
    put(on0, 1).await.expect("put");
    assert_eq!(gws[0].last_delta().as_deref(), Some("3 30"));
    assert_eq!(gws[0].last_rho().as_deref(), Some("1 10"));
}
