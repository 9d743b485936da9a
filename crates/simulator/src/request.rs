//! Reading the simulator's requests: bodies (bounded), query parameters and path segments,
//! decoded as IMDS clients encode them. Shared by IMDS's endpoints ([`super::http`]) and the
//! control API ([`super::control`]).

use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::{StatusCode, Uri};

use super::reply::{Refused, error};

/// Largest request body read. IMDS bodies are a few hundred bytes; a document set with `PUT
/// /control/document` may be twice as large as the agent reads (4 MiB), to test its cap.
const MAX_BODY: usize = 8 * 1024 * 1024;

/// Reads a request body of at most [`MAX_BODY`] bytes.
pub(super) async fn read_body(body: Incoming) -> Result<Bytes, Refused> {
    match Limited::new(body, MAX_BODY).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(Box::new(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("Bad request. Body is larger than {MAX_BODY} bytes"),
        ))),
        Err(e) => Err(Box::new(error(
            StatusCode::BAD_REQUEST,
            &format!("Bad request. Body could not be read: {e}"),
        ))),
    }
}

/// The first value of a query parameter, decoded as browsers and IMDS clients encode it.
pub(super) fn query_param(uri: &Uri, name: &str) -> Option<String> {
    form_urlencoded::parse(uri.query()?.as_bytes())
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.into_owned())
}

/// A path segment with its `%XX` escapes decoded; invalid escapes stay as written.
pub(super) fn percent_decode(segment: &str) -> String {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn query_parameters_are_found_and_decoded() -> TestResult {
        let uri: Uri = "/x?a=1&api-version=2020-07-01&api-version=2019-01-01".parse()?;
        assert_eq!(
            query_param(&uri, "api-version").as_deref(),
            Some("2020-07-01")
        );
        assert_eq!(query_param(&uri, "b"), None);
        let uri: Uri = "/x?api%2Dversion=2020%2D07%2D01&flag".parse()?;
        assert_eq!(
            query_param(&uri, "api-version").as_deref(),
            Some("2020-07-01")
        );
        assert_eq!(query_param(&uri, "flag").as_deref(), Some(""));
        let uri: Uri = "/x".parse()?;
        assert_eq!(query_param(&uri, "api-version"), None);
        Ok(())
    }

    #[test]
    fn broken_percent_escapes_are_kept_as_written() -> TestResult {
        assert_eq!(percent_decode("a%2"), "a%2");
        assert_eq!(percent_decode("%zz%41"), "%zzA");
        assert_eq!(percent_decode("%ff"), "\u{fffd}");
        Ok(())
    }
}
