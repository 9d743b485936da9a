// The three dashboards: fleet overview, one event across the fleet, agent health. Every query
// keeps the cluster label and is filtered by the variables; joins with vm_info fall back to the
// series without its labels when an agent has not read instance metadata.
local promql = import '../lib/promql.libsonnet';
local g = import 'grafana.libsonnet';

{
  local c = $._config,
  local q = promql.new(c),
  local cl = c.clusterLabel,
  local cap = c.capacityLabel,
  local vm = q.vmBy,
  local by(labels) = q.list(labels),
  local withCluster(labels) = (if cl == '' then [] else [cl]) + labels,
  // "{{cluster}} " in legends when there is a cluster label.
  local legendCluster = if cl == '' then '' else '{{%s}} ' % cl,

  // The variables' matchers, on every series of the agent.
  local matchers = (if cl == '' then [] else ['%s=~"$cluster"' % cl]) + ['job=~"$job"', 'instance=~"$instance"'],
  local s(metric, extra=[]) = q.sel(metric, matchers + extra),

  // The recording rules' series (mixin/alerts/rules.libsonnet): what every panel would otherwise
  // re-read over an hour of samples of every agent.
  local r = q.records,
  // The labels the recorded last known vm_info keeps, and the label that is one VM's identity.
  local recordLabels = if std.objectHas(c, 'vmInfoRecordLabels') then c.vmInfoRecordLabels else ['vm_name', 'location', 'zone', cap, 'resource_group', 'vm_size'],
  local vmIdLabel = if std.objectHas(c, 'vmIdLabel') then c.vmIdLabel else 'vm_id',
  local place = ['location=~"$location"', '%s=~"$scale_set"' % cap, 'zone=~"$zone"'],
  local clusterMatchers = if cl == '' then [] else ['%s=~"$cluster"' % cl],
  // Recorded series carry the labels they were recorded with: no selector, only the variables.
  local rec(name, extra=[]) = name + '{' + std.join(', ', extra) + '}',
  // One series per scrape target that passes every variable: its last known vm_info (kept while
  // the VM reboots), with its VM's id.
  local targets = 'max by (%s) (%s)' % [by(q.vm + [vmIdLabel]), rec(r.targetVmInfo, matchers + place)],

  // The targets that pass the location, scale-set and zone variables, as last known (a rebooting
  // or stopped agent still counts). Agents that have not read instance metadata pass, since where
  // they are is unknown.
  local vmFilter =
    '(\n  %(targets)s\n  or on (%(vm)s)\n  (max by (%(vm)s) (%(build)s) unless on (%(vm)s) %(all)s)\n)' % {
      vm: vm,
      targets: targets,
      build: s('azure_scheduled_events_build_info'),
      all: rec(r.targetVmInfo, clusterMatchers),
    },
  local filtered(expr) = '(\n  (%s)\n  and on (%s)\n  %s\n)' % [expr, vm, vmFilter],
  // The same for the per-agent time series, from one recorded series per target that was the agent
  // (with its VM's place where known): one selector, where vmFilter aggregates every agent's
  // series at each point of the range. An agent without instance metadata passes while the
  // location, scale-set and zone variables are All.
  local filteredRange(expr) = '(\n  (%s)\n  and on (%s)\n  %s\n)' % [expr, vm, rec(r.targetPlace, matchers + place)],

  // Per VM: `expr` (one series per target, or per target and `labels`) counted once per VM
  // (vmIdLabel) however many jobs scrape its agent, for the VMs that pass every variable. A
  // target without instance metadata is not a known VM and is not counted.
  local perVm(expr, labels=[]) =
    'count by (%(key)s) (\n  (%(e)s)\n  * on (%(vm)s) group_left (%(id)s)\n  %(targets)s\n)' % {
      key: by(withCluster([vmIdLabel] + labels)),
      e: expr,
      vm: vm,
      id: vmIdLabel,
      targets: targets,
    },
  // VMs per cluster and `labels` with `expr`.
  local countVms(expr, labels=[]) = 'count by (%s) (\n%s\n)' % [by(withCluster(labels)), perVm(expr, labels)],
  // Events in the document (Scheduled or Started; advisories are not events that take a VM down).
  local inDocument = ['event_status=~"Scheduled|Started"'],

  // `expr` with `labels` of vm_info added, or unchanged for a VM without instance metadata:
  // from the recorded last known vm_info when it keeps them, else from the current vm_info.
  local join(expr, key, labels) =
    local recorded = std.length([l for l in labels if !std.member(recordLabels, l)]) == 0;
    '(\n  (%(e)s)\n  * on (%(vm)s) group_left (%(l)s)\n  %(info)s\n)\nor on (%(on)s)\n(%(e)s)' % {
      e: expr,
      vm: vm,
      l: by(labels),
      info: if recorded then 'max by (%s) (%s)' % [by(q.vm + labels), rec(r.targetVmInfo, matchers)]
      else 'max by (%s) (%s)' % [by(q.vm + labels), s('azure_scheduled_events_vm_info')],
      on: by(q.vm + key),
    },
  // A recorded count per cluster and capacity group, for the groups with VMs that pass the variables.
  local groupMatchers = clusterMatchers + ['%s=~"$scale_set"' % cap],
  local groups(count) = '%s\nand on (%s)\ngroup by (%s) (%s)' % [count, q.groupBy, q.groupBy, rec(r.targetVmInfo, clusterMatchers + place + ['instance=~"$instance"'])],
  local groupSize = q.groupSize(groupMatchers),
  // The share of each capacity group facing a capacity event soon.
  local share = '(\n%s\n)\n/\n%s' % [groups(rec(r.capacityAtRisk, groupMatchers)), groupSize],
  // The events each VM saw within waveWindow, with its scale set.
  // The scale set of each target and event from the recorded targets of each event (a few
  // series), not every VM's recorded vm_info at each point.
  local wavesSeen = 'max by (%s) (last_over_time(%s[%s]))\n* on (%s, event_id) group_left (%s)\n%s' % [by(q.vm + ['event_id', 'event_type', 'event_source']), s('azure_scheduled_events_event_info', ['affects_this_vm="true"']), c.waveWindow, vm, cap, 'max by (%s, event_id, %s) (last_over_time(%s[%s]))' % [vm, cap, rec(r.targetEvent, matchers + place + ['%s!=""' % cap]), c.waveWindow]],
  local guid = '([0-9A-Fa-f]{8})-([0-9A-Fa-f]{4})-([0-9A-Fa-f]{4})-([0-9A-Fa-f]{4})-([0-9A-Fa-f]{12})',
  // The trace id of the event: its EventId without dashes (docs/traces.md).
  local traced(expr) = 'label_replace(\n%s,\n"trace_id", "$1$2$3$4$5", "event_id", "%s")' % [expr, guid],

  local affects = ['affects_this_vm="true"'],
  // 1 for each VM and event seen Started during the time range, 0 for those only seen Scheduled.
  local started(matchers) =
    'max by (%(on)s) (\n  max_over_time(%(started)s[$__range])\n  or on (%(on)s)\n  max_over_time(%(any)s[$__range]) * 0\n)' % {
      on: by(q.vm + ['event_id']),
      started: s('azure_scheduled_events_event_info', matchers + ['event_status="Started"']),
      any: s('azure_scheduled_events_event_info', matchers),
    },
  local eventLabels = ['event_id', 'event_type', 'event_source'],
  // Events each VM first saw within the time range with `extra` (a bucket), per cluster, event
  // type, priority and region (location of the recorded vm_info). The histogram is born with its
  // VM's first event of a type and priority, at 1, which increase() cannot see: a series absent at
  // the start of the range adds its first value. Only VMs that had events have the series. The
  // region of a VM gone since (an evicted Spot VM) is its recorded vm_info's at some point of the
  // range: the record outlives its target by an hour, so one look every 30 minutes finds every
  // target, at a few looks per target where every sample would be too many over a month.
  local noticed(metric, extra=[]) =
    local m = s(metric, extra);
    local zero = 'last_over_time(%s[$__range]) * 0' % m;
    local info = rec(r.targetVmInfo, matchers + place);
    'sum by (%(by)s) (\n  (\n    (increase(%(m)s[$__range]) or %(z)s)\n    + ((min_over_time(%(m)s[$__range]) unless %(m)s offset $__range) or %(z)s)\n  )\n  * on (%(vm)s) group_left (location)\n  max by (%(vml)s) (%(info)s or last_over_time(%(info)s[$__range:30m]))\n)' % {
      by: by(withCluster(['event_type', 'priority', 'location'])),
      m: m,
      z: zero,
      vm: vm,
      vml: by(q.vm + ['location']),
      info: info,
    },
  // The notice histogram's buckets the panel shows: le, refId, column.
  local noticeBuckets = [
    ['0', 'B', 'None'],
    ['45', 'C', '≤ 45 s'],
    ['180', 'D', '≤ 3 min'],
    ['420', 'E', '≤ 7 min'],
    ['720', 'F', '≤ 12 min'],
    ['1080', 'G', '≤ 18 min'],
  ],
  local variables(extra=[]) =
    [
      g.datasourceVariable('datasource', 'Prometheus', c.datasourceType),
      g.datasourceVariable('tempo', 'Tempo', 'tempo'),
    ]
    + (if cl == '' then [] else [
         g.queryVariable('cluster', 'Cluster', 'label_values(%s, %s)' % [q.sel('azure_scheduled_events_build_info'), cl]),
       ])
    + [
      g.queryVariable('location', 'Location', 'label_values(%s, location)' % q.sel('azure_scheduled_events_vm_info', matchers[:std.length(matchers) - 2])),
      g.queryVariable('scale_set', 'Scale set', 'label_values(%s, %s)' % [q.sel('azure_scheduled_events_vm_info', matchers[:std.length(matchers) - 2] + ['location=~"$location"']), cap]),
      g.queryVariable('zone', 'Zone', 'label_values(%s, zone)' % q.sel('azure_scheduled_events_vm_info', matchers[:std.length(matchers) - 2] + ['location=~"$location"', '%s=~"$scale_set"' % cap])),
      g.queryVariable('job', 'Job', 'label_values(%s, job)' % q.sel('azure_scheduled_events_build_info', matchers[:std.length(matchers) - 2])),
      g.queryVariable('instance', 'Instance', 'label_values(%s, instance)' % q.sel('azure_scheduled_events_build_info', matchers[:std.length(matchers) - 1])),
    ]
    + extra,

  // VMs per cluster, event type and transition within `window` before each point: an event that
  // appeared in a VM's document Scheduled or Started, or became Started (transition Scheduled or
  // Started), or left it (transition ended). Reads only the per-event series, which exist for
  // the few VMs that have events, never a counter of every agent.
  // Recorded by the dashboards' recording rules (below) once per dashboardRecordInterval for the
  // whole fleet, per cluster and scale set: VMs per event type and transition within that
  // interval. A panel reads a few series per cluster instead of joining every VM's at each point.
  local transitionWindow = if c.dashboardRecordInterval == '' then '1m' else c.dashboardRecordInterval,
  local recordedTransitions =
    local now = q.sel('azure_scheduled_events_event_info', affects + inDocument);
    local before = '%s offset %s' % [now, transitionWindow];
    local key = by(q.vm + ['event_id']);
    'count by (%(group)s, location, zone, event_type, transition) (\n  count by (%(vmGroup)s, event_type, transition) (\n    max by (%(vmt)s) (
      label_replace(%(now)s unless on (%(key)s, event_status) %(before)s, "transition", "$1", "event_status", "(.*)")
      or
      label_replace(%(before)s unless on (%(key)s) %(now)s, "transition", "ended", "", "")
    )
    * on (%(vm)s) group_left (%(id)s, location, zone, %(cap)s)
    max by (%(vm)s, %(id)s, location, zone, %(cap)s) (%(info)s)
  )
)' % {
      group: q.groupBy,
      vmGroup: raw(q.vmId + ['location', 'zone', cap]),
      vmt: by(q.vm + ['event_type', 'transition']),
      now: now,
      before: before,
      key: key,
      vm: vm,
      id: vmIdLabel,
      cap: cap,
      info: r.targetVmInfo,
    },
  // VMs per cluster, event type and transition within dashboardRecordInterval before each point.
  local transitions = 'sum by (%s) (%s)' % [by(withCluster(['event_type', 'transition'])), rec(r.transitions, clusterMatchers + place)],
  // The dashboards' recording rules: what fleet-wide panels read at every point of their range.
  local record(name, expr) = { record: name, expr: expr + '\n' },
  // `expr` (per target) with the location, zone and scale set of the target's VM (recorded last
  // known vm_info), or without them while its agent has not read instance metadata: the panels
  // filter the recorded sums by the location, scale-set and zone variables.
  // Not deduplicated (the Helm chart's placeholders cannot be): a capacityLabel of zone is
  // named twice, which PromQL accepts.
  local raw(labels) = std.join(', ', std.filter(function(l) l != '', labels)),
  local placeLabels = raw(['location', 'zone', cap]),
  local placed(expr) =
    '(\n  %(e)s\n  * on (%(vm)s) group_left (%(l)s)\n  %(place)s\n)' % {
      e: expr,
      vm: vm,
      l: placeLabels,
      place: r.targetPlace,
    },
  // A recorded IMDS rate as a panel reads it at each point: its last value within
  // dashboardRateInterval, which may exceed the 5 minutes an instant lookup looks back.
  local imdsRecorded(selector) =
    if c.dashboardRateInterval == '' then selector else 'last_over_time(%s[%s])' % [selector, c.dashboardRateInterval],
  local fleetBy(labels) = raw(withCluster(['job', 'location', 'zone', cap] + labels)),
  prometheusRules+:: {
    groups+: [
      {
        name: 'azure-scheduled-events.dashboards',
      } + (if c.dashboardRecordInterval == '' then {} else { interval: c.dashboardRecordInterval }) + {
        rules: [
          // Targets that were the agent within agentSeenLookback and whose last scrape failed, and
          // agents whose last poll gave no valid document, as the agent-health group recorded them
          // (azure_scheduled_events:target_down:timestamp_seconds, the condition of
          // AzureImdsUnreachable): a few series, where `up` and azure_scheduled_events_up are a
          // series of every agent. Counted per place (absent at 0).
          record(r.agentsDown, 'count by (%s) %s' % [fleetBy([]), placed(r.targetDown)]),
          record(r.agentsBlind, 'count by (%s) %s' % [fleetBy([]), placed(rec(r.targetAgentAlert, ['alert="AzureImdsUnreachable"']))]),
          record(r.transitions, recordedTransitions),
          // Each target's events (any status, whether or not they affect its VM), with its VM's
          // name and place where known (the labels of the recorded vm_info).
          record(r.targetEvent, (
            local events = 'max by (%s) (%s)' % [by(q.vm + ['event_id']), q.sel('azure_scheduled_events_event_info')];
            // The recorded vm_info is one series per target: joined as it is.
            '%(events)s\n* on (%(vm)s) group_left (%(labels)s)\n%(info)s\nor on (%(vm)s, event_id)\n%(events)s' % {
              events: events,
              vm: vm,
              labels: by(recordLabels),
              info: r.targetVmInfo,
            }
          )),
        ],
      },
      {
        // The fleet's IMDS figures: every agent's counters and latency histogram (18 series an
        // agent), summed per cluster and job.
        name: 'azure-scheduled-events.dashboards-imds',
      } + (if c.dashboardRateInterval == '' then {} else { interval: c.dashboardRateInterval }) + {
        rules: [
          record(r.imdsLatency, 'sum by (%s) %s' % [fleetBy(['operation', 'le']), placed('rate(%s[15m])' % q.sel('azure_scheduled_events_imds_request_duration_seconds_bucket'))]),
          record(r.imdsRequests, 'sum by (%s) %s' % [fleetBy(['operation']), placed('rate(%s[15m])' % q.sel('azure_scheduled_events_imds_requests_total'))]),
          record(r.imdsFailures, 'sum by (%s) %s' % [fleetBy(['operation', 'reason']), placed('rate(%s[15m])' % q.sel('azure_scheduled_events_imds_request_failures_total'))]),
        ],
      },
    ],
  },
  // The range panels of one event: `expr` (series of the event's targets, keyed by the target and
  // `key`) with `labels` of the target's VM, for the targets that pass the location, scale-set
  // and zone variables, from the recorded targets of each event (their VM's labels kept): a few
  // series, where the recorded vm_info of every VM would be read at each point of the range.
  local eventTargets(expr, key=[], labels=[]) =
    '(%(e)s)\n* on (%(on)s) group_left (%(l)s)\nmax by (%(by)s) (%(rec)s)' % {
      e: expr,
      on: by(q.vm + [k for k in key if k == 'event_id']),
      l: by(labels),
      by: by(q.vm + [k for k in key if k == 'event_id'] + labels),
      rec: rec(r.targetEvent, matchers + place + ['event_id="$event_id"']),
    },
  // VMs per cluster, event type and transition within `window` before each point, from the
  // per-event series (which exist only for the VMs that have events): the annotations, read at
  // one point a minute.
  local liveTransitions(window) =
    local now = s('azure_scheduled_events_event_info', affects + inDocument);
    local before = '%s offset %s' % [now, window];
    local key = by(q.vm + ['event_id']);
    countVms(
      'max by (%(vmt)s) (
  label_replace(%(now)s unless on (%(key)s, event_status) %(before)s, "transition", "$1", "event_status", "(.*)")
  or
  label_replace(%(before)s unless on (%(key)s) %(now)s, "transition", "ended", "", "")
)' % {
        vmt: by(q.vm + ['event_type', 'transition']),
        now: now,
        before: before,
        key: key,
      },
      ['event_type', 'transition'],
    ),
  // Lifecycle transitions as annotations, on every dashboard.
  local annotations = [
    g.annotation(
      'Scheduled-event transitions',
      liveTransitions('2m'),
      '{{event_type}} {{transition}}',
      if cl == '' then 'VMs: {{value}}' else 'cluster {{%s}}, VMs: {{value}}' % cl,
      'orange',
    ),
  ],

  local traceColumn = ['trace_id', [
    { id: 'displayName', value: 'Trace' },
    { id: 'links', value: [{ title: "Open this event's trace in Tempo", url: g.traceUrl('${__data.fields.trace_id}'), targetBlank: true }] },
  ]],
  local eventColumn = ['event_id', [
    { id: 'displayName', value: 'EventId' },
    { id: 'links', value: [{
      title: 'This event across the fleet',
      url: '/d/%s?var-event=${__data.fields.event_id}&${__url_time_range}&${datasource:queryparam}&${tempo:queryparam}' % c.dashboardUids.event,
      targetBlank: false,
    }] },
  ]],
  local clusterColumn = if cl == '' then [] else [[cl, 'Cluster']],
  local durationColumn(name) = [name, g.unit('s') + [{ id: 'mappings', value: [{ type: 'value', options: { '-1': { text: 'unknown', index: 0 } } }] }]],

  // Whether the recording rules are loaded, per cluster: most panels read recorded series, and
  // without the rules they are empty (or show 0) with nothing to say why. A shared store may have
  // them for some clusters only (Azure Monitor's rule groups deployed per cluster, a Prometheus
  // per cluster). 0 for each cluster with recorded series, 1 for each with the agents' series
  // only: an agent is there when its build_info is (and its vm_info, the only series with its
  // place); its recorded place (azure_scheduled_events:target_place:info, group .targets) is
  // there for every target that was the agent within agentSeenLookback, with the same place
  // labels. An agent without instance metadata has none on either side and passes the location,
  // scale-set and zone variables only at All: both sides select the same agents whatever the
  // variables, and where there is no agent nothing is said to be missing. Each side is read
  // once, grouped by cluster first (three series of every agent): a single tile when all is well
  // would read them three times over.
  local rulesStatus =
    local on = if cl == '' then '' else ' on (%s)' % cl;
    local perCluster(expr) = if cl == '' then 'group (%s)' % expr else 'group by (%s) (%s)' % [cl, expr];
    'sort_desc(
  %(recorded)s * 0
  or%(on)s
  %(build)s
  or%(on)s
  %(info)s
)' % {
      on: on,
      recorded: perCluster(rec(r.targetPlace, matchers + place)),
      build: perCluster(s('azure_scheduled_events_build_info', place)),
      info: perCluster(s('azure_scheduled_events_vm_info', place)),
    },
  local rulesHelp = c.dashboardDocsUrl + '#load-the-recording-rules',
  local rulesPanel = g.stat(
    'Recording rules (alerts/azure-scheduled-events.yml)',
    |||
      Whether Prometheus has the recording rules of `alerts/azure-scheduled-events.yml`, which most panels read: without them those panels are empty or show 0. *Not loaded* means that the agents' own series are there (`azure_scheduled_events_build_info`) and no recorded series is (`azure_scheduled_events:target_place:info`); with several clusters, each has its own tile, those without the rules first. Load them with one of:

      - **Prometheus**: the file under `rule_files:`, then reload Prometheus.
      - **Helm chart**: `--set prometheusRule.enabled=true`, a PrometheusRule for the Prometheus Operator; with kube-prometheus-stack also `--set prometheusRule.labels.release=<its release>` (`examples/helm-kube-prometheus-stack.yaml`), elsewhere the labels your Prometheus' `ruleSelector` picks.
      - **Azure Monitor managed Prometheus**: the rule groups of `deploy/azure-monitor/prometheus-rule-groups.bicep` (`az deployment group create`), one deployment per cluster or one for all.
      - **Thanos, Mimir, Cortex**: the file in their ruler.

      The rules record these series within %(interval)s of being loaded. Click the value for the steps.
    ||| % { interval: if c.targetsInterval == '' then "an evaluation interval" else c.targetsInterval },
    rulesStatus,
    steps=['text', [0, 'green'], [1, 'red']],
    legend=if cl == '' then null else '{{%s}}' % cl,
    w=24,
    h=3,
    noValue="No agent's series for these variables: is the agent scraped?",
  ) + {
    fieldConfig+: {
      defaults+: {
        mappings: [{
          type: 'value',
          options: {
            '0': { text: 'Loaded', color: 'green', index: 0 },
            '1': { text: 'Not loaded: most panels below stay empty or at 0 (click for how to load them)', color: 'red', index: 1 },
          },
        }],
        // oneClick: Grafana 11.3 and later open it on a click on the value, without a menu.
        links: [{ title: 'How to load the recording rules', url: rulesHelp, targetBlank: true, oneClick: true }],
      },
    },
    // With several clusters, each one's name above its state, at the tile's full width.
    options+: { colorMode: 'background', wideLayout: false },
    links: [{
      title: 'How to load the recording rules',
      type: 'link',
      url: rulesHelp,
      icon: 'doc',
      tooltip: 'Prometheus, the Helm chart, the Prometheus Operator, Azure Monitor',
      asDropdown: false,
      includeVars: false,
      keepTime: false,
      targetBlank: true,
      tags: [],
    }],
  },

  grafanaDashboards+:: {
    'fleet-overview.json': g.dashboard(
      c,
      c.dashboardUids.fleet,
      'Fleet overview',
      'Which VMs face Freeze, Reboot, Redeploy, Spot eviction or scale-set deletion, when, for how long, where, and which scale sets lose several VMs at once.',
      variables(),
      [
        rulesPanel,
        g.row('Now: which VMs face an event'),
        g.stat('VMs with a pending event', "VMs whose scheduled-events document holds an event that names them (any type, Scheduled or Started), each VM counted once however many jobs scrape its agent.",
               'count(%s) or vector(0)' % perVm(s('azure_scheduled_events_event_info', affects + inDocument))),
        g.stat('Reboot or Redeploy', 'VMs facing a Reboot or a Redeploy (memory lost; Redeploy also loses the temporary disk).',
               'count(%s) or vector(0)' % perVm(s('azure_scheduled_events_event_info', affects + inDocument + ['event_type=~"Reboot|Redeploy"']))),
        g.stat('Spot evictions', 'Spot VMs with a Preempt event: 30 seconds of notice.',
               'count(%s) or vector(0)' % perVm(s('azure_scheduled_events_event_info', affects + inDocument + ['event_type="Preempt"']))),
        g.stat('Scale-set deletions', 'VMs with a Terminate event: their scale set deletes them.',
               'count(%s) or vector(0)' % perVm(s('azure_scheduled_events_event_info', affects + inDocument + ['event_type="Terminate"']))),
        g.stat('VMs reporting', 'VMs whose agent exports azure_scheduled_events_up, counted by VM id (vm_id of azure_scheduled_events_vm_info).', 'count(%s)' % perVm(s('azure_scheduled_events_up')), steps=['text']),
        g.stat('VMs blind', 'VMs whose agent has no valid scheduled-events document: their events are not seen.',
               'count(%s) or vector(0)' % perVm('%s == 0' % s('azure_scheduled_events_up')), steps=['green', [1, 'red']]),
        g.timeseries('VMs with pending events, by type and status', 'How many VMs have at least one event naming them, per EventType and EventStatus.',
                     [g.target(countVms(s('azure_scheduled_events_event_info', affects + inDocument), ['event_type', 'event_status']),
                               legend=legendCluster + '{{event_type}} {{event_status}}')],
                     stack=true, fill=30, w=16),
        g.bargauge('Now, by type and status', 'VMs per EventType and EventStatus at the end of the time range.',
                   countVms(s('azure_scheduled_events_event_info', affects + inDocument), ['event_type', 'event_status']),
                   legendCluster + '{{event_type}} {{event_status}}'),

        g.row('Capacity: VMs of one scale set going down at once'),
        g.table(
          'Scale sets',
          'Per cluster and %(name)s: VMs facing a %(types)s whose NotBefore is less than %(min)d minutes away, passed, or already Started, out of its VMs. More than %(pct)g %% (and at least %(n)d VMs) pages (AzureScheduledEventsCapacityAtRisk).' % {
            name: c.capacityName,
            types: std.join(', ', c.capacity.eventTypes),
            min: c.impactSoonSeconds / 60,
            pct: c.capacity.fraction * 100,
            n: c.capacity.minVMs,
          },
          [
            g.target(groups(rec(r.capacityAtRisk, groupMatchers)), 'A', instant=true, table=true),
            g.target(groups(groupSize), 'B', instant=true, table=true),
            g.target(share, 'C', instant=true, table=true),
          ],
          clusterColumn + [[cap, 'Scale set'], ['Value #A', 'VMs going down'], ['Value #B', 'VMs'], ['Value #C', 'Share']],
          overrides=[['Share', g.unit('percentunit') + [
            { id: 'custom.cellOptions', value: { type: 'color-background' } },
            { id: 'thresholds', value: { mode: 'absolute', steps: [{ color: 'green', value: null }, { color: 'red', value: c.capacity.fraction }] } },
          ]]],
          sortBy=['Share', true],
          w=10,
          h=8,
        ),
        g.timeseries('Share of each scale set going down', 'The share of each %s facing an interrupting event soon, over time.' % c.capacityName,
                     [g.target(share, legend=legendCluster + '{{%s}}' % cap)],
                     unit='percentunit', w=14),

        g.row('Next: the events to come, soonest first'),
        g.table(
          'Next events',
          'Every event naming a VM, soonest NotBefore first. Started events have no NotBefore. Duration is DurationInSeconds (-1 unknown). EventId opens the event across the fleet; Trace opens its trace (every VM\'s view of it) in Tempo.',
          [
            g.target(traced(filtered(join('%s\n* on (%s, event_id) group_left (event_type, event_status, event_source)\n%s' % [s('azure_scheduled_events_event_seconds_until_not_before'), vm, s('azure_scheduled_events_event_info')], ['event_id'], ['vm_name', cap]))), 'A', instant=true, table=true),
            g.target(traced(filtered(join('%s\n* on (%s, event_id) group_left (event_type, event_status, event_source)\n%s' % [s('azure_scheduled_events_event_duration_seconds'), vm, s('azure_scheduled_events_event_info')], ['event_id'], ['vm_name', cap]))), 'B', instant=true, table=true),
          ],
          clusterColumn + [['vm_name', 'VM'], [cap, 'Scale set'], ['event_type', 'Type'], ['event_status', 'Status'], ['Value #A', 'Starts in'], ['Value #B', 'Duration'], ['event_source', 'Source'], ['event_id', 'event_id'], ['trace_id', 'trace_id'], ['instance', 'Instance']],
          overrides=[['Starts in', g.unit('s')], durationColumn('Duration'), eventColumn, traceColumn],
          sortBy=['Starts in', false],
        ),
        g.table(
          'Events in the time range',
          'Every event that named a VM during the time range, also those that have left the document: whether it started, its last NotBefore, and links to the event and its trace.',
          local seen = traced(filtered(join('max by (%s) (last_over_time(%s[$__range]))' % [by(q.vm + eventLabels), s('azure_scheduled_events_event_info', affects)], ['event_id'], ['vm_name', cap])));
          [
            g.target(seen, 'A', instant=true, table=true),
            g.target('%s\n* on (%s, event_id) group_left ()\n%s' % [seen, vm, started(affects)], 'B', instant=true, table=true),
            g.target('%s\n* on (%s, event_id) group_left ()\nmax by (%s, event_id) (last_over_time(%s[$__range])) * 1000' % [seen, vm, vm, s('azure_scheduled_events_event_not_before_timestamp_seconds')], 'C', instant=true, table=true),
          ],
          clusterColumn + [['vm_name', 'VM'], [cap, 'Scale set'], ['event_type', 'Type'], ['event_source', 'Source'], ['Value #B', 'Started'], ['Value #C', 'NotBefore'], ['event_id', 'event_id'], ['trace_id', 'trace_id'], ['instance', 'Instance'], ['Value #A', 'Value #A']],
          overrides=[
            ['Started', [{ id: 'mappings', value: [{ type: 'value', options: { '0': { text: 'no', index: 0 }, '1': { text: 'yes', index: 1 } } }] }]],
            ['NotBefore', g.unit('dateTimeAsIso')],
            ['Value #A', [{ id: 'custom.hidden', value: true }]],
            eventColumn,
            traceColumn,
          ],
          sortBy=['NotBefore', true],
        ),

        g.row('Maintenance waves: many EventIds of one type across a scale set within minutes'),
        g.table(
          'Maintenance waves',
          'Azure gives every host operation its own EventId, so one wave of maintenance across a %(name)s is many EventIds of the same type and source seen within %(w)s. Per cluster, %(name)s, type and source: the EventIds and the VMs they name in the last %(w)s.' % { name: c.capacityName, w: c.waveWindow },
          local wave = wavesSeen;
          [
            g.target('count by (%s) (count by (%s) (%s))' % [by(q.group + ['event_type', 'event_source']), by(q.group + eventLabels), wave], 'A', instant=true, table=true),
            g.target('count by (%s) (count by (%s) (%s))' % [by(q.group + ['event_type', 'event_source']), by(q.vm + [cap, 'event_type', 'event_source']), wave], 'B', instant=true, table=true),
          ],
          clusterColumn + [[cap, 'Scale set'], ['event_type', 'Type'], ['event_source', 'Source'], ['Value #A', 'EventIds'], ['Value #B', 'VMs']],
          sortBy=['VMs', true],
          w=10,
          h=8,
        ),
        g.timeseries('EventIds per scale set and type within %s' % c.waveWindow, 'A rise across many EventIds is a wave of maintenance going through a %s.' % c.capacityName,
                     [g.target('count by (%s) (count by (%s) (%s))' % [by(q.group + ['event_type']), by(q.group + ['event_id', 'event_type']), wavesSeen],
                               legend=legendCluster + '{{%s}} {{event_type}}' % cap)],
                     w=14),

        g.row('Spot evictions and scale-set deletions'),
        g.timeseries('VMs being evicted or deleted', 'Spot evictions (Preempt) and scale-set deletions (Terminate) in progress.',
                     [g.target(countVms(s('azure_scheduled_events_event_info', affects + inDocument + ['event_type=~"Preempt|Terminate"']), ['event_type']),
                               legend=legendCluster + '{{event_type}}')],
                     stack=true, fill=30),
        g.table(
          'Evicted or deleted now',
          'VMs with a Preempt or Terminate event, with their scale set and zone.',
          [g.target(filtered(join('max by (%s) (%s)' % [by(q.vm + ['event_id', 'event_type', 'event_status']), s('azure_scheduled_events_event_info', affects + ['event_type=~"Preempt|Terminate"'])], ['event_id'], ['vm_name', cap, 'zone'])), 'A', instant=true, table=true)],
          clusterColumn + [['vm_name', 'VM'], [cap, 'Scale set'], ['zone', 'Zone'], ['event_type', 'Type'], ['event_status', 'Status'], ['event_id', 'event_id'], ['instance', 'Instance'], ['Value', 'Value']],
          overrides=[['Value', [{ id: 'custom.hidden', value: true }]], eventColumn],
          w=12,
          h=8,
        ),

        g.row('Notice: how much each event gave'),
        g.table(
          'Notice each event gave',
          "Events of the VMs (each VM counts its own) first seen during the time range, per event type, VM priority and region, and how many gave at most each notice: NotBefore minus the agent's first sight of the event (azure_scheduled_events_event_notice_seconds, docs/metrics.md says how to take it to a support case). None: seen at or after NotBefore, or already Started. Azure's minimum notice is 15 minutes for Reboot and Freeze, 10 for Redeploy, 30 seconds for Preempt, 5 to 15 minutes for Terminate.",
          [
            g.target(noticed('azure_scheduled_events_event_notice_seconds_count'), 'A', instant=true, table=true),
          ] + [
            g.target(noticed('azure_scheduled_events_event_notice_seconds_bucket', ['le="%s"' % b[0]]), b[1], instant=true, table=true)
            for b in noticeBuckets
          ],
          clusterColumn + [['event_type', 'Type'], ['priority', 'Priority'], ['location', 'Region'], ['Value #A', 'Events']]
          + [['Value #%s' % b[1], b[2]] for b in noticeBuckets],
          overrides=[[col, [{ id: 'decimals', value: 0 }]] for col in ['Events'] + [b[2] for b in noticeBuckets]],
          sortBy=['Events', true],
        ),

        g.row('Where: fault domains, update domains and zones'),
      ] + [
        g.bargauge('VMs with pending events per %s' % d[1], 'VMs with an event naming them, per %s and event type (from azure_scheduled_events_vm_info).' % d[1],
                   'count by (%s) (\n%s\n* on (%s) group_left (%s)\nmax by (%s) (%s)\n)' % [by(withCluster([d[0], 'event_type'])), perVm(s('azure_scheduled_events_event_info', affects + inDocument), ['event_type']), by(withCluster([vmIdLabel])), d[0], by(withCluster([vmIdLabel, d[0]])), s('azure_scheduled_events_vm_info', place)],
                   legendCluster + '%s {{%s}} · {{event_type}}' % [d[1], d[0]])
        for d in [['platform_fault_domain', 'fault domain'], ['platform_update_domain', 'update domain'], ['zone', 'zone']]
      ],
      annotations,
    ),

    'event.json': g.dashboard(
      c,
      c.dashboardUids.event,
      'One event across the fleet',
      'Pick or paste an EventId (any case, with or without dashes, as in the logs\' trace_id): every VM it names, each one\'s status over time, countdown and placement, also after the event has left the document, and its trace in Tempo.',
      variables([
        g.queryVariable('event', 'EventId', 'label_values(%s, event_id)' % s('azure_scheduled_events_event_info'), all=false) + { allowCustomValue: true },
        g.queryVariable(
          'event_id',
          'EventId as exported',
          'query_result(max by (event_id) (label_replace(label_replace(label_replace(last_over_time(%s[$__range]), "key", "$1$2$3$4$5", "event_id", "%s"), "hit", "yes", "event_id", "(?i)$event"), "hit", "yes", "key", "(?i)$event") and on (hit) label_replace(vector(1), "hit", "yes", "", "")))' % [s('azure_scheduled_events_event_info'), guid],
          all=false,
          hide=2,
          regex='/event_id="([^"]+)"/',
          sort=0,
        ),
        g.queryVariable(
          'trace_id',
          'Trace id',
          'query_result(%s)' % traced('max by (event_id) (last_over_time(%s[$__range]))' % s('azure_scheduled_events_event_info', ['event_id="$event_id"'])),
          all=false,
          hide=2,
          regex='/trace_id="([^"]+)"/',
          sort=0,
        ),
      ]),
      local eid = ['event_id="$event_id"'];
      local seen = traced(filtered(join('max by (%s) (last_over_time(%s[$__range]))' % [by(q.vm + eventLabels), s('azure_scheduled_events_event_info', eid)], ['event_id'], ['vm_name', cap, 'zone', 'platform_fault_domain', 'platform_update_domain'])));
      [
        rulesPanel,
        g.row('The event'),
        g.stat('Type', 'EventType and EventSource, as the agents saw it during the time range.',
               'max by (%s) (%s)' % [by(withCluster(['event_type', 'event_source'])), filtered('last_over_time(%s[$__range])' % s('azure_scheduled_events_event_info', eid))],
               steps=['text'], textMode='name', legend=legendCluster + '{{event_type}} ({{event_source}})', w=5, noValue='not seen'),
        g.stat('VMs reporting it', 'Agents that saw this event during the time range.',
               'count(%s) or vector(0)' % perVm('max by (%s) (last_over_time(%s[$__range]))' % [vm, s('azure_scheduled_events_event_info', eid)]), steps=['text'], w=5),
        g.stat('VMs it names', "How many VMs the event's Resources names (approving it lets it proceed for all of them).",
               'max(%s)' % filtered('last_over_time(%s[$__range])' % s('azure_scheduled_events_event_resources', eid)), steps=['text'], w=5),
        g.stat('Started on', 'VMs that saw it Started during the time range.',
               'count(%s) or vector(0)' % perVm('max by (%s) (last_over_time(%s[$__range]))' % [vm, s('azure_scheduled_events_event_info', eid + ['event_status="Started"'])]), steps=['text'], w=5),
        g.stat('Starts in', 'NotBefore minus now on the VM where it is soonest; empty once Started or gone.',
               'min(%s)' % filtered(s('azure_scheduled_events_event_seconds_until_not_before', eid)), unit='s', steps=['text'], w=4, noValue='-'),

        g.row('Every VM it names'),
        g.table(
          'VMs',
          'Every VM that saw the event during the time range, with its placement, whether it started there, its last NotBefore and DurationInSeconds.',
          [
            g.target(seen, 'A', instant=true, table=true),
            g.target('%s\n* on (%s, event_id) group_left ()\n%s' % [seen, vm, started(eid)], 'B', instant=true, table=true),
            g.target('%s\n* on (%s, event_id) group_left ()\nmax by (%s, event_id) (last_over_time(%s[$__range])) * 1000' % [seen, vm, vm, s('azure_scheduled_events_event_not_before_timestamp_seconds', eid)], 'C', instant=true, table=true),
            g.target('%s\n* on (%s, event_id) group_left ()\nmax by (%s, event_id) (last_over_time(%s[$__range]))' % [seen, vm, vm, s('azure_scheduled_events_event_duration_seconds', eid)], 'D', instant=true, table=true),
          ],
          clusterColumn + [['vm_name', 'VM'], ['Value #B', 'Started'], ['Value #C', 'NotBefore'], ['Value #D', 'Duration'], [cap, 'Scale set'], ['zone', 'Zone'], ['platform_fault_domain', 'Fault domain'], ['platform_update_domain', 'Update domain'], ['trace_id', 'trace_id'], ['instance', 'Instance'], ['Value #A', 'Value #A']],
          overrides=[
            ['Started', [{ id: 'mappings', value: [{ type: 'value', options: { '0': { text: 'no', index: 0 }, '1': { text: 'yes', index: 1 } } }] }]],
            ['NotBefore', g.unit('dateTimeAsIso')],
            durationColumn('Duration'),
            ['Value #A', [{ id: 'custom.hidden', value: true }]],
            traceColumn,
          ],
          sortBy=['VM', false],
        ),
        g.stateTimeline(
          'Status per VM',
          'The event as each VM saw it: Scheduled, Started, or nothing (not in its document, or the agent was not scraped).',
          [g.target(eventTargets('2 * max by (%(vm)s) (%(started)s)\nor on (%(vm)s)\nmax by (%(vm)s) (%(scheduled)s)' % {
            vm: vm,
            started: s('azure_scheduled_events_event_info', eid + ['event_status="Started"']),
            scheduled: s('azure_scheduled_events_event_info', eid + ['event_status="Scheduled"']),
          }, [], ['vm_name']), legend=legendCluster + '{{vm_name}} {{instance}}')],
          [[1, 'Scheduled', 'blue'], [2, 'Started', 'orange']],
        ),
        g.timeseries('Countdown per VM', 'NotBefore minus now, on each VM.',
                     [g.target(eventTargets(s('azure_scheduled_events_event_seconds_until_not_before', eid), ['event_id'], ['vm_name']), legend=legendCluster + '{{vm_name}} {{instance}}')],
                     unit='s', min=null),
        g.timeseries('VMs by status', 'How many VMs see the event Scheduled or Started.',
                     [g.target('count by (%s) (%s)' % [by(withCluster(['event_status'])), eventTargets(s('azure_scheduled_events_event_info', eid), ['event_id', 'event_status'], [])], legend=legendCluster + '{{event_status}}')]),
      ],
      annotations,
      links=[{
        title: 'Trace of this event in Tempo',
        type: 'link',
        url: g.traceUrl('${trace_id}'),
        icon: 'external link',
        tooltip: "Every VM's view of this event, as one trace",
        asDropdown: false,
        includeVars: false,
        keepTime: false,
        targetBlank: true,
        tags: [],
      }],
    ),

    'agent-health.json': g.dashboard(
      c,
      c.dashboardUids.agent,
      'Agent health',
      'Is every agent scraped and polling, is IMDS answering, how fast, what fails, and what the approvals, the state file, the trace export, the notifications and the Kubernetes output do.',
      variables(),
      [
        rulesPanel,
        g.row('Is every agent watching?'),
        g.stat('Agents scraped', 'Agents whose last scrape succeeded.', 'sum(%s)' % filtered(s('up')), steps=['text'], w=3),
        g.stat('Agents down', 'Agents Prometheus cannot scrape.', 'count(%s) or vector(0)' % filtered('%s == 0' % s('up')), steps=['green', [1, 'red']], w=3),
        g.stat('IMDS answering', 'Agents whose last poll returned a valid document.', 'sum(%s)' % filtered(s('azure_scheduled_events_up')), steps=['text'], w=3),
        g.stat('IMDS failing', 'Agents whose last poll failed.', 'count(%s) or vector(0)' % filtered('%s == 0' % s('azure_scheduled_events_up')), steps=['green', [1, 'red']], w=3),
        g.stat('Longest blind', 'The longest time since an agent had a valid document.', 'max(%s)' % filtered('time() - (%s > 0)' % s('azure_scheduled_events_last_success_timestamp_seconds')), unit='s', steps=['green', [10, 'orange'], [60, 'red']], w=3),
        g.stat('Longest since a poll', 'The longest time since an agent\'s poll loop last finished a poll (the heartbeat): more than a few seconds is a stuck loop.', 'max(%s)' % filtered('time() - (%s > 0)' % s('azure_scheduled_events_last_poll_timestamp_seconds')), unit='s', steps=['green', [10, 'orange'], [c.pollStuckSeconds, 'red']], w=3),
        g.stat('Versions', 'Agents per version.', 'count by (%s) (%s)' % [by(withCluster(['version'])), filtered(s('azure_scheduled_events_build_info'))], steps=['green'], textMode='value_and_name', legend=legendCluster + '{{version}}', w=6),
        g.timeseries('Agents down or blind, by cluster', 'Per cluster, agents whose last scrape failed (up is 0) and agents whose last IMDS poll failed (azure_scheduled_events_up is 0), recorded per cluster, job, location, zone and scale set (the instance variable does not narrow it; the stats above do). A cluster without either has no line.', [
          g.target('sum by (%s) (%s)' % [by(withCluster([])), rec(r.agentsDown, clusterMatchers + ['job=~"$job"'] + place)], 'A', legend=legendCluster + 'scrape down'),
          g.target('sum by (%s) (%s)' % [by(withCluster([])), rec(r.agentsBlind, clusterMatchers + ['job=~"$job"'] + place)], 'B', legend=legendCluster + 'IMDS failing'),
        ], w=8),
        // Only agents over a minute behind: a healthy agent's timestamps are at most a scrape
        // interval old, and leaving them out first spares the panel every agent's series at each point.
        g.timeseries('Time since the last good document, the %d longest over a minute' % c.dashboardTopK, 'How long the agents blind the longest have been blind (one line per agent among the %d longest at each point), among agents without a valid document for over a minute as Prometheus last saw them: an empty panel is a fleet where every agent reads IMDS.' % c.dashboardTopK, [
          g.target('topk(%d, %s)' % [c.dashboardTopK, filteredRange('time() - ((%s < time() - 60) > 0)' % s('azure_scheduled_events_last_success_timestamp_seconds'))], legend=legendCluster + '{{instance}}'),
        ], unit='s', w=8),
        g.timeseries('Time since the last poll, the %d longest over a minute' % c.dashboardTopK, 'The poll loop\'s heartbeat: it ends a poll every --poll.interval, successful or not. A line that keeps rising is a stuck loop (AzureScheduledEventsPollLoopStuck). The %d agents with the oldest heartbeat at each point, among those whose heartbeat is over a minute old as Prometheus last saw it: an empty panel is a fleet whose poll loops all turn.' % c.dashboardTopK, [
          g.target('topk(%d, %s)' % [c.dashboardTopK, filteredRange('time() - ((%s < time() - 60) > 0)' % s('azure_scheduled_events_last_poll_timestamp_seconds'))], legend=legendCluster + '{{instance}}'),
        ], unit='s', w=8),

        g.row('IMDS requests'),
        g.timeseries('IMDS failures by reason', 'Requests to IMDS that gave no usable answer, per operation and reason, over 15 minutes (recorded per cluster, job, location, zone and scale set: the instance variable does not narrow it).', [
          g.target('sum by (%s) (%s)' % [by(withCluster(['operation', 'reason'])), imdsRecorded(rec(r.imdsFailures, clusterMatchers + ['job=~"$job"'] + place))], legend=legendCluster + '{{operation}} {{reason}}'),
        ], unit='reqps', w=8),
        g.timeseries('IMDS request latency', 'p50 and p99 of the time to a complete answer, per operation, over 15 minutes (recorded per cluster, job, location, zone and scale set: the instance variable does not narrow it).', [
          g.target('histogram_quantile(0.99, sum by (%s) (%s))' % [by(withCluster(['le', 'operation'])), imdsRecorded(rec(r.imdsLatency, clusterMatchers + ['job=~"$job"'] + place))], 'A', legend=legendCluster + 'p99 {{operation}}'),
          g.target('histogram_quantile(0.5, sum by (%s) (%s))' % [by(withCluster(['le', 'operation'])), imdsRecorded(rec(r.imdsLatency, clusterMatchers + ['job=~"$job"'] + place))], 'B', legend=legendCluster + 'p50 {{operation}}'),
        ], unit='s', w=8),
        g.timeseries('IMDS requests', 'Requests per second, per operation, over 15 minutes (recorded per cluster, job, location, zone and scale set: the instance variable does not narrow it).', [
          g.target('sum by (%s) (%s)' % [by(withCluster(['operation'])), imdsRecorded(rec(r.imdsRequests, clusterMatchers + ['job=~"$job"'] + place))], legend=legendCluster + '{{operation}}'),
        ], unit='reqps', w=8),

        g.row('What the agents saw'),
        g.timeseries('Lifecycle transitions', 'VMs per event type whose document gained an event (Scheduled), saw one start (Started) or lost one (ended), within the %s before each point (recorded per cluster, location, zone and scale set: the job and instance variables do not narrow it).' % transitionWindow, [
          g.target(transitions, legend=legendCluster + '{{event_type}} {{transition}}'),
        ]),
        g.table(
          'Agents',
          'Every agent: its version and the VM it runs on (empty until it has read instance metadata).',
          [g.target(filtered(join(s('azure_scheduled_events_build_info'), [], ['vm_name', 'vm_size', 'location', 'zone', cap])), 'A', instant=true, table=true)],
          clusterColumn + [['vm_name', 'VM'], ['instance', 'Instance'], ['version', 'Version'], ['revision', 'Revision'], ['api_version', 'api-version'], ['vm_size', 'Size'], ['location', 'Location'], ['zone', 'Zone'], [cap, 'Scale set'], ['Value', 'Value']],
          overrides=[['Value', [{ id: 'custom.hidden', value: true }]]],
          sortBy=['VM', false],
          w=12,
          h=8,
        ),

        g.row('Approvals, state and traces'),
        g.stat('Approval mode', 'Agents per approval mode (off, dry_run, on).', 'count by (%s) (%s)' % [by(withCluster(['mode'])), filtered('%s == 1' % s('azure_scheduled_events_approval_mode'))], steps=['text'], textMode='value_and_name', legend=legendCluster + '{{mode}}', w=6),
        g.stat('Approval failures', 'Approvals that failed during the time range.', 'sum(%s)' % filtered('increase(%s[$__range])' % s('azure_scheduled_events_approval_failures_total')), steps=['green', [1, 'red']], w=6),
        g.stat('State file failing', 'Agents that cannot write their state file.', 'count(%s) or vector(0)' % filtered('%s == 0' % s('azure_scheduled_events_state_up')), steps=['green', [1, 'red']], w=6),
        g.stat('Unexpected reboots', 'VMs that rebooted during the time range without a scheduled event of their own seen Started.', 'count(%s) or vector(0)' % filtered('increase(%s[$__range]) > 0' % s('azure_scheduled_events_reboots_total', ['expected="false"'])), steps=['green', [1, 'orange']], w=6),
        g.timeseries('Approvals and their failures', 'Events approved, and approvals that failed by reason.', [
          g.target('sum by (%s) (%s)' % [by(withCluster(['event_type'])), filteredRange('increase(%s[$__rate_interval])' % s('azure_scheduled_events_approvals_total'))], 'A', legend=legendCluster + 'approved {{event_type}}'),
          g.target('sum by (%s) (%s) > 0' % [by(withCluster(['event_type', 'reason'])), filteredRange('increase(%s[$__rate_interval])' % s('azure_scheduled_events_approval_failures_total'))], 'B', legend=legendCluster + 'failed {{event_type}}: {{reason}}'),
        ], w=8),
        g.timeseries('Approval decisions', 'Every decision of the approval policy, by reason.', [
          g.target('sum by (%s) (%s) > 0' % [by(withCluster(['decision', 'reason'])), filteredRange('increase(%s[$__rate_interval])' % s('azure_scheduled_events_approval_decisions_total'))], legend=legendCluster + '{{decision}} {{reason}}'),
        ], w=8),
        g.timeseries('Trace spans', 'Spans the OTLP collector accepted, and spans dropped by reason.', [
          g.target('sum by (%s) (%s)' % [by(withCluster([])), filteredRange('rate(%s[$__rate_interval])' % s('azure_scheduled_events_otlp_spans_exported_total'))], 'A', legend=legendCluster + 'exported'),
          g.target('sum by (%s) (%s)' % [by(withCluster(['reason'])), filteredRange('rate(%s[$__rate_interval])' % s('azure_scheduled_events_otlp_spans_dropped_total'))], 'B', legend=legendCluster + 'dropped {{reason}}'),
        ], w=8),

        g.row('Notifications and the Kubernetes Node'),
        g.timeseries('Notifications', 'Notifications per receiver that reached an end: delivered, failed (retries exhausted) or rejected (a 4xx); and those dropped from a full queue (AzureScheduledEventNotificationsFailing). Empty without --notify.* receivers.', [
          g.target('sum by (%s) (%s)' % [by(withCluster(['receiver', 'result'])), filteredRange('rate(%s[$__rate_interval])' % s('azure_scheduled_events_notifications_total'))], 'A', legend=legendCluster + '{{receiver}} {{result}}'),
          g.target('sum by (%s) (%s)' % [by(withCluster(['receiver'])), filteredRange('rate(%s[$__rate_interval])' % s('azure_scheduled_events_notifications_dropped_total'))], 'B', legend=legendCluster + '{{receiver}} dropped'),
        ], unit='reqps', w=12),
        g.timeseries('Kubernetes API requests', 'Requests of the Kubernetes output to the API server, per operation and result; anything but ok, conflict and already_exists is a failure (AzureScheduledEventsKubernetesRequestsFailing). Empty without --kubernetes.node-name.', [
          g.target('sum by (%s) (%s)' % [by(withCluster(['operation', 'result'])), filteredRange('rate(%s[$__rate_interval])' % s('azure_scheduled_events_kubernetes_requests_total'))], legend=legendCluster + '{{operation}} {{result}}'),
        ], unit='reqps', w=12),
      ],
      annotations,
    ),
  },
}
