// Injected into a --html page before it is loaded in headless Chromium: measures every
// chart's text, ticks, reference lines, legend and bars, and writes what it found as JSON
// into a pre element (id chart-check) for check_charts.py to read from the dumped DOM.
(function() {
function box(e) {
  const r = e.getBoundingClientRect();
  return [r.left, r.top, r.right, r.bottom];
}
const out = {
  scroll_width: document.documentElement.scrollWidth,
  inner_width: window.innerWidth,
  caveats: Array.from(document.querySelectorAll('.caveat'), (e) => e.textContent),
  charts: [],
};
document.querySelectorAll('svg').forEach(function(svg) {
  const section = svg.closest('section');
  const heading = section && section.querySelector('h2');
  const chart = {
    section: heading ? heading.textContent : '',
    kind: svg.getAttribute('data-chart') || '',
    box: box(svg),
    texts: [],
    ticks: [],
    grid: [],
    references: [],
    legend: [],
    marks: [],
  };
  svg.querySelectorAll('text').forEach(function(t) {
    chart.texts.push({text: t.textContent, cls: t.getAttribute('class') || '', box: box(t)});
  });
  svg.querySelectorAll('text.value').forEach(function(t) {
    chart.ticks.push({
      text: t.textContent,
      axis: t.getAttribute('data-axis'),
      value: Number(t.getAttribute('data-value')),
      box: box(t)
    });
  });
  svg.querySelectorAll('line.grid').forEach(function(l) {
    chart.grid.push({
      axis: l.getAttribute('data-axis'),
      value: Number(l.getAttribute('data-value')),
      box: box(l)
    });
  });
  svg.querySelectorAll('line.reference').forEach(function(l) {
    chart.references.push({
      axis: l.getAttribute('data-axis'),
      value: Number(l.getAttribute('data-value')),
      box: box(l)
    });
  });
  svg.querySelectorAll('.legend-entry').forEach(function(g) {
    const swatch = g.querySelector('.swatch');
    const text = g.querySelector('text');
    chart.legend.push({
      name: text ? text.textContent : null,
      fill: swatch ? swatch.getAttribute('fill') : null,
      swatch: swatch ? box(swatch) : null,
      text: text ? box(text) : null
    });
  });
  svg.querySelectorAll('rect.bar, rect.span').forEach(function(r) {
    chart.marks.push({cls: r.getAttribute('class'), box: box(r)});
  });
  out.charts.push(chart);
});
const pre = document.createElement('pre');
pre.id = 'chart-check';
pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
})();
