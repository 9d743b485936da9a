// alerts/ as `jsonnet -S -m <repository> mixin/render-alerts.jsonnet` writes it
// (scripts/render-mixin.sh). `config` (a Jsonnet object, --tla-code) is merged into the config.
// The YAML is written here rather than by std.manifestYamlDoc, which is slow on long strings and
// sorts keys: rules read alert, expr, for, labels, annotations.
// With chart=true, the Helm chart's copy instead: the settings of chart-placeholders.libsonnet
// left as placeholders for templates/prometheusrule.yaml; with singleCluster=true too, the
// same without a cluster label (the chart's clusterLabel: "").
function(config={}, chart=false, singleCluster=false)
  local settings =
    if chart then (import 'chart-placeholders.libsonnet') + config + (if singleCluster then { clusterLabel: '' } else {})
    else config;
  local mixin = (import 'mixin.libsonnet') + { _config+:: settings };
  // A scalar: a block for expressions (they end with a newline), a JSON string otherwise
  // (JSON strings are YAML).
  local scalar(value, indent) =
    if std.isString(value) && std.endsWith(value, '\n') then
      '|\n' + std.join('', [
        (if line == '' then '\n' else indent + line + '\n')
        for line in std.split(std.substr(value, 0, std.length(value) - 1), '\n')
      ])
    else
      std.escapeStringJson(value) + '\n';
  local map(object, indent) = std.join('', [
    indent + key + ': ' + scalar(object[key], indent + '  ')
    for key in std.objectFields(object)
  ]);
  local rule(r) =
    local first = if std.objectHas(r, 'alert') then 'alert' else 'record';
    '      - %s: %s' % [first, scalar(r[first], '')]
    + std.join('', [
      if std.isObject(r[key]) then
        '        %s:\n%s' % [key, map(r[key], '          ')]
      else
        '        %s: %s' % [key, scalar(r[key], '          ')]
      for key in ['expr', 'for', 'labels', 'annotations']
      if std.objectHas(r, key)
    ]);
  local header =
    if chart then
      '# Generated from mixin/ by scripts/render-mixin.sh: edit the mixin, not this file.\n' +
      '# The rules of alerts/azure-scheduled-events.yml with placeholders (see\n' +
      '# mixin/chart-placeholders.libsonnet) that templates/prometheusrule.yaml fills in from values.\n'
    else
      '# Generated from mixin/ by scripts/render-mixin.sh: edit the mixin, not this file.\n' +
      '# Recording and alert rules for azure-scheduled-events-exporter, tested by azure-scheduled-events.test.yml\n' +
      '# (`promtool test rules`) and end to end by tests/prometheus.rs; docs/runbook.md has one\n' +
      '# section per alert and the paging policy.\n';
  local file =
    if chart && singleCluster then 'deploy/helm/azure-scheduled-events-exporter/files/prometheus-rules-single-cluster.yml'
    else if chart then 'deploy/helm/azure-scheduled-events-exporter/files/prometheus-rules.yml'
  else 'alerts/azure-scheduled-events.yml';
  {
    [file]:
      header +
      'groups:\n' + std.join('', [
        '  - name: %s%s    rules:\n%s' % [
          scalar(group.name, ''),
          if std.objectHas(group, 'interval') then '    interval: %s' % scalar(group.interval, '') else '',
          std.join('', [rule(r) for r in group.rules]),
        ]
        for group in mixin.prometheusRules.groups + mixin.prometheusAlerts.groups
      ]),
  }
