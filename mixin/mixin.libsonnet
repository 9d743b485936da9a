// The monitoring mixin of azure-scheduled-events-exporter: `prometheusAlerts` (a Prometheus rule
// file) and `grafanaDashboards` (file name -> dashboard), from the config in config.libsonnet.
// alerts/ and dashboards/ hold its rendering with the default config (scripts/render-mixin.sh).
(import 'config.libsonnet')
+ (import 'alerts/alerts.libsonnet')
+ (import 'dashboards/dashboards.libsonnet')
