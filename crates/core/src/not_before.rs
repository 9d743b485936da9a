//! `NotBefore`: the time after which Azure may start an event, read as leniently as Azure writes it.
//!
//! The documented form is RFC 1123 (`Mon, 19 Sep 2016 18:29:47 GMT`), but real and sample documents
//! carry weekdays that do not match the date, ISO 8601 from older services, an empty string once the
//! event has started, no key at all, or text that is not a date. None of that is an error: a value
//! that cannot be read is kept as written and treated as unknown. A year is never read as one of
//! the first centuries: two digits are read as RFC 2822 says (00-49 are 2000-2049, 50-99 are
//! 1950-1999), and any other year that is not four digits, or four with a leading zero (`0035`),
//! makes the value unknown, so a lead-time policy never takes a date it misread as long past.

use chrono::{DateTime, NaiveDateTime, Utc};

/// `NotBefore` as received, with the instant it names when it names one.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NotBefore {
    raw: String,
    at: Option<DateTime<Utc>>,
}

impl NotBefore {
    /// Reads a `NotBefore` value; `None` is a missing key.
    pub fn parse(raw: Option<&str>) -> Self {
        let raw = raw.unwrap_or_default();
        Self {
            at: parse_instant(raw.trim()),
            raw: raw.to_owned(),
        }
    }

    /// The instant, when the value was a date this parser understands.
    pub fn at(&self) -> Option<DateTime<Utc>> {
        self.at
    }

    /// The value exactly as Azure sent it (empty when missing).
    pub fn raw(&self) -> &str {
        &self.raw
    }

    /// Seconds from `now` until `NotBefore`; negative when overdue, `None` when unknown.
    pub fn seconds_from(&self, now: DateTime<Utc>) -> Option<f64> {
        self.at
            .map(|at| (at - now).num_milliseconds() as f64 / 1000.0)
    }
}

/// RFC 1123 without trusting the weekday, then RFC 3339, then ISO 8601 without an offset (UTC).
fn parse_instant(text: &str) -> Option<DateTime<Utc>> {
    if text.is_empty() {
        return None;
    }
    // The weekday is redundant and edited examples get it wrong ("Mon, 19 Sep 2019" was a
    // Thursday), so it is dropped instead of failing the whole value.
    let without_weekday = match text.split_once(',') {
        Some((weekday, rest)) if weekday.chars().all(|c| c.is_ascii_alphabetic()) => rest.trim(),
        _ => text,
    };
    for zone in [" GMT", " UTC", " +0000", " Z"] {
        if let Some(naive) = without_weekday.strip_suffix(zone) {
            return rfc1123(naive);
        }
    }
    // ISO 8601 as Azure writes it always has a four-digit year; chrono would read fewer.
    if !text
        .split_once('-')
        .is_some_and(|(year, _)| four_digits(year))
    {
        return None;
    }
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Some(at.with_timezone(&Utc));
    }
    ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"]
        .iter()
        .find_map(|format| NaiveDateTime::parse_from_str(text, format).ok())
        .map(|at| at.and_utc())
}

/// `19 Sep 2016 18:29:47` (the zone already taken off), the year in four digits or, as RFC 2822
/// reads an obsolete two-digit year, 00-49 as 2000-2049 and 50-99 as 1950-1999.
fn rfc1123(text: &str) -> Option<DateTime<Utc>> {
    let mut parts = text.split_ascii_whitespace();
    let (day, month, year, time) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let year = match year.len() {
        4 if four_digits(year) => year.to_owned(),
        2 if year.bytes().all(|b| b.is_ascii_digit()) => {
            let century = if year < "50" { "20" } else { "19" };
            format!("{century}{year}")
        }
        _ => return None,
    };
    NaiveDateTime::parse_from_str(&format!("{day} {month} {year} {time}"), "%d %b %Y %H:%M:%S")
        .ok()
        .map(|at| at.and_utc())
}

/// Four digits, the first not a zero: `0035` is a year padded to look like one, never 35 AD.
fn four_digits(text: &str) -> bool {
    text.len() == 4 && text.bytes().all(|b| b.is_ascii_digit()) && !text.starts_with('0')
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> Option<DateTime<Utc>> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, s).single()
    }

    #[test]
    fn rfc1123_from_the_docs_is_read() {
        let nb = NotBefore::parse(Some("Mon, 19 Sep 2016 18:29:47 GMT"));
        assert_eq!(nb.at(), at(2016, 9, 19, 18, 29, 47));
        assert_eq!(nb.raw(), "Mon, 19 Sep 2016 18:29:47 GMT");
    }

    #[test]
    fn a_weekday_that_does_not_match_the_date_is_ignored() {
        // 19 Sep 2019 was a Thursday; 19 Dec 2018 a Wednesday (fixture 21).
        assert_eq!(
            NotBefore::parse(Some("Mon, 19 Sep 2019 18:29:47 GMT")).at(),
            at(2019, 9, 19, 18, 29, 47)
        );
        assert_eq!(
            NotBefore::parse(Some("Mon, 19 Dec 2018 18:29:47 GMT")).at(),
            at(2018, 12, 19, 18, 29, 47)
        );
    }

    #[test]
    fn rfc1123_without_weekday_is_read() {
        assert_eq!(
            NotBefore::parse(Some("11 Apr 2022 22:26:58 GMT")).at(),
            at(2022, 4, 11, 22, 26, 58)
        );
    }

    #[test]
    fn iso8601_with_and_without_offset_is_read() {
        assert_eq!(
            NotBefore::parse(Some("2022-04-11T22:26:58Z")).at(),
            at(2022, 4, 11, 22, 26, 58)
        );
        assert_eq!(
            NotBefore::parse(Some("2022-04-11T23:26:58+01:00")).at(),
            at(2022, 4, 11, 22, 26, 58)
        );
        assert_eq!(
            NotBefore::parse(Some("2022-04-11T22:26:58")).at(),
            at(2022, 4, 11, 22, 26, 58)
        );
        assert_eq!(
            NotBefore::parse(Some("2022-04-11 22:26:58.5"))
                .at()
                .map(|t| t.timestamp_millis()),
            at(2022, 4, 11, 22, 26, 58).map(|t| t.timestamp_millis() + 500)
        );
    }

    #[test]
    fn a_two_digit_year_is_read_as_rfc_2822_says_never_as_the_first_century() {
        assert_eq!(
            NotBefore::parse(Some("Mon, 01 Jan 35 00:00:00 GMT")).at(),
            at(2035, 1, 1, 0, 0, 0)
        );
        assert_eq!(
            NotBefore::parse(Some("19 Sep 49 18:29:47 GMT")).at(),
            at(2049, 9, 19, 18, 29, 47)
        );
        assert_eq!(
            NotBefore::parse(Some("Fri, 01 Jan 50 00:00:00 GMT")).at(),
            at(1950, 1, 1, 0, 0, 0)
        );
        assert_eq!(
            NotBefore::parse(Some("Thu, 31 Dec 99 23:59:59 UTC")).at(),
            at(1999, 12, 31, 23, 59, 59)
        );
    }

    #[test]
    fn a_year_of_one_three_or_five_digits_is_unknown() {
        for raw in [
            "Mon, 01 Jan 5 00:00:00 GMT",
            "Mon, 01 Jan 035 00:00:00 GMT",
            "Mon, 01 Jan 20350 00:00:00 GMT",
            "Mon, 01 Jan 35 00:00:00 GMT extra",
            "35-01-01T00:00:00Z",
            "035-01-01 00:00:00",
            "20350-01-01T00:00:00Z",
        ] {
            assert_eq!(NotBefore::parse(Some(raw)).at(), None, "{raw:?}");
        }
    }

    #[test]
    fn a_zero_padded_year_is_unknown_never_the_first_centuries() {
        for raw in [
            "0035-01-02T03:04:05Z",
            "0999-12-31T23:59:59Z",
            "0035-01-02T03:04:05",
            "0035-01-02 03:04:05",
            "Mon, 02 Jan 0035 03:04:05 GMT",
        ] {
            let nb = NotBefore::parse(Some(raw));
            assert_eq!(nb.at(), None, "{raw:?}");
            assert_eq!(nb.raw(), raw, "kept as written");
        }
        assert_eq!(
            NotBefore::parse(Some("2035-01-02T03:04:05Z")).at(),
            at(2035, 1, 2, 3, 4, 5)
        );
    }

    #[test]
    fn empty_missing_and_garbage_are_unknown_not_errors() {
        for raw in [
            Some(""),
            Some("   "),
            None,
            Some("20170702"),
            Some("soon"),
            Some("Mon, 32 Sep 2016 18:29:47 GMT"),
        ] {
            let nb = NotBefore::parse(raw);
            assert_eq!(nb.at(), None, "{raw:?}");
            assert_eq!(nb.raw(), raw.unwrap_or_default());
        }
    }

    #[test]
    fn seconds_from_is_negative_when_overdue() {
        let nb = NotBefore::parse(Some("Mon, 19 Sep 2016 18:29:47 GMT"));
        let now = Utc
            .with_ymd_and_hms(2016, 9, 19, 18, 30, 0)
            .single()
            .unwrap_or_default();
        assert_eq!(nb.seconds_from(now), Some(-13.0));
        assert_eq!(NotBefore::parse(Some("")).seconds_from(now), None);
    }
}
