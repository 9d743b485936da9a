// The settings the Helm chart's values set (prometheusRule.*): the chart's copy of the rules,
// files/prometheus-rules.yml, is the mixin rendered with these placeholders, and
// templates/prometheusrule.yaml replaces each with its value (docs/dashboards.md, "The Helm
// chart"). A list setting is one placeholder: a regex alternation where it is matched
// (`@@capacity.eventTypes@@`), words joined by "or" in texts (`@@text.capacity.eventTypes@@`).
// `@@percent.X@@` is 100 times the fraction X.
{
  runbookUrlBase: '@@runbookUrlBase@@',
  selector: '@@selector@@',
  clusterLabel: '@@clusterLabel@@',
  vmInfoLabels: ['@@vmInfoLabels@@'],
  capacity+: {
    eventTypes: ['@@capacity.eventTypes@@'],
    minVMs: '@@capacity.minVMs@@',
    fraction: '@@capacity.fraction@@',
    'for': '@@capacity.for@@',
  },
  spotWave+: {
    eventTypes: ['@@spotWave.eventTypes@@'],
    minVMs: '@@spotWave.minVMs@@',
    fraction: '@@spotWave.fraction@@',
    'for': '@@spotWave.for@@',
    severity: '@@spotWave.severity@@',
  },
}
