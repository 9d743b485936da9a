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

    // With clusterLabel, the labels that identify one agent, hence one VM. Add a label your
    // scrape configuration sets (e.g. 'node') to carry it onto every per-VM alert.
    vmLabels: ['job', 'instance'],

    // The label of azure_scheduled_events_vm_info that groups VMs into one unit of capacity:
    // a scale set (an AKS node pool). VMs with an empty value are not grouped.
    capacityLabel: 'vm_scale_set_name',
    // What one value of capacityLabel is called in alert texts.
    capacityName: 'scale set',

    // Labels of azure_scheduled_events_vm_info copied onto per-VM alerts when the agent has read
    // instance metadata (the alerts fire without them otherwise).
    vmInfoLabels: ['vm_name', self.capacityLabel],

    // How long a VM's last known azure_scheduled_events_vm_info stays usable after its agent
    // stopped answering (a rebooting VM).
    vmInfoLookback: '1h',

    severities: {
      // Pages at any hour: only capacity at risk.
      page: 'critical',
      // The team's queue: one VM's event or one agent's trouble.
      vm: 'warning',
      // Informational: a Spot eviction (30 s notice, shorter than a page's own delay).
      info: 'info',
    },

    // Event types that take a VM down (Freeze, a pause of seconds, is not one).
    interruptingTypes: ['Reboot', 'Redeploy', 'Preempt', 'Terminate'],
    // Event types that AzureScheduledEventImpactSoon reports (Preempt and Terminate have their
    // own alerts).
    impactSoonTypes: ['Reboot', 'Redeploy'],
    // NotBefore closer than this counts as "soon".
    impactSoonSeconds: 900,
    // How long the last events of a VM whose agent cannot be scraped (it is rebooting) keep
    // AzureScheduledEventImpactSoon firing.
    impactHold: '15m',

    // The capacity page: at least `minVMs` VMs and more than `fraction` of one capacity group
    // (capacityLabel) in one cluster face one of `eventTypes` with NotBefore within
    // impactSoonSeconds, passed, or already Started. Terminate (scale-in, usually wanted) is left out.
    capacity: {
      eventTypes: ['Reboot', 'Redeploy', 'Preempt'],
      minVMs: 2,
      fraction: 0.25,
      'for': '1m',
    },

    // A Started event older than this is stuck.
    stuckStarted: '30m',
    // A Redeploy announced further ahead than this is a degraded-hardware migration.
    redeployDaysAheadSeconds: 86400,
    // The poll loop's heartbeat (azure_scheduled_events_last_poll_timestamp_seconds) older than
    // this: the loop is stuck. A poll lasts at most the IMDS timeout (2 minutes for the first).
    pollStuckSeconds: 180,
    // IMDS without a valid document for this long.
    imdsUnreachableFor: '5m',

    // Where runbook_url points: this prefix followed by the alert name in lower case.
    runbookUrlBase: 'docs/runbook.md#',

    // Dashboards.
    dashboardTags: ['azure', 'azure-scheduled-events'],
    dashboardTitlePrefix: 'Azure Scheduled Events / ',
    dashboardUids: {
      fleet: 'azure-sched-events-fleet',
      event: 'azure-sched-events-event',
      agent: 'azure-sched-events-agent',
    },
    dashboardRefresh: '1m',
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
  },
}
