window.__dynscope = {errors: [], blocked: []};
window.addEventListener('error', function (e) { window.__dynscope.errors.push(String(e.message)); });
document.addEventListener('securitypolicyviolation', function (e) { window.__dynscope.blocked.push(e.blockedURI); });
window.addEventListener('load', function () {
  function shown(id) {
    var el = document.getElementById(id);
    if (!el) return 'missing';
    var svg = el.querySelector('svg');
    if (!svg) return 'no-svg';
    var r = svg.getBoundingClientRect();
    return (r.width > 10 && r.height > 10) ? 'visible' : 'hidden';
  }
  var b = document.body;
  b.setAttribute('data-program', shown('program-view'));
  b.setAttribute('data-first-graph', shown('graph-svg-0'));
  var k = document.querySelector('table.kernels');
  var kr = k ? k.getBoundingClientRect() : null;
  b.setAttribute('data-kernels', !k ? 'missing' : (kr.width > 10 && kr.height > 10) ? 'visible' : 'hidden');
  b.setAttribute('data-errors', String(window.__dynscope.errors.length));
  b.setAttribute('data-blocked', String(window.__dynscope.blocked.length));
  b.setAttribute('data-ready', 'yes');
});
// Zoom, on-demand pictures and node search. The state a test reads goes on <html>.
(function () {
  var root = document.documentElement;
  try {  // the first paint's time, for benchmarks/page_scale.py; a browser without it records none
    new PerformanceObserver(function (list) {
      list.getEntries().forEach(function (e) {
        if (e.name === 'first-contentful-paint') root.setAttribute('data-paint-ms', String(Math.round(e.startTime)));
      });
    }).observe({type: 'paint', buffered: true});
  } catch (e) { /* no paint timing */ }
  // The first frame after the page is parsed (where no paint timing is reported, as in
  // Chromium's --dump-dom): the callback runs as that frame is produced.
  document.addEventListener('DOMContentLoaded', function () {
    requestAnimationFrame(function () { root.setAttribute('data-frame-ms', String(Math.round(performance.now()))); });
  });
  window.addEventListener('load', function () { root.setAttribute('data-load-ms', String(Math.round(performance.now()))); });
  function size(el, z) {
    if (el.tagName.toLowerCase() === 'img') { if (el.naturalWidth) el.style.width = (el.naturalWidth * z) + 'px'; return; }
    ['width', 'height'].forEach(function (a) {
      if (!el.hasAttribute('data-' + a)) el.setAttribute('data-' + a, el.getAttribute(a) || '');
      var m = /^([0-9.]+)([a-z%]*)$/.exec(el.getAttribute('data-' + a));
      if (m) el.setAttribute(a, (parseFloat(m[1]) * z).toFixed(1) + m[2]);
    });
  }
  function zoom(box, f) {
    var pic = box.querySelector('svg, img');
    if (!pic) return;
    var z = f ? parseFloat(box.getAttribute('data-zoom') || '1') * f : 1;
    box.setAttribute('data-zoom', String(z));
    size(pic, z);
  }
  function fit(box) {
    // Shrink the picture to the box's width (never enlarge): the whole of it in view.
    var pic = box.querySelector('svg, img');
    if (!pic) return;
    zoom(box, 0);
    var wide = pic.getBoundingClientRect().width;
    if (wide > box.clientWidth && box.clientWidth > 0) {
      // Never below 0.6: a long program scrolls rather than shrinking its words to nothing.
      var z = Math.max(0.6, (box.clientWidth - 4) / wide);
      box.setAttribute('data-zoom', String(z));
      size(pic, z);
    }
  }
  function controls(box) {
    var bar = document.createElement('div');
    bar.className = 'zoom';
    [['+', 1.25, 'zoom in'], ['−', 0.8, 'zoom out'], ['reset', 0, 'original size'],
     ['fit', -1, 'fit the width']].forEach(function (c) {
      var btn = document.createElement('button');
      btn.type = 'button'; btn.textContent = c[0]; btn.title = c[2];
      btn.addEventListener('click', function () { if (c[1] < 0) fit(box); else zoom(box, c[1]); });
      bar.appendChild(btn);
    });
    box.parentNode.insertBefore(bar, box);
  }
  function load(btn) {
    var src = btn.getAttribute('data-src') || '';
    if (!/^graph_[0-9]+\.svg$/.test(src)) return;
    var box = btn.closest('.svgbox');
    var img = document.createElement('img');
    img.addEventListener('load', function () { count('data-pictures-loaded'); });
    img.addEventListener('error', function () { count('data-pictures-failed'); });
    img.src = src; img.alt = 'picture of ' + src;
    box.replaceChildren(img);
    controls(box);
  }
  function count(attr) { root.setAttribute(attr, String(parseInt(root.getAttribute(attr) || '0', 10) + 1)); }
  // Following a link to a graph whose picture is off the page shows the picture.
  function opened() {
    var m = /^#graph-([0-9]+)$/.exec(location.hash);
    var btn = m && document.querySelector('#graph-svg-' + m[1] + ' button.load');
    if (btn) load(btn);
  }
  window.addEventListener('hashchange', opened);
  var hits = [], at = -1;
  function find(q) {
    q = q.trim().toLowerCase();
    hits = []; at = -1;
    var pics = 0, coded = [];
    document.querySelectorAll('.svgbox').forEach(function (box) {
      var n = 0;
      box.querySelectorAll('g.node').forEach(function (g) {
        var text = ((g.getAttribute('data-name') || '') + ' ' + g.textContent).toLowerCase();
        var hit = q !== '' && text.indexOf(q) >= 0;
        g.classList.toggle('hit', hit);
        g.classList.toggle('dim', q !== '' && !hit);
        if (hit) { hits.push(g); n++; }
      });
      if (n) pics++;
    });
    // Graphs whose picture is not on the page: look in their code instead.
    document.querySelectorAll('section[data-picture="off-page"]').forEach(function (s) {
      var code = s.querySelector('pre.graph-code');
      if (q && code && code.textContent.toLowerCase().indexOf(q) >= 0) coded.push(s.getAttribute('data-graph'));
    });
    var out = document.getElementById('find-count');
    out.textContent = !q ? '' : hits.length + ' nodes in ' + pics + ' pictures' +
      (coded.length ? '; in the code of graphs ' + coded.join(', ') + ' (pictures not on the page)' : '') +
      (hits.length ? ' (Enter: next)' : '');
    root.setAttribute('data-find-hits', String(hits.length));
    root.setAttribute('data-find-code', coded.join(','));
  }
  function next() {
    if (!hits.length) return;
    at = (at + 1) % hits.length;
    hits[at].scrollIntoView({block: 'center', inline: 'center'});
  }
  document.addEventListener('DOMContentLoaded', function () {
    document.querySelectorAll('.svgbox').forEach(function (box) { if (box.querySelector('svg')) controls(box); });
    // The program view opens fitted to the page's width: the whole program at a glance.
    var program = document.getElementById('program-view');
    if (program) fit(program);
    document.querySelectorAll('button.load').forEach(function (btn) {
      btn.addEventListener('click', function () { load(btn); });
    });
    var input = document.getElementById('find');
    if (input) {
      input.addEventListener('input', function () { find(input.value); });
      input.addEventListener('keydown', function (e) { if (e.key === 'Enter') next(); });
      // #find=relu on the address searches at once (a link to a search; tests use it too).
      var m = /^#find=(.*)$/.exec(location.hash);
      if (m) { input.value = decodeURIComponent(m[1]); find(input.value); }
    }
    opened();
    root.setAttribute('data-zoom-controls', String(document.querySelectorAll('.zoom').length));
  });
})();
