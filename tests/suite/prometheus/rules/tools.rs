//! The tests of this module that run promtool.

use super::*;

fn promtool(args: &[&str]) -> Result<(bool, String), Error> {
    ops::run("promtool", args, "prometheus")
}

#[test]
fn promtool_accepts_every_rule_file_and_passes_its_unit_tests() -> TestResult {
    for rules in ops::rule_files()? {
        // Lint errors (a rule recorded twice) fail too.
        let (ok, report) = promtool(&[
            "check",
            "rules",
            "--lint=all",
            "--lint-fatal",
            &rules.to_string_lossy(),
        ])?;
        assert!(ok, "promtool check rules {}:\n{report}", rules.display());
    }
    let tests = ops::rule_tests()?;
    assert!(!tests.is_empty(), "no rule unit tests (alerts/*test*.yml)");
    for test in tests {
        let (ok, report) = promtool(&["test", "rules", &test.to_string_lossy()])?;
        assert!(ok, "promtool test rules {}:\n{report}", test.display());
    }
    Ok(())
}
