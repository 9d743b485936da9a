//! How long to wait before trying again, for everything the agent retries: IMDS polls, approval
//! POSTs, notifications and Kubernetes requests.

use std::time::Duration;

use reqwest::header::{HeaderMap, RETRY_AFTER};

/// `first` doubled `exponent` times, at least the server's `Retry-After`, capped at `max`, and
/// never shorter than `first`.
pub fn delay(
    first: Duration,
    max: Duration,
    exponent: u32,
    retry_after: Option<Duration>,
) -> Duration {
    let exponential = first.saturating_mul(1u32.checked_shl(exponent).unwrap_or(u32::MAX));
    exponential
        .max(retry_after.unwrap_or_default())
        .min(max)
        .max(first)
}

/// A `Retry-After` given in seconds (the HTTP-date form is not used by the servers we call).
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get(RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse().ok())
        .map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn doubles_up_to_the_cap() {
        let delays: Vec<u64> = (1..=6)
            .map(|n| delay(SECOND, 10 * SECOND, n, None).as_secs())
            .collect();
        assert_eq!(delays, [2, 4, 8, 10, 10, 10]);
        assert_eq!(
            delay(SECOND, 10 * SECOND, 40, None),
            10 * SECOND,
            "no overflow"
        );
    }

    #[test]
    fn honours_retry_after_within_the_cap() {
        assert_eq!(delay(SECOND, 10 * SECOND, 1, Some(5 * SECOND)), 5 * SECOND);
        assert_eq!(
            delay(SECOND, 10 * SECOND, 1, Some(70 * SECOND)),
            10 * SECOND
        );
    }

    #[test]
    fn is_never_shorter_than_the_first_delay() {
        assert_eq!(delay(5 * SECOND, 2 * SECOND, 1, None), 5 * SECOND);
    }

    #[test]
    fn retry_after_is_read_in_seconds() {
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert(RETRY_AFTER, HeaderValue::from_static(" 7 "));
        assert_eq!(retry_after(&headers), Some(7 * SECOND));
        headers.insert(
            RETRY_AFTER,
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&headers), None);
    }
}
