// The recording rules: what the alerts and the dashboards re-read, computed once per evaluation.
// A VM is (clusterLabel, vmIdLabel); a scrape target is (clusterLabel, vmLabels), and several
// targets (scrape jobs) may be one VM. Series names are in promql.libsonnet (`records`) and
// documented in docs/dashboards.md. Recorded series carry the labels they were recorded with:
// read them without the selector.
local promql = import '../lib/promql.libsonnet';

{
  local c = $._config,
  local q = promql.new(c),
  local r = q.records,
  local cl = c.clusterLabel,
  local nonEmpty(list) = std.filter(function(l) l != '', list),
  local target = q.vmBy,
  local cap = c.capacityLabel,

  // '1d' -> 86400: the durations of the config that rules compare with time().
  local seconds(duration) =
    local unit = std.substr(duration, std.length(duration) - 1, 1);
    local number = std.parseInt(std.substr(duration, 0, std.length(duration) - 1));
    local factor = { s: 1, m: 60, h: 3600, d: 86400, w: 604800 };
    if std.objectHas(factor, unit) then number * factor[unit]
    else error 'duration %s: expected a number and one of s, m, h, d, w' % duration,

  // The window in which a record of the targets group finds its own previous value: at least two
  // of its evaluations (one may fail or be skipped), and 10 minutes.
  local targetsWindow =
    local interval = if c.targetsInterval == '' then 0 else seconds(c.targetsInterval);
    if 2 * interval > 600 then '%ds' % (2 * interval) else '10m',

  // The recorded vm_info keeps the VM's priority besides vmInfoRecordLabels: the page leaves
  // Spot pools out by it.
  local infoLabels = q.list(q.vm + [c.vmIdLabel] + c.vmInfoRecordLabels + [q.priority]),
  // Every event type a rule below looks at: the quiet agent-down, the page, the Spot wave and
  // AzureScheduledEventImpactSoon read one record. (The Helm chart's placeholders for the page's
  // and the Spot wave's types are left out: the chart allows interruptingTypes only there.)
  local impactTypes = std.uniq(std.sort(std.filter(
    function(t) !std.startsWith(t, '@@'),
    c.interruptingTypes + c.goneTypes + c.capacity.eventTypes + c.spotWave.eventTypes + c.impactSoonTypes
  ))),
  // Only events that will happen or are happening (not an advisory) are impacts.
  local statuses = 'event_status=~"%s"' % q.types(c.impactStatuses),
  local record(name, expr) = { record: name, expr: expr + '\n' },

  // The matcher that leaves out VMs of a priority in `settings.exemptPriorities` (Spot pools).
  local exempt(settings) =
    if std.objectHas(settings, 'exemptPriorities') && settings.exemptPriorities != [] then ['%s!~"%s"' % [q.priority, q.types(settings.exemptPriorities)]] else [],
  // The held impacts by VM of `types` of a capacity group's VMs that count towards
  // `settings` (the page or the Spot wave): for the page (exemptPriorities), not the VMs of an
  // exempt priority, nor a Preempt of a VM whose priority is unknown (Azure evicts only Spot VMs:
  // an agent that exports no priority on a Spot VM).
  exemptMatchers(settings):: exempt(settings),
  heldOfGroup(settings, types)::
    local held = q.rec(r.vmImpactHeld, ['%s!=""' % cap, 'event_type=~"%s"' % q.types(types)] + exempt(settings));
    if exempt(settings) == [] then held
    else '%s\nunless\n%s' % [held, q.rec(r.vmImpactHeld, ['event_type="Preempt"', '%s=""' % q.priority])],
  // VMs of each capacity group (by name: q.namedVm) with a held event of `settings.eventTypes`, but for
  // VMs of a priority in `settings.exemptPriorities` (Spot pools).
  groupCount(settings)::
    'count by (%(group)s) (\n  max by (%(vm)s) (\n    %(held)s\n  )\n)' % {
      group: q.groupBy,
      vm: q.list(q.namedVm),
      held: std.strReplace($.heldOfGroup(settings, settings.eventTypes), '\n', '\n    '),
    },

  // Node names of kube_node_info, under nodeLabel.
  // Series without the cluster label (a kube-state-metrics stored without it) make no cluster of
  // their own where the agents' series have one: kube_node_info without it counts only where some
  // agent's series lack it too (one cluster, no label).
  local kubeNodes =
    local nodes(matchers) = q.underNodeLabel(q.kubeStateMetrics('kube_node_info', c.coverage.nodeMatchers + matchers));
    if cl == '' then nodes([])
    else '(\n  %s\n  or\n  %s\n  and on (%s) group by (%s) (%s)\n)' % [nodes(['%s!=""' % cl]), nodes(['%s=""' % cl]), cl, cl, q.sel('azure_scheduled_events_build_info', ['%s=""' % cl])],
  // The labels of one scrape job of a cluster.
  local jobKey = q.list([cl] + q.without(c.vmLabels, 'instance')),

  // Targets that were the agent within agentSeenLookback and fail their scrape now, with the node
  // they run on (nodeLabel, when the scrape sets it); the value is when each was last the agent,
  // the same throughout one failure: a new value is a new failure. Recorded in the group
  // azure-scheduled-events.agents, first: the condition of AzureScheduledEventsAgentDown and the
  // gone targets read it.
  // A target is down only where no copy of its `up` is 1 (the highest copy is 0): an HA pair of
  // Prometheus servers stored without deduplication has two (a replica label apart), and one that
  // cannot reach an agent the other scrapes is not the agent being down.
  targetDownRule:: record(
    r.targetDown,
    '(\n  max by (%(by)s) (%(up)s) == 0\n)\n+ on (%(t)s) group_left ()\n(%(seen)s > time() - %(lookback)d)' % {
      by: q.list(q.vm + [c.nodeLabel]),
      up: q.sel('up'),
      t: target,
      seen: r.targetLastSeen,
      lookback: seconds(c.agentSeenLookback),
    },
  ),

  // When each target's VM was last seen gone, kept for agentSeenLookback while the target is not up
  // again (it reads its own last value instead of a day of samples), by `reason`:
  // - `event`: a goneTypes event of its own (deleted, evicted): an event seen at any scrape since
  //   the group's previous evaluation counts (a Spot VM's Preempt lasts 30 seconds), its time that
  //   evaluation's;
  // - `discovery`: a target whose impacts are held (its VM reboots, its agent cannot be scraped)
  //   and that has left service discovery (no `up` any more) while its scrape job's discovery is
  //   itself seen (other targets of its cluster and job have `up`: a scraper down or replaying
  //   its WAL has none), unless the node it names is still a node of kube_node_info (a collector
  //   on the node itself goes down with it);
  // - `replaced`: the same, and its node answers again with instance metadata, from another
  //   target: another VM (or the same VM under another scrape target).
  // Recorded in the group azure-scheduled-events.agents, before the condition of
  // AzureScheduledEventsAgentDown that reads it; the held impacts of `discovery` and `replaced`
  // end (azure_scheduled_events:target_event_impact:held).
  targetGoneRule:: record(
    r.targetGone,
    // Held, not seen now, and not released: a target up again after its reboot is neither.
    local heldOnly(matchers) = '%s unless on (%s) %s unless on (%s) %s' % [q.rec(r.targetImpactHeld, matchers), q.list(q.vm + ['event_id']), r.targetImpactSoon, target, r.targetImpactReleased];
    local stamp(reason, expr) = 'label_replace(\n  max by (%s) (\n    %s\n  ) * 0 + time(),\n  "reason", "%s", "", ""\n)' % [target, std.strReplace(expr, '\n', '\n    '), reason];
    std.join('\nor\n', [
      stamp('event', 'last_over_time(%s[%s])' % [
        q.sel('azure_scheduled_events_event_info', ['affects_this_vm="true"', 'event_type=~"%s"' % q.types(c.goneTypes), statuses]),
        // Twice the group's interval: no scrape between two evaluations is missed.
        if c.agentsInterval == '' then '2m' else '%ds' % (2 * seconds(c.agentsInterval)),
      ]),
      stamp('discovery', '%s\nunless on (%s) %s' % [heldOnly([]), target, r.targetDown] + (
        if c.nodeLabel == '' then '' else '\nunless on (%s) %s' % [q.list([cl, c.nodeLabel]), kubeNodes]
      ) + '\nunless on (%s) %s\nand on (%s) group by (%s) (%s)' % [target, q.sel('up'), jobKey, jobKey, q.sel('up')]),
    ] + (
      if c.nodeLabel == '' then [] else [
        stamp('replaced', '%s\nand on (%s) %s' % [
          heldOnly(['%s!=""' % c.nodeLabel]),
          q.list([cl, c.nodeLabel]),
          q.sel('azure_scheduled_events_vm_info', ['%s!=""' % c.nodeLabel]),
        ]),
      ]
    )) + '\nor on (%(t)s, reason)\n(\n  last_over_time(%(prev)s[10m]) > time() - %(lookback)d\n)\nunless on (%(t)s) (%(up)s == 1)' % {
      t: target,
      prev: r.targetGone,
      lookback: seconds(c.agentSeenLookback),
      up: q.sel('up'),
    },
  ),

  // The impacts of each target, recorded first in the group azure-scheduled-events.events: the
  // page, the per-VM alerts and the quiet agent-down read them.
  impactRules:: [
    // The seconds until NotBefore of this VM's own events that will happen or are happening, by
    // the store's clock (NotBefore, which Azure gives, minus time()): a VM whose clock is behind
    // exports a countdown too long by as much. Every agent exports them for every event its VM
    // can see (a scale set's maintenance wave is as many events on each of its VMs), and two
    // rules below compare them; read once here.
    record(
      r.targetEventUntil,
      '%(until)s - time()\nand on (%(on)s)\n%(own)s' % {
        until: q.sel('azure_scheduled_events_event_not_before_timestamp_seconds'),
        on: q.list(q.vm + ['event_id']),
        own: q.sel('azure_scheduled_events_event_info', ['affects_this_vm="true"', statuses]),
      },
    ),
    // Events of this VM that take it down, with NotBefore within impactSoonSeconds,
    // passed, unknown, or Started: one series per target and event, with the VM's name, scale set
    // and priority the event series carry, its value NotBefore (a Unix time; 0 when unknown),
    // which the alerts' texts give.
    record(
      r.targetImpactSoon,
      'max by (%(key)s) (\n  %(events)s * 0\n  + on (%(on)s) group_left ()\n  %(notBefore)s\n  or\n  %(events)s * 0\n)\nunless on (%(on)s)\n  (%(until)s > %(soon)d)' % {
        key: q.list(q.vm + ['event_id', 'event_type', 'event_source'] + q.eventVm),
        events: q.sel('azure_scheduled_events_event_info', ['affects_this_vm="true"', 'event_type=~"%s"' % q.types(impactTypes), statuses]),
        // One per target and event, however many copies the store holds (an HA pair). NotBefore
        // is the countdown above plus time(), exactly (NotBefore is whole seconds): the
        // NotBefore of every event is selected once per evaluation, not twice.
        notBefore: 'max by (%s) (%s) + time()' % [q.list(q.vm + ['event_id']), r.targetEventUntil],
        on: q.list(q.vm + ['event_id']),
        until: r.targetEventUntil,
        soon: c.impactSoonSeconds,
      },
    ),
    // The same, held for impactHold after its last sighting until the target is recorded
    // released (it is up again: the VM has rebooted) or gone from service discovery or replaced
    // on its node (azure_scheduled_events:target_gone:timestamp_seconds). At every evaluation it
    // reads those records, not `up` of every target.
    record(
      r.targetImpactHeld,
      '%(soon)s\nor on (%(key)s)\n(\n  max_over_time(%(soon)s[%(hold)s])\n  unless on (%(t)s) %(released)s\n  unless on (%(t)s) %(gone)s\n)' % {
        soon: r.targetImpactSoon,
        key: q.list(q.vm + ['event_id']),
        hold: c.impactHold,
        t: target,
        released: r.targetImpactReleased,
        gone: q.rec(r.targetGone, ['reason=~"discovery|replaced"']),
      },
    ),
  ],

  // Targets up again with impacts seen within impactHold that they no longer report, and no
  // event of those types pending that is not near yet: their held impacts end (the VM has
  // rebooted, the event is over). A target whose events Azure rescheduled under new EventIds,
  // further ahead, keeps its hold until they come near, then has theirs. Recorded in the group
  // azure-scheduled-events.agents, which reads `up` of every target anyway: a held impact ends
  // up to agentsInterval after its VM is back.
  targetReleasedRule:: record(
    r.targetImpactReleased,
    'group by (%(t)s) (\n  max_over_time(%(soon)s[%(hold)s])\n  unless on (%(key)s) %(soon)s\n)\nand on (%(t)s) (%(up)s == 1)\nunless on (%(t)s) (\n  %(pending)s\n  unless on (%(key)s) %(soon)s\n)' % {
      t: target,
      soon: r.targetImpactSoon,
      pending: q.sel('azure_scheduled_events_event_info', ['affects_this_vm="true"', 'event_type=~"%s"' % q.types(impactTypes), statuses]),
      hold: c.impactHold,
      key: q.list(q.vm + ['event_id']),
      up: q.sel('up'),
    },
  ),

  // The held impact by VM (q.namedVm: its cluster, scale set and name, as its event series carry
  // them), with its priority, and the VMs of each capacity group it counts: recorded in the group
  // azure-scheduled-events.events from the targets' held impacts, one series per VM however many
  // jobs scrape its agent. Only VMs whose agent has read instance metadata (a name).
  vmImpactRules:: [
    record(
      r.vmImpactHeld,
      'max by (%s) (\n  %s\n)' % [q.list(q.namedVm + [q.priority, 'event_id', 'event_type', 'event_source']), q.named(r.targetImpactHeld)],
    ),
    record(r.capacityAtRisk, $.groupCount(c.capacity)),
    record(r.capacityEvicted, $.groupCount(c.spotWave)),
  ],

  prometheusRules+:: {
    groups+: [
      {
        name: 'azure-scheduled-events.targets',
      } + (if c.targetsInterval == '' then {} else { interval: c.targetsInterval }) + {
        rules: [
          // When each target last was the agent: exported build_info, which every agent does
          // from its first scrape (its vm_info comes later, or never without instance metadata).
          // It reads its own last value: the series lasts agentSeenLookback after the last
          // scrape, without reading a day of samples.
          record(
            r.targetLastSeen,
            'max by (%(t)s) (timestamp(%(build)s))\nor on (%(t)s)\n(\n  last_over_time(%(prev)s[%(window)s])\n  > time() - %(lookback)d\n)' % {
              t: target,
              build: q.sel('azure_scheduled_events_build_info'),
              prev: r.targetLastSeen,
              window: targetsWindow,
              lookback: seconds(c.agentSeenLookback),
            },
          ),
          // The target's vm_info now, or its last known one for vmInfoLookback after the target
          // was last seen (a rebooting VM). One series per target. A vm_info without vmIdLabel
          // gets the target as its id: it counts as a VM of its own.
          record(
            r.targetVmInfo,
            'max by (%(labels)s) (\n  %(withId)s\n  or\n  label_join(%(withoutId)s, "%(id)s", "/", %(targetQuoted)s)\n)\nor on (%(t)s)\n(\n  last_over_time(%(prev)s[%(window)s])\n  and on (%(t)s)\n  (%(seen)s > time() - %(lookback)d)\n)' % {
              labels: infoLabels,
              withId: q.sel('azure_scheduled_events_vm_info', ['%s!=""' % c.vmIdLabel]),
              withoutId: q.sel('azure_scheduled_events_vm_info', ['%s=""' % c.vmIdLabel]),
              id: c.vmIdLabel,
              targetQuoted: std.join(', ', ['"%s"' % l for l in q.vm]),
              t: target,
              prev: r.targetVmInfo,
              window: targetsWindow,
              seen: r.targetLastSeen,
              lookback: seconds(c.vmInfoLookback),
            },
          ),
          // Every target that was the agent within agentSeenLookback, with its VM's place (location,
          // zone, capacityLabel) where known: what the dashboards filter and sum per-agent series by.
          // The labels are not deduplicated (the Helm chart's placeholders cannot be).
          record(
            r.targetPlace,
            local place = std.join(', ', std.filter(function(l) l != '', ['location', 'zone', cap]));
            'max by (%(t)s, %(place)s) (%(info)s)\nor on (%(t)s)\ngroup by (%(t)s) (%(seen)s)' % {
              t: target,
              place: place,
              info: r.targetVmInfo,
              seen: r.targetLastSeen,
            },
          ),
          // The VMs of each capacity group by priority, seen within impactHold (a rebooting VM still
          // counts) and not gone from service discovery or replaced: the page's size of a scale set
          // (its Regular VMs: not of a priority in capacity.exemptPriorities) and the Spot wave's
          // (all of them). A VM being deleted (Terminate) is left out by the page itself, at once. In
          // this group: the size of a scale set changes when VMs are created or deleted.
          record(
            r.capacityVms,
            'count by (%(group)s, %(priority)s) (\n  max by (%(vm)s) (\n    %(info)s\n    and on (%(t)s)\n    (%(seen)s > time() - %(hold)d)\n    unless on (%(t)s)\n    %(gone)s\n  )\n)' % {
              group: q.groupBy,
              priority: q.priority,
              vm: q.list(q.vmId + [cap, q.priority]),
              info: q.rec(r.targetVmInfo, ['%s!=""' % cap]),
              t: target,
              seen: r.targetLastSeen,
              hold: seconds(c.impactHold),
              gone: q.rec(r.targetGone, ['reason=~"discovery|replaced"']),
            },
          ),
          // VMs seen within vmInfoLookback.
          record(r.vmsKnown, 'count by (%s) (\n  count by (%s) (%s)\n)' % [q.list([cl]), q.vmIdBy, r.targetVmInfo]),
        ],
      },
      {
        name: 'azure-scheduled-events.coverage',
      } + (if c.coverageInterval == '' then {} else { interval: c.coverageInterval }) + {
        rules: [
          // VMs whose agent is scraped now (compared with the nodes below).
          record(
            r.vmsReporting,
            'count by (%(cluster)s) (\n  count by (%(vm)s) (\n    %(info)s\n    and on (%(t)s)\n    %(now)s\n  )\n)' % {
              cluster: q.list([cl]),
              vm: q.vmIdBy,
              info: r.targetVmInfo,
              t: target,
              now: q.sel('azure_scheduled_events_vm_info'),
            },
          ),
          record(r.nodes, 'count by (%s) (%s)' % [q.list([cl]), kubeNodes]),
          // Nodes without a working agent (one scraped now) that AzureScheduledEventsAgentDown does
          // not name: by name where the agent's series carry nodeLabel (its build_info, whether or
          // not it has read instance metadata), by count where kube_node_info is present but they
          // do not; without kube-state-metrics,
          // targets of a job with agents that never were the agent (never up, image not pulled,
          // wrong architecture).
          record(
            r.nodesWithoutAgent,
            // AzureScheduledEventsAgentDown's VMs: their nodes have an agent, which that alert
            // names (now, or within agentDown.flapWindow by name: a crash loop between failures).
            local agentDown = q.rec(r.vmAgentAlert, ['alert="AzureScheduledEventsAgentDown"']);
            local byCount = '(\n    %(nodes)s\n    - (%(reporting)s or on (%(cluster)s) %(nodes)s * 0)\n    - (count by (%(cluster)s) (%(down)s) or on (%(cluster)s) %(nodes)s * 0)\n  ) > 0' % {
              nodes: r.nodes,
              reporting: r.vmsReporting,
              cluster: q.list([cl]),
              down: agentDown,
            };
            local named = 'count by (%s) (%s)' % [q.list([cl]), q.sel('azure_scheduled_events_build_info', ['%s!=""' % c.nodeLabel])];
            local byName = 'count by (%(cluster)s) (\n    max by (%(on)s) (%(kube)s)\n    unless on (%(on)s)\n    %(agents)s\n    unless on (%(on)s)\n    max_over_time(%(down)s[%(window)s])\n  )\n  and on (%(cluster)s) %(named)s' % {
              cluster: q.list([cl]),
              on: q.list([cl, c.nodeLabel]),
              kube: kubeNodes,
              agents: q.sel('azure_scheduled_events_build_info', ['%s!=""' % c.nodeLabel]),
              down: q.rec(r.vmAgentAlert, ['alert="AzureScheduledEventsAgentDown"', '%s!=""' % c.nodeLabel]),
              window: c.agentDown.flapWindow,
              named: named,
            };
            local kube =
              if c.nodeLabel == '' then byCount
              else '%s\n  or on (%s)\n  (\n  %s\n  unless on (%s) %s\n  )' % [byName, q.list([cl]), byCount, q.list([cl]), named];
            '(\n  %(kube)s\n)\nor on (%(cluster)s)\n(\n  count by (%(cluster)s) (\n    (%(up)s == 0)\n    and on (%(job)s) count by (%(job)s) (%(build)s)\n    unless on (%(t)s) %(seen)s\n  )\n  unless on (%(cluster)s) %(nodes)s\n)' % {
              kube: kube,
              cluster: q.list([cl]),
              up: q.sel('up'),
              job: q.list([cl] + q.without(c.vmLabels, 'instance')),
              build: q.sel('azure_scheduled_events_build_info'),
              t: target,
              seen: r.targetLastSeen,
              nodes: r.nodes,
            },
          ),
        ],
      },
    ],
  },
}
