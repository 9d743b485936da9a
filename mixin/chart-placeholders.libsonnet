// The settings the Helm chart's values set (prometheusRule.*): the chart's copy of the rules,
// files/prometheus-rules.yml, is the mixin rendered with these placeholders, and
// templates/prometheusrule.yaml replaces each with its value (docs/dashboards.md, "The Helm
// chart"). A list setting is one placeholder: a regex alternation where it is matched
// (`@@capacity.eventTypes@@`), words joined by "or" in texts (`@@text.capacity.eventTypes@@`).
// `@@percent.X@@` is 100 times the fraction X. `@@vmInfoLabels.joined@@` is vmInfoLabels,
// capacityLabel and priority, each once. `@@vmLabels.without.L@@` is vmLabels without L,
// and `"@@vmLabels@@"` its labels each quoted; `@@escaped.X@@` is the matchers X with their quotes
// escaped (inside a template's string). An empty clusterLabel is a rendering of its own,
// files/prometheus-rules-single-cluster.yml: the placeholder scheme cannot drop a label from a
// list and from the texts that name it.
{
  runbookUrlBase: '@@runbookUrlBase@@',
  selector: '@@selector@@',
  clusterLabel: '@@clusterLabel@@',
  vmInfoLabels: ['@@vmInfoLabels@@'],
  vmLabels: ['@@vmLabels@@'],
  capacityLabel: '@@capacityLabel@@',
  nodeLabel: '@@nodeLabel@@',
  // The mixin's vmInfoRecordLabels, which hold capacityLabel and nodeLabel: one placeholder, so that
  // the chart can leave out a label named twice.
  vmInfoRecordLabels: ['@@vmInfoRecordLabels@@'],
  coverage+: {
    nodeMatchers: ['@@coverage.nodeMatchers@@'],
    kubeStateMetricsSelector: '@@coverage.kubeStateMetricsSelector@@',
    'for': '@@coverage.for@@',
  },
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
