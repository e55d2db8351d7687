//! The S3 service as hyper serves it on a connection: s3s's [`S3Service`] plus the
//! connection-level rules that S3 clients need from us.
//!
//! **Every request is one [`request`](crate::request)**: an id sent back in
//! `x-amz-request-id` and `x-amz-id-2`, a span its handler's lines carry, one log line for its
//! outcome; the refusals below included.
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
//!
//! **A bounded header section.** `Content-Type`, `Cache-Control`, `x-amz-meta-*` and the
//! like are stored with an object and sent back with every GET and HEAD; hyper alone would
//! take hundreds of KiB of them, which common clients then refuse to read back (Python's
//! `http.client` stops at a 64 KiB header line: the object could be written but never read).
//! A request whose header section is over the service's limit is answered
//! `RequestHeaderSectionTooLarge` (400) before it is authenticated or its body read, and its
//! connection closed. S3 itself allows 8 KiB.

use std::future::Future;
use std::pin::Pin;

use http::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, EXPECT};
use http::{HeaderMap, HeaderValue, Request, StatusCode, Version};
use hyper::body::Incoming;
use s3s::service::S3Service;
use s3s::{HttpError, HttpResponse};

use crate::request::Served;

/// The default limit on a request's header section: names, values and their separators.
pub const HEADER_SECTION_MAX: usize = 16 * 1024;

/// [`S3Service`] with sluice's connection rules; what the gateway and the agent serve.
#[derive(Clone)]
pub struct HttpService {
    s3: S3Service,
    header_max: usize,
}

impl HttpService {
    pub fn new(s3: S3Service) -> Self {
        Self {
            s3,
            header_max: HEADER_SECTION_MAX,
        }
    }

    /// The same service with another limit on the header section (bytes).
    #[must_use]
    pub fn with_header_limit(self, header_max: usize) -> Self {
        Self { header_max, ..self }
    }
}

/// The size of a header section as it travels in HTTP/1.1: `name: value` and CRLF per header.
fn header_section_len(headers: &HeaderMap) -> usize {
    headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum()
}

/// S3's answer to a header section over `max`, closing an HTTP/1 connection (its body, unread,
/// is not waited for).
fn header_section_too_large(version: Version, len: usize, max: usize) -> HttpResponse {
    let xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>RequestHeaderSectionTooLarge\
         </Code><Message>the request's headers are {len} bytes; at most {max} are allowed\
         </Message></Error>"
    );
    let mut resp = HttpResponse::new(s3s::Body::from(xml));
    *resp.status_mut() = StatusCode::BAD_REQUEST;
    let headers = resp.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/xml"));
    if version < Version::HTTP_2 {
        headers.insert(CONNECTION, HeaderValue::from_static("close"));
    }
    resp
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
        let served = Served::begin(req.method(), req.uri());
        let len = header_section_len(req.headers());
        if len > self.header_max {
            let resp = header_section_too_large(req.version(), len, self.header_max);
            return Box::pin(served.run(std::future::ready(Ok(resp))));
        }
        let close = expects_continue_without_body(req.version(), req.headers());
        let future = hyper::service::Service::call(&self.s3, req);
        Box::pin(served.run(async move {
            let mut resp = future.await?;
            if close {
                resp.headers_mut()
                    .insert(CONNECTION, HeaderValue::from_static("close"));
            }
            Ok(resp)
        }))
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

    #[test]
    fn a_header_section_counts_names_values_and_separators() {
        let h = headers(&[(CONTENT_LENGTH, "0"), (EXPECT, "100-continue")]);
        assert_eq!(
            header_section_len(&h),
            "content-length: 0\r\n".len() + "expect: 100-continue\r\n".len()
        );
    }

    #[test]
    fn an_oversized_header_section_gets_an_s3_error_and_closes_http1() {
        let resp = header_section_too_large(Version::HTTP_11, 20_000, 16_384);
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
        assert_eq!(resp.headers()[CONNECTION], "close");
        assert_eq!(resp.headers()[CONTENT_TYPE], "application/xml");
        let h2 = header_section_too_large(Version::HTTP_2, 20_000, 16_384);
        assert!(h2.headers().get(CONNECTION).is_none());
    }
}
