#!/usr/bin/env bash
# Renders the plain Kubernetes manifests in deploy/kubernetes/ from the Helm chart, so the two never
# disagree: daemonset.yaml (Namespace, ServiceAccount, DaemonSet: the chart's defaults) and
# podmonitor.yaml (its PodMonitor). Run it after changing the chart; the test suite runs --check.
#
#   scripts/render-manifests.sh           rewrite deploy/kubernetes/{daemonset,podmonitor}.yaml
#   scripts/render-manifests.sh --check   exit 1, with the diff, when they differ from the chart
#
# helm from PATH, else target/ci-tools/bin/helm (.ci/run installs it).
set -euo pipefail
cd "$(dirname "$0")/.."

helm=helm
command -v helm >/dev/null 2>&1 || helm=target/ci-tools/bin/helm
chart=deploy/helm/azure-scheduled-events-exporter
release=azure-scheduled-events-exporter
namespace=azure-scheduled-events

render() {
    # helm reports the chart's links to alerts/ and dashboards/ on stderr at level INFO; errors still
    # fail the command.
    "$helm" template "$release" "$chart" --namespace "$namespace" "$@" 2>/dev/null ||
        "$helm" template "$release" "$chart" --namespace "$namespace" "$@" >/dev/null
}

daemonset() {
    cat <<'HEADER'
# azure-scheduled-events-exporter on every node of an AKS cluster (or any Kubernetes on Azure VMs).
# Rendered from the Helm chart (deploy/helm/azure-scheduled-events-exporter) with its defaults by
# scripts/render-manifests.sh: change the chart, not this file.
#   kubectl apply -k "https://github.com/azure-scheduled-events-exporter/azure-scheduled-events-exporter//deploy/kubernetes?ref=v0.1.0"
#   (this file, through kustomization.yaml; podmonitor.yaml beside it for the Prometheus Operator)
# The image is the one each release publishes (docs/releasing.md). The pods run on the pod network at Pod
# Security "restricted"; where AKS's IMDS restriction is on, install the chart with hostNetwork=true.
HEADER
    # The test hook (`helm test`) is no object to apply.
    render --set namespace.create=true --skip-tests | sed "1{/^---$/d}"
}

podmonitor() {
    cat <<'HEADER'
# Scrape configuration for the Prometheus Operator (kube-prometheus-stack); for Azure Monitor managed
# Prometheus, change apiVersion to azmonitoring.coreos.com/v1. The job label becomes
# azure-scheduled-events/azure-scheduled-events-exporter. Add the labels your Prometheus'
# podMonitorSelector expects. Rendered from the Helm chart by scripts/render-manifests.sh.
HEADER
    render --set podMonitor.enabled=true --show-only templates/podmonitor.yaml | sed "1{/^---$/d}"
}

if [ "${1:-}" = --check ]; then
    status=0
    for file in daemonset podmonitor; do
        if ! diff -u "deploy/kubernetes/$file.yaml" <("$file") >&2; then
            echo "deploy/kubernetes/$file.yaml differs from the chart: run scripts/render-manifests.sh" >&2
            status=1
        fi
    done
    exit "$status"
fi
daemonset >deploy/kubernetes/daemonset.yaml.tmp
podmonitor >deploy/kubernetes/podmonitor.yaml.tmp
mv deploy/kubernetes/daemonset.yaml.tmp deploy/kubernetes/daemonset.yaml
mv deploy/kubernetes/podmonitor.yaml.tmp deploy/kubernetes/podmonitor.yaml
