//! The S3 service as hyper serves it on a connection: s3s's [`S3Service`] plus the one
//! connection-level rule that S3 clients need from us.
//!
//! **`Expect: 100-continue` on an empty body.** hyper answers such a request with its final
//! response and no `100 Continue` first (RFC 9110 allows it: there is no content to wait
//! for). The AWS CLI v1 (the botocore it bundles, 1.43.x) records that early final
//! response's status line and, because it forgets it only before requests *without* `Expect`,
//! parses the next response on the same connection with it: the real status line is read as
//! a header, the length is lost, and the upload hangs until the 60 s read timeout and a
//! retry. Every `aws s3 cp`/`sync` of an empty file (DCP writes some; `__init__.py` files are
//! others) followed by another upload stalled a minute. After such a response the connection
//! is closed (`Connection: close`), so the client's next request starts on a fresh one.

use std::future::Future;
use std::pin::Pin;

use http::header::{CONNECTION, CONTENT_LENGTH, EXPECT};
use http::{HeaderMap, HeaderValue, Request, Version};
use hyper::body::Incoming;
use s3s::service::S3Service;
use s3s::{HttpError, HttpResponse};

/// [`S3Service`] with sluice's connection rules; what the gateway and the agent serve.
#[derive(Clone)]
pub struct HttpService(S3Service);

impl HttpService {
    pub fn new(s3: S3Service) -> Self {
        Self(s3)
    }
}

/// An HTTP/1.1 request that expects `100 Continue` but declares no content.
fn expects_continue_without_body(version: Version, headers: &HeaderMap) -> bool {
    version == Version::HTTP_11
        && headers
            .get(EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
        && headers
            .get(CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() == b"0")
}

impl hyper::service::Service<Request<Incoming>> for HttpService {
    type Response = HttpResponse;
    type Error = HttpError;
    type Future = Pin<Box<dyn Future<Output = Result<HttpResponse, HttpError>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let close = expects_continue_without_body(req.version(), req.headers());
        let future = hyper::service::Service::call(&self.0, req);
        Box::pin(async move {
            let mut resp = future.await?;
            if close {
                resp.headers_mut()
                    .insert(CONNECTION, HeaderValue::from_static("close"));
            }
            Ok(resp)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(http::HeaderName, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| (k.clone(), HeaderValue::from_static(v)))
            .collect()
    }

    #[test]
    fn only_empty_bodies_that_expect_continue_close_the_connection() {
        let empty = headers(&[(EXPECT, "100-continue"), (CONTENT_LENGTH, "0")]);
        assert!(expects_continue_without_body(Version::HTTP_11, &empty));
        // HTTP/2 has no such exchange (and no Connection header).
        assert!(!expects_continue_without_body(Version::HTTP_2, &empty));
        let with_body = headers(&[(EXPECT, "100-continue"), (CONTENT_LENGTH, "4")]);
        assert!(!expects_continue_without_body(Version::HTTP_11, &with_body));
        let no_expect = headers(&[(CONTENT_LENGTH, "0")]);
        assert!(!expects_continue_without_body(Version::HTTP_11, &no_expect));
    }
}
