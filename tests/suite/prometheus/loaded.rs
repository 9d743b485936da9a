//! What a user who imports the dashboards before loading the rules sees.

use super::server::*;
use crate::common::{TempDir, wait};
use crate::ops;

use ops::Error;
use std::collections::BTreeMap;
use std::time::Duration;

/// What a user who imports the dashboards before loading the rules sees at the top of each:
/// Not loaded (1) for the cluster whose agent is scraped; with the rules, Loaded (0); where no
/// agent is, nothing (the panel then says no agent's series are there), never that rules are
/// missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_says_whether_the_recording_rules_are_loaded() -> Result<(), Error> {
    const TITLE: &str = "Recording rules (alerts/azure-scheduled-events.yml)";
    let dir = TempDir::new("rules-loaded")?;
    let site = Site::start(
        compute("pool_0", "pool_0", "eastus", "2"),
        reboots("quiet", &[])?,
    )
    .await?;
    let pool_0 = agent("pool_0", &site.url(), &dir.0, &[])?;
    let targets = [Target {
        address: pool_0.address().to_owned(),
        labels: vec![("cluster", "east".to_owned())],
    }];
    let without = Prometheus::start(&targets, &[]).await?;
    let with = Prometheus::start(&targets, &at_test_pace(&dir.0)?).await?;
    wait("the agent's vm_info to be scraped and its place recorded")
        .within(Duration::from_secs(60))
        .retrying_errors()
        .until(async || {
            let scraped = without.query("azure_scheduled_events_vm_info").await?;
            let recorded = with
                .query("azure_scheduled_events:target_place:info")
                .await?;
            Ok::<_, String>(!scraped.is_empty() && !recorded.is_empty())
        })
        .await?;
    let values = |cluster: &'static str, location: &'static str| {
        [
            ("cluster", cluster),
            ("location", location),
            ("scale_set", ".*"),
            ("zone", ".*"),
            ("job", JOB),
            ("instance", ".*"),
        ]
    };
    let said =
        |cluster: &str, value: &str| BTreeMap::from([(cluster.to_owned(), value.to_owned())]);
    let mut checked = 0;
    for (dashboard, json) in ops::dashboards()? {
        let expr = ops::queries(&dashboard, &json)
            .into_iter()
            .find(|q| q.place == format!("panel {TITLE:?} target A"))
            .map(|q| q.expr)
            .ok_or(format!("{dashboard}: no panel {TITLE:?}"))?;
        for (prometheus, rules, state) in [
            (&without, "without the rules", "1"),
            (&with, "with the rules", "0"),
        ] {
            let east = ops::substitute(&expr, &values("east", ".*"))?;
            assert_eq!(
                answer(&prometheus.query(&east).await?, Some("cluster")),
                said("east", state),
                "{dashboard} {rules}: {east}"
            );
            // The location variable narrows both sides alike: east's VM is in eastus.
            let eastus = ops::substitute(&expr, &values(".*", "eastus"))?;
            assert_eq!(
                answer(&prometheus.query(&eastus).await?, Some("cluster")),
                said("east", state),
                "{dashboard} {rules} in eastus: {eastus}"
            );
            // No agent in west nor in westeurope: nothing is said to be missing there.
            for nowhere in [values("west", ".*"), values(".*", "westeurope")] {
                let query = ops::substitute(&expr, &nowhere)?;
                let result = prometheus.query(&query).await?;
                assert!(
                    result.is_empty(),
                    "{dashboard} {rules}: {result:?} where no agent is: {query}"
                );
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 6, "three dashboards, with and without the rules");
    drop(pool_0);
    Ok(())
}
