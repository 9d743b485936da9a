// What a deployment may change. Override fields with `(import 'mixin.libsonnet') + { _config+:: {...} }`;
// docs/dashboards.md describes each one. The files in alerts/ and dashboards/ are these defaults.
{
  _config+:: {
    // Label matchers added to every selector of the agent's series (and of `up`), e.g.
    // 'job="azure-scheduled-events"'. Empty: the metric names alone select the agent.
    selector: '',

    // The label that tells clusters (or Prometheus servers) apart in a shared metrics store.
    // Every aggregation and join keeps it. Empty for a single-cluster setup.
    clusterLabel: 'cluster',

    // With clusterLabel, the labels that identify one scrape target of the agent. Several
    // targets (scrape jobs) may be one VM: VMs are counted by vmIdLabel, or by the vm_name and
    // capacityLabel their event series carry.
    vmLabels: ['job', 'instance'],
    // The label of azure_scheduled_events_vm_info that is one VM's identity (Azure's vmId):
    // with clusterLabel, it counts each VM once however many jobs scrape its agent. A target
    // whose vm_info lacks it counts as a VM of its own.
    vmIdLabel: 'vm_id',
    // The label that names the Kubernetes node on the agent's series: the chart's PodMonitor
    // and ServiceMonitor set it from the pod's node. Copied onto per-VM alerts when present,
    // and matched against kube-state-metrics' kube_node_info for coverage. Empty off Kubernetes.
    nodeLabel: 'node',

    // The label of azure_scheduled_events_vm_info, and of the event series (event_info), that
    // groups VMs into one unit of capacity: a scale set (an AKS node pool). VMs with an empty
    // value are not grouped.
    capacityLabel: 'vm_scale_set_name',
    // What one value of capacityLabel is called in alert texts.
    capacityName: 'scale set',

    // Labels of azure_scheduled_events_vm_info copied onto the agent-health alerts when the agent
    // has read instance metadata (the alerts fire without them otherwise). The alerts of events
    // carry vm_name, capacityLabel and nodeLabel from the event series, which carry them.
    vmInfoLabels: ['vm_name', self.capacityLabel, self.nodeLabel],
    // Labels of azure_scheduled_events_vm_info kept by the recorded last known vm_info
    // (azure_scheduled_events:target_vm_info:last).
    vmInfoRecordLabels: ['vm_name', 'location', 'zone', self.capacityLabel, 'resource_group', 'vm_size', self.nodeLabel],

    // How long a VM's last known azure_scheduled_events_vm_info stays usable after its agent
    // stopped answering (a rebooting VM).
    vmInfoLookback: '1h',
    // How long a target that exported the agent's build_info counts as the agent after its last
    // scrape: AzureScheduledEventsAgentDown fires for it while it is down within this time.
    agentSeenLookback: '1d',

    severities: {
      // Pages at any hour: only capacity at risk.
      page: 'critical',
      // The team's queue: one VM's event or one agent's trouble.
      vm: 'warning',
      // Informational: a Spot eviction (30 s notice, shorter than a page's own delay).
      info: 'info',
    },

    // Event types that take a VM down (Freeze, a pause of seconds, is not one). While one of
    // the VM's own is due, under way or held (impactHold), its agent being down is no news.
    interruptingTypes: ['Reboot', 'Redeploy', 'Preempt', 'Terminate'],
    // Event types after which a VM is gone (deleted by its scale set, evicted): its target may
    // linger at up=0, and AzureScheduledEventsAgentDown stays quiet for agentSeenLookback.
    goneTypes: ['Preempt', 'Terminate'],
    // The EventStatus values of an event that will happen or is happening. Any other (a Spot
    // rebalance recommendation's Advisory, a status Azure adds later) is never an impact: no
    // rule counts it, holds for it or alerts on it.
    impactStatuses: ['Scheduled', 'Started'],
    // Event types that AzureScheduledEventImpactSoon reports (Preempt and Terminate have their
    // own alerts).
    impactSoonTypes: ['Reboot', 'Redeploy'],
    // NotBefore closer than this counts as "soon".
    impactSoonSeconds: 900,
    // How long the last events of a VM whose agent cannot be scraped (it is rebooting) keep
    // AzureScheduledEventImpactSoon firing.
    impactHold: '15m',

    // The capacity page reads Regular capacity: at least `minVMs` Regular VMs (counted by the
    // vm_name their event series carry) and more than `fraction` of the Regular VMs of one capacity group
    // (capacityLabel) in one cluster face one of `eventTypes` with NotBefore within
    // impactSoonSeconds, passed, or already Started. A VM's priority decides, not the event's
    // type: VMs whose priority (the `priority` label of azure_scheduled_events_vm_info and of
    // the event series, from instance metadata) is one of `exemptPriorities` are built for interruption and never
    // counted, in the VMs going down or in the group's size, so a scale set without Regular VMs
    // never pages; a VM without a priority counts as Regular. VMs being deleted (Terminate,
    // usually a wanted scale-in) leave the size at once. Spot waves are spotWave.
    capacity: {
      eventTypes: ['Reboot', 'Redeploy', 'Preempt'],
      minVMs: 2,
      fraction: 0.25,
      'for': '1m',
      // Low is Spot's former name, still reported by older scale sets.
      exemptPriorities: ['Spot', 'SpotPlus', 'Low'],
    },
    // A Spot wave: the same thresholds for evictions, reported at `severity`, never paged.
    spotWave: {
      eventTypes: ['Preempt'],
      minVMs: 2,
      fraction: 0.25,
      'for': '1m',
      severity: 'warning',
    },
    // How often the group that records what each scrape target is (azure-scheduled-events.targets:
    // when it was last the agent, its last known vm_info and place, each scale set's size) is
    // evaluated. What a target
    // is changes when a VM is created or deleted; each evaluation reads every target's series.
    // In a VM's first minutes its agent-health alerts may carry its target's labels (job,
    // instance) until its vm_info is recorded, and a scale set's size moves as late (a VM being deleted, with its Terminate,
    // leaves it at once).
    // Every 5 minutes: at 10,000 agents each evaluation allocates some 320 MB of Prometheus'
    // heap (docs/performance.md). Empty: Prometheus' evaluation_interval.
    targetsInterval: '5m',
    // How often the conditions of the agent-health alerts (AzureScheduledEventsAgentDown,
    // PollLoopStuck, ImdsUnreachable, the approval, notification and Kubernetes failures,
    // AzureVMRebootedUnexpectedly) are recorded and those alerts evaluated (group
    // azure-scheduled-events.agents): each evaluation reads a series of every agent. The interval
    // their `for:` needs: with `for: 5m`, an alert fires at the second evaluation that sees its
    // condition, 5 to 10 minutes after it began (every 2 minutes: 6 to 8). The same group records
    // which targets are up again after their VM's reboot: a held impact (impactHold) ends up to
    // this much after the VM is back. Empty: evaluation_interval.
    agentsInterval: '5m',
    // How often the group azure-scheduled-events.events (each VM's impacts, the per-VM alerts of
    // events, the capacity page and the Spot wave) is evaluated. It reads the events' series only,
    // few, which name their VM (vm_name, scale set, priority): no series of every target.
    // Every 30 seconds: a Spot VM's Preempt (30 seconds of notice, exported by as many scrapes) is
    // seen by an evaluation at scrape intervals up to 30 seconds; the page and
    // AzureScheduledEventImpactSoon (`for: 1m`) fire 1 to 1.5 minutes after their condition began.
    // Empty: evaluation_interval.
    eventsInterval: '30s',
    // How often the coverage group (AzureScheduledEventsNodesWithoutAgent and the recording rules
    // it reads) is evaluated: it compares every node with every agent. The interval its alert's
    // `for:` (coverage.for, 15 minutes) needs: it fires 15 to 30 minutes after nodes went without
    // an agent. Empty: Prometheus' evaluation_interval.
    coverageInterval: '15m',
    // Coverage: nodes of a cluster with no working agent, from kube-state-metrics' kube_node_info
    // (by node name where the agent's series carry nodeLabel, by count elsewhere), and without
    // it, targets of the agent's scrape jobs that never were the agent.
    coverage: {
      // Matchers selecting the nodes that should run the agent (Linux nodes: the agent runs on
      // Linux only), e.g. add 'node!~"virtual-node.*"'.
      nodeMatchers: ['os_image!~"Windows.*"'],
      // Label matchers of kube-state-metrics' series, e.g. 'job="kube-state-metrics"'.
      kubeStateMetricsSelector: '',
      'for': '15m',
    },

    // AzureScheduledEventsAgentDown. `for`: how long a target fails its scrapes before it alerts,
    // longer than a clean OS reboot takes (kured, unattended upgrades: a few minutes), which then
    // raises nothing. `flaps`: that many separate failures within `flapWindow` (a crash loop, a
    // scrape that comes and goes) keep it firing between them, rather than firing and resolving
    // once per loop. On Kubernetes (nodeLabel, kube-state-metrics), an agent down on a node that
    // was cordoned (`cordonedMatchers` of kube_node_spec_taint: the taint Kubernetes adds to a
    // cordoned node) within `cordonHold` raises nothing: the node is being drained or rebooted on
    // purpose.
    agentDown: {
      'for': '5m',
      flaps: 3,
      flapWindow: '30m',
      cordonedMatchers: ['key="node.kubernetes.io/unschedulable"'],
      cordonHold: '10m',
    },

    // Shared causes. When at least `minVMs` VMs and more than `fraction` of a cluster's VMs (those
    // seen within vmInfoLookback; with none known, the count alone decides) have the same
    // agent-health condition (AzureScheduledEventsAgentDown, AzureScheduledEventsPollLoopStuck,
    // AzureImdsUnreachable, AzureScheduledEventApprovalsFailing for one event type and reason,
    // AzureVMRebootedUnexpectedly), one alert for the cluster, with the number of VMs, replaces
    // theirs. Notification receivers and the Kubernetes API server
    // are shared by nature: AzureScheduledEventNotificationsFailing and
    // AzureScheduledEventsKubernetesRequestsFailing are always one alert per cluster and receiver
    // or operation.
    rollup: {
      minVMs: 3,
      fraction: 0.1,
    },

    // A Started event older than this is stuck.
    stuckStarted: '30m',
    // A Redeploy announced further ahead than this is a degraded-hardware migration, for agents
    // that do not mark events hardware_failure_predicted themselves.
    redeployDaysAheadSeconds: 86400,
    // The poll loop's heartbeat (azure_scheduled_events_last_poll_timestamp_seconds) older than
    // this: the loop is stuck. A poll lasts at most the IMDS timeout (2 minutes for the first).
    pollStuckSeconds: 180,
    // IMDS without a valid document for this long.
    imdsUnreachableFor: '5m',

    // Where runbook_url points: this prefix followed by the alert name in lower case. Absolute,
    // so that the link works in a pager or a chat message; point it at your own copy of
    // docs/runbook.md to add your own steps.
    runbookUrlBase: 'https://github.com/azure-scheduled-events-exporter/azure-scheduled-events-exporter/blob/main/docs/runbook.md#',

    // Dashboards.
    dashboardTags: ['azure', 'azure-scheduled-events'],
    dashboardTitlePrefix: 'Azure Scheduled Events / ',
    dashboardUids: {
      fleet: 'azure-sched-events-fleet',
      event: 'azure-sched-events-event',
      agent: 'azure-sched-events-agent',
    },
    dashboardRefresh: '1m',
    // How often the dashboards' recording rules (fleet-wide IMDS rates, agents down or blind,
    // lifecycle transitions per cluster and scale set) are evaluated; also the window of the
    // recorded transitions. Empty: Prometheus' evaluation_interval (then set the window yourself).
    dashboardRecordInterval: '5m',
    // How often the fleet's IMDS rates (15-minute rates of every agent's request counters, failures
    // and latency histogram: 8 series an agent while IMDS answers, summed per cluster, job and
    // place) are recorded: the panels that read them move in steps of this much (at most 15m, the
    // rates' window, so that every request is counted). A rate's cost grows little with its
    // window: every 15 minutes costs about a fifth less than every 10 (docs/performance.md).
    // Empty: Prometheus' evaluation_interval.
    dashboardRateInterval: '15m',
    // Two events of one type and description that appear within this window belong to one
    // maintenance wave (Azure gives every host operation its own EventId).
    waveWindow: '10m',
    // Per-agent panels show the agents worst off, this many at each point, rather than one line
    // per agent of the fleet.
    dashboardTopK: 20,
    // The type of the $datasource variable: 'prometheus' (Grafana's Prometheus data source,
    // also Azure Managed Grafana's link to an Azure Monitor workspace) or
    // 'grafana-azureprometheus-datasource' (the Azure Monitor Managed Service for Prometheus
    // data source plugin).
    datasourceType: 'prometheus',
    // Where the dashboards link to docs/dashboards.md (how to load the recording rules): absolute,
    // as a Grafana link must be; point it at your own copy to add your own steps.
    dashboardDocsUrl: 'https://github.com/azure-scheduled-events-exporter/azure-scheduled-events-exporter/blob/main/docs/dashboards.md',
  },
}
