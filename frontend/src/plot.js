// Bus bandwidth against message size (log2 x axis) with uPlot; series are [[bytes, GB/s], ...].

import { fmtBytes } from "./api.js";

const COLOURS = ["#1f5fbf", "#c8322d", "#1b7f3b", "#e08a00", "#7b4fb0", "#3fa7d6"];

export function busbwPlot(container, series, { width, height = 260 } = {}) {
  const xs = [...new Set(series.flatMap((s) => s.points.map((p) => p[0])))].filter((x) => x > 0).sort((a, b) => a - b);
  const data = [xs];
  for (const s of series) {
    const m = new Map(s.points);
    data.push(xs.map((x) => (m.has(x) ? m.get(x) : null)));
  }
  const opts = {
    width: width || Math.max(320, container.clientWidth || 600),
    height,
    scales: { x: { distr: 3, log: 2 }, y: { range: (u, min, max) => [0, Math.max(1, max * 1.1)] } },
    axes: [
      { label: "message size", values: (u, vals) => vals.map((v) => (v == null ? "" : fmtBytes(v))), space: 56, size: 40 },
      { label: "busbw (GB/s)", size: 56 },
    ],
    series: [
      { label: "size", value: (u, v) => (v == null ? "–" : fmtBytes(v)) },
      ...series.map((s, i) => ({
        label: s.label,
        stroke: COLOURS[i % COLOURS.length],
        width: 2,
        dash: s.dashed ? [6, 4] : undefined,
        points: { show: true, size: 5 },
        spanGaps: true,
        value: (u, v) => (v == null ? "–" : `${v.toFixed(1)} GB/s`),
      })),
    ],
  };
  return new window.uPlot(opts, data, container);
}
