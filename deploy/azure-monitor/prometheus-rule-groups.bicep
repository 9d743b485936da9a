// Generated from mixin/ by scripts/render-mixin.sh: edit the mixin, not this file.
// The rules of alerts/ as Azure Monitor managed Prometheus rule groups, one resource per group.

@description('Resource ID of the Azure Monitor workspace that holds the metrics.')
param azureMonitorWorkspaceId string

@description('Evaluate the rules on this cluster only (the cluster label Azure Monitor adds); empty: every cluster of the workspace, kept apart by the rules themselves.')
param clusterName string = ''

@description('Resource ID of the AKS cluster, added to the scopes (optional).')
param clusterResourceId string = ''

@description('Resource ID of the action group that critical alerts notify (Azure severity 0): the page, AzureScheduledEventsCapacityAtRisk, alone. Point it at the pager. Empty: no action.')
param criticalActionGroupId string = ''

@description('Resource ID of the action group that info alerts notify (Azure severity 3): Spot evictions and scale sets deleting VMs. A chat channel, or empty: no action.')
param infoActionGroupId string = ''

@description('How often the rule groups of events and the capacity page are evaluated (ISO 8601, PT1M to PT15M); the groups with an interval of their own in the mixin (targets, agent health, coverage, dashboards) keep it.')
param interval string = 'PT1M'

@description('Region of the rule groups: the Azure Monitor workspace\'s.')
param location string = resourceGroup().location

@description('Prefix of the rule group names, e.g. the cluster name when each cluster has its own groups.')
param ruleGroupPrefix string = ''

@description('Resource ID of the action group that warning alerts notify (Azure severity 2): a VM\'s event, an event stuck in Started, agent health, Spot waves, nodes without an agent. A ticket queue or a chat channel, not the pager. Empty: no action.')
param warningActionGroupId string = ''

resource ruleGroup0 'Microsoft.AlertsManagement/prometheusRuleGroups@2023-03-01' = {
  name: '${ruleGroupPrefix}azure-scheduled-events.targets'
  location: location
  properties: {
    clusterName: empty(clusterName) ? null : clusterName
    description: 'azure-scheduled-events-exporter: rule group azure-scheduled-events.targets (generated from the monitoring mixin).'
    enabled: true
    interval: 'PT5M'
    rules: [
      {
        enabled: true
        expression: 'max by (cluster, job, instance) (timestamp(azure_scheduled_events_build_info))\nor on (cluster, job, instance)\n(\n  last_over_time(azure_scheduled_events:target_last_seen:timestamp_seconds[10m])\n  > time() - 86400\n)'
        record: 'azure_scheduled_events:target_last_seen:timestamp_seconds'
      }
      {
        enabled: true
        expression: 'max by (cluster, job, instance, vm_id, vm_name, location, zone, vm_scale_set_name, resource_group, vm_size, node, priority) (\n  azure_scheduled_events_vm_info{vm_id!=""}\n  or\n  label_join(azure_scheduled_events_vm_info{vm_id=""}, "vm_id", "/", "cluster", "job", "instance")\n)\nor on (cluster, job, instance)\n(\n  last_over_time(azure_scheduled_events:target_vm_info:last[10m])\n  and on (cluster, job, instance)\n  (azure_scheduled_events:target_last_seen:timestamp_seconds > time() - 3600)\n)'
        record: 'azure_scheduled_events:target_vm_info:last'
      }
      {
        enabled: true
        expression: 'max by (cluster, job, instance, location, zone, vm_scale_set_name) (azure_scheduled_events:target_vm_info:last)\nor on (cluster, job, instance)\ngroup by (cluster, job, instance) (azure_scheduled_events:target_last_seen:timestamp_seconds)'
        record: 'azure_scheduled_events:target_place:info'
      }
      {
        enabled: true
        expression: 'count by (cluster, vm_scale_set_name, priority) (\n  max by (cluster, vm_id, vm_scale_set_name, priority) (\n    azure_scheduled_events:target_vm_info:last{vm_scale_set_name!=""}\n    and on (cluster, job, instance)\n    (azure_scheduled_events:target_last_seen:timestamp_seconds > time() - 900)\n    unless on (cluster, job, instance)\n    azure_scheduled_events:target_gone:timestamp_seconds{reason=~"discovery|replaced"}\n  )\n)'
        record: 'azure_scheduled_events:capacity_vms:count'
      }
      {
        enabled: true
        expression: 'count by (cluster) (\n  count by (cluster, vm_id) (azure_scheduled_events:target_vm_info:last)\n)'
        record: 'azure_scheduled_events:vms_known:count'
      }
    ]
    scopes: empty(clusterResourceId) ? [azureMonitorWorkspaceId] : [azureMonitorWorkspaceId, clusterResourceId]
  }
}

resource ruleGroup1 'Microsoft.AlertsManagement/prometheusRuleGroups@2023-03-01' = {
  name: '${ruleGroupPrefix}azure-scheduled-events.coverage'
  location: location
  properties: {
    clusterName: empty(clusterName) ? null : clusterName
    description: 'azure-scheduled-events-exporter: rule group azure-scheduled-events.coverage (generated from the monitoring mixin).'
    enabled: true
    interval: 'PT15M'
    rules: [
      {
        enabled: true
        expression: 'count by (cluster) (\n  count by (cluster, vm_id) (\n    azure_scheduled_events:target_vm_info:last\n    and on (cluster, job, instance)\n    azure_scheduled_events_vm_info\n  )\n)'
        record: 'azure_scheduled_events:vms_reporting:count'
      }
      {
        enabled: true
        expression: 'count by (cluster) ((\n  kube_node_info{os_image!~"Windows.*", cluster!=""}\n  or\n  kube_node_info{os_image!~"Windows.*", cluster=""}\n  and on (cluster) group by (cluster) (azure_scheduled_events_build_info{cluster=""})\n))'
        record: 'azure_scheduled_events:nodes:count'
      }
      {
        enabled: true
        expression: '(\n  count by (cluster) (\n    max by (cluster, node) ((\n  kube_node_info{os_image!~"Windows.*", cluster!=""}\n  or\n  kube_node_info{os_image!~"Windows.*", cluster=""}\n  and on (cluster) group by (cluster) (azure_scheduled_events_build_info{cluster=""})\n))\n    unless on (cluster, node)\n    azure_scheduled_events_build_info{node!=""}\n    unless on (cluster, node)\n    max_over_time(azure_scheduled_events:vm_agent_alert:value{alert="AzureScheduledEventsAgentDown", node!=""}[30m])\n  )\n  and on (cluster) count by (cluster) (azure_scheduled_events_build_info{node!=""})\n  or on (cluster)\n  (\n  (\n    azure_scheduled_events:nodes:count\n    - (azure_scheduled_events:vms_reporting:count or on (cluster) azure_scheduled_events:nodes:count * 0)\n    - (count by (cluster) (azure_scheduled_events:vm_agent_alert:value{alert="AzureScheduledEventsAgentDown"}) or on (cluster) azure_scheduled_events:nodes:count * 0)\n  ) > 0\n  unless on (cluster) count by (cluster) (azure_scheduled_events_build_info{node!=""})\n  )\n)\nor on (cluster)\n(\n  count by (cluster) (\n    (up == 0)\n    and on (cluster, job) count by (cluster, job) (azure_scheduled_events_build_info)\n    unless on (cluster, job, instance) azure_scheduled_events:target_last_seen:timestamp_seconds\n  )\n  unless on (cluster) azure_scheduled_events:nodes:count\n)'
        record: 'azure_scheduled_events:nodes_without_agent:count'
      }
      {
        actions: empty(warningActionGroupId) ? [] : [
          {
            actionGroupId: warningActionGroupId
          }
        ]
        alert: 'AzureScheduledEventsNodesWithoutAgent'
        annotations: {
          description: '{{ \$value }} nodes{{ with \$labels.cluster }} in cluster {{ . }}{{ end }} have no working agent (and no agent that AzureScheduledEventsAgentDown names): their scheduled events go unseen, and the capacity page does not count them.'
          'runbook_url': 'https://github.com/azure-scheduled-events-exporter/azure-scheduled-events-exporter/blob/main/docs/runbook.md#azurescheduledeventsnodeswithoutagent'
          summary: '{{ \$value }} nodes{{ with \$labels.cluster }} in cluster {{ . }}{{ end }} without a working scheduled-events agent'
        }
        enabled: true
        expression: 'azure_scheduled_events:nodes_without_agent:count > 0'
        'for': 'PT15M'
        labels: {
          severity: 'warning'
        }
        resolveConfiguration: {
          autoResolved: true
          timeToResolve: 'PT10M'
        }
        severity: 2
      }
    ]
    scopes: empty(clusterResourceId) ? [azureMonitorWorkspaceId] : [azureMonitorWorkspaceId, clusterResourceId]
  }
}

resource ruleGroup2 'Microsoft.AlertsManagement/prometheusRuleGroups@2023-03-01' = {
  name: '${ruleGroupPrefix}azure-scheduled-events.dashboards'
  location: location
  properties: {
    clusterName: empty(clusterName) ? null : clusterName
    description: 'azure-scheduled-events-exporter: rule group azure-scheduled-events.dashboards (generated from the monitoring mixin).'
    enabled: true
    interval: 'PT5M'
    rules: [
      {
        enabled: true
        expression: 'count by (cluster, job, location, zone, vm_scale_set_name) (\n  azure_scheduled_events:target_down:timestamp_seconds\n  * on (cluster, job, instance) group_left (location, zone, vm_scale_set_name)\n  azure_scheduled_events:target_place:info\n)'
        record: 'azure_scheduled_events:agents_down:count'
      }
      {
        enabled: true
        expression: 'count by (cluster, job, location, zone, vm_scale_set_name) (\n  azure_scheduled_events:target_agent_alert:value{alert="AzureImdsUnreachable"}\n  * on (cluster, job, instance) group_left (location, zone, vm_scale_set_name)\n  azure_scheduled_events:target_place:info\n)'
        record: 'azure_scheduled_events:agents_blind:count'
      }
      {
        enabled: true
        expression: 'count by (cluster, vm_scale_set_name, location, zone, event_type, transition) (\n  count by (cluster, vm_id, location, zone, vm_scale_set_name, event_type, transition) (\n    max by (cluster, job, instance, event_type, transition) (\n      label_replace(azure_scheduled_events_event_info{affects_this_vm="true", event_status=~"Scheduled|Started"} unless on (cluster, job, instance, event_id, event_status) azure_scheduled_events_event_info{affects_this_vm="true", event_status=~"Scheduled|Started"} offset 5m, "transition", "\$1", "event_status", "(.*)")\n      or\n      label_replace(azure_scheduled_events_event_info{affects_this_vm="true", event_status=~"Scheduled|Started"} offset 5m unless on (cluster, job, instance, event_id) azure_scheduled_events_event_info{affects_this_vm="true", event_status=~"Scheduled|Started"}, "transition", "ended", "", "")\n    )\n    * on (cluster, job, instance) group_left (vm_id, location, zone, vm_scale_set_name)\n    max by (cluster, job, instance, vm_id, location, zone, vm_scale_set_name) (azure_scheduled_events:target_vm_info:last)\n  )\n)'
        record: 'azure_scheduled_events:vm_transitions:count'
      }
      {
        enabled: true
        expression: 'max by (cluster, job, instance, event_id) (azure_scheduled_events_event_info)\n* on (cluster, job, instance) group_left (vm_name, location, zone, vm_scale_set_name, resource_group, vm_size, node)\nazure_scheduled_events:target_vm_info:last\nor on (cluster, job, instance, event_id)\nmax by (cluster, job, instance, event_id) (azure_scheduled_events_event_info)'
        record: 'azure_scheduled_events:target_event:info'
      }
    ]
    scopes: empty(clusterResourceId) ? [azureMonitorWorkspaceId] : [azureMonitorWorkspaceId, clusterResourceId]
  }
}

resource ruleGroup3 'Microsoft.AlertsManagement/prometheusRuleGroups@2023-03-01' = {
  name: '${ruleGroupPrefix}azure-scheduled-events.dashboards-imds'
  location: location
  properties: {
    clusterName: empty(clusterName) ? null : clusterName
    description: 'azure-scheduled-events-exporter: rule group azure-scheduled-events.dashboards-imds (generated from the monitoring mixin).'
    enabled: true
    interval: 'PT15M'
    rules: [
      {
        enabled: true
        expression: 'sum by (cluster, job, location, zone, vm_scale_set_name, operation, le) (\n  rate(azure_scheduled_events_imds_request_duration_seconds_bucket[15m])\n  * on (cluster, job, instance) group_left (location, zone, vm_scale_set_name)\n  azure_scheduled_events:target_place:info\n)'
        record: 'azure_scheduled_events:imds_request_duration_seconds_bucket:rate15m'
      }
      {
        enabled: true
        expression: 'sum by (cluster, job, location, zone, vm_scale_set_name, operation) (\n  rate(azure_scheduled_events_imds_requests_total[15m])\n  * on (cluster, job, instance) group_left (location, zone, vm_scale_set_name)\n  azure_scheduled_events:target_place:info\n)'
        record: 'azure_scheduled_events:imds_requests:rate15m'
      }
      {
        enabled: true
        expression: 'sum by (cluster, job, location, zone, vm_scale_set_name, operation, reason) (\n  rate(azure_scheduled_events_imds_request_failures_total[15m])\n  * on (cluster, job, instance) group_left (location, zone, vm_scale_set_name)\n  azure_scheduled_events:target_place:info\n)'
        record: 'azure_scheduled_events:imds_request_failures:rate15m'
      }
    ]
    scopes: empty(clusterResourceId) ? [azureMonitorWorkspaceId] : [azureMonitorWorkspaceId, clusterResourceId]
  }
}

resource ruleGroup4 'Microsoft.AlertsManagement/prometheusRuleGroups@2023-03-01' = {
  name: '${ruleGroupPrefix}azure-scheduled-events.events'
  location: location
  properties: {
    clusterName: empty(clusterName) ? null : clusterName
    description: 'azure-scheduled-events-exporter: rule group azure-scheduled-events.events (generated from the monitoring mixin).'
    enabled: true
    interval: interval
    rules: [
      {
        enabled: true
        expression: 'azure_scheduled_events_event_not_before_timestamp_seconds - time()\nand on (cluster, job, instance, event_id)\nazure_scheduled_events_event_info{affects_this_vm="true", event_status=~"Scheduled|Started"}'
        record: 'azure_scheduled_events:target_event_seconds_until_not_before:own'
      }
      {
        enabled: true
        expression: 'max by (cluster, job, instance, event_id, event_type, event_source, node, vm_name, vm_scale_set_name, priority) (\n  azure_scheduled_events_event_info{affects_this_vm="true", event_type=~"Preempt|Reboot|Redeploy|Terminate", event_status=~"Scheduled|Started"} * 0\n  + on (cluster, job, instance, event_id) group_left ()\n  max by (cluster, job, instance, event_id) (azure_scheduled_events:target_event_seconds_until_not_before:own) + time()\n  or\n  azure_scheduled_events_event_info{affects_this_vm="true", event_type=~"Preempt|Reboot|Redeploy|Terminate", event_status=~"Scheduled|Started"} * 0\n)\nunless on (cluster, job, instance, event_id)\n  (azure_scheduled_events:target_event_seconds_until_not_before:own > 900)'
        record: 'azure_scheduled_events:target_event_impact:soon'
      }
      {
        enabled: true
        expression: 'azure_scheduled_events:target_event_impact:soon\nor on (cluster, job, instance, event_id)\n(\n  max_over_time(azure_scheduled_events:target_event_impact:soon[15m])\n  unless on (cluster, job, instance) azure_scheduled_events:target_event_impact:released\n  unless on (cluster, job, instance) azure_scheduled_events:target_gone:timestamp_seconds{reason=~"discovery|replaced"}\n)'
        record: 'azure_scheduled_events:target_event_impact:held'
      }
      {
        enabled: true
        expression: 'label_replace(\n  azure_scheduled_events:target_event_impact:held{event_type=~"Reboot|Redeploy"},\n  "alert", "AzureScheduledEventImpactSoon", "", ""\n)\nor\nlabel_replace(\n  max by (cluster, job, instance, event_id, event_type, event_source, node, vm_name, vm_scale_set_name, priority) (\n    azure_scheduled_events_event_info{affects_this_vm="true", event_status=~"Scheduled|Started", event_type="Preempt"}\n  ),\n  "alert", "AzureSpotEviction", "", ""\n)\nor\nlabel_replace(\n  max by (cluster, job, instance, event_id, event_type, event_source, node, vm_name, vm_scale_set_name, priority) (\n    azure_scheduled_events_event_info{affects_this_vm="true", event_status=~"Scheduled|Started", event_type="Terminate"}\n  ),\n  "alert", "AzureScaleSetDelete", "", ""\n)\nor\nlabel_replace(\n  azure_scheduled_events:target_event_seconds_until_not_before:own\n  > on (cluster, job, instance, event_id) group_left (event_type, event_source, node, vm_name, vm_scale_set_name, priority)\n  (\n    max by (cluster, job, instance, event_id, event_type, event_source, node, vm_name, vm_scale_set_name, priority) (\n      azure_scheduled_events_event_info{affects_this_vm="true", event_status=~"Scheduled|Started", hardware_failure_predicted="true"}\n    ) * 0 - Inf\n    or on (cluster, job, instance, event_id)\n    max by (cluster, job, instance, event_id, event_type, event_source, node, vm_name, vm_scale_set_name, priority) (\n      azure_scheduled_events_event_info{affects_this_vm="true", event_status=~"Scheduled|Started", event_type="Redeploy"}\n    ) * 0 + 86400\n  ),\n  "alert", "AzureRedeployAnnouncedDaysAhead", "", ""\n)'
        record: 'azure_scheduled_events:target_alert:value'
      }
      {
        enabled: true
        expression: 'max by (cluster, vm_scale_set_name, vm_name, priority, event_id, event_type, event_source) (\n  azure_scheduled_events:target_event_impact:held unless on (vm_name) vector(1)\n)'
        record: 'azure_scheduled_events:vm_event_impact:held'
      }
      {
        enabled: true
        expression: 'count by (cluster, vm_scale_set_name) (\n  max by (cluster, vm_scale_set_name, vm_name) (\n    azure_scheduled_events:vm_event_impact:held{vm_scale_set_name!="", event_type=~"Reboot|Redeploy|Preempt", priority!~"Spot|SpotPlus|Low"}\n    unless\n    azure_scheduled_events:vm_event_impact:held{event_type="Preempt", priority=""}\n  )\n)'
        record: 'azure_scheduled_events:capacity_vms_at_risk:count'
      }
      {
        enabled: true
        expression: 'count by (cluster, vm_scale_set_name) (\n  max by (cluster, vm_scale_set_name, vm_name) (\n    azure_scheduled_events:vm_event_impact:held{vm_scale_set_name!="", event_type=~"Preempt"}\n  )\n)'
        record: 'azure_scheduled_events:capacity_vms_evicted:count'
      }
      {
        enabled: true
        expression: 'max by (cluster, vm_scale_set_name, vm_name, node, alert, event_id, event_source, event_type) (\n  azure_scheduled_events:target_alert:value unless on (vm_name) vector(1) unless on (node) vector(1)\n)\nor on (cluster, vm_scale_set_name, vm_name, alert, event_id, event_source, event_type)\nmax by (cluster, vm_scale_set_name, vm_name, alert, event_id, event_source, event_type) (\n  azure_scheduled_events:target_alert:value unless on (vm_name) vector(1)\n)\nor\nazure_scheduled_events:target_alert:value and on (vm_name) vector(1)'
        record: 'azure_scheduled_events:vm_alert:value'
      }
      {
        actions: empty(warningActionGroupId) ? [] : [
          {
            actionGroupId: warningActionGroupId
          }
        ]
        alert: 'AzureScheduledEventImpactSoon'
        annotations: {
          description: 'VM {{ if \$labels.vm_name }}{{ \$labels.vm_name }}{{ else }}{{ \$labels.instance }}{{ end }}{{ with \$labels.vm_scale_set_name }} of scale set {{ . }}{{ end }}{{ with \$labels.node }} on node {{ . }}{{ end }}{{ with \$labels.cluster }} in cluster {{ . }}{{ end }}: {{ \$labels.event_source }} {{ \$labels.event_type }} event {{ \$labels.event_id }} {{ if gt \$value 0.0 }}is due at {{ \$value | humanizeTimestamp }}{{ else }}has started, or its NotBefore passed or is unknown{{ end }}.'
          'runbook_url': 'https://github.com/azure-scheduled-events-exporter/azure-scheduled-events-exporter/blob/main/docs/runbook.md#azurescheduledeventimpactsoon'
          summary: '{{ \$labels.event_type }} of VM {{ if \$labels.vm_name }}{{ \$labels.vm_name }}{{ else }}{{ \$labels.instance }}{{ end }} within 15 minutes'
        }
        enabled: true
        expression: 'max without (alert) (\n  azure_scheduled_events:vm_alert:value{alert="AzureScheduledEventImpactSoon"}\n)'
        'for': 'PT1M'
        labels: {
          severity: 'warning'
        }
        resolveConfiguration: {
          autoResolved: true
          timeToResolve: 'PT10M'
        }
        severity: 2
      }
      {
        actions: empty(infoActionGroupId) ? [] : [
          {
            actionGroupId: infoActionGroupId
          }
        ]
        alert: 'AzureSpotEviction'
        annotations: {
          description: 'Spot VM {{ if \$labels.vm_name }}{{ \$labels.vm_name }}{{ else }}{{ \$labels.instance }}{{ end }}{{ with \$labels.vm_scale_set_name }} of scale set {{ . }}{{ end }}{{ with \$labels.node }} on node {{ . }}{{ end }}{{ with \$labels.cluster }} in cluster {{ . }}{{ end }} is being evicted: Preempt event {{ \$labels.event_id }}. Informational: Azure gives 30 seconds, less than scrape, rule evaluation and notification take.'
          'runbook_url': 'https://github.com/azure-scheduled-events-exporter/azure-scheduled-events-exporter/blob/main/docs/runbook.md#azurespoteviction'
          summary: 'Spot eviction of VM {{ if \$labels.vm_name }}{{ \$labels.vm_name }}{{ else }}{{ \$labels.instance }}{{ end }}'
        }
        enabled: true
        expression: 'max without (alert) (\n  azure_scheduled_events:vm_alert:value{alert="AzureSpotEviction"}\n)'
        'for': 'PT0S'
        labels: {
          severity: 'info'
        }
        resolveConfiguration: {
          autoResolved: true
          timeToResolve: 'PT10M'
        }
        severity: 3
      }
      {
        actions: empty(infoActionGroupId) ? [] : [
          {
            actionGroupId: infoActionGroupId
          }
        ]
        alert: 'AzureScaleSetDelete'
        annotations: {
          description: '{{ \$value }} VMs{{ with \$labels.vm_scale_set_name }} of scale set {{ . }}{{ end }}{{ with \$labels.cluster }} in cluster {{ . }}{{ end }} are being deleted by their scale set: {{ with \$labels.event_source }}{{ if eq . "User" }}requested (a scale-in, a delete by a user or an automation){{ else }}Terminate events from {{ . }}{{ end }}{{ else }}Terminate events from an unknown source{{ end }}. Informational: a scale set deletes VMs on purpose.'
          'runbook_url': 'https://github.com/azure-scheduled-events-exporter/azure-scheduled-events-exporter/blob/main/docs/runbook.md#azurescalesetdelete'
          summary: '{{ \$value }} VMs{{ with \$labels.vm_scale_set_name }} of scale set {{ . }}{{ end }}{{ with \$labels.cluster }} in cluster {{ . }}{{ end }} deleted by their scale set'
        }
        enabled: true
        expression: 'count by (cluster, vm_scale_set_name, event_source) (\n  azure_scheduled_events:vm_alert:value{alert="AzureScaleSetDelete"}\n)'
        'for': 'PT0S'
        labels: {
          severity: 'info'
        }
        resolveConfiguration: {
          autoResolved: true
          timeToResolve: 'PT10M'
        }
        severity: 3
      }
      {
        actions: empty(warningActionGroupId) ? [] : [
          {
            actionGroupId: warningActionGroupId
          }
        ]
        alert: 'AzureScheduledEventStuckStarted'
        annotations: {
          description: '{{ \$labels.event_type }} event {{ \$labels.event_id }}{{ with \$labels.cluster }} in cluster {{ . }}{{ end }} has been Started for more than 30m, on {{ \$value }} VMs whose agents report it as their own (0: only neighbours see it). Open one Azure support case for this EventId.'
          'runbook_url': 'https://github.com/azure-scheduled-events-exporter/azure-scheduled-events-exporter/blob/main/docs/runbook.md#azurescheduledeventstuckstarted'
          summary: '{{ \$labels.event_type }} event {{ \$labels.event_id }} Started for over 30m{{ with \$labels.cluster }} in cluster {{ . }}{{ end }}'
        }
        enabled: true
        expression: 'count by (cluster, event_id, event_type, event_source) (\n  max by (cluster, instance, event_id, event_type, event_source) (\n    azure_scheduled_events_event_info{event_status="Started", affects_this_vm="true"}\n  )\n)\nor\nmax by (cluster, event_id, event_type, event_source) (\n  azure_scheduled_events_event_info{event_status="Started"}\n) * 0'
        'for': 'PT30M'
        labels: {
          severity: 'warning'
        }
        resolveConfiguration: {
          autoResolved: true
          timeToResolve: 'PT10M'
        }
        severity: 2
      }
      {
        actions: empty(warningActionGroupId) ? [] : [
          {
            actionGroupId: warningActionGroupId
          }
        ]
        alert: 'AzureRedeployAnnouncedDaysAhead'
        annotations: {
          description: 'VM {{ if \$labels.vm_name }}{{ \$labels.vm_name }}{{ else }}{{ \$labels.instance }}{{ end }}{{ with \$labels.vm_scale_set_name }} of scale set {{ . }}{{ end }}{{ with \$labels.node }} on node {{ . }}{{ end }}{{ with \$labels.cluster }} in cluster {{ . }}{{ end }} will be taken down by Azure in {{ \$value | humanizeDuration }} ({{ \$labels.event_type }} event {{ \$labels.event_id }}): its host is degraded. Redeploy it yourself at a quiet time.'
          'runbook_url': 'https://github.com/azure-scheduled-events-exporter/azure-scheduled-events-exporter/blob/main/docs/runbook.md#azureredeployannounceddaysahead'
          summary: '{{ \$labels.event_type }} of VM {{ if \$labels.vm_name }}{{ \$labels.vm_name }}{{ else }}{{ \$labels.instance }}{{ end }} announced days ahead (degraded hardware)'
        }
        enabled: true
        expression: 'max without (alert) (\n  azure_scheduled_events:vm_alert:value{alert="AzureRedeployAnnouncedDaysAhead"}\n)'
        'for': 'PT5M'
        labels: {
          severity: 'warning'
        }
        resolveConfiguration: {
          autoResolved: true
          timeToResolve: 'PT10M'
        }
        severity: 2
      }
      {
        actions: empty(criticalActionGroupId) ? [] : [
          {
            actionGroupId: criticalActionGroupId
          }
        ]
        alert: 'AzureScheduledEventsCapacityAtRisk'
        annotations: {
          description: 'At least 2 and more than 25 % of the Regular VMs of scale set {{ \$labels.vm_scale_set_name }}{{ with \$labels.cluster }} in cluster {{ . }}{{ end }} face a Reboot or Redeploy or Preempt event, the first {{ if gt \$value 0.0 }}at {{ \$value | humanizeTimestamp }}{{ else }}now (Started, or NotBefore passed or unknown){{ end }}. NotBefore cannot be postponed: add capacity first. The runbook lists the VMs.'
          'runbook_url': 'https://github.com/azure-scheduled-events-exporter/azure-scheduled-events-exporter/blob/main/docs/runbook.md#azurescheduledeventscapacityatrisk'
          summary: 'Scale set {{ \$labels.vm_scale_set_name }}{{ with \$labels.cluster }} in cluster {{ . }}{{ end }}: over 25 % of its Regular VMs go down, the first {{ if gt \$value 0.0 }}at {{ \$value | humanizeTimestamp }}{{ else }}now (Started, or NotBefore passed or unknown){{ end }}'
        }
        enabled: true
        expression: 'min by (cluster, vm_scale_set_name) (\n  azure_scheduled_events:vm_event_impact:held{vm_scale_set_name!="", event_type=~"Reboot|Redeploy|Preempt", priority!~"Spot|SpotPlus|Low"}\n  unless\n  azure_scheduled_events:vm_event_impact:held{event_type="Preempt", priority=""}\n)\nand on (cluster, vm_scale_set_name)\n(\n  azure_scheduled_events:capacity_vms_at_risk:count >= 2\n  and\n  azure_scheduled_events:capacity_vms_at_risk:count\n  / (\n    sum by (cluster, vm_scale_set_name) (azure_scheduled_events:capacity_vms:count{priority!~"Spot|SpotPlus|Low"})\n    - (\n      count by (cluster, vm_scale_set_name) (\n        max by (cluster, vm_scale_set_name, vm_name) (\n          azure_scheduled_events:vm_event_impact:held{vm_scale_set_name!="", event_type="Terminate", priority!~"Spot|SpotPlus|Low"}\n        )\n      )\n      or sum by (cluster, vm_scale_set_name) (azure_scheduled_events:capacity_vms:count{priority!~"Spot|SpotPlus|Low"}) * 0\n    )\n  ) > 0.25\n)'
        'for': 'PT1M'
        labels: {
          severity: 'critical'
        }
        resolveConfiguration: {
          autoResolved: true
          timeToResolve: 'PT10M'
        }
        severity: 0
      }
      {
        actions: empty(warningActionGroupId) ? [] : [
          {
            actionGroupId: warningActionGroupId
          }
        ]
        alert: 'AzureSpotEvictionWave'
        annotations: {
          description: '{{ \$value }} VMs of scale set {{ \$labels.vm_scale_set_name }}{{ with \$labels.cluster }} in cluster {{ . }}{{ end }} are being evicted (Preempt): more than 25 % of its VMs at once. Not paged: a Spot pool is built for evictions; check that its workload found room elsewhere.'
          'runbook_url': 'https://github.com/azure-scheduled-events-exporter/azure-scheduled-events-exporter/blob/main/docs/runbook.md#azurespotevictionwave'
          summary: '{{ \$value }} Spot VMs of scale set {{ \$labels.vm_scale_set_name }}{{ with \$labels.cluster }} in cluster {{ . }}{{ end }} evicted at once'
        }
        enabled: true
        expression: 'count by (cluster, vm_scale_set_name) (\n  max by (cluster, vm_scale_set_name, vm_name) (\n    azure_scheduled_events:vm_event_impact:held{vm_scale_set_name!="", event_type=~"Preempt"}\n  )\n) >= 2\nand on (cluster, vm_scale_set_name)\n(\n  azure_scheduled_events:capacity_vms_evicted:count\n  / sum by (cluster, vm_scale_set_name) (azure_scheduled_events:capacity_vms:count)\n) > 0.25'
        'for': 'PT1M'
        labels: {
          severity: 'warning'
        }
        resolveConfiguration: {
          autoResolved: true
          timeToResolve: 'PT10M'
        }
        severity: 2
      }
    ]
    scopes: empty(clusterResourceId) ? [azureMonitorWorkspaceId] : [azureMonitorWorkspaceId, clusterResourceId]
  }
}

resource ruleGroup5 'Microsoft.AlertsManagement/prometheusRuleGroups@2023-03-01' = {
  name: '${ruleGroupPrefix}azure-scheduled-events.agents'
  location: location
  properties: {
    clusterName: empty(clusterName) ? null : clusterName
    description: 'azure-scheduled-events-exporter: rule group azure-scheduled-events.agents (generated from the monitoring mixin).'
    enabled: true
    interval: 'PT5M'
    rules: [
      {
        enabled: true
        expression: 'group by (cluster, job, instance) (\n  max_over_time(azure_scheduled_events:target_event_impact:soon[15m])\n  unless on (cluster, job, instance, event_id) azure_scheduled_events:target_event_impact:soon\n)\nand on (cluster, job, instance) (up == 1)\nunless on (cluster, job, instance) (\n  azure_scheduled_events_event_info{affects_this_vm="true", event_type=~"Preempt|Reboot|Redeploy|Terminate", event_status=~"Scheduled|Started"}\n  unless on (cluster, job, instance, event_id) azure_scheduled_events:target_event_impact:soon\n)'
        record: 'azure_scheduled_events:target_event_impact:released'
      }
      {
        enabled: true
        expression: '(\n  max by (cluster, job, instance, node) (up) == 0\n)\n+ on (cluster, job, instance) group_left ()\n(azure_scheduled_events:target_last_seen:timestamp_seconds > time() - 86400)'
        record: 'azure_scheduled_events:target_down:timestamp_seconds'
      }
      {
        enabled: true
        expression: 'label_replace(\n  max by (cluster, job, instance) (\n    last_over_time(azure_scheduled_events_event_info{affects_this_vm="true", event_type=~"Preempt|Terminate", event_status=~"Scheduled|Started"}[600s])\n  ) * 0 + time(),\n  "reason", "event", "", ""\n)\nor\nlabel_replace(\n  max by (cluster, job, instance) (\n    azure_scheduled_events:target_event_impact:held unless on (cluster, job, instance, event_id) azure_scheduled_events:target_event_impact:soon unless on (cluster, job, instance) azure_scheduled_events:target_event_impact:released\n    unless on (cluster, job, instance) azure_scheduled_events:target_down:timestamp_seconds\n    unless on (cluster, node) (\n      kube_node_info{os_image!~"Windows.*", cluster!=""}\n      or\n      kube_node_info{os_image!~"Windows.*", cluster=""}\n      and on (cluster) group by (cluster) (azure_scheduled_events_build_info{cluster=""})\n    )\n    unless on (cluster, job, instance) up\n    and on (cluster, job) group by (cluster, job) (up)\n  ) * 0 + time(),\n  "reason", "discovery", "", ""\n)\nor\nlabel_replace(\n  max by (cluster, job, instance) (\n    azure_scheduled_events:target_event_impact:held{node!=""} unless on (cluster, job, instance, event_id) azure_scheduled_events:target_event_impact:soon unless on (cluster, job, instance) azure_scheduled_events:target_event_impact:released\n    and on (cluster, node) azure_scheduled_events_vm_info{node!=""}\n  ) * 0 + time(),\n  "reason", "replaced", "", ""\n)\nor on (cluster, job, instance, reason)\n(\n  last_over_time(azure_scheduled_events:target_gone:timestamp_seconds[10m]) > time() - 86400\n)\nunless on (cluster, job, instance) (up == 1)'
        record: 'azure_scheduled_events:target_gone:timestamp_seconds'
      }
      {
        enabled: true
        expression: 'label_replace(\n  azure_scheduled_events:target_down:timestamp_seconds\n  unless on (cluster, job, instance) azure_scheduled_events:target_event_impact:held{event_type=~"Reboot|Redeploy|Preempt|Terminate"}\n  unless on (cluster, job, instance) azure_scheduled_events:target_gone:timestamp_seconds\n  unless on (cluster, node) max by (cluster, node) (\n    max_over_time(kube_node_spec_taint{key="node.kubernetes.io/unschedulable"}[10m])\n  ),\n  "alert", "AzureScheduledEventsAgentDown", "", ""\n)\nor\nlabel_replace(\n  changes(azure_scheduled_events_last_poll_timestamp_seconds[180s]) == 0\n  and\n  count_over_time(azure_scheduled_events_last_poll_timestamp_seconds[180s]) > 1,\n  "alert", "AzureScheduledEventsPollLoopStuck", "", ""\n)\nor\nlabel_replace(\n  azure_scheduled_events_up == 0,\n  "alert", "AzureImdsUnreachable", "", ""\n)\nor\nlabel_replace(\n  max by (cluster, job, instance, event_type, reason) (\n    increase(azure_scheduled_events_approval_failures_total[10m])\n  ) > 0\n  unless on (cluster, job, instance, event_type)\n    max by (cluster, job, instance, event_type) (increase(azure_scheduled_events_approvals_total[10m])) > 0,\n  "alert", "AzureScheduledEventApprovalsFailing", "", ""\n)\nor\nlabel_replace(\n  sum by (cluster, job, instance, receiver) (\n    increase(azure_scheduled_events_notifications_total{result!="delivered"}[10m])\n    or\n    increase(azure_scheduled_events_notifications_dropped_total[10m])\n  ) > 0,\n  "alert", "AzureScheduledEventNotificationsFailing", "", ""\n)\nor\nlabel_replace(\n  sum by (cluster, job, instance, operation, result) (\n    increase(azure_scheduled_events_kubernetes_requests_total{result!~"ok|conflict|already_exists"}[10m])\n  ) > 0\n  unless on (cluster, job, instance, operation)\n    sum by (cluster, job, instance, operation) (increase(azure_scheduled_events_kubernetes_requests_total{result="ok"}[10m])) > 0,\n  "alert", "AzureScheduledEventsKubernetesRequestsFailing", "", ""\n)\nor\nlabel_replace(\n  azure_scheduled_events_reboots_total{expected="false", clean!="true"}\n  > min_over_time(azure_scheduled_events_reboots_total{expected="false", clean!="true"}[30m]),\n  "alert", "AzureVMRebootedUnexpectedly", "", ""\n)'
        record: 'azure_scheduled_events:target_agent_alert:value'
      }
      {
        enabled: true
        expression: 'azure_scheduled_events:target_agent_alert:value\n* on (cluster, job, instance) group_left (vm_id, vm_name, vm_scale_set_name, node, priority)\nazure_scheduled_events:target_vm_info:last'
        record: 'azure_scheduled_events:target_agent_alert_vm:value'
      }
      {
        enabled: true
        expression: 'max by (cluster, vm_id, alert, event_type, operation, reason, receiver, result, instance, vm_name, vm_scale_set_name, node) (azure_scheduled_events:target_agent_alert_vm:value unless on (node) vector(1))\nor on (cluster, vm_id, alert, event_type, operation, reason, receiver, result)\nmax by (cluster, vm_id, alert, event_type, operation, reason, receiver, result, instance, vm_name, vm_scale_set_name, node) (azure_scheduled_events:target_agent_alert_vm:value and on (node) vector(1))\nor\n(\nazure_scheduled_events:target_agent_alert:value\n)\nunless on (cluster, job, instance) azure_scheduled_events:target_agent_alert_vm:value'
        record: 'azure_scheduled_events:vm_agent_alert:value'
      }
      {
        enabled: true
        expression: 'count by (cluster, alert) (\n  count by (cluster, vm_id, job, instance, alert) (\n    azure_scheduled_events:vm_agent_alert:value{alert="AzureScheduledEventsAgentDown"}\n    or\n    changes(azure_scheduled_events:vm_agent_alert:value{alert="AzureScheduledEventsAgentDown"}[30m]) >= 2\n  )\n)\nor\ncount by (cluster, alert) (\n  count by (cluster, vm_id, job, instance, alert) (\n    azure_scheduled_events:vm_agent_alert:value{alert="AzureScheduledEventsPollLoopStuck"}\n  )\n)\nor\ncount by (cluster, alert) (\n  count by (cluster, vm_id, job, instance, alert) (\n    azure_scheduled_events:vm_agent_alert:value{alert="AzureImdsUnreachable"}\n  )\n)\nor\ncount by (cluster, alert, event_type, reason) (\n  count by (cluster, vm_id, job, instance, alert, event_type, reason) (\n    azure_scheduled_events:vm_agent_alert:value{alert="AzureScheduledEventApprovalsFailing"}\n  )\n)\nor\ncount by (cluster, alert, receiver) (\n  count by (cluster, vm_id, job, instance, alert, receiver) (\n    azure_scheduled_events:vm_agent_alert:value{alert="AzureScheduledEventNotificationsFailing"}\n  )\n)\nor\ncount by (cluster, alert, operation) (\n  count by (cluster, vm_id, job, instance, alert, operation) (\n    azure_scheduled_events:vm_agent_alert:value{alert="AzureScheduledEventsKubernetesRequestsFailing"}\n  )\n)\nor\ncount by (cluster, alert) (\n  count by (cluster, vm_id, job, instance, alert) (\n    azure_scheduled_events:vm_agent_alert:value{alert="AzureVMRebootedUnexpectedly"}\n  )\n)'
        record: 'azure_scheduled_events:rollup_vms:count'
      }
      {
        enabled: true
        expression: '(\n  azure_scheduled_events:rollup_vms:count{alert=~"AzureScheduledEventsAgentDown|AzureScheduledEventsPollLoopStuck|AzureImdsUnreachable|AzureScheduledEventApprovalsFailing|AzureVMRebootedUnexpectedly"} >= 3\n)\nand\n(\n  azure_scheduled_events:rollup_vms:count{alert=~"AzureScheduledEventsAgentDown|AzureScheduledEventsPollLoopStuck|AzureImdsUnreachable|AzureScheduledEventApprovalsFailing|AzureVMRebootedUnexpectedly"}\n  / on (cluster) group_left ()\n  azure_scheduled_events:vms_known:count > 0.1\n  or\n  azure_scheduled_events:rollup_vms:count{alert=~"AzureScheduledEventsAgentDown|AzureScheduledEventsPollLoopStuck|AzureImdsUnreachable|AzureScheduledEventApprovalsFailing|AzureVMRebootedUnexpectedly"}\n  unless on (cluster) azure_scheduled_events:vms_known:count\n)\nor\n(\n  azure_scheduled_events:rollup_vms:count{alert=~"AzureScheduledEventsAgentDown|AzureScheduledEventsPollLoopStuck|AzureImdsUnreachable|AzureScheduledEventApprovalsFailing|AzureVMRebootedUnexpectedly"}\n  and\n  last_over_time(azure_scheduled_events:shared_alert:value{alert=~"AzureScheduledEventsAgentDown|AzureScheduledEventsPollLoopStuck|AzureImdsUnreachable|AzureScheduledEventApprovalsFailing|AzureVMRebootedUnexpectedly"}[450s])\n)\nor\nazure_scheduled_events:rollup_vms:count{alert=~"AzureScheduledEventNotificationsFailing|AzureScheduledEventsKubernetesRequestsFailing"}'
        record: 'azure_scheduled_events:shared_alert:value'
      }
      {
        actions: empty(warningActionGroupId) ? [] : [
          {
            actionGroupId: warningActionGroupId
          }
        ]
        alert: 'AzureScheduledEventsAgentDown'
        annotations: {
          description: '{{ if \$labels.instance }}Prometheus cannot scrape the agent on VM {{ if \$labels.vm_name }}{{ \$labels.vm_name }}{{ else }}{{ \$labels.instance }}{{ end }} ({{ \$labels.instance }}{{ with \$labels.job }}, job {{ . }}{{ end }}{{ with \$labels.node }} on node {{ . }}{{ end }}{{ with \$labels.cluster }} in cluster {{ . }}{{ end }}), or could not 3 times or more in 30m (a crash loop): scheduled events of this VM go unseen.{{ else }}Prometheus cannot scrape the agents of {{ \$value }} VMs{{ with \$labels.cluster }} in cluster {{ . }}{{ end }} (at least 3 and more than 10 % of its VMs): one cause for them all, such as a NetworkPolicy, the scrape configuration or the agent\'s release. Scheduled events of these VMs go unseen.{{ end }}'
          'runbook_url': 'https://github.com/azure-scheduled-events-exporter/azure-scheduled-events-exporter/blob/main/docs/runbook.md#azurescheduledeventsagentdown'
          summary: '{{ if \$labels.instance }}Scheduled-events agent down on VM {{ if \$labels.vm_name }}{{ \$labels.vm_name }}{{ else }}{{ \$labels.instance }}{{ end }}{{ else }}Scheduled-events agents down on {{ \$value }} VMs{{ with \$labels.cluster }} in cluster {{ . }}{{ end }}{{ end }}'
        }
        enabled: true
        expression: '(\n  max without (alert) (\n    azure_scheduled_events:vm_agent_alert:value{alert="AzureScheduledEventsAgentDown"}\n    or\n    changes(azure_scheduled_events:vm_agent_alert:value{alert="AzureScheduledEventsAgentDown"}[30m]) >= 2\n  )\n)\nunless on (cluster) azure_scheduled_events:shared_alert:value{alert="AzureScheduledEventsAgentDown"}\nor\nmax without (alert) (\n  azure_scheduled_events:shared_alert:value{alert="AzureScheduledEventsAgentDown"}\n)'
        'for': 'PT5M'
        labels: {
          severity: 'warning'
        }
        resolveConfiguration: {
          autoResolved: true
          timeToResolve: 'PT10M'
        }
        severity: 2
      }
      {
        actions: empty(warningActionGroupId) ? [] : [
          {
            actionGroupId: warningActionGroupId
          }
        ]
        alert: 'AzureScheduledEventsPollLoopStuck'
        annotations: {
          description: '{{ if \$labels.instance }}The agent on VM {{ if \$labels.vm_name }}{{ \$labels.vm_name }}{{ else }}{{ \$labels.instance }}{{ end }} ({{ \$labels.instance }}{{ with \$labels.node }} on node {{ . }}{{ end }}{{ with \$labels.cluster }} in cluster {{ . }}{{ end }}) answers scrapes but has not finished a poll for more than 180 seconds: its poll loop is stuck and new events of this VM go unseen, while the last known ones stay exported.{{ else }}The agents of {{ \$value }} VMs{{ with \$labels.cluster }} in cluster {{ . }}{{ end }} (at least 3 and more than 10 % of its VMs) answer scrapes but have not finished a poll for more than 180 seconds: one cause for them all, such as a release of the agent or the nodes\' network. New events of these VMs go unseen.{{ end }}'
          'runbook_url': 'https://github.com/azure-scheduled-events-exporter/azure-scheduled-events-exporter/blob/main/docs/runbook.md#azurescheduledeventspollloopstuck'
          summary: '{{ if \$labels.instance }}The agent on VM {{ if \$labels.vm_name }}{{ \$labels.vm_name }}{{ else }}{{ \$labels.instance }}{{ end }} no longer polls IMDS{{ else }}The agents of {{ \$value }} VMs{{ with \$labels.cluster }} in cluster {{ . }}{{ end }} no longer poll IMDS{{ end }}'
        }
        enabled: true
        expression: '(\n  max without (alert) (\n    azure_scheduled_events:vm_agent_alert:value{alert="AzureScheduledEventsPollLoopStuck"}\n  )\n)\nunless on (cluster) azure_scheduled_events:shared_alert:value{alert="AzureScheduledEventsPollLoopStuck"}\nor\nmax without (alert) (\n  azure_scheduled_events:shared_alert:value{alert="AzureScheduledEventsPollLoopStuck"}\n)'
        'for': 'PT5M'
        labels: {
          severity: 'warning'
        }
        resolveConfiguration: {
          autoResolved: true
          timeToResolve: 'PT10M'
        }
        severity: 2
      }
      {
        actions: empty(warningActionGroupId) ? [] : [
          {
            actionGroupId: warningActionGroupId
          }
        ]
        alert: 'AzureImdsUnreachable'
        annotations: {
          description: '{{ if \$labels.instance }}The agent on VM {{ if \$labels.vm_name }}{{ \$labels.vm_name }}{{ else }}{{ \$labels.instance }}{{ end }} ({{ \$labels.instance }}{{ with \$labels.node }} on node {{ . }}{{ end }}{{ with \$labels.cluster }} in cluster {{ . }}{{ end }}) has had no valid scheduled-events document for 5m: no events of this VM are seen; the last known ones stay exported.{{ else }}The agents of {{ \$value }} VMs{{ with \$labels.cluster }} in cluster {{ . }}{{ end }} (at least 3 and more than 10 % of its VMs) have had no valid scheduled-events document for 5m: one cause for them all, such as AKS\' IMDS restriction, a NetworkPolicy or the pods\' host network. No events of these VMs are seen.{{ end }}'
          'runbook_url': 'https://github.com/azure-scheduled-events-exporter/azure-scheduled-events-exporter/blob/main/docs/runbook.md#azureimdsunreachable'
          summary: '{{ if \$labels.instance }}IMDS scheduled events unreachable from VM {{ if \$labels.vm_name }}{{ \$labels.vm_name }}{{ else }}{{ \$labels.instance }}{{ end }}{{ else }}IMDS scheduled events unreachable from {{ \$value }} VMs{{ with \$labels.cluster }} in cluster {{ . }}{{ end }}{{ end }}'
        }
        enabled: true
        expression: '(\n  max without (alert) (\n    azure_scheduled_events:vm_agent_alert:value{alert="AzureImdsUnreachable"}\n  )\n)\nunless on (cluster) azure_scheduled_events:shared_alert:value{alert="AzureImdsUnreachable"}\nor\nmax without (alert) (\n  azure_scheduled_events:shared_alert:value{alert="AzureImdsUnreachable"}\n)'
        'for': 'PT5M'
        labels: {
          severity: 'warning'
        }
        resolveConfiguration: {
          autoResolved: true
          timeToResolve: 'PT10M'
        }
        severity: 2
      }
      {
        actions: empty(warningActionGroupId) ? [] : [
          {
            actionGroupId: warningActionGroupId
          }
        ]
        alert: 'AzureScheduledEventApprovalsFailing'
        annotations: {
          description: '{{ if \$labels.instance }}The agent on VM {{ if \$labels.vm_name }}{{ \$labels.vm_name }}{{ else }}{{ \$labels.instance }}{{ end }} ({{ \$labels.instance }}{{ with \$labels.node }} on node {{ . }}{{ end }}{{ with \$labels.cluster }} in cluster {{ . }}{{ end }}) failed to approve {{ \$labels.event_type }} events {{ printf "%.0f" \$value }} times in 10 minutes ({{ \$labels.reason }}) and approved none. They will start at NotBefore instead, ready or not.{{ else }}The agents of {{ \$value }} VMs{{ with \$labels.cluster }} in cluster {{ . }}{{ end }} (at least 3 and more than 10 % of its VMs) failed to approve {{ \$labels.event_type }} events in 10 minutes ({{ \$labels.reason }}) and approved none: one cause for them all, such as the approval hook or policy as deployed, or IMDS refusing the POSTs. Their events will start at NotBefore instead, ready or not.{{ end }}'
          'runbook_url': 'https://github.com/azure-scheduled-events-exporter/azure-scheduled-events-exporter/blob/main/docs/runbook.md#azurescheduledeventapprovalsfailing'
          summary: '{{ if \$labels.instance }}Approvals of {{ \$labels.event_type }} events fail on VM {{ if \$labels.vm_name }}{{ \$labels.vm_name }}{{ else }}{{ \$labels.instance }}{{ end }} ({{ \$labels.reason }}){{ else }}Approvals of {{ \$labels.event_type }} events fail on {{ \$value }} VMs{{ with \$labels.cluster }} in cluster {{ . }}{{ end }} ({{ \$labels.reason }}){{ end }}'
        }
        enabled: true
        expression: '(\n  max without (alert) (\n    azure_scheduled_events:vm_agent_alert:value{alert="AzureScheduledEventApprovalsFailing"}\n  )\n)\nunless on (cluster, event_type, reason) azure_scheduled_events:shared_alert:value{alert="AzureScheduledEventApprovalsFailing"}\nor\nmax without (alert) (\n  azure_scheduled_events:shared_alert:value{alert="AzureScheduledEventApprovalsFailing"}\n)'
        'for': 'PT5M'
        labels: {
          severity: 'warning'
        }
        resolveConfiguration: {
          autoResolved: true
          timeToResolve: 'PT10M'
        }
        severity: 2
      }
      {
        actions: empty(warningActionGroupId) ? [] : [
          {
            actionGroupId: warningActionGroupId
          }
        ]
        alert: 'AzureScheduledEventNotificationsFailing'
        annotations: {
          description: 'The agents of {{ \$value }} VMs{{ with \$labels.cluster }} in cluster {{ . }}{{ end }} could not deliver notifications to receiver {{ \$labels.receiver }} in 10 minutes (refused, retries exhausted, or dropped from a full queue). A receiver is shared: one cause for them all, such as a rotated or revoked URL, the receiver down or a proxy. Whoever relies on it is not told of these VMs\' events.'
          'runbook_url': 'https://github.com/azure-scheduled-events-exporter/azure-scheduled-events-exporter/blob/main/docs/runbook.md#azurescheduledeventnotificationsfailing'
          summary: 'Notifications to receiver {{ \$labels.receiver }} are lost{{ with \$labels.cluster }} in cluster {{ . }}{{ end }}'
        }
        enabled: true
        expression: 'max without (alert) (\n  azure_scheduled_events:shared_alert:value{alert="AzureScheduledEventNotificationsFailing"}\n)'
        'for': 'PT1M'
        labels: {
          severity: 'warning'
        }
        resolveConfiguration: {
          autoResolved: true
          timeToResolve: 'PT10M'
        }
        severity: 2
      }
      {
        actions: empty(warningActionGroupId) ? [] : [
          {
            actionGroupId: warningActionGroupId
          }
        ]
        alert: 'AzureScheduledEventsKubernetesRequestsFailing'
        annotations: {
          description: 'The agents of {{ \$value }} VMs{{ with \$labels.cluster }} in cluster {{ . }}{{ end }} failed {{ \$labels.operation }} requests to the Kubernetes API server in 10 minutes and none succeeded. The API server and the agents\' RBAC are the cluster\'s: one cause for them all. Their Nodes may lack the AzureScheduledEvent condition, Events, or the taint and cordon of a pending event.'
          'runbook_url': 'https://github.com/azure-scheduled-events-exporter/azure-scheduled-events-exporter/blob/main/docs/runbook.md#azurescheduledeventskubernetesrequestsfailing'
          summary: 'The agents of {{ \$value }} VMs{{ with \$labels.cluster }} in cluster {{ . }}{{ end }} cannot {{ \$labels.operation }}'
        }
        enabled: true
        expression: 'max without (alert) (\n  azure_scheduled_events:shared_alert:value{alert="AzureScheduledEventsKubernetesRequestsFailing"}\n)'
        'for': 'PT5M'
        labels: {
          severity: 'warning'
        }
        resolveConfiguration: {
          autoResolved: true
          timeToResolve: 'PT10M'
        }
        severity: 2
      }
      {
        actions: empty(warningActionGroupId) ? [] : [
          {
            actionGroupId: warningActionGroupId
          }
        ]
        alert: 'AzureVMRebootedUnexpectedly'
        annotations: {
          description: '{{ if \$labels.instance }}VM {{ if \$labels.vm_name }}{{ \$labels.vm_name }}{{ else }}{{ \$labels.instance }}{{ end }} ({{ \$labels.instance }}{{ with \$labels.node }} on node {{ . }}{{ end }}{{ with \$labels.cluster }} in cluster {{ . }}{{ end }}) rebooted, and no Reboot, Redeploy, Freeze or Preempt event of its own was seen Started before: a crash, a manual restart, or an event missed while the agent was down.{{ else }}{{ \$value }} VMs{{ with \$labels.cluster }} in cluster {{ . }}{{ end }} (at least 3 and more than 10 % of its VMs) rebooted within 30 minutes, uncleanly and with no Reboot, Redeploy, Freeze or Preempt event of their own seen Started before: one cause for them all, such as a node image or kernel, a host or zone outage, or someone restarting them.{{ end }}'
          'runbook_url': 'https://github.com/azure-scheduled-events-exporter/azure-scheduled-events-exporter/blob/main/docs/runbook.md#azurevmrebootedunexpectedly'
          summary: '{{ if \$labels.instance }}VM {{ if \$labels.vm_name }}{{ \$labels.vm_name }}{{ else }}{{ \$labels.instance }}{{ end }} rebooted without a scheduled event{{ else }}{{ \$value }} VMs{{ with \$labels.cluster }} in cluster {{ . }}{{ end }} rebooted without a scheduled event{{ end }}'
        }
        enabled: true
        expression: '(\n  max without (alert) (\n    azure_scheduled_events:vm_agent_alert:value{alert="AzureVMRebootedUnexpectedly"}\n  )\n)\nunless on (cluster) azure_scheduled_events:shared_alert:value{alert="AzureVMRebootedUnexpectedly"}\nor\nmax without (alert) (\n  azure_scheduled_events:shared_alert:value{alert="AzureVMRebootedUnexpectedly"}\n)'
        'for': 'PT5M'
        labels: {
          severity: 'warning'
        }
        resolveConfiguration: {
          autoResolved: true
          timeToResolve: 'PT10M'
        }
        severity: 2
      }
    ]
    scopes: empty(clusterResourceId) ? [azureMonitorWorkspaceId] : [azureMonitorWorkspaceId, clusterResourceId]
  }
}

