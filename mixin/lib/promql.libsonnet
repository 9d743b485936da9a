// PromQL building blocks shared by the alerts and the dashboards, all driven by the config so
// that every aggregation and join keeps the cluster label (or leaves it out when it is empty).
{
  new(config):: {
    local c = config,
    local nonEmpty(list) = std.filter(function(l) l != '', list),
    // The first occurrence of each name, in order.
    local unique(list) = std.foldl(function(seen, l) if std.member(seen, l) then seen else seen + [l], list, []),

    // 'a, b, c' from a list, skipping empty and repeated names.
    list(labels):: std.join(', ', unique(nonEmpty(labels))),

    // The labels that identify one VM's agent.
    vm:: nonEmpty([c.clusterLabel] + c.vmLabels),
    vmBy:: self.list(self.vm),
    // The labels of one capacity group.
    group:: nonEmpty([c.clusterLabel, c.capacityLabel]),
    groupBy:: self.list(self.group),

    // `metric{selector, matchers...}`.
    sel(metric, matchers=[])::
      local all = nonEmpty([c.selector] + matchers);
      if all == [] then metric else metric + '{' + std.join(', ', all) + '}',

    // `list` without the label `name`. The Helm chart's placeholder for vmLabels stands for a
    // list the chart knows only when it fills it in: it becomes the placeholder of that list
    // without `name` (mixin/chart-placeholders.libsonnet).
    without(list, name):: [
      if l == '@@vmLabels@@' then '@@vmLabels.without.%s@@' % name else l
      for l in list
      if l != name
    ],

    // kube-state-metrics' `metric` with its selector (coverage.kubeStateMetricsSelector) and
    // `matchers`.
    kubeStateMetrics(metric, matchers=[])::
      local all = nonEmpty([c.coverage.kubeStateMetricsSelector] + matchers);
      if all == [] then metric else '%s{%s}' % [metric, std.join(', ', all)],
    // `expr`, a vector of kube-state-metrics with its `node` label, with that label under
    // nodeLabel.
    underNodeLabel(expr)::
      if c.nodeLabel == 'node' || c.nodeLabel == '' then expr
      // The Helm chart's placeholder: label_replace unless its nodeLabel is node.
      else if std.startsWith(c.nodeLabel, '@@') then '@@nodeRelabel.open@@%s@@nodeRelabel.close@@' % expr
      else 'label_replace(%s, "%s", "$1", "node", "(.*)")' % [expr, c.nodeLabel],

    // An alternation regex of event types.
    types(list):: std.join('|', list),

    // The recording rules' series (mixin/alerts/rules.libsonnet; docs/dashboards.md lists
    // them). They carry the labels they were recorded with, not the selector's.
    records:: {
      targetLastSeen: 'azure_scheduled_events:target_last_seen:timestamp_seconds',
      targetVmInfo: 'azure_scheduled_events:target_vm_info:last',
      targetPlace: 'azure_scheduled_events:target_place:info',
      vmsReporting: 'azure_scheduled_events:vms_reporting:count',
      vmsKnown: 'azure_scheduled_events:vms_known:count',
      targetEventUntil: 'azure_scheduled_events:target_event_seconds_until_not_before:own',
      targetImpactSoon: 'azure_scheduled_events:target_event_impact:soon',
      targetImpactHeld: 'azure_scheduled_events:target_event_impact:held',
      targetImpactReleased: 'azure_scheduled_events:target_event_impact:released',
      targetGone: 'azure_scheduled_events:target_gone:timestamp_seconds',
      targetDown: 'azure_scheduled_events:target_down:timestamp_seconds',
      vmImpactHeld: 'azure_scheduled_events:vm_event_impact:held',
      capacityVms: 'azure_scheduled_events:capacity_vms:count',
      capacityAtRisk: 'azure_scheduled_events:capacity_vms_at_risk:count',
      capacityEvicted: 'azure_scheduled_events:capacity_vms_evicted:count',
      nodes: 'azure_scheduled_events:nodes:count',
      nodesWithoutAgent: 'azure_scheduled_events:nodes_without_agent:count',
      imdsLatency: 'azure_scheduled_events:imds_request_duration_seconds_bucket:rate15m',
      imdsRequests: 'azure_scheduled_events:imds_requests:rate15m',
      imdsFailures: 'azure_scheduled_events:imds_request_failures:rate15m',
      agentsDown: 'azure_scheduled_events:agents_down:count',
      agentsBlind: 'azure_scheduled_events:agents_blind:count',
      transitions: 'azure_scheduled_events:vm_transitions:count',
      targetEvent: 'azure_scheduled_events:target_event:info',
      targetAgentAlert: 'azure_scheduled_events:target_agent_alert:value',
      targetAgentAlertVm: 'azure_scheduled_events:target_agent_alert_vm:value',
      targetAlert: 'azure_scheduled_events:target_alert:value',
      vmAlert: 'azure_scheduled_events:vm_alert:value',
      vmAgentAlert: 'azure_scheduled_events:vm_agent_alert:value',
      rollupVms: 'azure_scheduled_events:rollup_vms:count',
      clusterAlert: 'azure_scheduled_events:shared_alert:value',
    },
    // The label of azure_scheduled_events_vm_info with the VM's priority from instance metadata
    // (Regular, Spot, SpotPlus; empty or absent when instance metadata has none: Regular).
    priority:: 'priority',
    // The VM labels a target is joined with: `labels`, capacityLabel and the priority, each once.
    // The Helm chart's placeholder for vmInfoLabels stands for a list the chart knows only when it
    // fills it in: it becomes a placeholder of its own.
    joined(labels)::
      if labels == ['@@vmInfoLabels@@'] then ['@@vmInfoLabels.joined@@'] else labels + [c.capacityLabel, self.priority],
    // The labels of one VM: the cluster and its id.
    vmId:: nonEmpty([c.clusterLabel, c.vmIdLabel]),
    // The labels the agent's event series carry besides the target's: the node the scrape names
    // (nodeLabel) and this VM's name, scale set (capacityLabel) and priority, from instance
    // metadata (absent until the agent has read it). The rules of events read them there, with
    // no join with every target's VM.
    eventVm:: nonEmpty([c.nodeLabel, self.vmName, c.capacityLabel, self.priority]),
    // One VM as its event series name it: its cluster, scale set and name (unique in a scale set).
    namedVm:: nonEmpty([c.clusterLabel, c.capacityLabel, self.vmName]),
    // The label of the agent's series with the VM's name (vm_info's and the event series').
    vmName:: 'vm_name',
    // `expr` (a few series: a record) without its series whose `label` is empty, or with only
    // those: a set operation with vector(1), which has no label, rather than a matcher
    // (`label!=""`, `label=""`), which makes Prometheus gather the series of every value of
    // `label` in the store (every VM's name, every node's), whatever series it reads.
    labelled(expr, label):: '%s unless on (%s) vector(1)' % [expr, label],
    unlabelled(expr, label):: '%s and on (%s) vector(1)' % [expr, label],
    // The series of `expr` of VMs whose agent has read instance metadata (a name), or has not.
    named(expr):: self.labelled(expr, self.vmName),
    unnamed(expr):: self.unlabelled(expr, self.vmName),
    vmIdBy:: self.list(self.vmId),
    // The VMs of each capacity group, over the priorities its recorded count (by priority) keeps
    // with `matchers`: the page's size (its Regular priorities), the Spot wave's and the
    // dashboards' (all of them).
    groupSize(matchers=[]):: 'sum by (%s) (%s)' % [self.groupBy, self.rec(self.records.capacityVms, matchers)],
    // `{matchers}` of a recorded series, or nothing.
    rec(name, matchers=[])::
      local all = nonEmpty(matchers);
      if all == [] then name else name + '{' + std.join(', ', all) + '}',

    // `expr` (one series per scrape target, or per target and `key` labels) with each target's
    // VM. The rule of `joined` (recorded first) is the targets of `expr` whose VM is known, with its
    // vmIdLabel, vmInfoLabels, capacityLabel and priority (their recorded vm_info,
    // azure_scheduled_events:target_vm_info:last). `byVm` makes them ONE series per VM and `key`,
    // however many scrape jobs scrape its agent (the max of the targets' values), with the instance
    // and vmInfoLabels of a target that names the node (nodeLabel) where one does, and keeps the
    // other targets' own labels, unchanged, while their agent has not read instance metadata.
    // `key` names every label of `expr` besides the target's that the alert keeps, `alert` among
    // them.
    vmJoin(expr, joined, key=[]):: {
      local q = $.new(c),
      joined: '%s\n* on (%s) group_left (%s)\n%s' % [
        expr,
        q.vmBy,
        q.list([c.vmIdLabel] + q.joined(c.vmInfoLabels)),
        q.records.targetVmInfo,
      ],
      local perVm(series) = 'max by (%s) (%s)' % [q.list(q.vmId + key + ['instance'] + c.vmInfoLabels), series],
      byVm:
        '%(perVm)s\nor\n(\n%(expr)s\n)\nunless on (%(t)s) %(all)s' % {
          perVm:
            if c.nodeLabel == '' then perVm(joined)
            else '%s\nor on (%s)\n%s' % [perVm(q.labelled(joined, c.nodeLabel)), q.list(q.vmId + key), perVm(q.unlabelled(joined, c.nodeLabel))],
          all: joined,
          expr: expr,
          t: q.vmBy,
        },
    },
  },
}
