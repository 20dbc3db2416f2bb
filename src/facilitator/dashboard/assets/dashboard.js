// Tollgate dashboard charts: each `[data-chart]` element names a JSON data block
// (`<script type="application/json" id="…">`, not executed) drawn with uPlot. No inline script runs
// anywhere (the Content-Security-Policy forbids it); this file is the dashboard's only script.
// Times are UTC throughout, as in the tables beside the charts.
(() => {
  const palette = ["#0b6bcb", "#067647", "#b54708", "#7a5af8", "#c11574", "#0e9384", "#475467"];
  const darkPalette = ["#58a6ff", "#3fb950", "#f0883e", "#a78bfa", "#f778ba", "#2dd4bf", "#b1bac4"];
  const dark = window.matchMedia("(prefers-color-scheme: dark)");
  const charts = {};
  window.tollgateCharts = charts;

  /** `2026-11-22 10:00` from Unix seconds, in UTC. */
  function utc(seconds, withTime) {
    const text = new Date(seconds * 1000).toISOString();
    return withTime ? text.slice(0, 16).replace("T", " ") : text.slice(0, 10);
  }

  // uPlot's own time ticks are 12-hour clock text; the tables beside read `2026-11-22 10:00 UTC`.
  function timeTicks(_u, ticks, _i, _space, increment) {
    return ticks.map((t) => {
      const text = new Date(t * 1000).toISOString();
      if (increment >= 86_400 || t % 86_400 === 0) return text.slice(5, 10);
      return text.slice(11, 16);
    });
  }

  /** The bucket length in seconds: the smallest gap between two points (a day when there is one). */
  function stepOf(x) {
    let step = Number.POSITIVE_INFINITY;
    for (let i = 1; i < x.length; i++) step = Math.min(step, x[i] - x[i - 1]);
    return Number.isFinite(step) && step > 0 ? step : 86_400;
  }

  // A line through mostly empty buckets reads as a spike from zero; fewer than a third of buckets
  // holding a value are drawn as bars instead.
  function isSparse(spec) {
    const filled = spec.x.filter((_t, i) => spec.series.some((s) => (s.values[i] ?? 0) !== 0)).length;
    return spec.x.length < 3 || filled * 3 < spec.x.length;
  }

  /** Side-by-side bars: series `k` of `n` takes its slot of 80% of each bucket. */
  function barPaths(k, n, step) {
    const width = (step * 0.8) / n;
    return uPlot.paths.bars({
      disp: {
        x0: { unit: 1, values: (u) => u.data[0].map((t) => t - step * 0.4 + k * width) },
        size: { unit: 1, values: () => [width] },
      },
    });
  }

  // The axis as wide as its longest label, measured in the canvas font (uPlot's fixed width cut them).
  function axisSize(u, values, axisIdx, cycleNum) {
    const axis = u.axes[axisIdx];
    if (cycleNum > 1) return axis._size;
    let size = axis.ticks.size + axis.gap;
    const longest = (values ?? []).reduce((a, v) => (String(v).length > a.length ? String(v) : a), "");
    if (longest !== "") {
      u.ctx.font = axis.font[0];
      size += u.ctx.measureText(longest).width / devicePixelRatio;
    }
    return Math.ceil(size) + 4;
  }

  /** Decimals enough to tell neighbouring ticks apart, at most the token's. */
  function tickDecimals(spec, increment) {
    if (!(increment > 0)) return 0;
    return Math.min(spec.decimals, Math.max(0, Math.ceil(-Math.log10(increment) - 1e-9)));
  }

  /** The chart's text alternative: range, bucket and each series' total and busiest bucket. */
  function summary(spec, title, step) {
    const hourly = step < 86_400;
    const first = spec.x[0];
    const last = spec.x[spec.x.length - 1];
    const parts = [
      `${title}: ${spec.series.length} series, ${spec.x.length} ${hourly ? "hourly" : "daily"} buckets` +
        (first === undefined ? "" : ` from ${utc(first, hourly)} to ${utc(last, hourly)} UTC`),
    ];
    for (const s of spec.series) {
      let total = 0;
      let peak = 0;
      for (let i = 0; i < s.values.length; i++) {
        const v = s.values[i] ?? 0;
        total += v;
        if (v > (s.values[peak] ?? 0)) peak = i;
      }
      const busiest =
        total > 0 ? `, most ${s.values[peak]} ${spec.unit} at ${utc(spec.x[peak], hourly)} UTC` : "";
      parts.push(`${s.label}: ${+total.toFixed(spec.decimals)} ${spec.unit} in all${busiest}`);
    }
    return `${parts.join(". ")}.`;
  }

  function colours() {
    const css = getComputedStyle(document.documentElement);
    return {
      text: css.getPropertyValue("--fg").trim() || "#1b1f24",
      grid: css.getPropertyValue("--line").trim() || "#d9dee3",
      palette: dark.matches ? darkPalette : palette,
    };
  }

  function options(spec, el, step) {
    const { text, grid, palette: colors } = colours();
    const sparse = isSparse(spec);
    const hourly = step < 86_400;
    const series = [
      { label: "time (UTC)", value: (_u, t) => (t == null ? "-" : `${utc(t, true)} UTC`) },
    ].concat(
      spec.series.map((s, i) => ({
        label: s.label,
        stroke: colors[i % colors.length],
        fill: `${colors[i % colors.length]}${sparse ? "99" : "22"}`,
        width: sparse ? 1 : 2,
        points: { show: !sparse && spec.x.length < 60 },
        value: (_u, v) => (v == null ? "-" : `${v.toFixed(spec.decimals)} ${spec.unit}`),
        ...(sparse ? { paths: barPaths(i, spec.series.length, step) } : {}),
      })),
    );
    const axis = { stroke: text, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } };
    return {
      width: chartWidth(el),
      height: 240,
      series,
      tzDate: (seconds) => uPlot.tzDate(new Date(seconds * 1000), "Etc/UTC"),
      axes: [
        { ...axis, values: timeTicks, label: hourly ? "Hour (UTC)" : "Day (UTC)", labelSize: 20 },
        {
          ...axis,
          size: axisSize,
          values: (_u, ticks, _i, _space, increment) => {
            const decimals = tickDecimals(spec, increment);
            return ticks.map((t) => t.toFixed(decimals));
          },
        },
      ],
      scales: {
        x: {
          time: true,
          // Half a bucket of room each side, so the first and last bars are whole.
          ...(sparse ? { range: (_u, min, max) => [min - step / 2, max + step / 2] } : {}),
        },
      },
      legend: { show: true },
    };
  }

  function chartWidth(el) {
    return Math.max(200, el.clientWidth || 600);
  }

  function draw(el) {
    const id = el.dataset.chart;
    const source = document.getElementById(id);
    if (source === null) return;
    const spec = JSON.parse(source.textContent);
    const step = stepOf(spec.x);
    const data = [spec.x].concat(spec.series.map((s) => s.values));
    charts[id]?.destroy();
    el.textContent = "";
    const chart = new uPlot(options(spec, el, step), data, el);
    charts[id] = chart;
    const title = el.closest("section")?.querySelector("h2")?.textContent ?? "Chart";
    const canvas = chart.root.querySelector(".u-wrap");
    canvas?.setAttribute("role", "img");
    canvas?.setAttribute("aria-label", summary(spec, title, step));
    el.dataset.kind = isSparse(spec) ? "bars" : "lines";
    el.dataset.drawn = "true";
  }

  function drawAll() {
    for (const el of document.querySelectorAll("[data-chart]")) draw(el);
  }

  // Charts follow their box: a window resized or a phone turned redraws them at the new width.
  const resized = new ResizeObserver((entries) => {
    for (const entry of entries) {
      const chart = charts[entry.target.dataset.chart];
      const width = chartWidth(entry.target);
      if (chart !== undefined && chart.width !== width) chart.setSize({ width, height: chart.height });
    }
  });

  function start() {
    drawAll();
    for (const el of document.querySelectorAll("[data-chart]")) resized.observe(el);
    // Axis and series colours come from the stylesheet's scheme; a switch redraws with the new ones.
    dark.addEventListener("change", drawAll);
  }

  // Buttons that need a second thought carry data-confirm; the form submits only when confirmed.
  document.addEventListener("submit", (event) => {
    const form = event.target;
    const message = form instanceof HTMLFormElement ? form.dataset.confirm : undefined;
    if (message !== undefined && !window.confirm(message)) event.preventDefault();
  });

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
