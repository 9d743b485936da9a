// The monitoring mixin of azure-scheduled-events-exporter: `prometheusRules` (recording rules),
// `prometheusAlerts` (alert rules) and `grafanaDashboards` (file name -> dashboard), from the config in config.libsonnet.
// alerts/ and dashboards/ hold its rendering with the default config (scripts/render-mixin.sh).
(import 'config.libsonnet')
+ (import 'alerts/rules.libsonnet')
+ (import 'alerts/alerts.libsonnet')
+ (import 'dashboards/dashboards.libsonnet')
