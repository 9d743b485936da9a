// dashboards/ as `jsonnet -m <repository> mixin/render-dashboards.jsonnet` writes it
// (scripts/render-mixin.sh). `config` (a Jsonnet object, --tla-code) is merged into the config.
function(config={})
  local mixin = (import 'mixin.libsonnet') + { _config+:: config };
  {
    ['dashboards/' + name]: mixin.grafanaDashboards[name]
    for name in std.objectFields(mixin.grafanaDashboards)
  }
