#!/usr/bin/env bash
# Renders the monitoring mixin (mixin/) into alerts/, dashboards/ and the Helm chart's
# files/prometheus-rules.yml with the default config, or
# into the directory given as the first argument; a second argument is a Jsonnet object merged
# into the mixin's config, e.g. '{clusterLabel: ""}'. Needs jsonnet (Debian package jsonnet).
# Deterministic: the same mixin gives the same bytes, which tests/mixin.rs checks.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$repo}"
config="${2:-{\}}"
mkdir -p "$out/alerts" "$out/dashboards" "$out/deploy/helm/azure-scheduled-events-exporter/files"
jsonnet -J "$repo/mixin" --tla-code "config=$config" -S -m "$out" "$repo/mixin/render-alerts.jsonnet" >/dev/null
# The Helm chart's copy of the rules, with placeholders for the settings its values set.
jsonnet -J "$repo/mixin" --tla-code "config=$config" --tla-code chart=true -S -m "$out" "$repo/mixin/render-alerts.jsonnet" >/dev/null
jsonnet -J "$repo/mixin" --tla-code "config=$config" --tla-code chart=true --tla-code singleCluster=true -S -m "$out" "$repo/mixin/render-alerts.jsonnet" >/dev/null
jsonnet -J "$repo/mixin" --tla-code "config=$config" -m "$out" "$repo/mixin/render-dashboards.jsonnet" >/dev/null
# Azure Monitor managed Prometheus: the rules as prometheusRuleGroups (ARM and Bicep), and the
# dashboards with a $datasource variable for the Azure Monitor Managed Service for Prometheus
# data source plugin. Their uids end in -azmon: a Grafana that imports both sets keeps both, where equal
# uids would make one set overwrite the other (their links between dashboards follow).
mkdir -p "$out/deploy/azure-monitor/dashboards"
jsonnet -J "$repo/mixin" --tla-code "config=$config" -S -m "$out" "$repo/mixin/render-azure-monitor.jsonnet" >/dev/null
jsonnet -J "$repo/mixin" --tla-code "config={datasourceType: 'grafana-azureprometheus-datasource', dashboardUids: {fleet: 'azure-sched-events-fleet-azmon', event: 'azure-sched-events-event-azmon', agent: 'azure-sched-events-agent-azmon'}} + $config" -m "$out/deploy/azure-monitor" "$repo/mixin/render-dashboards.jsonnet" >/dev/null
