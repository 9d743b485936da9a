// deploy/azure-monitor/ as `jsonnet -S -m <repository> mixin/render-azure-monitor.jsonnet` writes it
// (scripts/render-mixin.sh): the recording and alert rules of the mixin as Azure Monitor managed
// Prometheus rule groups (Microsoft.AlertsManagement/prometheusRuleGroups), one resource per rule
// group, as an ARM template and as Bicep, both from the same data. Azure Monitor has no
// Alertmanager: each alert rule carries an integer severity (0 critical to 4 verbose) and the
// action group to notify, one parameter per severity (critical, warning, info; empty: no action),
// so that only the page reaches the pager. `config` (a Jsonnet object, --tla-code) is merged into
// the config.
function(config={})
  // The events' group runs at the `interval` parameter (PT1M at least: Azure runs no group more
  // often), whatever eventsInterval says.
  local mixin = (import 'mixin.libsonnet') + { _config+:: config + { eventsInterval: '' } };
  local c = mixin._config;
  local apiVersion = '2023-03-01';
  local type = 'Microsoft.AlertsManagement/prometheusRuleGroups';
  // The mixin's severities as Azure Monitor's: 0 critical, 1 error, 2 warning, 3 informational,
  // 4 verbose. A severity not listed here is verbose.
  local azureSeverity = { critical: 0, 'error': 1, warning: 2, info: 3, informational: 3 };
  local severity(rule) =
    local labels = if std.objectHas(rule, 'labels') then rule.labels else {};
    local s = if std.objectHas(labels, 'severity') then labels.severity else '';
    if std.objectHas(azureSeverity, s) then azureSeverity[s] else 4;
  // The action group parameter of each Azure severity: 0 the page, 1 and 2 the team's queue, 3
  // and 4 informational.
  local actionGroup(rule) =
    local s = severity(rule);
    if s == 0 then 'criticalActionGroupId' else if s <= 2 then 'warningActionGroupId' else 'infoActionGroupId';
  // A Prometheus duration ('1m', '90s', '1h30m', '0s') as ISO 8601 ('PT1M').
  local iso(duration) =
    local units = { d: 'D', h: 'H', m: 'M', s: 'S' };
    local parts = std.foldl(
      function(state, ch)
        if std.objectHas(units, ch) then { out: state.out + [[state.num, units[ch]]], num: '' }
        else { out: state.out, num: state.num + ch },
      std.stringChars(duration),
      { out: [], num: '' },
    ).out;
    local days = [p for p in parts if p[1] == 'D'];
    local time = [p for p in parts if p[1] != 'D' && std.parseInt(p[0]) > 0];
    'P' + std.join('', [p[0] + p[1] for p in days])
    + (if time == [] && days == [] then 'T0S' else if time == [] then '' else 'T' + std.join('', [p[0] + p[1] for p in time]));
  local groups =
    (if std.objectHasAll(mixin, 'prometheusRules') then mixin.prometheusRules.groups else [])
    + mixin.prometheusAlerts.groups;
  // Expressions end with a newline in the rule files; Azure keeps them as given.
  local trim(s) = if std.endsWith(s, '\n') then std.substr(s, 0, std.length(s) - 1) else s;

  // A string ARM would read as an expression ('[...') is escaped by doubling its bracket.
  local armLiteral(s) = if std.startsWith(s, '[') then '[' + s else s;
  // Each rule as Azure Monitor wants it; `actions(parameter)` is the list of action groups to
  // notify in the output's own syntax, none when the parameter is empty; `text` maps the rule's own
  // strings into it.
  local rule(r, actions, text=function(s) s) =
    if std.objectHas(r, 'record') then {
      record: r.record,
      expression: text(trim(r.expr)),
      enabled: true,
    } + (if std.objectHas(r, 'labels') then { labels: { [k]: text(r.labels[k]) for k in std.objectFields(r.labels) } } else {})
    else {
      alert: r.alert,
      expression: text(trim(r.expr)),
      enabled: true,
      severity: severity(r),
      resolveConfiguration: { autoResolved: true, timeToResolve: 'PT10M' },
      actions: actions(actionGroup(r)),
    } + (if std.objectHas(r, 'for') then { 'for': iso(r['for']) } else {})
    + (if std.objectHas(r, 'labels') then { labels: { [k]: text(r.labels[k]) for k in std.objectFields(r.labels) } } else {})
    + (
      // An alert's annotations for Azure Monitor, which runs no query in them, where they differ.
      local annotations = if std.objectHasAll(r, 'azureAnnotations') then r.azureAnnotations else if std.objectHas(r, 'annotations') then r.annotations else null;
      if annotations == null then {} else { annotations: { [k]: text(annotations[k]) for k in std.objectFields(annotations) } }
    );
  local description(group) =
    'azure-scheduled-events-exporter: rule group %s (generated from the monitoring mixin).' % group.name;

  // ARM: parameters and expressions in ARM's bracket syntax.
  local armGroup(group) = {
    type: type,
    apiVersion: apiVersion,
    name: "[concat(parameters('ruleGroupPrefix'), '%s')]" % group.name,
    location: "[parameters('location')]",
    properties: {
      description: description(group),
      scopes: "[if(empty(parameters('clusterResourceId')), createArray(parameters('azureMonitorWorkspaceId')), createArray(parameters('azureMonitorWorkspaceId'), parameters('clusterResourceId')))]",
      clusterName: "[if(empty(parameters('clusterName')), null(), parameters('clusterName'))]",
      enabled: true,
      interval: if std.objectHas(group, 'interval') then iso(group.interval) else "[parameters('interval')]",
      rules: [
        rule(r, function(p) "[if(empty(parameters('%s')), createArray(), createArray(createObject('actionGroupId', parameters('%s'))))]" % [p, p], armLiteral)
        for r in group.rules
      ],
    },
  };
  local parameters = {
    azureMonitorWorkspaceId: { type: 'string', description: 'Resource ID of the Azure Monitor workspace that holds the metrics.' },
    criticalActionGroupId: { type: 'string', default: '', description: 'Resource ID of the action group that critical alerts notify (Azure severity 0): the page, AzureScheduledEventsCapacityAtRisk, alone. Point it at the pager. Empty: no action.' },
    warningActionGroupId: { type: 'string', default: '', description: 'Resource ID of the action group that warning alerts notify (Azure severity 2): a VM\'s event, an event stuck in Started, agent health, Spot waves, nodes without an agent. A ticket queue or a chat channel, not the pager. Empty: no action.' },
    infoActionGroupId: { type: 'string', default: '', description: 'Resource ID of the action group that info alerts notify (Azure severity 3): Spot evictions and scale sets deleting VMs. A chat channel, or empty: no action.' },
    clusterName: { type: 'string', default: '', description: 'Evaluate the rules on this cluster only (the cluster label Azure Monitor adds); empty: every cluster of the workspace, kept apart by the rules themselves.' },
    clusterResourceId: { type: 'string', default: '', description: 'Resource ID of the AKS cluster, added to the scopes (optional).' },
    location: { type: 'string', default: '[resourceGroup().location]', description: 'Region of the rule groups: the Azure Monitor workspace\'s.' },
    ruleGroupPrefix: { type: 'string', default: '', description: 'Prefix of the rule group names, e.g. the cluster name when each cluster has its own groups.' },
    interval: { type: 'string', default: 'PT1M', description: 'How often the rule groups of events and the capacity page are evaluated (ISO 8601, PT1M to PT15M); the groups with an interval of their own in the mixin (targets, agent health, coverage, dashboards) keep it.' },
  };
  local arm = {
    '$schema': 'https://schema.management.azure.com/schemas/2019-04-01/deploymentTemplate.json#',
    contentVersion: '1.0.0.0',
    metadata: { description: 'Generated from mixin/ by scripts/render-mixin.sh: edit the mixin, not this file.' },
    parameters: {
      [name]: { type: parameters[name].type, metadata: { description: parameters[name].description } }
              + (if std.objectHas(parameters[name], 'default') then { defaultValue: parameters[name].default } else {})
      for name in std.objectFields(parameters)
    },
    resources: [armGroup(g) for g in groups],
  };

  // Bicep: the same data as Bicep literals.
  local bicepString(s) =
    "'" + std.join('', [
      if ch == '\\' then '\\\\'
      else if ch == "'" then "\\'"
      else if ch == '\n' then '\\n'
      else if ch == '\r' then '\\r'
      else if ch == '\t' then '\\t'
      else if ch == '$' then '\\$'
      else ch
      for ch in std.stringChars(s)
    ]) + "'";
  local bicep(value, indent) =
    if std.isString(value) then bicepString(value)
    else if std.isBoolean(value) then (if value then 'true' else 'false')
    else if std.isNumber(value) then std.toString(value)
    else if std.isArray(value) then
      if value == [] then '[]'
      else '[\n' + std.join('', [indent + '  ' + bicep(v, indent + '  ') + '\n' for v in value]) + indent + ']'
    else if std.isObject(value) then
      if std.objectFields(value) == [] then '{}'
      else '{\n' + std.join('', [
        indent + '  ' + bicepString(k) + ': ' + bicep(value[k], indent + '  ') + '\n'
        for k in std.objectFields(value)
      ]) + indent + '}'
    else error 'no Bicep literal for %s' % std.toString(value);
  // Raw Bicep expressions, kept apart from strings by a marker object; `expression` is a string, or
  // a function of the indentation for one of several lines.
  local raw(expression) = { __bicep__: expression };
  local bicepValue(value, indent) =
    if std.isObject(value) && std.objectHas(value, '__bicep__') then
      if std.isFunction(value.__bicep__) then value.__bicep__(indent) else value.__bicep__
    else if std.isArray(value) then
      if value == [] then '[]'
      else '[\n' + std.join('', [indent + '  ' + bicepValue(v, indent + '  ') + '\n' for v in value]) + indent + ']'
    else if std.isObject(value) then
      if std.objectFields(value) == [] then '{}'
      else '{\n' + std.join('', [
        indent + '  ' + (if std.length(std.findSubstr('_', k)) == 0 && std.length(std.findSubstr('-', k)) == 0 && !std.member(['for', 'if', 'resource', 'param', 'var', 'output', 'module'], k) then k else bicepString(k)) + ': ' + bicepValue(value[k], indent + '  ') + '\n'
        for k in std.objectFields(value)
      ]) + indent + '}'
    else bicep(value, indent);
  local bicepGroup(i, group) =
    "resource ruleGroup%d '%s@%s' = {\n  name: '${ruleGroupPrefix}%s'\n  location: location\n  properties: %s\n}\n" % [
      i,
      type,
      apiVersion,
      group.name,
      bicepValue({
        description: description(group),
        scopes: raw('empty(clusterResourceId) ? [azureMonitorWorkspaceId] : [azureMonitorWorkspaceId, clusterResourceId]'),
        clusterName: raw('empty(clusterName) ? null : clusterName'),
        enabled: true,
        interval: if std.objectHas(group, 'interval') then iso(group.interval) else raw('interval'),
        rules: [
          rule(r, function(p) raw(function(indent) 'empty(%(p)s) ? [] : [\n%(i)s  {\n%(i)s    actionGroupId: %(p)s\n%(i)s  }\n%(i)s]' % { p: p, i: indent }))
          for r in group.rules
        ],
      }, '  '),
    ];
  local bicepParam(name) =
    local p = parameters[name];
    "@description(%s)\nparam %s %s%s\n" % [
      bicepString(p.description),
      name,
      p.type,
      if !std.objectHas(p, 'default') then ''
      else if p.default == '[resourceGroup().location]' then ' = resourceGroup().location'
      else ' = ' + bicepString(p.default),
    ];
  {
    'deploy/azure-monitor/prometheus-rule-groups.json': std.manifestJsonEx(arm, '  ') + '\n',
    'deploy/azure-monitor/prometheus-rule-groups.bicep':
      '// Generated from mixin/ by scripts/render-mixin.sh: edit the mixin, not this file.\n'
      + '// The rules of alerts/ as Azure Monitor managed Prometheus rule groups, one resource per group.\n\n'
      + std.join('\n', [bicepParam(name) for name in std.objectFields(parameters)])
      + '\n'
      + std.join('\n', [bicepGroup(i, groups[i]) for i in std.range(0, std.length(groups) - 1)]),
  }
