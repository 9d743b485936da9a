// Small builders for the Grafana JSON the dashboards use (schema version 39), in the shapes
// tests/grafana/dashboard.ts checks against @grafana/schema.
{
  local ds = { type: 'prometheus', uid: '${datasource}' },

  datasourceVariable(name, label, type):: {
    type: 'datasource',
    name: name,
    label: label,
    query: type,
    refresh: 1,
    regex: '',
    hide: 0,
    includeAll: false,
    multi: false,
  },

  // A query variable; `all` offers All (allValue .*: every value, and series without the label).
  queryVariable(name, label, query, all=true, hide=0, regex='', sort=1):: {
    type: 'query',
    name: name,
    label: label,
    datasource: ds,
    query: query,
    refresh: 2,
    regex: regex,
    sort: sort,
    hide: hide,
    multi: all,
    includeAll: all,
  } + (if all then { allValue: '.*' } else {}),

  target(expr, refId='A', legend=null, instant=false, table=false):: {
    datasource: ds,
    refId: refId,
    expr: expr,
    range: !instant,
    instant: instant,
  } + (if legend != null then { legendFormat: legend } else {})
    + (if table then { format: 'table' } else {}),

  annotation(name, expr, title, text, color):: {
    name: name,
    datasource: ds,
    enable: true,
    iconColor: color,
    target: { refId: 'Anno', expr: expr },
    step: '1m',
    titleFormat: title,
    textFormat: text,
    tagKeys: '',
    useValueForTime: false,
  },

  row(title):: { type: 'row', title: title, collapsed: false, panels: [], h:: 1, w:: 24 },

  local thresholds(steps) = {
    mode: 'absolute',
    steps: [{ color: steps[0], value: null }] + [{ color: s[1], value: s[0] } for s in steps[1:]],
  },

  stat(title, description, expr, unit='none', steps=['green', [1, 'orange']], textMode='auto', legend=null, w=4, h=4, noValue='0'):: {
    type: 'stat',
    title: title,
    description: description,
    datasource: ds,
    targets: [$.target(expr, legend=legend, instant=true)],
    fieldConfig: {
      defaults: {
        unit: unit,
        noValue: noValue,
        color: { mode: 'thresholds' },
        thresholds: thresholds(steps),
      },
      overrides: [],
    },
    options: {
      reduceOptions: { calcs: ['lastNotNull'], fields: '', values: false },
      orientation: 'auto',
      textMode: textMode,
      colorMode: 'value',
      graphMode: 'none',
      justifyMode: 'auto',
      wideLayout: true,
      showPercentChange: false,
      percentChangeColorMode: 'standard',
    },
    w:: w,
    h:: h,
  },

  timeseries(title, description, targets, unit='none', stack=false, fill=10, w=12, h=8, min=0):: {
    type: 'timeseries',
    title: title,
    description: description,
    datasource: ds,
    targets: targets,
    fieldConfig: {
      defaults: {
        unit: unit,
        custom: {
          drawStyle: 'line',
          lineWidth: 1,
          fillOpacity: fill,
          showPoints: 'never',
          spanNulls: false,
          stacking: { mode: if stack then 'normal' else 'none', group: 'A' },
        },
        color: { mode: 'palette-classic' },
      } + (if min != null then { min: min } else {}),
      overrides: [],
    },
    options: {
      legend: { calcs: [], displayMode: 'list', placement: 'bottom', showLegend: true },
      tooltip: { mode: 'multi', sort: 'desc' },
    },
    w:: w,
    h:: h,
  },

  bargauge(title, description, expr, legend, w=8, h=8):: {
    type: 'bargauge',
    title: title,
    description: description,
    datasource: ds,
    targets: [$.target(expr, legend=legend, instant=true)],
    fieldConfig: {
      defaults: {
        unit: 'none',
        min: 0,
        color: { mode: 'thresholds' },
        thresholds: thresholds(['blue']),
      },
      overrides: [],
    },
    options: {
      displayMode: 'basic',
      orientation: 'horizontal',
      reduceOptions: { calcs: ['lastNotNull'], fields: '', values: false },
      showUnfilled: true,
      valueMode: 'color',
      namePlacement: 'auto',
      sizing: 'auto',
      minVizHeight: 16,
      minVizWidth: 8,
      maxVizHeight: 300,
      legend: { calcs: [], displayMode: 'list', placement: 'bottom', showLegend: false },
    },
    w:: w,
    h:: h,
  },

  // A state timeline: one row per series, values mapped to text and colours.
  stateTimeline(title, description, targets, mappings, w=24, h=8):: {
    type: 'state-timeline',
    title: title,
    description: description,
    datasource: ds,
    targets: targets,
    fieldConfig: {
      defaults: {
        custom: { fillOpacity: 80, lineWidth: 0 },
        color: { mode: 'thresholds' },
        thresholds: thresholds(['text']),
        mappings: [{
          type: 'value',
          options: {
            [std.toString(m[0])]: { text: m[1], color: m[2], index: i }
            for i in std.range(0, std.length(mappings) - 1)
            for m in [mappings[i]]
          },
        }],
      },
      overrides: [],
    },
    options: {
      rowHeight: 0.9,
      showValue: 'auto',
      mergeValues: true,
      alignValue: 'left',
      legend: { calcs: [], displayMode: 'list', placement: 'bottom', showLegend: true },
      tooltip: { mode: 'single', sort: 'none' },
    },
    w:: w,
    h:: h,
  },

  // A table merging instant table queries: `columns` is a list of [field, header] in display
  // order; fields not listed are hidden. `overrides` by header.
  table(title, description, targets, allColumns, overrides=[], sortBy=null, w=24, h=10)::
    // A field listed twice (capacityLabel may be one of the other columns) shows once.
    local columns = std.foldl(
      function(kept, column) if std.member([k[0] for k in kept], column[0]) then kept else kept + [column],
      allColumns,
      [],
    );
    {
    type: 'table',
    title: title,
    description: description,
    datasource: ds,
    targets: targets,
    transformations: [
      { id: 'merge', options: {} },
      {
        id: 'organize',
        options: {
          excludeByName: { Time: true, __name__: true },
          indexByName: { [columns[i][0]]: i for i in std.range(0, std.length(columns) - 1) },
          renameByName: { [c[0]]: c[1] for c in columns if c[1] != c[0] },
        },
      },
      {
        id: 'filterFieldsByName',
        options: { include: { names: [c[1] for c in columns] } },
      },
    ],
    fieldConfig: {
      defaults: {
        custom: { align: 'auto', cellOptions: { type: 'auto' }, inspect: false },
        color: { mode: 'thresholds' },
        thresholds: thresholds(['text']),
      },
      overrides: [
        { matcher: { id: 'byName', options: o[0] }, properties: o[1] }
        for o in overrides
      ],
    },
    options: {
      showHeader: true,
      cellHeight: 'sm',
      frameIndex: 0,
    } + (if sortBy != null then { sortBy: [{ displayName: sortBy[0], desc: sortBy[1] }] } else {}),
    w:: w,
    h:: h,
  },

  unit(u):: [{ id: 'unit', value: u }],
  link(title, url, blank=false):: [{ id: 'links', value: [{ title: title, url: url, targetBlank: blank }] }],

  // Grafana Explore on ${tempo} for a trace id (a variable reference).
  traceUrl(traceId)::
    local encode(text) = std.foldl(
      function(t, pair) std.strReplace(t, pair[0], pair[1]),
      [['%', '%25'], ['"', '%22'], ['{', '%7B'], ['}', '%7D'], [':', '%3A'], [',', '%2C'], ['[', '%5B'], [']', '%5D']],
      text,
    );
    local pane = encode(std.manifestJsonMinified({
      trace: {
        datasource: 'TEMPO',
        queries: [{ refId: 'A', datasource: { type: 'tempo', uid: 'TEMPO' }, queryType: 'traceql', query: 'TRACE' }],
        range: { from: 'now-7d', to: 'now' },
      },
    }));
    '/explore?schemaVersion=1&panes=' + std.strReplace(std.strReplace(pane, 'TEMPO', '${tempo}'), 'TRACE', traceId),

  // Lays panels out left to right, wrapping at 24 columns, and numbers them.
  layout(panels)::
    local step(state, p) =
      local wrap = state.x + p.w > 24 || p.type == 'row';
      local x = if wrap then 0 else state.x;
      local y = if wrap then state.y + state.h else state.y;
      {
        x: x + p.w,
        y: y,
        h: if wrap then p.h else std.max(state.h, p.h),
        out: state.out + [p { id: std.length(state.out) + 1, gridPos: { h: p.h, w: p.w, x: x, y: y } }],
      };
    std.foldl(step, panels, { x: 0, y: 0, h: 0, out: [] }).out,

  dashboard(config, uid, title, description, variables, panels, annotations=[], links=[]):: {
    id: null,
    uid: uid,
    title: config.dashboardTitlePrefix + title,
    description: description,
    tags: config.dashboardTags,
    editable: true,
    graphTooltip: 1,
    schemaVersion: 39,
    version: 1,
    refresh: config.dashboardRefresh,
    timezone: 'browser',
    time: { from: 'now-6h', to: 'now' },
    timepicker: {},
    links: [{
      title: 'Azure Scheduled Events',
      type: 'dashboards',
      tags: [config.dashboardTags[std.length(config.dashboardTags) - 1]],
      asDropdown: true,
      includeVars: true,
      keepTime: true,
      icon: 'external link',
      targetBlank: false,
      tooltip: '',
      url: '',
    }] + links,
    templating: { list: variables },
    annotations: { list: annotations },
    panels: $.layout(panels),
  },
}
