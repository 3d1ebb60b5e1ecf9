// The overview's throughput chart: pushed, completed and failed per second, derived
// from the broker's running totals in successive stats:snapshot frames. The history
// lives in this module (not the component) so leaving and reopening the overview
// keeps the last hour.
import uPlot from "./vendor/uPlot.esm.js";
import { html, useEffect, useRef } from "./ui.js";

const KEEP_MS = 60 * 60 * 1000;
const history = { x: [], pushed: [], completed: [], failed: [] };
let previous = null; // {ts, totalPushed, totalCompleted, totalFailed}
const watchers = new Set();

// Feed one set of running totals taken at `ts` (ms); a rate point is added once there
// is a previous sample to subtract (a broker restart, totals going down, is skipped).
export function addTotals(ts, totals) {
  const sample = {
    ts,
    totalPushed: Number(totals.totalPushed) || 0,
    totalCompleted: Number(totals.totalCompleted) || 0,
    totalFailed: Number(totals.totalFailed) || 0,
  };
  const last = previous;
  previous = sample;
  if (!last || ts <= last.ts) return;
  const seconds = (ts - last.ts) / 1000;
  const rate = (key) => Math.max(0, (sample[key] - last[key]) / seconds);
  if (sample.totalPushed < last.totalPushed) return;
  history.x.push(ts / 1000);
  history.pushed.push(rate("totalPushed"));
  history.completed.push(rate("totalCompleted"));
  history.failed.push(rate("totalFailed"));
  while (history.x.length && history.x[0] < (ts - KEEP_MS) / 1000) {
    for (const key of Object.keys(history)) history[key].shift();
  }
  for (const watcher of watchers) watcher();
}

// The broker's own history (DashboardOverview's throughputHistory: the totals every
// 10 s for the last hour), fed once, before any live sample: the chart opens with the
// last hour rather than empty.
export function seedHistory(points) {
  if (previous !== null) return;
  for (const point of points) {
    addTotals(point.t, { totalPushed: point.pushed, totalCompleted: point.completed,
                         totalFailed: point.failed });
  }
}

export function pointCount() {
  return history.x.length;
}

function chartData() {
  return [history.x, history.pushed, history.completed, history.failed];
}

export function ThroughputChart() {
  const box = useRef(null);
  useEffect(() => {
    const width = () => Math.max(300, box.current.clientWidth - 8);
    const chart = new uPlot({
      width: width(),
      height: 220,
      scales: {
        // At least a minute wide, so the first points do not stretch over years.
        x: { time: true, range: (u, min, max) => [Math.min(min ?? 0, (max ?? 0) - 60), max ?? 0] },
        y: { range: (u, min, max) => [0, Math.max(1, max)] },
      },
      series: [
        {},
        { label: "pushed/s", stroke: "#2f6fdd", width: 2 },
        { label: "completed/s", stroke: "#238a4b", width: 2 },
        { label: "failed/s", stroke: "#c23b3b", width: 2 },
      ],
      axes: [{}, { label: "jobs/s" }],
    }, chartData(), box.current);
    const redraw = () => chart.setData(chartData());
    const resize = () => chart.setSize({ width: width(), height: 220 });
    watchers.add(redraw);
    window.addEventListener("resize", resize);
    return () => {
      watchers.delete(redraw);
      window.removeEventListener("resize", resize);
      chart.destroy();
    };
  }, []);
  return html`<div ref=${box} data-testid="throughput-chart"></div>`;
}
