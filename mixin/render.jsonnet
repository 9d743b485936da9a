// The files of alerts/ and dashboards/, as `jsonnet -S -m <repository> mixin/render.jsonnet`
// writes them (scripts/render-mixin.sh). `config` (a JSON object passed with --tla-code) is
// merged into the mixin's config.
function(config={})
  local mixin = (import 'mixin.libsonnet') + { _config+:: config };
  {
    'alerts/azure-scheduled-events.yml':
      '# Generated from mixin/ by scripts/render-mixin.sh: edit the mixin, not this file.\n' +
      '# Alert rules for azure-scheduled-events-exporter, tested by azure-scheduled-events.test.yml\n' +
      '# (`promtool test rules`) and end to end by tests/prometheus.rs; docs/runbook.md has one\n' +
      '# section per alert and the paging policy.\n' +
      std.manifestYamlDoc(mixin.prometheusAlerts, indent_array_in_object=true, quote_keys=false) + '\n',
  } + {
    ['dashboards/' + name]: std.manifestJsonEx(mixin.grafanaDashboards[name], '  ') + '\n'
    for name in std.objectFields(mixin.grafanaDashboards)
  }
