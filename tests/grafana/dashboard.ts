// The shape every file in dashboards/ must have, from Grafana's own schema (@grafana/schema).
//
// generated/<name>.ts holds one dashboard's JSON as `export const dashboard: CheckedDashboard = ...`
// (written by tests/suite/dashboards.rs before it runs tsc), so tsc checks the literal: unknown fields are
// errors, required fields must be there, and each panel's options and field config must match its
// panel type's own schema. Panel types the dashboards do not use are not listed: a new one is an
// error until it is added here.
import type { AnnotationQuery, Dashboard, Panel, RowPanel } from '@grafana/schema';
import type * as BarGauge from '@grafana/schema/dist/esm/raw/composable/bargauge/panelcfg/x/BarGaugePanelCfg_types.gen';
import type * as StateTimeline from '@grafana/schema/dist/esm/raw/composable/statetimeline/panelcfg/x/StateTimelinePanelCfg_types.gen';
import type * as Stat from '@grafana/schema/dist/esm/raw/composable/stat/panelcfg/x/StatPanelCfg_types.gen';
import type * as Table from '@grafana/schema/dist/esm/raw/composable/table/panelcfg/x/TablePanelCfg_types.gen';
import type * as TimeSeries from '@grafana/schema/dist/esm/raw/composable/timeseries/panelcfg/x/TimeSeriesPanelCfg_types.gen';

/** What JSON can say for T: the schema's string enums become the union of their values. */
type Json<T> = T extends string
  ? `${T}`
  : T extends number | boolean | null | undefined
    ? T
    : T extends ReadonlyArray<infer U>
      ? Array<Json<U>>
      : T extends object
        ? { [K in keyof T]: Json<T[K]> }
        : T;

/** A panel of type K whose options and field config are checked against that panel's schema. */
type Typed<K extends string, Options, FieldConfig> = Json<
  Omit<Panel<Options, FieldConfig>, 'type' | 'options'> & { type: K; options: Options }
>;

export type CheckedPanel =
  | Typed<'bargauge', BarGauge.Options, Record<string, never>>
  | Typed<'stat', Stat.Options, Record<string, never>>
  | Typed<'state-timeline', StateTimeline.Options, StateTimeline.FieldConfig>
  | Typed<'table', Table.Options, Table.FieldConfig>
  | Typed<'timeseries', TimeSeries.Options, TimeSeries.FieldConfig>;

export type CheckedRow = Json<Omit<RowPanel, 'panels'>> & { panels: CheckedPanel[] };

/**
 * An annotation from Prometheus: Grafana's AnnotationQuery with the query in `target` (the schema's
 * AnnotationTarget only describes Grafana's own annotations) and the Prometheus data source's
 * options for turning series into annotations.
 */
export type CheckedAnnotation = Json<Omit<AnnotationQuery, 'target'>> & {
  target: { refId: string; expr: string };
  step: string;
  titleFormat: string;
  textFormat: string;
  tagKeys: string;
  useValueForTime: boolean;
};

export type CheckedDashboard = Json<Omit<Dashboard, 'panels' | 'annotations'>> & {
  panels: Array<CheckedPanel | CheckedRow>;
  annotations: { list: CheckedAnnotation[] };
};
