// Tollgate dashboard charts: each `[data-chart]` element names a JSON data block
// (`<script type="application/json" id="…">`, not executed) drawn with uPlot. No inline script runs
// anywhere (the Content-Security-Policy forbids it); this file is the dashboard's only script.
(() => {
  const palette = ["#0b6bcb", "#067647", "#b54708", "#7a5af8", "#c11574", "#0e9384", "#475467"];
  const charts = {};
  window.tollgateCharts = charts;

  function draw(el) {
    const source = document.getElementById(el.dataset.chart);
    if (source === null) return;
    const spec = JSON.parse(source.textContent);
    const width = Math.max(320, el.clientWidth || 600);
    const series = [{ label: "time" }].concat(
      spec.series.map((s, i) => ({
        label: s.label,
        stroke: palette[i % palette.length],
        fill: `${palette[i % palette.length]}22`,
        width: 2,
        points: { show: spec.x.length < 60 },
        value: (_u, v) => (v == null ? "-" : `${v.toFixed(spec.decimals)} ${spec.unit}`),
      })),
    );
    const options = {
      width,
      height: 240,
      series,
      axes: [{}, { values: (_u, ticks) => ticks.map((t) => t.toFixed(Math.min(spec.decimals, 2))) }],
      scales: { x: { time: true } },
      legend: { show: true },
    };
    const data = [spec.x].concat(spec.series.map((s) => s.values));
    el.textContent = "";
    charts[el.dataset.chart] = new uPlot(options, data, el);
    el.dataset.drawn = "true";
  }

  function drawAll() {
    for (const el of document.querySelectorAll("[data-chart]")) draw(el);
  }

  // Buttons that need a second thought carry data-confirm; the form submits only when confirmed.
  document.addEventListener("submit", (event) => {
    const form = event.target;
    const message = form instanceof HTMLFormElement ? form.dataset.confirm : undefined;
    if (message !== undefined && !window.confirm(message)) event.preventDefault();
  });

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", drawAll);
  else drawAll();
})();
