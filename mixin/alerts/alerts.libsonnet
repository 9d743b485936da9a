// The alert rules. Paging policy: one VM's event or one agent's trouble is `severities.vm` (or
// `severities.info`); only a capacity group (scale set) losing several VMs at once in one cluster
// is `severities.page`. One message per cause: a cause shared by many VMs of a cluster (rollup) is
// one alert for the cluster, a stuck event one per EventId, a scale-in one per scale set.
// docs/runbook.md has one section per alert.
local promql = import '../lib/promql.libsonnet';

{
  local c = $._config,
  local q = promql.new(c),
  local cl = c.clusterLabel,

  // `{{ $labels.x }}`.
  local label(name) = '{{ $labels.%s }}' % name,
  // The VM as people know it: vm_name when instance metadata was read, else the instance.
  local vmName = '{{ if $labels.vm_name }}{{ $labels.vm_name }}{{ else }}{{ $labels.instance }}{{ end }}',
  // " in cluster X" when there is a cluster label: for alerts of a group or a cluster.
  local inClusterOnly = if cl == '' then '' else '{{ with $labels.%s }} in cluster {{ . }}{{ end }}' % cl,
  // " on node N in cluster X": the Kubernetes node when the alert carries nodeLabel, and the
  // cluster when there is a cluster label.
  local inCluster =
    (if c.nodeLabel == '' then '' else '{{ with $labels.%s }} on node {{ . }}{{ end }}' % c.nodeLabel)
    + (if cl == '' then '' else '{{ with $labels.%s }} in cluster {{ . }}{{ end }}' % cl),
  // printf arguments that select this alert's VM in a template query: matchers and values.
  // Per-VM alerts carry the cluster and the VM's instance, not a job: the agent's series are
  // selected by those (every scrape job of one agent exports the same values).
  local templateVm = q.without(q.vm, 'job'),
  local vmMatchers = std.join(',', ['%s=%%q' % l for l in templateVm]),
  local vmValues = std.join(' ', ['$labels.%s' % l for l in templateVm]),
  local vmQuery(metric, extra='', compare='') =
    'printf "%s{%s%s}%s" %s' % [metric, vmMatchers, extra, compare, vmValues],

  local runbook(name) = c.runbookUrlBase + std.asciiLower(name),
  // '1d' -> 86400.
  local seconds(duration) =
    local unit = std.substr(duration, std.length(duration) - 1, 1);
    local number = std.parseInt(std.substr(duration, 0, std.length(duration) - 1));
    local factor = { s: 1, m: 60, h: 3600, d: 86400, w: 604800 };
    if std.objectHas(factor, unit) then number * factor[unit]
    else error 'duration %s: expected a number and one of s, m, h, d, w' % duration,
  // A per-VM alert's condition: `expr` per scrape target (and `key` labels), evaluated with every
  // other per-VM alert's in one recording rule and joined once with the VM's identity and labels
  // (azure_scheduled_events:vm_alert:value), instead of once per alert: the join reads the
  // recorded vm_info of every VM, the conditions only a few series.
  // `slow`: a condition on every agent's own series (agent health), recorded every
  // agentsInterval in the group azure-scheduled-events.agents rather than at every evaluation;
  // the others read only the series of events, which few VMs have.
  // `alertExpr(selector)`, when given, is the alert's expression over its recorded per-VM
  // conditions (`selector`) instead of one alert per VM; `vmExpr(selector)`, when given, is which
  // VMs alert (with their labels, `alert` among them) instead of those of `selector`: the alert and
  // its rollup read it.
  local perVm(expr, key=[], slow=false) = { expr: expr, key: key, slow: slow },
  // `rollup`, when given: `share` (one alert for a cluster where many VMs have the condition, for
  // each value of the labels `key`, instead of theirs) or `always` (one alert per cluster and
  // `key`, never per VM), from azure_scheduled_events:shared_alert:value.
  local rollup(kind, key=[]) = { rollup: { kind: kind, key: key } },
  local vmExpr(condition, selector) = if std.objectHas(condition, 'vmExpr') then condition.vmExpr(selector) else selector,
  local alert(name, expr, for_, severity, summary, description) = {
    alert: name,
    expr: (
      if std.isObject(expr) then
        local selector = q.rec(r.vmAlert, ['alert="%s"' % name]);
        local vms = if std.objectHas(expr, 'alertExpr') then expr.alertExpr(selector)
        else 'max without (alert) (\n  %s\n)' % std.strReplace(vmExpr(expr, selector), '\n', '\n  ');
        local cluster = 'max without (alert) (\n  %s\n)' % q.rec(r.clusterAlert, ['alert="%s"' % name]);
        if !std.objectHas(expr, 'rollup') then vms
        else if expr.rollup.kind == 'always' then cluster
        else '(\n  %s\n)\nunless on (%s) %s\nor\n%s' % [
          std.strReplace(vms, '\n', '\n  '),
          q.list([cl] + expr.rollup.key),
          q.rec(r.clusterAlert, ['alert="%s"' % name]),
          cluster,
        ]
      else expr
    ) + '\n',
    // The condition of a per-VM alert, read by the recording rules (not rendered).
    condition:: if std.isObject(expr) then expr else null,
    'for': for_,
    labels: { severity: severity },
    annotations: {
      summary: summary,
      description: description,
      runbook_url: runbook(name),
    },
  },

  // One series per VM and event: event_info with the given matchers, the same series whether
  // the event is Scheduled or Started; never an advisory (another EventStatus).
  local statuses = 'event_status=~"%s"' % q.types(c.impactStatuses),
  local eventKey = ['event_id', 'event_type', 'event_source'],
  local events(matchers) =
    'max by (%s) (\n  %s\n)' % [
      q.list(q.vm + eventKey),
      q.sel('azure_scheduled_events_event_info', ['affects_this_vm="true"', statuses] + matchers),
    ],
  local up = q.sel('up'),
  local r = q.records,
  // Events of `types` affecting the target's VM whose NotBefore is within impactSoonSeconds,
  // passed, unknown, or Started, held for impactHold while the agent cannot be scraped (the VM
  // is rebooting): the recorded azure_scheduled_events:target_event_impact:held.
  local impact(types) = q.rec(r.targetImpactHeld, ['event_type=~"%s"' % q.types(types)]),

  // Settings the Helm chart fills in: the chart's copy of the rules is rendered with placeholders
  // `@@name@@` for them (mixin/chart-placeholders.libsonnet), which are strings here.
  local number(n) = if std.isString(n) then n else '%g' % n,
  local percent(fraction) =
    if std.isString(fraction) then '@@percent.' + std.substr(fraction, 2, std.length(fraction) - 2)
    else '%g' % (fraction * 100),
  local typesText(types) = std.join(' or ', [
    if std.startsWith(t, '@@') then '@@text.' + std.substr(t, 2, std.length(t) - 2) else t
    for t in types
  ]),

  local record(name, expr) = { record: name, expr: expr + '\n' },
  // Every per-VM alert's condition, one series per target (and key) with the alert's name in
  // the label `alert`.
  local conditions(alerts) = std.join('\nor\n', [
    'label_replace(\n  %s,\n  "alert", "%s", "", ""\n)' % [std.strReplace(a.condition.expr, '\n', '\n  '), a.alert]
    for a in alerts
  ]),
  // The labels the conditions keep besides the target's.
  local keys(alerts) = std.uniq(std.sort(std.flattenArrays([a.condition.key for a in alerts]))),

  // The number of VMs with each rolled-up alert's condition, per cluster, alert and the alert's
  // key: each alert's per-VM conditions counted once, for the thresholds below to read.
  local rollupVms(alerts) = std.join('\nor\n', [
    'count by (%s) (\n  count by (%s) (\n    %s\n  )\n)' % [
      q.list([cl, 'alert'] + a.condition.rollup.key),
      q.list(q.vmId + c.vmLabels + ['alert'] + a.condition.rollup.key),
      std.strReplace(vmExpr(a.condition, q.rec(r.vmAlert, ['alert="%s"' % a.alert])), '\n', '\n    '),
    ]
    for a in alerts
  ]),
  // The rolled-up alerts' conditions per cluster (and key), their value the number of VMs: for
  // `share`, where at least rollup.minVMs VMs and more than rollup.fraction of the cluster's VMs
  // have it, for `always`, wherever one has it. Read from the VMs counted by rollupVms.
  local rollups(alerts) =
    local named(kind) = [a.alert for a in alerts if a.condition.rollup.kind == kind];
    local vms(kind) = q.rec(r.rollupVms, ['alert=~"%s"' % std.join('|', named(kind))]);
    std.join('\nor\n', (
      if named('share') == [] then [] else [
        '(\n  %(vms)s >= %(min)s\n)\nand\n(\n  %(vms)s\n  / on (%(cluster)s) group_left ()\n  %(known)s > %(fraction)s\n  or\n  %(vms)s\n  unless on (%(cluster)s) %(known)s\n)' % {
          vms: vms('share'),
          min: number(c.rollup.minVMs),
          cluster: q.list([cl]),
          known: r.vmsKnown,
          fraction: number(c.rollup.fraction),
        },
      ]
    ) + (if named('always') == [] then [] else [vms('always')])),
  // Texts of an alert in both forms: one VM's (with an instance) or the cluster's.
  local forms(vm, cluster) = '{{ if $labels.instance }}%s{{ else }}%s{{ end }}' % [vm, cluster],
  // A cluster alert's sample of VMs: `(VM: name (instance); ...)`, of the VMs `flaps(selector)`
  // returns when given (a template's selector, whose printf arguments come twice).
  local sample(name, key=[], flaps=null) =
    local selector = 'azure_scheduled_events:vm_alert:value{alert=\\"%s\\"%s}' % [name, std.join('', [',%s=%%q' % l for l in std.filter(function(l) l != '', [cl] + key)])];
    local args = std.join('', [' $labels.%s' % l for l in std.filter(function(l) l != '', [cl] + key)]);
    '{{ range printf "topk(%(n)d, %(vms)s)"%(args)s | query | sortByLabel "instance" }}{{ with .Labels.vm_name }}{{ . }} {{ end }}({{ .Labels.instance }}); {{ end }}' % {
      n: c.rollup.sampleVMs,
      vms: if flaps == null then selector else flaps(selector),
      args: if flaps == null then args else args + args,
    },
  // " in cluster X" or " in the fleet".
  local inClusterOrFleet = if cl == '' then ' in the fleet' else '{{ with $labels.%s }} in cluster {{ . }}{{ end }}' % cl,
  // What "many" means, for texts.
  local many = 'at least %d and more than %g %% of its VMs' % [c.rollup.minVMs, c.rollup.fraction * 100],

  // At least `minVMs` VMs (by vmIdLabel) and more than `fraction` of a capacity group face an
  // event of `types` (recorded per VM), over the group's recorded size.
  local groupAtRisk(settings, recorded) =
    '%(count)s >= %(min)s\nand on (%(group)s)\n(\n  %(recorded)s\n  / %(size)s\n) > %(fraction)s' % {
      count: $.groupCount(settings),
      min: number(settings.minVMs),
      group: q.groupBy,
      recorded: recorded,
      size: r.capacityVms,
      fraction: number(settings.fraction),
    },
  // The description's list of the group's VMs and their events of `types`.
  local groupList(types) =
    '(VM, event: {{ range printf "max by (instance, vm_name, event_type, event_id) (azure_scheduled_events_event_info{affects_this_vm=\\"true\\",event_type=~\\"%(typesRe)s\\",event_status=~\\"%(statusRe)s\\"%(clusterMatch)s} * on (%(vm)s) group_left (vm_name) azure_scheduled_events_vm_info{%(capacity)s=%%q%(clusterMatch)s})"%(clusterArg)s $labels.%(capacity)s%(clusterArg)s | query | sortByLabel "vm_name" }}' % {
      capacity: c.capacityLabel,
      typesRe: q.types(types),
      statusRe: q.types(c.impactStatuses),
      vm: q.vmBy,
      clusterMatch: if cl == '' then '' else ',%s=%%q' % cl,
      clusterArg: if cl == '' then '' else ' $labels.%s' % cl,
    } + '{{ .Labels.vm_name }} ({{ .Labels.instance }}) {{ .Labels.event_type }} {{ .Labels.event_id }}; {{ end }})',

  // " of scale set X " when the alert has a capacity group.
  local ofGroup = '{{ with $labels.%s }} of %s {{ . }}{{ end }}' % [c.capacityLabel, c.capacityName],
  // The VMs a scale set is deleting (AzureScaleSetDelete's conditions), in a template query, and
  // the printf arguments that follow the cluster's.
  local deletedVms = 'azure_scheduled_events:vm_alert:value{alert=\\"AzureScaleSetDelete\\"%s,%s=%%q,event_source=%%q}' % [
    if cl == '' then '' else ',%s=%%q' % cl,
    c.capacityLabel,
  ],
  local deletedArgs = ' $labels.%s $labels.event_source' % c.capacityLabel,

  prometheusAlerts+:: {
    local vmAlerts = [a for a in [g for g in self.groups if g.name == 'azure-scheduled-events.vms'][0].alerts if a.condition != null],
    groups+: [
      {
        name: 'azure-scheduled-events.capacity',
        rules: [
          alert(
            'AzureScheduledEventsCapacityAtRisk',
            groupAtRisk(c.capacity, r.capacityAtRisk),
            c.capacity['for'],
            c.severities.page,
            '{{ $value }} VMs of %s %s%s go down at once' % [c.capacityName, label(c.capacityLabel), inClusterOnly],
            ('{{ $value }} VMs of %(capacityName)s %(name)s%(cluster)s face a %(types)s event whose NotBefore is less than %(soon)s away, ' +
             'passed, or already Started: more than %(percent)s %% of its VMs at once. ') % {
              capacityName: c.capacityName,
              name: label(c.capacityLabel),
              cluster: inClusterOnly,
              types: typesText(c.capacity.eventTypes),
              soon: '%d minutes' % (c.impactSoonSeconds / 60),
              percent: percent(c.capacity.fraction),
            } + groupList(c.capacity.eventTypes),
          ),
          // Many Spot VMs of one group evicted at once: worth knowing (the pool shrinks, its
          // workload moves), never a page: Spot pools are built for it, and 30 seconds of
          // notice leave nothing to do.
          alert(
            'AzureSpotEvictionWave',
            groupAtRisk(c.spotWave, r.capacityEvicted),
            c.spotWave['for'],
            c.spotWave.severity,
            '{{ $value }} Spot VMs of %s %s%s evicted at once' % [c.capacityName, label(c.capacityLabel), inClusterOnly],
            ('{{ $value }} VMs of %(capacityName)s %(name)s%(cluster)s are being evicted (%(types)s): more than %(percent)s %% of its VMs at once. ' +
             'Not paged: a Spot pool is built for evictions; check that its workload found room elsewhere. ') % {
              capacityName: c.capacityName,
              name: label(c.capacityLabel),
              cluster: inClusterOnly,
              types: typesText(c.spotWave.eventTypes),
              percent: percent(c.spotWave.fraction),
            } + groupList(c.spotWave.eventTypes),
          ),
        ],
      },
      {
        name: 'azure-scheduled-events.agents',
      } + (if c.agentsInterval == '' then {} else { interval: c.agentsInterval }) + {
        // The conditions of the agent-health alerts (slow): each reads a series of every agent.
        rules: [$.targetReleasedRule, $.targetDownRule, $.targetGoneRule, record(r.targetAgentAlert, conditions([a for a in vmAlerts if a.condition.slow]))],
      },
      {
        name: 'azure-scheduled-events.vms',
        // The per-VM alerts' conditions, recorded first in the group so that each alert reads
        // them at the same evaluation.
        // The held impacts are joined with the conditions: the VMs of the page's counts, read
        // with the per-VM alerts' in one join (rules.libsonnet: vmImpactRules).
        local perVmAlerts = [a for a in self.alerts if a.condition != null],
        local join = q.vmJoin(r.targetAlert, r.targetImpactHeld, r.targetAlertVm, ['alert'] + keys(perVmAlerts)),
        rules: $.impactRules + [
          record(r.targetAlert, conditions([a for a in perVmAlerts if !a.condition.slow]) + '\nor\n' + r.targetAgentAlert),
          record(r.targetAlertVm, join.joined),
        ] + $.vmImpactRules(r.targetAlertVm) + [
          record(r.vmAlert, join.byVm),
          record(r.rollupVms, rollupVms([a for a in perVmAlerts if std.objectHas(a.condition, 'rollup')])),
          record(r.clusterAlert, rollups([a for a in perVmAlerts if std.objectHas(a.condition, 'rollup')])),
        ] + self.alerts,
        alerts:: [
          alert(
            'AzureScheduledEventImpactSoon',
            // While the agent cannot be scraped (the VM is rebooting), its last events hold the
            // alert, so Alertmanager can keep inhibiting node-down alerts of this VM.
            perVm(impact(c.impactSoonTypes), eventKey),
            '1m',
            c.severities.vm,
            '%s of VM %s within %d minutes' % [label('event_type'), vmName, c.impactSoonSeconds / 60],
            ('VM %(vm)s (%(instance)s%(cluster)s): %(source)s %(type)s event %(id)s ' +
             '{{ with %(q)s | query }}starts in {{ . | first | value | humanizeDuration }}{{ else }}has started or starts any moment{{ end }}.') % {
              vm: vmName,
              instance: label('instance'),
              cluster: inCluster,
              source: label('event_source'),
              type: label('event_type'),
              id: label('event_id'),
              q: vmQuery('azure_scheduled_events_event_seconds_until_not_before', ',event_id=%q', ' > 0') + ' $labels.event_id',
            },
          ),
          alert(
            'AzureSpotEviction',
            perVm(events(['event_type="Preempt"']), eventKey),
            '0s',
            c.severities.info,
            'Spot eviction of VM %s' % vmName,
            ('Spot VM %(vm)s (%(instance)s%(cluster)s) is being evicted: Preempt event %(id)s ' +
             '{{ with %(q)s | query }}in {{ . | first | value | humanizeDuration }}{{ else }}now{{ end }}. ' +
             'Informational: Azure gives 30 seconds, less than scrape, rule evaluation and notification take.') % {
              vm: vmName,
              instance: label('instance'),
              cluster: inCluster,
              id: label('event_id'),
              q: vmQuery('azure_scheduled_events_event_seconds_until_not_before', ',event_id=%q', ' > 0') + ' $labels.event_id',
            },
          ),
          alert(
            'AzureScaleSetDelete',
            // One alert per capacity group (scale set) and source, with the number of its VMs
            // being deleted: a scale-in deletes many VMs at once, on purpose. Informational.
            perVm(events(['event_type="Terminate"']), eventKey) + {
              alertExpr(selector): 'count by (%s) (\n  %s\n)' % [q.list([cl, c.capacityLabel, 'event_source']), selector],
            },
            '0s',
            c.severities.info,
            '{{ $value }} VMs%s%s deleted by their %s' % [ofGroup, inClusterOnly, c.capacityName],
            ('{{ $value }} VMs%(of)s%(cluster)s are being deleted by their %(capacityName)s: ' +
             '{{ if eq $labels.event_source "User" }}requested (a scale-in, a delete by a user or an automation){{ else }}Terminate events from {{ or $labels.event_source "an unknown source" }}{{ end }}, ' +
             'the first {{ with printf "min(%(until)s)"%(untilArgs)s | query }}{{ with . | first | value }}{{ if gt . 0.0 }}in {{ humanizeDuration . }}{{ else }}now{{ end }}{{ end }}{{ else }}now{{ end }}. ' +
             'Informational: a scale set deletes VMs on purpose. (VM, event: {{ range printf "%(vms)s"%(args)s | query | sortByLabel "instance" }}{{ with .Labels.vm_name }}{{ . }} {{ end }}({{ .Labels.instance }}) {{ .Labels.event_id }}; {{ end }})') % {
              of: ofGroup,
              cluster: inClusterOnly,
              capacityName: c.capacityName,
              vms: deletedVms,
              until: 'azure_scheduled_events_event_seconds_until_not_before%s and on (%s) %s' % [
                if cl == '' then '' else '{%s=%%q}' % cl,
                q.list([cl, 'instance', 'event_id']),
                deletedVms,
              ],
              args: (if cl == '' then '' else ' $labels.%s' % cl) + deletedArgs,
              untilArgs: (if cl == '' then '' else ' $labels.%s $labels.%s' % [cl, cl]) + deletedArgs,
            },
          ),
          alert(
            'AzureScheduledEventStuckStarted',
            // One alert per event (EventId), however many VMs it names or see it (every VM of an
            // availability set or scale set sees its neighbours' events); the description lists the
            // VMs whose agents report it as their own.
            'max by (%s) (\n  %s\n)' % [
              q.list([cl] + eventKey),
              q.sel('azure_scheduled_events_event_info', ['event_status="Started"']),
            ],
            c.stuckStarted,
            c.severities.vm,
            '%s event %s Started for over %s%s' % [label('event_type'), label('event_id'), c.stuckStarted, inClusterOnly],
            ('%(type)s event %(id)s%(cluster)s has been Started for more than %(stuck)s. ' +
             'VMs it names (as their agents report): {{ range printf "%(named)s"%(namedArgs)s | query | sortByLabel "instance" }}{{ with .Labels.vm_name }}{{ . }} {{ end }}({{ .Labels.instance }}); {{ else }}none whose agent reports it; {{ end }}' +
             'seen by {{ with printf "count(max by (%(by)s) (azure_scheduled_events_event_info{event_id=%%q%(clusterMatch)s}))" $labels.event_id%(clusterArg)s | query }}{{ . | first | value }}{{ end }} agents.') % {
              type: label('event_type'),
              id: label('event_id'),
              cluster: inClusterOnly,
              stuck: c.stuckStarted,
              // The VMs whose agent has the event as its own, with their names where known.
              local named = 'azure_scheduled_events_event_info{event_id=%%q,affects_this_vm=\\"true\\"%s}' % (if cl == '' then '' else ',%s=%%q' % cl),
              named: 'max by (instance, vm_name) (%(named)s * on (%(vm)s) group_left (vm_name) azure_scheduled_events_vm_info%(clusterOnly)s or on (%(vm)s) %(named)s)' % {
                named: named,
                vm: q.vmBy,
                clusterOnly: if cl == '' then '' else '{%s=%%q}' % cl,
              },
              local one = ' $labels.event_id' + (if cl == '' then '' else ' $labels.%s' % cl),
              namedArgs: one + (if cl == '' then '' else ' $labels.%s' % cl) + one,
              by: 'instance',
              clusterMatch: if cl == '' then '' else ',%s=%%q' % cl,
              clusterArg: if cl == '' then '' else ' $labels.%s' % cl,
            },
          ),
          alert(
            'AzureRedeployAnnouncedDaysAhead',
            // The agent's own mark (hardware_failure_predicted: a Reboot or Redeploy first seen more
            // than a day ahead, or a Description of degraded hardware), or, from agents that do not
            // export it, a Redeploy due further ahead than redeployDaysAheadSeconds.
            // The seconds until NotBefore of the VM's own events (recorded once per evaluation)
            // are compared with a threshold per event: none for a marked one,
            // redeployDaysAheadSeconds for a Redeploy.
            perVm(
              '%(until)s\n> on (%(on)s) group_left (event_type, event_source)\n(\n  %(marked)s * 0 - Inf\n  or on (%(on)s)\n  %(redeploy)s * 0 + %(ahead)d\n)' % {
                until: r.targetEventUntil,
                on: q.list(q.vm + ['event_id']),
                marked: std.strReplace(events(['hardware_failure_predicted="true"']), '\n', '\n  '),
                ahead: c.redeployDaysAheadSeconds,
                redeploy: std.strReplace(events(['event_type="Redeploy"']), '\n', '\n  '),
              },
              eventKey,
            ),
            '5m',
            c.severities.vm,
            '%s of VM %s announced days ahead (degraded hardware)' % [label('event_type'), vmName],
            ('VM %s (%s%s) will be taken down by Azure in {{ $value | humanizeDuration }} ' +
             '(%s event %s): its host is degraded. Redeploy it yourself at a quiet time.') % [
              vmName,
              label('instance'),
              inCluster,
              label('event_type'),
              label('event_id'),
            ],
          ),

          alert(
            'AzureScheduledEventsAgentDown',
            // A target that was the agent within agentSeenLookback and now fails its scrape
            // (recorded), unless its VM is down on purpose: under one of its own interruptingTypes
            // events (held for impactHold while it reboots), deleted, evicted or replaced (gone),
            // or on a node cordoned within agentDown.cordonHold. One removed from service discovery
            // has no `up` left. The value is when this failure began, as recorded at the group's
            // previous evaluation: a new value is a new failure, which the alert counts.
            perVm(
              local down = '%(down)s\nunless on (%(t)s) %(held)s\nunless on (%(t)s) %(gone)s%(cordoned)s' % {
                down: r.targetDown,
                t: q.vmBy,
                held: impact(c.interruptingTypes),
                gone: r.targetGone,
                cordoned: if c.nodeLabel == '' then '' else '\nunless on (%s) max by (%s) (\n  %s\n)' % [
                  q.list([cl, c.nodeLabel]),
                  q.list([cl, c.nodeLabel]),
                  q.underNodeLabel('max_over_time(%s[%s])' % [q.kubeStateMetrics('kube_node_spec_taint', c.agentDown.cordonedMatchers), c.agentDown.cordonHold]),
                ],
              };
              '(\n  max without (alert) (%(prev)s)\n  and on (%(t)s)\n  (\n    %(down)s\n  )\n)\nor on (%(t)s)\n(\n  (\n    %(down)s\n  ) * 0 + time()\n)' % {
                prev: q.rec(r.targetAgentAlert, ['alert="AzureScheduledEventsAgentDown"']),
                t: q.vmBy,
                down: std.strReplace(down, '\n', '\n    '),
              },
              slow=true,
            ) + rollup('share') + {
              // Down now, or that many separate failures within agentDown.flapWindow.
              vmExpr(selector): '%(s)s\nor\nchanges(%(s)s[%(window)s]) >= %(changes)d' % {
                s: selector,
                window: c.agentDown.flapWindow,
                changes: c.agentDown.flaps - 1,
              },
            },
            c.agentDown['for'],
            c.severities.vm,
            forms('Scheduled-events agent down on VM %s' % vmName, 'Scheduled-events agents down on {{ $value }} VMs%s' % inClusterOrFleet),
            forms(
              ('Prometheus cannot scrape the agent on VM %s (%s{{ with $labels.job }}, job {{ . }}{{ end }}%s), ' +
               'or could not %d times or more in %s (a crash loop): scheduled events of this VM go unseen.') % [vmName, label('instance'), inCluster, c.agentDown.flaps, c.agentDown.flapWindow],
              ('Prometheus cannot scrape the agents of {{ $value }} VMs%s (%s): one cause for them all, ' +
               'such as a NetworkPolicy, the scrape configuration or the agent\'s release, rather than each VM\'s. Scheduled events of these VMs go unseen. (VM: %s)') % [inClusterOrFleet, many, sample('AzureScheduledEventsAgentDown', flaps=function(s) '%s or changes(%s[%s]) >= %d' % [s, s, c.agentDown.flapWindow, c.agentDown.flaps - 1])],
            ),
          ),
          alert(
            'AzureScheduledEventsPollLoopStuck',
            // The heartbeat moves at every poll, successful or not; 0 before the first poll
            // ends, which the first request (up to 2 minutes) may delay.
            perVm('time() - %s > %d' % [
              q.sel('azure_scheduled_events_last_poll_timestamp_seconds'),
              c.pollStuckSeconds,
            ], slow=true) + rollup('share'),
            '5m',
            c.severities.vm,
            forms('The agent on VM %s no longer polls IMDS' % vmName, 'The agents of {{ $value }} VMs%s no longer poll IMDS' % inClusterOrFleet),
            forms(
              ('The agent on VM %s (%s%s) answers scrapes but its last poll ended {{ $value | humanizeDuration }} ago: ' +
               'its poll loop is stuck and new events of this VM go unseen, while the last known ones stay exported.') % [
                vmName,
                label('instance'),
                inCluster,
              ],
              ('The agents of {{ $value }} VMs%s (%s) answer scrapes but have not finished a poll for more than %s: one cause for them all, ' +
               'such as a release of the agent or the nodes\' network, rather than each VM\'s. New events of these VMs go unseen. (VM: %s)') % [inClusterOrFleet, many, '%d seconds' % c.pollStuckSeconds, sample('AzureScheduledEventsPollLoopStuck')],
            ),
          ),
          alert(
            'AzureImdsUnreachable',
            // azure_scheduled_events_up is 0 until the first document; Azure may take 2 minutes
            // to answer the very first request.
            perVm('%s == 0' % q.sel('azure_scheduled_events_up'), slow=true) + rollup('share'),
            c.imdsUnreachableFor,
            c.severities.vm,
            forms('IMDS scheduled events unreachable from VM %s' % vmName, 'IMDS scheduled events unreachable from {{ $value }} VMs%s' % inClusterOrFleet),
            forms(
              ('The agent on VM %s (%s%s) has had no valid scheduled-events document for %s' +
               '{{- with printf "topk(1, increase(azure_scheduled_events_imds_request_failures_total{%s,operation=\\"events\\"}[5m]) > 0)" %s | query }} (most failures: {{ . | first | label "reason" }}){{ end }}: ' +
               'no events of this VM are seen; the last known ones stay exported.') % [
                vmName,
                label('instance'),
                inCluster,
                c.imdsUnreachableFor,
                vmMatchers,
                vmValues,
              ],
              ('The agents of {{ $value }} VMs%s (%s) have had no valid scheduled-events document for %s' +
               '{{- with printf "topk(1, sum by (reason) (increase(azure_scheduled_events_imds_request_failures_total{operation=\\"events\\"%s}[5m])) > 0)"%s | query }} (most failures: {{ . | first | label "reason" }}){{ end }}: ' +
               'one cause for them all, such as AKS\' IMDS restriction, a NetworkPolicy or the pods\' host network, rather than each VM\'s. No events of these VMs are seen. (VM: %s)') % [
                inClusterOrFleet,
                many,
                c.imdsUnreachableFor,
                if cl == '' then '' else ',%s=%%q' % cl,
                if cl == '' then '' else ' $labels.%s' % cl,
                sample('AzureImdsUnreachable'),
              ],
            ),
          ),
          alert(
            'AzureScheduledEventApprovalsFailing',
            // Approvals of one event type failed and none of that type succeeded: the hook
            // keeps failing or IMDS refuses the POST. The events still start at NotBefore.
            perVm(
              'sum by (%(key)s) (\n  increase(%(failures)s[10m])\n) > 0\nunless on (%(on)s)\n  sum by (%(on)s) (increase(%(approvals)s[10m])) > 0' % {
                key: q.list(q.vm + ['event_type', 'reason']),
                on: q.list(q.vm + ['event_type']),
                failures: q.sel('azure_scheduled_events_approval_failures_total'),
                approvals: q.sel('azure_scheduled_events_approvals_total'),
              },
              ['event_type', 'reason'],
             slow=true) + rollup('share', ['event_type', 'reason']),
            '1m',
            c.severities.vm,
            forms(
              'Approvals of %s events fail on VM %s (%s)' % [label('event_type'), vmName, label('reason')],
              'Approvals of %s events fail on {{ $value }} VMs%s (%s)' % [label('event_type'), inClusterOrFleet, label('reason')],
            ),
            forms(
              ('The agent on VM %s (%s%s) failed to approve %s events {{ printf "%%.0f" $value }} times in 10 minutes (%s) and approved none ' +
               '(Scheduled %s events now: {{ range %s $labels.event_type | query | sortByLabel "event_id" }}{{ .Labels.event_id }} {{ else }}none {{ end }}). ' +
               'They will start at NotBefore instead, ready or not.') % [
                vmName,
                label('instance'),
                inCluster,
                label('event_type'),
                label('reason'),
                label('event_type'),
                vmQuery('azure_scheduled_events_event_info', ',event_type=%q,event_status=\\"Scheduled\\"'),
              ],
              ('The agents of {{ $value }} VMs%s (%s) failed to approve %s events in 10 minutes (%s) and approved none: ' +
               'one cause for them all, such as the approval hook or policy as deployed, or IMDS refusing the POSTs, rather than each VM\'s. ' +
               'Their events will start at NotBefore instead, ready or not. (VM: %s)') % [
                inClusterOrFleet,
                many,
                label('event_type'),
                label('reason'),
                sample('AzureScheduledEventApprovalsFailing', ['event_type', 'reason']),
              ],
            ),
          ),
          alert(
            'AzureScheduledEventNotificationsFailing',
            // Notifications (--notify.*) that reached no receiver in the last 10 minutes: retries
            // exhausted, refused with a 4xx, or dropped from a full queue. The `or` adds the drops,
            // which have no `result` label, to the failures of the same receiver.
            perVm(
              'sum by (%(key)s) (
  increase(%(failed)s[10m])
  or
  increase(%(dropped)s[10m])
) > 0' % {
                key: q.list(q.vm + ['receiver']),
                failed: q.sel('azure_scheduled_events_notifications_total', ['result!="delivered"']),
                dropped: q.sel('azure_scheduled_events_notifications_dropped_total'),
              },
              ['receiver'],
             slow=true) + rollup('always', ['receiver']),
            '1m',
            c.severities.vm,
            'Notifications to receiver %s are lost%s' % [label('receiver'), inClusterOrFleet],
            ('The agents of {{ $value }} VMs%(cluster)s could not deliver %(lost)s notifications to receiver %(receiver)s in 10 minutes ' +
             '(refused, retries exhausted, or dropped from a full queue). A receiver is shared: one cause for them all, such as a rotated or revoked URL, ' +
             'the receiver down or a proxy. Whoever relies on it is not told of these VMs\' events. (VM: %(sample)s)') % {
              cluster: inClusterOrFleet,
              receiver: label('receiver'),
              // Counted once per agent, however many jobs scrape it.
              lost: '{{ with printf "sum(max by (instance) (sum by (%(t)s) (increase(azure_scheduled_events_notifications_total{result!=\\"delivered\\",receiver=%%q%(m)s}[10m]) or increase(azure_scheduled_events_notifications_dropped_total{receiver=%%q%(m)s}[10m]))))" $labels.receiver%(a)s $labels.receiver%(a)s | query }}{{ . | first | value | printf "%%.0f" }}{{ end }}' % {
                t: q.vmBy,
                m: if cl == '' then '' else ',%s=%%q' % cl,
                a: if cl == '' then '' else ' $labels.%s' % cl,
              },
              sample: sample('AzureScheduledEventNotificationsFailing', ['receiver']),
            },
          ),
          alert(
            'AzureScheduledEventsKubernetesRequestsFailing',
            // Requests of the Kubernetes output (--kubernetes.node-name) of one operation failed in
            // the last 10 minutes and none of that operation succeeded. Conflicts are retried at
            // once and an Event that already exists is not a failure.
            perVm(
              'sum by (%(key)s) (
  increase(%(failures)s[10m])
) > 0
unless on (%(on)s)
  sum by (%(on)s) (increase(%(ok)s[10m])) > 0' % {
                key: q.list(q.vm + ['operation', 'result']),
                on: q.list(q.vm + ['operation']),
                failures: q.sel('azure_scheduled_events_kubernetes_requests_total', ['result!~"ok|conflict|already_exists"']),
                ok: q.sel('azure_scheduled_events_kubernetes_requests_total', ['result="ok"']),
              },
              ['operation', 'result'],
             slow=true) + rollup('always', ['operation']),
            '5m',
            c.severities.vm,
            'The agents of {{ $value }} VMs%s cannot %s' % [inClusterOrFleet, label('operation')],
            ('The agents of {{ $value }} VMs%(cluster)s failed %(operation)s requests to the Kubernetes API server in 10 minutes and none succeeded ' +
             '(results: {{ range printf "count by (result) (azure_scheduled_events:vm_alert:value{alert=\\"AzureScheduledEventsKubernetesRequestsFailing\\",operation=%%q%(m)s})" $labels.operation%(a)s | query | sortByLabel "result" }}{{ .Labels.result }} on {{ .Value }} VMs; {{ end }}). ' +
             'The API server and the agents\' RBAC are the cluster\'s: one cause for them all. Their Nodes may lack the AzureScheduledEvent condition, Events, or the taint and cordon of a pending event. (VM: %(sample)s)') % {
              cluster: inClusterOrFleet,
              operation: label('operation'),
              m: if cl == '' then '' else ',%s=%%q' % cl,
              a: if cl == '' then '' else ' $labels.%s' % cl,
              sample: sample('AzureScheduledEventsKubernetesRequestsFailing', ['operation']),
            },
          ),
          alert(
            'AzureVMRebootedUnexpectedly',
            // The counter starts at 1 in the agent started after the reboot; increase() sees it
            // rise from the previous process' 0, and the alert clears itself 30 minutes later.
            // A clean reboot (the agent was stopped before it, clean="true") is not unexpected.
            perVm('increase(%s[30m]) > 0' % q.sel('azure_scheduled_events_reboots_total', ['expected="false"', 'clean!="true"']), slow=true) + rollup('share'),
            '0s',
            c.severities.vm,
            forms('VM %s rebooted without a scheduled event' % vmName, '{{ $value }} VMs%s rebooted without a scheduled event' % inClusterOrFleet),
            forms(
              ('VM %s (%s%s) rebooted, and no Reboot, Redeploy, Freeze or Preempt event of its own was seen Started before: ' +
               'a crash, a manual restart, or an event missed while the agent was down.') % [vmName, label('instance'), inCluster],
              ('{{ $value }} VMs%s (%s) rebooted within 30 minutes, uncleanly and with no Reboot, Redeploy, Freeze or Preempt event of their own seen Started before: ' +
               'one cause for them all, such as a node image or kernel, a host or zone outage, or someone restarting them. (VM: %s)') % [inClusterOrFleet, many, sample('AzureVMRebootedUnexpectedly')],
            ),
          ),
        ],
      },
    ],
  },

  // The coverage alert joins the coverage group's recording rules (rules.libsonnet), evaluated
  // at its interval.
  prometheusRules+:: {
    groups: [
      if g.name == 'azure-scheduled-events.coverage' then g + { rules+: [coverageAlert] } else g
      for g in super.groups
    ],
  },
  local coverageAlert =
    alert(
      'AzureScheduledEventsNodesWithoutAgent',
      // Recorded: nodes of kube_node_info without a working agent, or, without
      // kube-state-metrics, targets of the agent's job that never were the agent.
      '%s > 0' % r.nodesWithoutAgent,
      c.coverage['for'],
      c.severities.vm,
      '{{ $value }} nodes%s without a working scheduled-events agent' % inClusterOnly,
      ('{{ $value }} nodes%(cluster)s have no working agent (and no agent that AzureScheduledEventsAgentDown names): their scheduled events go unseen, and the capacity page does not count them. ' +
       '(Nodes without an agent: {{ range printf "%(kube)s unless on (%(on)s) azure_scheduled_events_build_info%(upMatch)s unless on (%(on)s) azure_scheduled_events:vm_alert:value{alert=\\"AzureScheduledEventsAgentDown\\"%(clusterMatch)s} and on (%(clusterOn)s) azure_scheduled_events_build_info{%(node)s!=\\"\\"%(clusterMatch)s}" %(args4)s | query | sortByLabel "%(node)s" }}{{ .Labels.%(node)s }} {{ else }}not named (the agents\' series carry no %(node)s label) {{ end }}; ' +
       'targets never up: {{ range printf "up%(upMatch)s == 0 and on (%(job)s) azure_scheduled_events_build_info%(upMatch)s unless on (%(t)s) %(seen)s%(upMatch)s" %(args3)s | query | sortByLabel "instance" }}{{ .Labels.instance }} {{ else }}none {{ end }}.)') % {
        cluster: inClusterOnly,
        // kube_node_info's node names under nodeLabel. The chart's placeholders for
        // matchers stand here for matchers with escaped quotes.
        local kube = 'kube_node_info{%s}' % std.join(',', [
          if std.startsWith(m, '@@') && std.endsWith(m, '@@') then '@@escaped.' + std.substr(m, 2, std.length(m) - 2)
          else std.strReplace(m, '"', '\\"')
          for m in std.filter(function(m) m != '', [c.coverage.kubeStateMetricsSelector] + c.coverage.nodeMatchers + (if cl == '' then [] else ['%s=%%q' % cl]))
        ]),
        local node = if c.nodeLabel == '' then 'node' else c.nodeLabel,
        kube: if node == 'node' then kube
        else if std.startsWith(node, '@@') then '@@nodeRelabel.open@@%s@@escaped.nodeRelabel.close@@' % kube
        else 'label_replace(%s, \\"%s\\", \\"$1\\", \\"node\\", \\"(.*)\\")' % [kube, node],
        on: q.list([cl, node]),
        node: node,
        clusterOn: q.list([cl]),
        upMatch: if cl == '' then '' else '{%s=%%q}' % cl,
        job: q.list([cl] + q.without(c.vmLabels, 'instance')),
        t: q.vmBy,
        seen: r.targetLastSeen,
        // Each of the cluster's selectors names it: a firing alert's text is rendered at every
        // evaluation, and reads one cluster's series, not the fleet's.
        clusterMatch: if cl == '' then '' else ',%s=%%q' % cl,
        args3: if cl == '' then '' else std.join(' ', std.repeat(['$labels.%s' % cl], 3)),
        args4: if cl == '' then '' else std.join(' ', std.repeat(['$labels.%s' % cl], 4)),
      },
    ),
}
