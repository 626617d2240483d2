// Bus bandwidth against message size (log2 x axis) with uPlot; series are
// {label, kind: "modelled" | "measured", dashed, points: [[bytes, GB/s], ...]}.

import { fmtBytes } from "./api.js";

const COLOURS = ["#1f5fbf", "#c8322d", "#1b7f3b", "#e08a00", "#7b4fb0", "#3fa7d6"];

// Powers of two between min and max, every 2nd/4th/... one so the labels do not collide:
// "1 KiB", "1 MiB", "64 MiB" rather than 31 crowded ticks.
function sizeSplits(u, axisIdx, min, max) {
  const lo = Math.ceil(Math.log2(Math.max(1, min)));
  const hi = Math.floor(Math.log2(max));
  const room = Math.max(2, Math.floor(u.bbox.width / devicePixelRatio / 60));
  // Steps of 5 and 10 land on 1 KiB, 1 MiB, 1 GiB (and 32 of each): sizes people know.
  const step = [1, 2, 5, 10, 20].find((st) => (hi - lo) / st <= room) || 20;
  const out = [];
  for (let k = lo; k <= hi; k += 1) if (k % step === 0) out.push(2 ** k);
  return out;
}

export function busbwPlot(container, series, { width, height = 280 } = {}) {
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
      { label: "message size (log scale)", splits: sizeSplits, filter: (u, splits) => splits, values: (u, vals) => vals.map((v) => (v == null ? "" : fmtBytes(v))), size: 44 },
      { label: "bus bandwidth (GB/s)", size: 56 },
    ],
    legend: { live: true },
    series: [
      { label: "size", value: (u, v) => (v == null ? "–" : fmtBytes(v)) },
      ...series.map((s, i) => ({
        // Modelled curves are dashed and drawn without points, measured ones solid with
        // points, and each label says which it is: colour is not the only difference.
        label: s.label,
        stroke: COLOURS[i % COLOURS.length],
        width: 2,
        dash: s.dashed || s.kind === "modelled" ? [8, 5] : undefined,
        points: { show: s.kind !== "modelled", size: 5 },
        spanGaps: true,
        value: (u, v) => (v == null ? "–" : `${v.toFixed(1)} GB/s`),
      })),
    ],
  };
  return new window.uPlot(opts, data, container);
}
