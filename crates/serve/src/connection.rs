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
//!
//! **A refusal is read to the end of its body** ([`unread`]): a handler that answers before
//! reading the body (a PUT over quota) would otherwise have its connection reset under the
//! client, which then sees a send error instead of the refusal.
//!
//! **Every error explains itself.** s3s answers the refusals it decides itself (a signature
//! that does not match, a malformed URI, ...) with a code and no message, which clients show
//! as "Unknown". Such a response gets S3's own wording for its code ([`s3_message`]) before
//! it leaves; a message set by the handler is never touched.

use std::future::Future;
use std::pin::Pin;

use http::header::{CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, EXPECT};
use http::{HeaderMap, HeaderValue, Request, StatusCode, Version};
use hyper::body::{Body as _, Incoming};
use s3s::service::S3Service;
use s3s::{HttpError, HttpResponse};

use crate::request::Served;
use crate::unread;

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

/// A request that expects `100 Continue` before it sends its body.
fn expects_continue(headers: &HeaderMap) -> bool {
    headers
        .get(EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

/// An HTTP/1.1 request that expects `100 Continue` but declares no content.
fn expects_continue_without_body(version: Version, headers: &HeaderMap) -> bool {
    version == Version::HTTP_11
        && expects_continue(headers)
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
        let mut close = expects_continue_without_body(req.version(), req.headers());
        let http1 = req.version() < Version::HTTP_2;
        let expects_continue = expects_continue(req.headers());
        let (req, slot) = if http1 && !req.body().is_end_stream() {
            let (parts, body) = req.into_parts();
            let (body, slot) = unread::returning(body);
            (
                Request::from_parts(parts, s3s::Body::http_body(body)),
                Some(slot),
            )
        } else {
            (req.map(s3s::Body::from), None)
        };
        let s3 = self.s3.clone();
        let future = async move { s3.call(req).await };
        Box::pin(served.run(async move {
            let mut resp = future.await?;
            explain(&mut resp);
            if let Some(slot) = slot {
                close |= slot.settle(expects_continue).await == unread::Settled::Close;
            }
            if close {
                resp.headers_mut()
                    .insert(CONNECTION, HeaderValue::from_static("close"));
            }
            Ok(resp)
        }))
    }
}

/// S3's message for an error code that s3s sends without one (the wording of S3's error
/// reference); `None` for codes s3s always sends with a message or never sends.
pub fn s3_message(code: &str) -> Option<&'static str> {
    Some(match code {
        "SignatureDoesNotMatch" => {
            "The request signature we calculated does not match the signature you provided. \
             Check your key and signing method."
        }
        "InvalidAccessKeyId" => "The AWS access key Id you provided does not exist in our records.",
        "AccessDenied" => "Access Denied",
        "AuthorizationHeaderMalformed" => "The authorization header you provided is invalid.",
        "RequestTimeTooSkewed" => {
            "The difference between the request time and the server's time is too large."
        }
        "ExpiredToken" | "AccessDeniedExpired" => "Request has expired",
        "InvalidBucketName" => "The specified bucket is not valid.",
        "InvalidURI" => "Couldn't parse the specified URI.",
        "KeyTooLongError" => "Your key is too long.",
        "MethodNotAllowed" => "The specified method is not allowed against this resource.",
        "NotImplemented" => "A header you provided implies functionality that is not implemented.",
        "MissingContentLength" => "You must provide the Content-Length HTTP header.",
        "InvalidArgument" => "Invalid Argument",
        "InvalidRequest" => "Invalid Request",
        "MalformedXML" => {
            "The XML you provided was not well-formed or did not validate against our published \
             schema."
        }
        "InvalidDigest" => "The Content-MD5 you specified was not valid.",
        "BadDigest" => "The Content-MD5 you specified did not match what we received.",
        "XAmzContentSHA256Mismatch" => {
            "The provided 'x-amz-content-sha256' header does not match what was computed."
        }
        "IncompleteBody" => {
            "You did not provide the number of bytes specified by the Content-Length HTTP header."
        }
        "EntityTooLarge" => "Your proposed upload exceeds the maximum allowed object size.",
        "InvalidRange" => "The requested range is not satisfiable",
        "NoSuchKey" => "The specified key does not exist.",
        "NoSuchBucket" => "The specified bucket does not exist.",
        "NoSuchUpload" => {
            "The specified multipart upload does not exist. The upload ID might be invalid, or \
             the multipart upload might have been aborted or completed."
        }
        "InternalError" => "We encountered an internal error. Please try again.",
        "ServiceUnavailable" => "Please reduce your request rate.",
        "SlowDown" => "Please reduce your request rate.",
        _ => return None,
    })
}

/// Fills in S3's message on an error document s3s sent with a code and no `<Message>`.
fn explain(resp: &mut HttpResponse) {
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return;
    }
    let Some(body) = resp.body().bytes() else {
        return;
    };
    let Some(filled) = std::str::from_utf8(&body).ok().and_then(with_message) else {
        return;
    };
    *resp.body_mut() = s3s::Body::from(filled);
    resp.headers_mut().remove(CONTENT_LENGTH);
}

/// `xml` with S3's message for its code after `</Code>`, if it has no `<Message>` and the
/// code has a known wording.
fn with_message(xml: &str) -> Option<String> {
    if xml.contains("<Message>") {
        return None;
    }
    let start = xml.find("<Code>")? + "<Code>".len();
    let end = start + xml[start..].find("</Code>")?;
    let message = s3_message(xml[start..end].trim())?;
    let at = end + "</Code>".len();
    Some(format!(
        "{}<Message>{message}</Message>{}",
        &xml[..at],
        &xml[at..]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_without_a_message_gets_s3s_wording_and_one_with_a_message_is_kept() {
        let bare = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SignatureDoesNotMatch\
                    </Code></Error>";
        let filled = with_message(bare).expect("filled");
        assert!(
            filled.contains(
                "</Code><Message>The request signature we calculated does not match the \
                 signature you provided. Check your key and signing method.</Message></Error>"
            ),
            "{filled}"
        );
        let kept = "<Error><Code>NoSuchKey</Code><Message>gone</Message></Error>";
        assert_eq!(with_message(kept), None);
        assert_eq!(with_message("<Error><Code>Whatever</Code></Error>"), None);
    }

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
