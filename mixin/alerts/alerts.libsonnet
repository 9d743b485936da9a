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
        // The event alerts' per-VM conditions are recorded in .events, the agent-health ones in .agents.
        local selector = q.rec(if expr.slow then r.vmAgentAlert else r.vmAlert, ['alert="%s"' % name]);
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
      q.list(q.vm + eventKey + q.eventVm),
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
  // The conditions of the alerts of events (`recorded`, per target and `key`) one per VM as its
  // event series name it (its cluster, scale set and name), with the node where a job's series
  // name it, however many jobs scrape its agent; a target whose agent has not read instance
  // metadata (no name) keeps its own labels.
  local namedVms(recorded, key) =
    local one(by, series) = 'max by (%s) (\n  %s\n)' % [q.list(by), series];
    (
      if c.nodeLabel == '' then one(q.namedVm + key, q.named(recorded))
      else '%s\nor on (%s)\n%s' % [one(q.namedVm + [c.nodeLabel] + key, q.labelled(q.named(recorded), c.nodeLabel)), q.list(q.namedVm + key), one(q.namedVm + key, q.named(recorded))]
    ) + '\nor\n%s' % q.unnamed(recorded),

  // The number of VMs with each rolled-up alert's condition, per cluster, alert and the alert's
  // key: each alert's per-VM conditions counted once, for the thresholds below to read.
  local rollupVms(alerts) = std.join('\nor\n', [
    'count by (%s) (\n  count by (%s) (\n    %s\n  )\n)' % [
      q.list([cl, 'alert'] + a.condition.rollup.key),
      q.list(q.vmId + c.vmLabels + ['alert'] + a.condition.rollup.key),
      std.strReplace(vmExpr(a.condition, q.rec(r.vmAgentAlert, ['alert="%s"' % a.alert])), '\n', '\n    '),
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
        '(\n  %(vms)s >= %(min)s\n)\nand\n(\n  %(vms)s\n  / on (%(cluster)s) group_left ()\n  %(known)s > %(fraction)s\n  or\n  %(vms)s\n  unless on (%(cluster)s) %(known)s\n)\nor\n(\n  %(vms)s\n  and\n  last_over_time(%(previous)s[%(window)s])\n)' % {
          vms: vms('share'),
          // Once formed, a shared cause lasts while any of its VMs has the condition (its own
          // previous value, read over one and a half intervals of its group), rather than turning
          // into as many per-VM alerts when it falls under the threshold.
          previous: q.rec(r.clusterAlert, ['alert=~"%s"' % std.join('|', named('share'))]),
          window: if c.agentsInterval == '' then '90s' else '%ds' % (3 * seconds(c.agentsInterval) / 2),
          min: number(c.rollup.minVMs),
          cluster: q.list([cl]),
          known: r.vmsKnown,
          fraction: number(c.rollup.fraction),
        },
      ]
    ) + (if named('always') == [] then [] else [vms('always')])),
  // Texts of an alert in both forms: one VM's (with an instance) or the cluster's.
  local forms(vm, cluster) = '{{ if $labels.instance }}%s{{ else }}%s{{ end }}' % [vm, cluster],
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
      size: q.groupSize(),
      fraction: number(settings.fraction),
    },
  // The page: at least capacity.minVMs Regular VMs and more than capacity.fraction of a capacity
  // group's Regular VMs (its recorded Regular size, less its VMs being deleted at this
  // evaluation) face an event of capacity.eventTypes. Its value is the earliest NotBefore of
  // those VMs' events (a Unix time; 0 when one has started or has none), which its texts give.
  local pageExpr =
    local held(types) = std.strReplace($.heldOfGroup(c.capacity, types), '\n', '\n  ');
    local deleted = 'count by (%s) (\n  max by (%s) (\n    %s\n  )\n)' % [q.groupBy, q.list(q.namedVm), q.rec(r.vmImpactHeld, ['%s!=""' % c.capacityLabel, 'event_type="Terminate"'] + $.exemptMatchers(c.capacity))];
    'min by (%(group)s) (\n  %(held)s\n)\nand on (%(group)s)\n(\n  %(atRisk)s >= %(min)s\n  and\n  %(atRisk)s\n  / (\n    %(size)s\n    - (\n      %(deleted)s\n      or %(size)s * 0\n    )\n  ) > %(fraction)s\n)' % {
      group: q.groupBy,
      held: held(c.capacity.eventTypes),
      atRisk: r.capacityAtRisk,
      min: number(c.capacity.minVMs),
      size: q.groupSize($.exemptMatchers(c.capacity)),
      deleted: std.strReplace(deleted, '\n', '\n      '),
      fraction: number(c.capacity.fraction),
    },
  // When the page's first VM goes down: its value as a time, or "now".
  local firstDown = '{{ if gt $value 0.0 }}at {{ $value | humanizeTimestamp }}{{ else }}now (Started, or NotBefore passed or unknown){{ end }}',
  // Where a store runs queries in templates (Prometheus, vmalert; not Azure Monitor): the time
  // left until the page's value, from the value alone (no label, so none can be missing).
  local timeLeft = '{{ if gt $value 0.0 }}{{ with printf "%.0f - time()" $value | query }}{{ $left := . | first | value }}{{ if gt $left 0.0 }}, in {{ humanizeDuration $left }}{{ else }}, passed{{ end }}{{ end }}{{ end }}',
  // " of scale set X " when the alert has a capacity group.
  local ofGroup = '{{ with $labels.%s }} of %s {{ . }}{{ end }}' % [c.capacityLabel, c.capacityName],
  // Where a VM of an alert of events is: its scale set, node and cluster, as far as its labels say
  // (a VM whose agent has not read instance metadata is named by its instance).
  local eventPlace = ofGroup + inCluster,
  // The alerts of events (the per-VM ones and the stuck event) and of agent health (`slow`:
  // conditions on every agent's own series).
  fleetAlerts:: [
    alert(
      'AzureScheduledEventImpactSoon',
      // While the agent cannot be scraped (the VM is rebooting), its last events hold the
      // alert, so Alertmanager can keep inhibiting node-down alerts of this VM.
      perVm(impact(c.impactSoonTypes), eventKey),
      '1m',
      c.severities.vm,
      '%s of VM %s within %d minutes' % [label('event_type'), vmName, c.impactSoonSeconds / 60],
      'VM %s%s: %s %s event %s %s.' % [vmName, eventPlace, label('event_source'), label('event_type'), label('event_id'), '{{ if gt $value 0.0 }}is due at {{ $value | humanizeTimestamp }}{{ else }}has started, or its NotBefore passed or is unknown{{ end }}'],
    ),
    alert(
      'AzureSpotEviction',
      perVm(events(['event_type="Preempt"']), eventKey),
      '0s',
      c.severities.info,
      'Spot eviction of VM %s' % vmName,
      ('Spot VM %s%s is being evicted: Preempt event %s. ' +
       'Informational: Azure gives 30 seconds, less than scrape, rule evaluation and notification take.') % [vmName, eventPlace, label('event_id')],
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
      ('{{ $value }} VMs%s%s are being deleted by their %s: ' +
       '{{ with $labels.event_source }}{{ if eq . "User" }}requested (a scale-in, a delete by a user or an automation){{ else }}Terminate events from {{ . }}{{ end }}{{ else }}Terminate events from an unknown source{{ end }}. ' +
       'Informational: a scale set deletes VMs on purpose.') % [ofGroup, inClusterOnly, c.capacityName],
    ),
    alert(
      'AzureScheduledEventStuckStarted',
      // One alert per event (EventId), however many VMs see it (every VM of an availability set
      // or scale set sees its neighbours' events); its value is the number of VMs (instances,
      // whichever job or replica scraped them) whose agents report it as their own.
      '%(own)s\nor\n%(seen)s * 0' % {
        own: 'count by (%s) (\n  max by (%s) (\n    %s\n  )\n)' % [
          q.list([cl] + eventKey),
          q.list([cl, 'instance'] + eventKey),
          q.sel('azure_scheduled_events_event_info', ['event_status="Started"', 'affects_this_vm="true"']),
        ],
        seen: 'max by (%s) (\n  %s\n)' % [
          q.list([cl] + eventKey),
          q.sel('azure_scheduled_events_event_info', ['event_status="Started"']),
        ],
      },
      c.stuckStarted,
      c.severities.vm,
      '%s event %s Started for over %s%s' % [label('event_type'), label('event_id'), c.stuckStarted, inClusterOnly],
      ('%s event %s%s has been Started for more than %s, on {{ $value }} VMs whose agents report it as their own (0: only neighbours see it). ' +
       'Open one Azure support case for this EventId.') % [label('event_type'), label('event_id'), inClusterOnly, c.stuckStarted],
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
        '%(until)s\n> on (%(on)s) group_left (%(labels)s)\n(\n  %(marked)s * 0 - Inf\n  or on (%(on)s)\n  %(redeploy)s * 0 + %(ahead)d\n)' % {
          until: r.targetEventUntil,
          on: q.list(q.vm + ['event_id']),
          labels: q.list(['event_type', 'event_source'] + q.eventVm),
          marked: std.strReplace(events(['hardware_failure_predicted="true"']), '\n', '\n  '),
          ahead: c.redeployDaysAheadSeconds,
          redeploy: std.strReplace(events(['event_type="Redeploy"']), '\n', '\n  '),
        },
        eventKey,
      ),
      '5m',
      c.severities.vm,
      '%s of VM %s announced days ahead (degraded hardware)' % [label('event_type'), vmName],
      ('VM %s%s will be taken down by Azure in {{ $value | humanizeDuration }} ' +
       '(%s event %s): its host is degraded. Redeploy it yourself at a quiet time.') % [
        vmName,
        eventPlace,
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
      // has no `up` left. The value is the recorded failure's (when the target was last the
      // agent): the same throughout one failure, a new value a new failure, which the alert
      // counts. It reads no earlier evaluation of its own, so every engine and every evaluation
      // delay computes it alike.
      perVm(
        '%(down)s\nunless on (%(t)s) %(held)s\nunless on (%(t)s) %(gone)s%(cordoned)s' % {
          down: r.targetDown,
          t: q.vmBy,
          held: impact(c.interruptingTypes),
          gone: r.targetGone,
          cordoned: if c.nodeLabel == '' then '' else '\nunless on (%s) max by (%s) (\n  %s\n)' % [
            q.list([cl, c.nodeLabel]),
            q.list([cl, c.nodeLabel]),
            q.underNodeLabel('max_over_time(%s[%s])' % [q.kubeStateMetrics('kube_node_spec_taint', c.agentDown.cordonedMatchers), c.agentDown.cordonHold]),
          ],
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
         'such as a NetworkPolicy, the scrape configuration or the agent\'s release. Scheduled events of these VMs go unseen.') % [inClusterOrFleet, many],
      ),
    ),
    alert(
      'AzureScheduledEventsPollLoopStuck',
      // The heartbeat moves at every poll, successful or not; 0 before the first poll
      // ends, which the first request (up to 2 minutes) may delay.
      // Judged by the store's sample times, not the VM's clock (which may be minutes off): the
      // heartbeat has not changed in any sample of the last pollStuckSeconds, of which there are
      // at least two.
      perVm('changes(%(hb)s[%(window)ds]) == 0\nand\ncount_over_time(%(hb)s[%(window)ds]) > 1' % {
        hb: q.sel('azure_scheduled_events_last_poll_timestamp_seconds'),
        window: c.pollStuckSeconds,
      }, slow=true) + rollup('share'),
      '5m',
      c.severities.vm,
      forms('The agent on VM %s no longer polls IMDS' % vmName, 'The agents of {{ $value }} VMs%s no longer poll IMDS' % inClusterOrFleet),
      forms(
        ('The agent on VM %s (%s%s) answers scrapes but has not finished a poll for more than %s: ' +
         'its poll loop is stuck and new events of this VM go unseen, while the last known ones stay exported.') % [vmName, label('instance'), inCluster, '%d seconds' % c.pollStuckSeconds],
        ('The agents of {{ $value }} VMs%s (%s) answer scrapes but have not finished a poll for more than %s: one cause for them all, ' +
         'such as a release of the agent or the nodes\' network. New events of these VMs go unseen.') % [inClusterOrFleet, many, '%d seconds' % c.pollStuckSeconds],
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
        ('The agent on VM %s (%s%s) has had no valid scheduled-events document for %s: ' +
         'no events of this VM are seen; the last known ones stay exported.') % [vmName, label('instance'), inCluster, c.imdsUnreachableFor],
        ('The agents of {{ $value }} VMs%s (%s) have had no valid scheduled-events document for %s: ' +
         'one cause for them all, such as AKS\' IMDS restriction, a NetworkPolicy or the pods\' host network. No events of these VMs are seen.') % [inClusterOrFleet, many, c.imdsUnreachableFor],
      ),
    ),
    alert(
      'AzureScheduledEventApprovalsFailing',
      // Approvals of one event type failed and none of that type succeeded: the hook
      // keeps failing or IMDS refuses the POST. The events still start at NotBefore.
      perVm(
        // max, not sum: the copies of one series an HA pair of servers stores count once.
        'max by (%(key)s) (\n  increase(%(failures)s[10m])\n) > 0\nunless on (%(on)s)\n  max by (%(on)s) (increase(%(approvals)s[10m])) > 0' % {
          key: q.list(q.vm + ['event_type', 'reason']),
          on: q.list(q.vm + ['event_type']),
          failures: q.sel('azure_scheduled_events_approval_failures_total'),
          approvals: q.sel('azure_scheduled_events_approvals_total'),
        },
        ['event_type', 'reason'],
       slow=true) + rollup('share', ['event_type', 'reason']),
      // Long enough for a shared cause (the hook as deployed) to reach the roll-up's threshold
      // as the VMs' events come, before each VM alerts alone.
      '5m',
      c.severities.vm,
      forms(
        'Approvals of %s events fail on VM %s (%s)' % [label('event_type'), vmName, label('reason')],
        'Approvals of %s events fail on {{ $value }} VMs%s (%s)' % [label('event_type'), inClusterOrFleet, label('reason')],
      ),
      forms(
        ('The agent on VM %s (%s%s) failed to approve %s events {{ printf "%%.0f" $value }} times in 10 minutes (%s) and approved none. ' +
         'They will start at NotBefore instead, ready or not.') % [vmName, label('instance'), inCluster, label('event_type'), label('reason')],
        ('The agents of {{ $value }} VMs%s (%s) failed to approve %s events in 10 minutes (%s) and approved none: ' +
         'one cause for them all, such as the approval hook or policy as deployed, or IMDS refusing the POSTs. ' +
         'Their events will start at NotBefore instead, ready or not.') % [inClusterOrFleet, many, label('event_type'), label('reason')],
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
      ('The agents of {{ $value }} VMs%s could not deliver notifications to receiver %s in 10 minutes ' +
       '(refused, retries exhausted, or dropped from a full queue). A receiver is shared: one cause for them all, such as a rotated or revoked URL, ' +
       'the receiver down or a proxy. Whoever relies on it is not told of these VMs\' events.') % [inClusterOrFleet, label('receiver')],
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
      ('The agents of {{ $value }} VMs%s failed %s requests to the Kubernetes API server in 10 minutes and none succeeded. ' +
       'The API server and the agents\' RBAC are the cluster\'s: one cause for them all. Their Nodes may lack the AzureScheduledEvent condition, Events, or the taint and cordon of a pending event.') % [inClusterOrFleet, label('operation')],
    ),
    alert(
      'AzureVMRebootedUnexpectedly',
      // The counter starts at 1 in the agent started after the reboot: it is above its lowest
      // sample of the last 30 minutes (the previous process' 0), and the alert clears itself
      // 30 minutes later. A series first seen at 1 (a reboot before the agent was first
      // scraped) is not news. Compared sample with sample, not with increase(): VictoriaMetrics
      // counts a new series' first sample as a rise from 0, Prometheus does not.
      // A clean reboot (the agent was stopped before it, clean="true") is not unexpected.
      perVm('%(r)s\n> min_over_time(%(r)s[30m])' % { r: q.sel('azure_scheduled_events_reboots_total', ['expected="false"', 'clean!="true"']) }, slow=true) + rollup('share'),
      // Long enough for a shared cause (a zone or host outage) to reach the roll-up's
      // threshold before the first VMs back alert one by one.
      '5m',
      c.severities.vm,
      forms('VM %s rebooted without a scheduled event' % vmName, '{{ $value }} VMs%s rebooted without a scheduled event' % inClusterOrFleet),
      forms(
        ('VM %s (%s%s) rebooted, and no Reboot, Redeploy, Freeze or Preempt event of its own was seen Started before: ' +
         'a crash, a manual restart, or an event missed while the agent was down.') % [vmName, label('instance'), inCluster],
        ('{{ $value }} VMs%s (%s) rebooted within 30 minutes, uncleanly and with no Reboot, Redeploy, Freeze or Preempt event of their own seen Started before: ' +
         'one cause for them all, such as a node image or kernel, a host or zone outage, or someone restarting them.') % [inClusterOrFleet, many],
      ),
    ),
  ],

  // The capacity page and the Spot wave: they read the held impacts of the events' group.
  capacityAlerts:: [
    local pageText(left) = {
      summary: '%s %s%s: over %s %% of its Regular VMs go down, the first %s%s' % [std.asciiUpper(std.substr(c.capacityName, 0, 1)) + std.substr(c.capacityName, 1, std.length(c.capacityName) - 1), label(c.capacityLabel), inClusterOnly, percent(c.capacity.fraction), firstDown, left],
      description: ('At least %s and more than %s %% of the Regular VMs of %s %s%s face a %s event, the first %s%s. ' +
                    'NotBefore cannot be postponed: add capacity first. The runbook lists the VMs.') % [
        number(c.capacity.minVMs),
        percent(c.capacity.fraction),
        c.capacityName,
        label(c.capacityLabel),
        inClusterOnly,
        typesText(c.capacity.eventTypes),
        firstDown,
        left,
      ],
    };
    alert(
      'AzureScheduledEventsCapacityAtRisk',
      pageExpr,
      c.capacity['for'],
      c.severities.page,
      pageText(timeLeft).summary,
      pageText(timeLeft).description,
    ) + {
      // Azure Monitor runs no query in annotations: the time of the first VM alone.
      azureAnnotations:: super.annotations + { summary: pageText('').summary, description: pageText('').description },
    },
    // Many Spot VMs of one group evicted at once: worth knowing (the pool shrinks, its
    // workload moves), never a page: Spot pools are built for it, and 30 seconds of
    // notice leave nothing to do.
    alert(
      'AzureSpotEvictionWave',
      groupAtRisk(c.spotWave, r.capacityEvicted),
      c.spotWave['for'],
      c.spotWave.severity,
      '{{ $value }} Spot VMs of %s %s%s evicted at once' % [c.capacityName, label(c.capacityLabel), inClusterOnly],
      ('{{ $value }} VMs of %s %s%s are being evicted (%s): more than %s %% of its VMs at once. ' +
       'Not paged: a Spot pool is built for evictions; check that its workload found room elsewhere.') % [c.capacityName, label(c.capacityLabel), inClusterOnly, typesText(c.spotWave.eventTypes), percent(c.spotWave.fraction)],
    ),
  ],

  prometheusAlerts+:: {
    local eventAlerts = [a for a in $.fleetAlerts if a.condition == null || !a.condition.slow],
    local agentAlerts = [a for a in $.fleetAlerts if a.condition != null && a.condition.slow],
    local perVmOf(list) = [a for a in list if a.condition != null],
    local rolledUp(list) = [a for a in list if a.condition != null && std.objectHas(a.condition, 'rollup')],
    // One group per alert family, each holding the records its alerts read, so that no alert
    // waits an interval for another group's record, and each within the 20 rules a group may
    // hold on Azure Monitor, Mimir and Amazon Managed Prometheus.
    groups+: [
      {
        name: 'azure-scheduled-events.events',
      } + (if c.eventsInterval == '' then {} else { interval: c.eventsInterval }) + {
        // The impacts and the per-VM alerts' conditions, recorded first in the group so that each
        // alert reads them at the same evaluation. They read only the events' series, which carry
        // the VM's name, scale set and priority: no series of every target.
        local conditionsOf = perVmOf(eventAlerts),
        rules: $.impactRules + [
          record(r.targetAlert, conditions(conditionsOf)),
        ] + $.vmImpactRules + [
          record(r.vmAlert, namedVms(r.targetAlert, ['alert'] + keys(conditionsOf))),
        ] + eventAlerts + $.capacityAlerts,
      },
      {
        name: 'azure-scheduled-events.agents',
      } + (if c.agentsInterval == '' then {} else { interval: c.agentsInterval }) + {
        // The conditions of the agent-health alerts: each reads a series of every agent.
        local conditionsOf = perVmOf(agentAlerts),
        local join = q.vmJoin(r.targetAgentAlert, r.targetAgentAlertVm, ['alert'] + keys(conditionsOf)),
        rules: [
          $.targetReleasedRule,
          $.targetDownRule,
          $.targetGoneRule,
          record(r.targetAgentAlert, conditions(conditionsOf)),
          record(r.targetAgentAlertVm, join.joined),
          record(r.vmAgentAlert, join.byVm),
          record(r.rollupVms, rollupVms(rolledUp(agentAlerts))),
          record(r.clusterAlert, rollups(rolledUp(agentAlerts))),
        ] + agentAlerts,
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
      ('{{ $value }} nodes%s have no working agent (and no agent that AzureScheduledEventsAgentDown names): ' +
       'their scheduled events go unseen, and the capacity page does not count them.') % inClusterOnly,
    ),
}
