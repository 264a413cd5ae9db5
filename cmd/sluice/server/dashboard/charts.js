// Time charts on a canvas: a time axis (the last state.range), a value
// axis from 0, lines (an area under those with fill), and a tooltip with
// the values at the time under the pointer. No dependencies.

import { el, fmt } from "./core.js";

const SERIES_MS = 2000; // the charts' rates: growth over 2 seconds (or the interval between points)
const GAP_MS = 30000;   // a line breaks where no point came for this long
const PAD = { left: 38, right: 8, top: 6, bottom: 16 };

// rateSeries turns a group's history into per-second rates of field, each
// over the SERIES_MS before the point (the interval between points if
// longer), so that the line does not depend on how often the status comes.
export function rateSeries(h, field) {
  const out = [];
  let j = 0;
  for (let i = 1; i < h.length; i++) {
    while (j + 1 < i && h[i].t - h[j + 1].t >= SERIES_MS) j++;
    const dt = (h[i].t - h[j].t) / 1000;
    out.push({ t: h[i].t, v: dt > 0 ? Math.max(0, (h[i][field] - h[j][field]) / dt) : 0 });
  }
  return out;
}

export const series = (h, field) => h.map((p) => ({ t: p.t, v: p[field] }));

// niceMax rounds max up to 1, 2 or 5 times a power of ten.
function niceMax(max) {
  if (max <= 1) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(max)));
  for (const m of [1, 2, 5, 10]) if (m * p >= max) return m * p;
  return 10 * p;
}

const TIME_STEPS = [10e3, 30e3, 60e3, 120e3, 300e3, 600e3, 900e3, 1800e3];

function clock(t) {
  const d = new Date(t);
  return String(d.getHours()).padStart(2, "0") + ":" + String(d.getMinutes()).padStart(2, "0") +
    (d.getSeconds() ? ":" + String(d.getSeconds()).padStart(2, "0") : "");
}

let hover = null; // {key, x, clientX, clientY}: the pointer over a chart
let tip = null;   // the tooltip element (one for the page)

// chart makes a chart's element: a title, the canvas and its key (which
// chart the pointer is over survives the canvas being drawn anew).
export function chart(key, title) {
  const canvas = el("canvas", { "data-chart": key });
  const root = el("div", { class: "chart" }, el("div", { class: "label" }, title), canvas);
  const move = (ev) => {
    const r = canvas.getBoundingClientRect();
    hover = { key, x: ev.clientX - r.left, clientX: ev.clientX, clientY: ev.clientY };
    if (canvas._draw) drawChart(canvas, canvas._draw.lines, canvas._draw.range);
  };
  canvas.addEventListener("mousemove", move);
  canvas.addEventListener("mouseleave", () => {
    if (hover && hover.key === key) hover = null;
    if (tip) tip.hidden = true;
    if (canvas._draw) drawChart(canvas, canvas._draw.lines, canvas._draw.range);
  });
  return { root, canvas };
}

// drawChart draws lines ({name, color, fill, points: [{t, v}]}) over the
// last range milliseconds, with axes, and the tooltip if the pointer is
// over this chart.
export function drawChart(canvas, lines, range) {
  canvas._draw = { lines, range };
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 300, hgt = canvas.clientHeight || 90;
  canvas.width = w * dpr;
  canvas.height = hgt * dpr;
  const ctx = canvas.getContext("2d");
  ctx.scale(dpr, dpr);
  ctx.clearRect(0, 0, w, hgt);
  const to = Date.now(), from = to - range;
  const pw = w - PAD.left - PAD.right, ph = hgt - PAD.top - PAD.bottom;
  let max = 0;
  for (const l of lines) for (const p of l.points) if (p.t >= from && p.v > max) max = p.v;
  const top = niceMax(max);
  const X = (t) => PAD.left + ((t - from) / range) * pw;
  const Y = (v) => PAD.top + ph - (v / top) * ph;

  // Axes: three values, and times at a round step.
  ctx.font = "10px ui-sans-serif, system-ui, sans-serif";
  ctx.fillStyle = "#7d8b9a";
  ctx.strokeStyle = "#263140";
  ctx.lineWidth = 1;
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  for (const v of [0, top / 2, top]) {
    const y = Math.round(Y(v)) + 0.5;
    ctx.beginPath(); ctx.moveTo(PAD.left, y); ctx.lineTo(w - PAD.right, y); ctx.stroke();
    ctx.fillText(fmt(v), PAD.left - 4, y);
  }
  const step = TIME_STEPS.find((s) => (range / s) * 48 <= pw) || TIME_STEPS[TIME_STEPS.length - 1];
  ctx.textAlign = "center";
  ctx.textBaseline = "top";
  for (let t = Math.ceil(from / step) * step; t <= to; t += step) {
    const x = Math.round(X(t)) + 0.5;
    ctx.beginPath(); ctx.moveTo(x, PAD.top + ph); ctx.lineTo(x, PAD.top + ph + 3); ctx.stroke();
    if (x > PAD.left + 14 && x < w - 14) ctx.fillText(clock(t), x, PAD.top + ph + 4);
  }

  // The lines, clipped to the plot.
  ctx.save();
  ctx.beginPath(); ctx.rect(PAD.left, PAD.top - 1, pw, ph + 2); ctx.clip();
  for (const l of lines) {
    const pts = l.points.filter((p, i, a) => p.t >= from || (a[i + 1] && a[i + 1].t >= from));
    if (pts.length < 2) continue;
    ctx.beginPath();
    let start = 0;
    pts.forEach((p, i) => {
      const x = X(p.t), y = Y(p.v);
      if (i === 0 || p.t - pts[i - 1].t > GAP_MS) { ctx.moveTo(x, y); start = i; } else ctx.lineTo(x, y);
    });
    ctx.strokeStyle = l.color;
    ctx.lineWidth = 1.6;
    ctx.stroke();
    if (l.fill) {
      ctx.lineTo(X(pts[pts.length - 1].t), PAD.top + ph);
      ctx.lineTo(X(pts[start].t), PAD.top + ph);
      ctx.closePath();
      ctx.globalAlpha = 0.18;
      ctx.fillStyle = l.color;
      ctx.fill();
      ctx.globalAlpha = 1;
    }
  }
  ctx.restore();
  if (hover && hover.key === canvas.dataset.chart && hover.x >= PAD.left && hover.x <= w - PAD.right) {
    drawHover(ctx, lines, from + ((hover.x - PAD.left) / pw) * range, X, Y, ph);
  }
}

// drawHover marks the time under the pointer and fills the tooltip with
// each line's value nearest to it.
function drawHover(ctx, lines, t, X, Y, ph) {
  const rows = [];
  let at = null;
  for (const l of lines) {
    let best = null;
    for (const p of l.points) if (!best || Math.abs(p.t - t) < Math.abs(best.t - t)) best = p;
    if (!best || Math.abs(best.t - t) > GAP_MS) continue;
    at = at === null ? best.t : at;
    rows.push({ l, p: best });
  }
  if (at === null) { if (tip) tip.hidden = true; return; }
  const x = Math.round(X(at)) + 0.5;
  ctx.strokeStyle = "#7d8b9a";
  ctx.beginPath(); ctx.moveTo(x, PAD.top); ctx.lineTo(x, PAD.top + ph); ctx.stroke();
  for (const { l, p } of rows) {
    ctx.fillStyle = l.color;
    ctx.beginPath(); ctx.arc(X(p.t), Y(p.v), 2.5, 0, 2 * Math.PI); ctx.fill();
  }
  if (!tip) { tip = el("div", { id: "chart-tip", class: "chart-tip" }); document.body.append(tip); }
  tip.replaceChildren(el("div", { class: "when" }, new Date(at).toLocaleTimeString()),
    ...rows.map(({ l, p }) => el("div", { class: "row" }, el("span", { class: "swatch", "data-color": l.color }),
      el("span", {}, l.name), el("b", {}, fmt(p.v)))));
  for (const s of tip.querySelectorAll(".swatch")) s.style.background = s.dataset.color; // (CSSOM: allowed by the CSP)
  tip.hidden = false;
  const left = Math.min(hover.clientX + 14, window.innerWidth - tip.offsetWidth - 8);
  tip.style.left = Math.max(8, left) + "px";
  tip.style.top = Math.max(8, hover.clientY - tip.offsetHeight - 10) + "px";
}
