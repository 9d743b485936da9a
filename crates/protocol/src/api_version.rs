//! The scheduled-events `api-version` as IMDS checks it: which scheduled-events versions exist, what
//! each one added to the document, and which instance-metadata versions are accepted.
//!
//! Azure keeps old versions working by leaving out what they did not know yet: fields added later
//! are dropped and events of a type added later are not returned at all. This file is the only
//! place that knows those dates.
//!
//! Azure also serves versions it has not published: Spot Plus delivers rebalance recommendations
//! "at a different version" of the same endpoint. The simulator accepts one such version when told
//! to (`simulator --api-version`), as [`ApiVersion::Newer`]: it has every documented field, and it
//! alone returns `SpotRebalanceRecommendation` events.

use std::fmt;

use chrono::NaiveDate;

/// What IMDS lists in `newest-versions` when the version is missing or invalid. These are
/// instance-metadata versions, not scheduled-events ones: clients must never switch to them.
pub const NEWEST_VERSIONS: [&str; 3] = ["2023-07-01", "2023-05-01", "2023-03-01"];

/// The oldest `api-version` that `/metadata/instance` accepts.
pub const OLDEST_INSTANCE_VERSION: &str = "2017-04-02";

/// A documented scheduled-events `api-version`, ordered by date.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ApiVersion {
    /// Preview: resource names carry a leading `_`.
    V2017_03_01,
    /// GA: leading `_` removed, `Metadata: true` enforced.
    V2017_08_01,
    /// Adds the `Preempt` event type (Spot eviction).
    V2017_11_01,
    /// Adds the `Terminate` event type (scale-set delete).
    V2019_01_01,
    /// Adds `Description`.
    V2019_04_01,
    /// Adds `EventSource`.
    V2019_08_01,
    /// Adds `DurationInSeconds`.
    V2020_07_01,
    /// An unpublished version later than every documented one (Spot Plus), accepted only when
    /// the simulator is told to: adds `SpotRebalanceRecommendation` events.
    Newer(NaiveDate),
}

impl ApiVersion {
    /// Every documented version, oldest first.
    pub const ALL: [ApiVersion; 7] = [
        ApiVersion::V2017_03_01,
        ApiVersion::V2017_08_01,
        ApiVersion::V2017_11_01,
        ApiVersion::V2019_01_01,
        ApiVersion::V2019_04_01,
        ApiVersion::V2019_08_01,
        ApiVersion::V2020_07_01,
    ];

    /// The newest documented version: what `/control/state` shows.
    pub const LATEST: ApiVersion = ApiVersion::V2020_07_01;

    /// A version that shows every event and field, newer ones included: for telling whether the
    /// document changed, whatever version a client asks for.
    pub const EVERYTHING: ApiVersion = ApiVersion::Newer(NaiveDate::MAX);

    /// Reads a version exactly as IMDS does: only the documented dates, spelled exactly.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.documented() == Some(text))
    }

    /// As [`ApiVersion::parse`], also accepting `newer`, the one unpublished version the
    /// simulator was told to serve.
    pub fn parse_accepting(text: &str, newer: Option<ApiVersion>) -> Option<Self> {
        Self::parse(text).or_else(|| newer.filter(|v| v.to_string() == text))
    }

    /// An unpublished version to accept (`simulator --api-version`): a `YYYY-MM-DD` date later
    /// than every documented version.
    pub fn newer(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let date = NaiveDate::parse_from_str(text, "%Y-%m-%d")
            .ok()
            .filter(|_| text.len() == 10)
            .ok_or_else(|| format!("{text:?} is not a date like 2026-09-01"))?;
        // ISO dates of equal length order like strings.
        if *text <= *Self::LATEST.to_string() || date == NaiveDate::MAX {
            return Err(format!(
                "{text} is not later than {}, the newest documented version (always accepted)",
                Self::LATEST
            ));
        }
        Ok(ApiVersion::Newer(date))
    }

    /// The documented spelling; `None` for a [`ApiVersion::Newer`] one.
    fn documented(self) -> Option<&'static str> {
        Some(match self {
            ApiVersion::V2017_03_01 => "2017-03-01",
            ApiVersion::V2017_08_01 => "2017-08-01",
            ApiVersion::V2017_11_01 => "2017-11-01",
            ApiVersion::V2019_01_01 => "2019-01-01",
            ApiVersion::V2019_04_01 => "2019-04-01",
            ApiVersion::V2019_08_01 => "2019-08-01",
            ApiVersion::V2020_07_01 => "2020-07-01",
            ApiVersion::Newer(_) => return None,
        })
    }

    /// Whether events of this `EventType` exist in this version. Types this file does not know
    /// (new ones Azure may add) are always returned, so clients meet them as they would in Azure.
    pub fn knows_event_type(self, event_type: &str) -> bool {
        if event_type.eq_ignore_ascii_case("Preempt") {
            self >= ApiVersion::V2017_11_01
        } else if event_type.eq_ignore_ascii_case("Terminate") {
            self >= ApiVersion::V2019_01_01
        } else if event_type.eq_ignore_ascii_case("SpotRebalanceRecommendation") {
            matches!(self, ApiVersion::Newer(_))
        } else {
            true
        }
    }

    /// Resource names carried a leading `_` until 2017-08-01.
    pub fn prefixes_resource_names(self) -> bool {
        self < ApiVersion::V2017_08_01
    }

    pub fn has_description(self) -> bool {
        self >= ApiVersion::V2019_04_01
    }

    pub fn has_event_source(self) -> bool {
        self >= ApiVersion::V2019_08_01
    }

    pub fn has_duration(self) -> bool {
        self >= ApiVersion::V2020_07_01
    }
}

impl fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.documented(), self) {
            (Some(text), _) => f.write_str(text),
            (None, ApiVersion::Newer(date)) => write!(f, "{}", date.format("%Y-%m-%d")),
            (None, _) => Ok(()),
        }
    }
}

/// Whether `/metadata/instance` accepts this version: any well-formed `YYYY-MM-DD` date from
/// [`OLDEST_INSTANCE_VERSION`] on. Real IMDS keeps an explicit list; accepting every later date
/// keeps users' newer clients working without a simulator release.
pub fn is_instance_version(text: &str) -> bool {
    let well_formed =
        chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").is_ok() && text.len() == 10;
    // ISO dates of equal length order like strings.
    well_formed && text >= OLDEST_INSTANCE_VERSION
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn only_documented_versions_spelled_exactly_are_accepted() -> TestResult {
        assert_eq!(
            ApiVersion::parse("2020-07-01"),
            Some(ApiVersion::V2020_07_01)
        );
        assert_eq!(
            ApiVersion::parse("2017-03-01"),
            Some(ApiVersion::V2017_03_01)
        );
        assert_eq!(ApiVersion::parse("2021-02-01"), None);
        assert_eq!(ApiVersion::parse("2020-07-01 "), None);
        assert_eq!(ApiVersion::parse("latest"), None);
        assert_eq!(ApiVersion::parse(""), None);
        Ok(())
    }

    #[test]
    fn newer_event_types_are_unknown_to_older_versions() -> TestResult {
        assert!(!ApiVersion::V2017_08_01.knows_event_type("Preempt"));
        assert!(ApiVersion::V2017_11_01.knows_event_type("preempt"));
        assert!(!ApiVersion::V2017_11_01.knows_event_type("Terminate"));
        assert!(ApiVersion::V2019_01_01.knows_event_type("Terminate"));
        assert!(ApiVersion::V2017_03_01.knows_event_type("Hibernate"));
        Ok(())
    }

    #[test]
    fn a_newer_version_is_accepted_only_when_told_and_alone_shows_rebalance_recommendations()
    -> TestResult {
        let spot_plus = ApiVersion::newer("2026-09-01")?;
        assert_eq!(spot_plus.to_string(), "2026-09-01");
        assert_eq!(ApiVersion::parse("2026-09-01"), None);
        assert_eq!(
            ApiVersion::parse_accepting("2026-09-01", Some(spot_plus)),
            Some(spot_plus)
        );
        assert_eq!(
            ApiVersion::parse_accepting("2026-10-01", Some(spot_plus)),
            None
        );
        assert_eq!(
            ApiVersion::parse_accepting("2019-08-01", Some(spot_plus)),
            Some(ApiVersion::V2019_08_01)
        );
        assert!(spot_plus.knows_event_type("SpotRebalanceRecommendation"));
        assert!(!ApiVersion::LATEST.knows_event_type("spotrebalancerecommendation"));
        assert!(spot_plus.has_duration() && spot_plus.has_description());
        assert!(!spot_plus.prefixes_resource_names());
        assert!(ApiVersion::newer("2020-07-01").is_err());
        assert!(ApiVersion::newer("2019-01-01").is_err());
        assert!(ApiVersion::newer("2026-9-1").is_err());
        assert!(ApiVersion::newer("latest").is_err());
        Ok(())
    }

    #[test]
    fn each_field_appears_in_the_version_that_added_it() -> TestResult {
        assert!(!ApiVersion::V2019_01_01.has_description());
        assert!(ApiVersion::V2019_04_01.has_description());
        assert!(!ApiVersion::V2019_04_01.has_event_source());
        assert!(ApiVersion::V2019_08_01.has_event_source());
        assert!(!ApiVersion::V2019_08_01.has_duration());
        assert!(ApiVersion::V2020_07_01.has_duration());
        Ok(())
    }

    #[test]
    fn instance_metadata_accepts_dated_versions_from_2017_04_02_on() -> TestResult {
        assert!(is_instance_version("2017-04-02"));
        assert!(is_instance_version("2021-02-01"));
        assert!(!is_instance_version("2017-03-01"));
        assert!(!is_instance_version("2021-2-1"));
        assert!(!is_instance_version("soon"));
        Ok(())
    }
}
