// attnc.viz: the attention views' one rendering core, plain JavaScript with
// no dependency. Loaded by anywidget as an ES module (render) and inlined by
// View.save into a standalone page (mountPage). The spec is the JSON that
// attnc/viz/_views.py lays out; the weights are float32, every attention's
// (layers, H, L, S) one after the other.

const SVG_NS = "http://www.w3.org/2000/svg"; // a namespace name, never fetched
const PALETTE = [
  "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
  "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939",
];
// viridis at nine evenly spaced stops, interpolated into a 256-entry table
const VIRIDIS = [
  [68, 1, 84], [71, 44, 122], [59, 81, 139], [44, 113, 142], [33, 144, 141],
  [39, 173, 129], [92, 200, 99], [170, 220, 50], [253, 231, 37],
];
const LUT = (() => {
  const lut = new Uint8Array(256 * 3);
  for (let i = 0; i < 256; i++) {
    const x = (i / 255) * (VIRIDIS.length - 1), k = Math.min(Math.floor(x), VIRIDIS.length - 2), t = x - k;
    for (let c = 0; c < 3; c++) lut[3 * i + c] = Math.round(VIRIDIS[k][c] * (1 - t) + VIRIDIS[k + 1][c] * t);
  }
  return lut;
})();

function headColour(h, H) {
  return H <= PALETTE.length ? PALETTE[h] : `hsl(${Math.round((360 * h) / H)},65%,45%)`;
}

// An HTML (or, with ns, SVG) element with attributes, appended to parent.
function make(tag, attrs = {}, parent = null, text = null, ns = null) {
  const e = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== null) e.textContent = text; // labels are text, never markup
  if (parent) parent.appendChild(e);
  return e;
}
const svg = (tag, attrs, parent, text = null) => make(tag, attrs, parent, text, SVG_NS);

function choice(parent, label, names, value, onchange) {
  const wrap = make("label", { class: "attnc-choice" }, parent, label + " ");
  const sel = make("select", { "data-role": label }, wrap);
  names.forEach((n, i) => make("option", { value: String(i) }, sel, n));
  sel.value = String(value);
  sel.addEventListener("change", () => onchange(Number(sel.value)));
  return sel;
}

// The weights as a Float32Array: base64 text (the standalone page) or the
// widget's binary buffer (a DataView).
function floats(data) {
  if (typeof data === "string") {
    const text = data.trim();
    let bytes;
    if (Uint8Array.fromBase64) bytes = Uint8Array.fromBase64(text);
    else {
      const bin = atob(text);
      bytes = new Uint8Array(bin.length);
      for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    }
    return new Float32Array(bytes.buffer, 0, bytes.length >> 2);
  }
  const view = ArrayBuffer.isView(data) ? data : new DataView(data);
  if (view.byteOffset % 4 === 0) return new Float32Array(view.buffer, view.byteOffset, view.byteLength >> 2);
  return new Float32Array(view.buffer.slice(view.byteOffset, view.byteOffset + view.byteLength));
}

// One attention's (L, S) matrix for a layer and head, and its labels.
class Weights {
  constructor(spec, data) {
    this.spec = spec;
    this.data = data;
  }
  attention(a) {
    return this.spec.attentions[a];
  }
  // A step view's named array: its values and its shape.
  array(name) {
    const { offset, shape } = this.spec.arrays[name];
    return { a: this.data.subarray(offset, offset + shape.reduce((x, y) => x * y, 1)), shape };
  }
  matrix(a, layer, head) {
    const at = this.attention(a), n = at.rows.length * at.cols.length;
    const start = at.offset + (layer * at.heads + head) * n;
    return this.data.subarray(start, start + n);
  }
}

// ------------------------------------------------------------------ head view

// A token row's height (less for thousands of tokens: a canvas is at most
// 32,767 pixels tall), the token columns' width and the gap the lines cross.
const ROW = 18, COL = 120, GAP = 140, TALLEST = 30000;

function headView(root, W, init = {}, onBack = null) {
  const minWeight = W.spec.options.min_weight ?? 0.01;
  const st = { a: init.attention ?? 0, layer: init.layer ?? 0, heads: new Set(init.heads ?? []), hover: null };
  const bar = make("div", { class: "attnc-bar" }, root);
  const body = make("div", { class: "attnc-body" }, root);
  if (onBack) make("button", { "data-role": "back" }, bar, "← all heads").addEventListener("click", onBack);
  if (W.spec.attentions.length > 1) {
    const names = W.spec.attentions.map((a) => a.name);
    choice(bar, "attention", names, st.a, (v) => {
      Object.assign(st, { a: v, layer: 0, heads: new Set(), hover: null });
      build();
    });
  }
  let layerBar = make("span", {}, bar), headBar = make("span", { class: "attnc-heads" }, bar);
  let lines = null, row = ROW;

  function build() {
    const at = W.attention(st.a);
    if (!st.heads.size) for (let h = 0; h < at.heads; h++) st.heads.add(h);
    layerBar.replaceChildren();
    choice(layerBar, "layer", at.layer_ids.map((l) => `${l}`), st.layer, (v) => {
      st.layer = v;
      draw();
    });
    headBar.replaceChildren();
    for (let h = 0; h < at.heads; h++) {
      const box = make("span", { class: "attnc-head", "data-head": h, title: `head ${at.head_ids[h]}` }, headBar);
      box.style.background = headColour(h, at.heads);
      box.addEventListener("click", () => {
        st.heads.has(h) ? st.heads.delete(h) : st.heads.add(h);
        draw();
      });
      box.addEventListener("dblclick", () => {
        st.heads = new Set([h]);
        draw();
      });
    }
    body.replaceChildren();
    const n = Math.max(at.rows.length, at.cols.length);
    row = Math.min(ROW, TALLEST / Math.max(n, 1));
    const stack = make("div", { class: "attnc-stack" }, body);
    // The lines on a canvas (tens of thousands of SVG lines take seconds), the tokens in SVG over it.
    lines = make("canvas", { class: "attnc-lines" }, stack);
    Object.assign(lines.style, { left: `${COL}px`, width: `${GAP}px`, height: `${n * row}px` });
    const dpr = window.devicePixelRatio || 1;
    [lines.width, lines.height] = [Math.round(GAP * dpr), Math.max(1, Math.round(n * row * dpr))];
    const root_svg = svg("svg", { class: "attnc-head-svg", width: 2 * COL + GAP, height: n * row + 4 }, stack);
    tokens(root_svg, at.rows, "row", 0, "end", COL - 6);
    tokens(root_svg, at.cols, "col", COL + GAP, "start", 6);
    draw();
  }

  function tokens(parent, labels, side, x, anchor, dx) {
    labels.forEach((label, i) => {
      const g = svg("g", { class: "attnc-token", "data-side": side, "data-index": i }, parent);
      svg("rect", { x, y: i * row, width: COL, height: row }, g);
      const t = svg("text", { x: x + dx, y: i * row + row / 2, "text-anchor": anchor }, g);
      t.textContent = label.length > 16 ? label.slice(0, 15) + "…" : label;
      svg("title", {}, g, label);
      g.addEventListener("mouseenter", () => {
        st.hover = { side, index: i };
        draw();
      });
      g.addEventListener("mouseleave", () => {
        st.hover = null;
        draw();
      });
    });
  }

  function draw() {
    const at = W.attention(st.a), L = at.rows.length, S = at.cols.length;
    Object.assign(root.dataset, { attention: st.a, layer: st.layer, heads: [...st.heads].sort((x, y) => x - y) });
    for (const box of headBar.children) box.classList.toggle("attnc-off", !st.heads.has(Number(box.dataset.head)));
    const heads = [...st.heads].sort((x, y) => x - y);
    for (const g of root.querySelectorAll(".attnc-token")) {
      const k = Number(g.dataset.index), side = g.dataset.side, on = st.hover && side === st.hover.side && k === st.hover.index;
      g.classList.toggle("attnc-active", !!on);
      // The other column's tokens shaded by the weight they share with the hovered one (its strongest head's colour).
      let best = -1, top = 0;
      if (st.hover && side !== st.hover.side)
        for (const h of heads) {
          const M = W.matrix(st.a, st.layer, h), w = side === "col" ? M[st.hover.index * S + k] : M[k * S + st.hover.index];
          if (w > top) [best, top] = [h, w];
        }
      const rect = g.querySelector("rect");
      rect.style.fill = best >= 0 ? headColour(best, at.heads) : "";
      rect.style.fillOpacity = best >= 0 ? String(Math.min(1, top) * 0.6) : "";
      if (st.hover && side !== st.hover.side) g.dataset.weight = top;
      else delete g.dataset.weight;
    }
    const [i0, i1] = st.hover?.side === "row" ? [st.hover.index, st.hover.index + 1] : [0, L];
    const [j0, j1] = st.hover?.side === "col" ? [st.hover.index, st.hover.index + 1] : [0, S];
    const drawn = [], raster = new Raster(lines);
    for (const h of heads) {
      const M = W.matrix(st.a, st.layer, h), colour = rgbOf(headColour(h, at.heads));
      for (let i = i0; i < i1; i++)
        for (let j = j0; j < j1; j++) {
          const w = M[i * S + j];
          if (w < minWeight) continue;
          raster.line(i * row + row / 2, j * row + row / 2, colour, Math.min(1, w));
          drawn.push([h, i, j, w]);
        }
    }
    raster.show();
    lines.attncLines = drawn; // (head, row, col, weight) of every line drawn: the page's state, for tests
    lines.dataset.lines = drawn.length;
  }

  build();
}

// Lines across a canvas from its left edge (height y1) to its right (y2),
// composited "over" in JavaScript: a canvas stroke per line takes seconds for
// the tens of thousands a dozen diffuse heads over 128 tokens draw.
class Raster {
  constructor(canvas) {
    this.canvas = canvas;
    this.dpr = canvas.width / GAP;
    this.buf = new Float32Array(4 * canvas.width * canvas.height); // premultiplied RGBA
  }
  line(y1, y2, [r, g, b], a) {
    const Wpx = this.canvas.width, Hpx = this.canvas.height, buf = this.buf, k = 1 - a, half = this.dpr;
    const dy = ((y2 - y1) * this.dpr) / Wpx;
    for (let x = 0, ya = y1 * this.dpr; x < Wpx; x++, ya += dy) {
      const lo = Math.max(0, Math.floor(Math.min(ya, ya + dy) - half)), hi = Math.min(Hpx, Math.ceil(Math.max(ya, ya + dy) + half));
      for (let y = lo, o = 4 * (lo * Wpx + x); y < hi; y++, o += 4 * Wpx) {
        buf[o] = r * a + buf[o] * k;
        buf[o + 1] = g * a + buf[o + 1] * k;
        buf[o + 2] = b * a + buf[o + 2] * k;
        buf[o + 3] = a + buf[o + 3] * k;
      }
    }
  }
  show() {
    const img = new ImageData(this.canvas.width, this.canvas.height), px = img.data, buf = this.buf;
    for (let o = 0; o < buf.length; o += 4) {
      const a = buf[o + 3];
      if (!a) continue;
      px[o] = buf[o] / a;
      px[o + 1] = buf[o + 1] / a;
      px[o + 2] = buf[o + 2] / a;
      px[o + 3] = 255 * a;
    }
    this.canvas.getContext("2d").putImageData(img, 0, 0);
  }
}

// [r, g, b] (0-255) of a "#rrggbb" or "hsl(h,s%,l%)" colour, as the browser computes it.
function rgbOf(colour) {
  const ctx = document.createElement("canvas").getContext("2d");
  ctx.fillStyle = colour;
  ctx.fillRect(0, 0, 1, 1);
  return [...ctx.getImageData(0, 0, 1, 1).data.slice(0, 3)];
}

// ------------------------------------------------------------------ model view

const THUMB = 72;

function modelView(root, W) {
  let a = 0;
  function grid() {
    root.replaceChildren();
    const bar = make("div", { class: "attnc-bar" }, root);
    if (W.spec.attentions.length > 1)
      choice(bar, "attention", W.spec.attentions.map((x) => x.name), a, (v) => {
        a = v;
        grid();
      });
    make("span", { class: "attnc-hint" }, bar, "click a head to open it");
    const at = W.attention(a);
    const table = make("div", { class: "attnc-grid" }, root);
    table.style.gridTemplateColumns = `auto repeat(${at.heads}, ${THUMB + 4}px)`;
    make("span", {}, table, "");
    at.head_ids.forEach((h) => make("span", { class: "attnc-grid-label" }, table, `head ${h}`));
    for (let l = 0; l < at.layers; l++) {
      make("span", { class: "attnc-grid-label" }, table, `layer ${at.layer_ids[l]}`);
      for (let h = 0; h < at.heads; h++) {
        const c = make("canvas", { class: "attnc-thumb", width: THUMB, height: THUMB, "data-layer": l, "data-head": h }, table);
        thumbnail(c, W.matrix(a, l, h), at.rows.length, at.cols.length, headColour(h, at.heads));
        c.addEventListener("click", () => {
          root.replaceChildren();
          headView(root, W, { attention: a, layer: l, heads: [h] }, grid);
        });
      }
    }
  }
  grid();
}

function thumbnail(canvas, M, L, S, colour) {
  const ctx = canvas.getContext("2d"), pad = 6, span = THUMB - 2 * pad;
  ctx.strokeStyle = colour;
  for (let i = 0; i < L; i++)
    for (let j = 0; j < S; j++) {
      const w = M[i * S + j];
      if (w < 0.01) continue;
      ctx.globalAlpha = Math.min(1, w);
      ctx.beginPath();
      ctx.moveTo(pad + span * 0.2, pad + (span * (i + 0.5)) / L);
      ctx.lineTo(pad + span * 0.8, pad + (span * (j + 0.5)) / S);
      ctx.stroke();
    }
}

// ------------------------------------------------------------------ matrix view

const PLOT = 640, MARGIN = 96, MAX_CELL = 48;

// Levels of 2x2 pooling, level 0 the matrix itself: max pooling keeps every
// peak visible when zoomed out; mean pooling keeps sums (divided by the
// block's cell count when drawn, exact at the ragged edges).
function pyramid(base, L, S, mean) {
  const levels = [{ w: S, h: L, a: base }];
  for (let p = levels[0]; p.w > 1 || p.h > 1; p = levels[levels.length - 1]) {
    const w = Math.ceil(p.w / 2), h = Math.ceil(p.h / 2), a = new Float32Array(w * h), src = p.a;
    for (let r = 0; r < h; r++) {
      const r0 = 2 * r * p.w, r1 = 2 * r + 1 < p.h ? r0 + p.w : -1;
      for (let c = 0; c < w; c++) {
        const c0 = 2 * c, c1 = c0 + 1 < p.w ? c0 + 1 : -1;
        let v = src[r0 + c0];
        if (mean) {
          if (c1 >= 0) v += src[r0 + c1];
          if (r1 >= 0) v += src[r1 + c0] + (c1 >= 0 ? src[r1 + c1] : 0);
        } else {
          if (c1 >= 0) v = Math.max(v, src[r0 + c1]);
          if (r1 >= 0) v = Math.max(v, src[r1 + c0], c1 >= 0 ? src[r1 + c1] : 0);
        }
        a[r * w + c] = v;
      }
    }
    levels.push({ w, h, a });
  }
  return levels;
}

function matrixView(root, W) {
  const opts = W.spec.options;
  const st = { a: 0, layer: 0, head: 0, shared: opts.scale === "shared", mean: opts.pool === "mean" };
  const bar = make("div", { class: "attnc-bar" }, root);
  const controls = make("span", {}, bar);
  const colourbar = make("span", { class: "attnc-colourbar" }, bar);
  const canvas = make("canvas", { class: "attnc-matrix", width: MARGIN + PLOT + 8, height: MARGIN + PLOT + 8 }, root);
  const readout = make("div", { class: "attnc-readout", "data-role": "readout" }, root, " ");
  const ctx = canvas.getContext("2d"), off = document.createElement("canvas"), cache = new Map();
  let fit = 1;

  const at = () => W.attention(st.a);
  function levels() {
    const key = `${st.a}/${st.layer}/${st.head}/${st.mean}`;
    if (!cache.has(key)) {
      if (cache.size >= 8) cache.delete(cache.keys().next().value); // bounded memory
      cache.set(key, pyramid(W.matrix(st.a, st.layer, st.head), at().rows.length, at().cols.length, st.mean));
    }
    return cache.get(key);
  }
  function vmax() {
    const m = at().vmax;
    return st.shared ? Math.max(0, ...m.flat()) : m[st.layer][st.head];
  }

  function buildControls() {
    controls.replaceChildren();
    const x = at();
    if (W.spec.attentions.length > 1)
      choice(controls, "attention", W.spec.attentions.map((a) => a.name), st.a, (v) => {
        Object.assign(st, { a: v, layer: 0, head: 0 });
        reset();
      });
    choice(controls, "layer", x.layer_ids.map(String), st.layer, (v) => ((st.layer = v), draw()));
    choice(controls, "head", x.head_ids.map(String), st.head, (v) => ((st.head = v), draw()));
    choice(controls, "scale", ["per head", "shared"], +st.shared, (v) => ((st.shared = !!v), draw()));
    choice(controls, "pool", ["max", "mean"], +st.mean, (v) => ((st.mean = !!v), draw()));
    make("button", { "data-role": "fit" }, controls, "fit").addEventListener("click", reset);
  }
  function reset() {
    const { rows, cols } = at();
    fit = Math.min(PLOT / Math.max(cols.length, 1), PLOT / Math.max(rows.length, 1));
    Object.assign(st, { scale: fit, ox: 0, oy: 0 });
    buildControls();
    draw();
  }
  function clampView() {
    const { rows, cols } = at();
    st.scale = Math.min(Math.max(st.scale, fit), Math.max(MAX_CELL, fit));
    st.ox = Math.max(0, Math.min(st.ox, cols.length - PLOT / st.scale));
    st.oy = Math.max(0, Math.min(st.oy, rows.length - PLOT / st.scale));
  }
  // The pyramid level drawn: its cells are at least one screen pixel wide.
  function level(lv) {
    const k = st.scale >= 1 ? 0 : Math.ceil(Math.log2(1 / st.scale) - 1e-9);
    return Math.min(k, lv.length - 1);
  }
  function cellValue(lv, k, r, c) {
    const { rows, cols } = at(), f = 2 ** k, v = lv[k].a[r * lv[k].w + c];
    if (!st.mean) return v;
    return v / (Math.min(f, rows.length - r * f) * Math.min(f, cols.length - c * f));
  }

  function draw() {
    const { rows, cols } = at(), L = rows.length, S = cols.length;
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    const top = vmax();
    colourbar.replaceChildren();
    make("span", {}, colourbar, "0");
    make("span", { class: "attnc-ramp" }, colourbar);
    make("span", { "data-role": "vmax" }, colourbar, top.toPrecision(3));
    if (!L || !S) return;
    clampView();
    const lv = levels(), k = level(lv), f = 2 ** k, p = lv[k], s = st.scale;
    const c0 = Math.floor(st.ox / f), c1 = Math.min(p.w, Math.ceil((st.ox + PLOT / s) / f));
    const r0 = Math.floor(st.oy / f), r1 = Math.min(p.h, Math.ceil((st.oy + PLOT / s) / f));
    const nw = c1 - c0, nh = r1 - r0, img = ctx.createImageData(nw, nh), px = img.data;
    const inv = top > 0 ? 255 / top : 0;
    for (let r = 0; r < nh; r++)
      for (let c = 0; c < nw; c++) {
        const q = 3 * Math.min(255, Math.floor(cellValue(lv, k, r0 + r, c0 + c) * inv)), o = 4 * (r * nw + c);
        px[o] = LUT[q];
        px[o + 1] = LUT[q + 1];
        px[o + 2] = LUT[q + 2];
        px[o + 3] = 255;
      }
    off.width = nw;
    off.height = nh;
    off.getContext("2d").putImageData(img, 0, 0);
    ctx.save();
    ctx.beginPath();
    ctx.rect(MARGIN, MARGIN, Math.min(PLOT, (S - st.ox) * s), Math.min(PLOT, (L - st.oy) * s));
    ctx.clip();
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(off, MARGIN + (c0 * f - st.ox) * s, MARGIN + (r0 * f - st.oy) * s, nw * f * s, nh * f * s);
    ctx.restore();
    axes(rows, cols);
    Object.assign(canvas.dataset, { level: k, scale: s, ox: st.ox, oy: st.oy });
  }

  // Token labels once a cell is tall enough to hold one, else index ticks.
  function axes(rows, cols) {
    const s = st.scale, labels = s >= 9;
    const step = labels ? 1 : [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000].find((t) => t * s >= 40) ?? 10000;
    ctx.fillStyle = "#333";
    ctx.font = `${labels ? Math.min(12, s - 2) : 10}px sans-serif`;
    const text = (i, names) => (labels ? (names[i].length > 12 ? names[i].slice(0, 11) + "…" : names[i]) : String(i));
    const first = (o) => Math.ceil(o / step) * step;
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (let r = first(Math.floor(st.oy)); r < Math.min(rows.length, st.oy + PLOT / s); r += step)
      ctx.fillText(text(r, rows), MARGIN - 4, MARGIN + (r - st.oy + 0.5) * s);
    ctx.save();
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "left";
    for (let c = first(Math.floor(st.ox)); c < Math.min(cols.length, st.ox + PLOT / s); c += step)
      ctx.fillText(text(c, cols), -(MARGIN - 4), MARGIN + (c - st.ox + 0.5) * s);
    ctx.restore();
  }

  function plotPoint(e) {
    const box = canvas.getBoundingClientRect();
    return [e.clientX - box.left - MARGIN, e.clientY - box.top - MARGIN];
  }
  function zoomAt(x, y, factor) {
    const cx = st.ox + x / st.scale, cy = st.oy + y / st.scale;
    st.scale *= factor;
    clampView();
    st.ox = cx - x / st.scale;
    st.oy = cy - y / st.scale;
    draw();
  }
  function showValue(e) {
    const [x, y] = plotPoint(e), { rows, cols } = at();
    const r = Math.floor(st.oy + y / st.scale), c = Math.floor(st.ox + x / st.scale);
    if (x < 0 || y < 0 || r >= rows.length || c >= cols.length) return void (readout.textContent = " ");
    const lv = levels(), k = level(lv), f = 2 ** k, v = cellValue(lv, k, Math.floor(r / f), Math.floor(c / f));
    if (k === 0) {
      readout.textContent = `${rows[r]} → ${cols[c]}   w[${r}, ${c}] = ${v.toPrecision(6)}`;
      return;
    }
    const R = Math.floor(r / f) * f, C = Math.floor(c / f) * f, how = st.mean ? "mean" : "max";
    const span = (a, n) => `${a}–${Math.min(a + f, n) - 1}`;
    readout.textContent = `rows ${span(R, rows.length)}, cols ${span(C, cols.length)}: ${how} ${v.toPrecision(6)} (zoom in for single cells)`;
  }

  canvas.addEventListener(
    "wheel",
    (e) => {
      e.preventDefault();
      const [x, y] = plotPoint(e), unit = e.deltaMode === 1 ? 16 : e.deltaMode === 2 ? PLOT : 1;
      zoomAt(Math.min(Math.max(x, 0), PLOT), Math.min(Math.max(y, 0), PLOT), Math.exp(-e.deltaY * unit * 0.002));
      showValue(e);
    },
    { passive: false },
  );
  let drag = null;
  canvas.addEventListener("mousedown", (e) => (drag = [e.clientX, e.clientY]));
  canvas.addEventListener("mouseup", () => (drag = null)); // (no listener on window: re-rendered widgets would pile them up)
  canvas.addEventListener("mousemove", (e) => {
    if (drag) {
      st.ox -= (e.clientX - drag[0]) / st.scale;
      st.oy -= (e.clientY - drag[1]) / st.scale;
      drag = [e.clientX, e.clientY];
      draw();
    }
    showValue(e);
  });
  canvas.addEventListener("mouseleave", () => {
    readout.textContent = " ";
    drag = null;
  });
  canvas.addEventListener("dblclick", reset);
  reset();
}


// ------------------------------------------------------------------ step views
// One core for the views of a run step by step: a slider over the steps, and
// panels (bars over positions, heatmaps, points, an image) that redraw for a step.

function stepper(root, T, label, onStep) {
  const bar = make("div", { class: "attnc-bar" }, root);
  const prev = make("button", { "data-role": "prev" }, bar, "◀");
  const slider = make("input", { type: "range", min: 0, max: Math.max(0, T - 1), value: 0, "data-role": "step" }, bar);
  const next = make("button", { "data-role": "next" }, bar, "▶");
  const text = make("span", { "data-role": "step-label" }, bar);
  const set = (t) => {
    t = Math.min(Math.max(0, t), Math.max(0, T - 1));
    slider.value = String(t);
    root.dataset.step = t;
    text.textContent = T ? label(t) : "no steps";
    if (T) onStep(t);
  };
  slider.addEventListener("input", () => set(Number(slider.value)));
  prev.addEventListener("click", () => set(Number(slider.value) - 1));
  next.addEventListener("click", () => set(Number(slider.value) + 1));
  return set;
}

function panel(parent, title, role) {
  const box = make("div", { class: "attnc-panel", "data-role": role }, parent);
  make("div", { class: "attnc-panel-title" }, box, title);
  return box;
}

// Bars over n positions (labels under them when given); update(values, top, mark, window).
function bars(parent, title, role, n, names = null) {
  const box = panel(parent, title, role), bw = Math.max(3, Math.min(28, 560 / Math.max(n, 1))), H = 70;
  const lab = names ? 60 : 4;
  const root = svg("svg", { width: n * bw + 2, height: H + lab }, box);
  const win = svg("rect", { class: "attnc-window", y: 0, height: H, width: 0 }, root);
  const rects = [];
  for (let i = 0; i < n; i++) {
    rects.push(svg("rect", { class: "attnc-bar-rect", x: i * bw + 1, width: bw - 2, "data-index": i }, root));
    if (names) {
      const t = svg("text", { transform: `translate(${i * bw + bw / 2},${H + 4}) rotate(60)` }, root);
      t.textContent = names[i].length > 8 ? names[i].slice(0, 7) + "…" : names[i];
    }
  }
  return (values, top = 1, mark = -1, window = null) => {
    rects.forEach((r, i) => {
      const h = top > 0 ? (H * values[i]) / top : 0;
      Object.entries({ y: H - h, height: h, "data-value": values[i] }).forEach(([k, v]) => r.setAttribute(k, v));
      r.classList.toggle("attnc-marked", i === mark);
    });
    const [start, end] = window ?? [0, 0];
    Object.entries({ x: start * bw, width: (end - start) * bw, "data-start": start, "data-end": end }).forEach(([k, v]) =>
      win.setAttribute(k, v),
    );
  };
}

// A heatmap of an (r, c) matrix in cells of px pixels; update(values, lo, hi, outlined row).
function heat(parent, title, role, r, c, px) {
  const box = panel(parent, title, role);
  const canvas = make("canvas", { width: Math.max(1, c * px), height: Math.max(1, r * px) }, box);
  const ctx = canvas.getContext("2d");
  return (values, lo, hi, row = -1) => {
    for (let i = 0; i < r; i++)
      for (let j = 0; j < c; j++) {
        const q = 3 * Math.min(255, Math.max(0, Math.floor(((values[i * c + j] - lo) / (hi - lo || 1)) * 255)));
        ctx.fillStyle = `rgb(${LUT[q]},${LUT[q + 1]},${LUT[q + 2]})`;
        ctx.fillRect(j * px, i * px, px, px);
      }
    if (row >= 0) {
      ctx.strokeStyle = "#e00";
      ctx.lineWidth = 2;
      ctx.strokeRect(1, row * px + 1, c * px - 2, px - 2);
    }
  };
}

const maxOf = (a) => a.reduce((m, v) => Math.max(m, v), 0);
const minOf = (a) => a.reduce((m, v) => Math.min(m, v), 0);

function alignmentView(root, W) {
  const { rows, cols, steps } = W.spec, { a } = W.array("weights"), S = cols.length;
  const windows = W.spec.arrays.windows ? W.array("windows").a : null;
  const body = make("div", { class: "attnc-panels" }, root);
  const out = panel(body, "output", "output");
  const words = rows.map((t, i) => make("span", { class: "attnc-word", "data-index": i }, out, t));
  const update = bars(body, "attention over the source", "bars", S, cols);
  const cell = Math.max(2, Math.min(16, Math.floor(480 / Math.max(S, steps, 1))));
  const grid = heat(body, "alignment (rows: output steps)", "alignment", steps, S, cell);
  const top = maxOf(a);
  const set = stepper(root, steps, (t) => `step ${t}: ${rows[t]}`, (t) => {
    words.forEach((w, i) => (w.className = "attnc-word " + (i < t ? "attnc-past" : i === t ? "attnc-now" : "attnc-future")));
    const row = a.subarray(t * S, (t + 1) * S);
    update(row, maxOf(row), -1, windows ? [windows[2 * t], windows[2 * t + 1]] : null);
    grid(a, 0, top, t);
  });
  root.prepend(root.lastChild); // the slider above the panels
  set(0);
}

function ntmView(root, W) {
  const read = W.array("read"), write = W.array("write"), memory = W.array("memory");
  const [T, N, M] = memory.shape, R = read.shape[1], Wh = write.shape[1];
  const body = make("div", { class: "attnc-panels" }, root);
  const mem = heat(body, `memory (${N} slots x ${M})`, "memory", N, M, Math.max(3, Math.min(18, Math.floor(300 / Math.max(N, M, 1)))));
  const heads = [];
  for (let k = 0; k < Wh; k++) heads.push(["write", k, bars(body, `write head ${k}`, `write-${k}`, N)]);
  for (let k = 0; k < R; k++) heads.push(["read", k, bars(body, `read head ${k}`, `read-${k}`, N)]);
  const stages = W.spec.stages.map((s) => [W.array(`stage:${s}`).a, bars(body, `stage: ${s}`, `stage-${s}`, N)]);
  const lo = minOf(memory.a), hi = Math.max(maxOf(memory.a), lo + 1e-12);
  const set = stepper(root, T, (t) => `step ${t}`, (t) => {
    mem(memory.a.subarray(t * N * M, (t + 1) * N * M), lo, hi);
    for (const [kind, k, update] of heads) {
      const src = kind === "read" ? read : write, n = src.shape[1];
      update(src.a.subarray((t * n + k) * N, (t * n + k + 1) * N), 1);
    }
    for (const [a, update] of stages) update(a.subarray(t * N, (t + 1) * N), 1);
  });
  root.prepend(root.lastChild);
  set(0);
}

function pointerView(root, W) {
  const points = W.array("points").a, p = W.array("pointers"), idx = W.array("indices").a;
  const [T, cols] = p.shape, n = points.length / 2, size = 420, pad = 24;
  const xs = [...Array(n).keys()].map((i) => points[2 * i]), ys = [...Array(n).keys()].map((i) => points[2 * i + 1]);
  const [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
  const span = Math.max(x1 - x0, y1 - y0) || 1;
  const X = (i) => pad + ((xs[i] - x0) / span) * (size - 2 * pad), Y = (i) => size - pad - ((ys[i] - y0) / span) * (size - 2 * pad);
  const body = make("div", { class: "attnc-panels" }, root);
  const plot = svg("svg", { width: size, height: size, class: "attnc-points" }, panel(body, "points (area: the step's probability)", "points"));
  const path = svg("polyline", { class: "attnc-path" }, plot);
  const dots = [...Array(n).keys()].map((i) => svg("circle", { cx: X(i), cy: Y(i), "data-index": i }, plot));
  const end = make("div", { "data-role": "end" }, body);
  const set = stepper(root, T, (t) => `step ${t}: ${idx[t] < 0 ? "ended" : idx[t] === n ? "end" : `point ${idx[t]}`}`, (t) => {
    dots.forEach((d, i) => {
      const q = p.a[t * cols + i];
      Object.entries({ r: 3 + 14 * Math.sqrt(q), "data-p": q }).forEach(([k, v]) => d.setAttribute(k, v));
      d.classList.toggle("attnc-marked", idx[t] === i);
    });
    const chosen = [...idx.subarray(0, t + 1)].filter((i) => i >= 0 && i < n);
    path.setAttribute("points", chosen.map((i) => `${X(i)},${Y(i)}`).join(" "));
    path.dataset.path = chosen.join(",");
    end.textContent = W.spec.end ? `end token: ${p.a[t * cols + n].toPrecision(4)}` : "";
  });
  root.prepend(root.lastChild);
  set(0);
}

function imageView(root, W) {
  const img = W.array("image"), maps = W.array("maps"), [H, Wd] = img.shape, [T, h, w] = maps.shape;
  const zoom = Math.max(1, Math.floor(360 / Math.max(H, Wd)));
  const body = make("div", { class: "attnc-panels" }, root);
  const words = W.spec.positions ? [] : W.spec.rows.map((t, i) => make("span", { class: "attnc-word", "data-index": i }, panel(body, "", "words"), t));
  if (words.length) body.lastChild.querySelector(".attnc-panel-title").remove();
  const canvas = make("canvas", { class: "attnc-image", width: Wd * zoom, height: H * zoom }, body);
  const ctx = canvas.getContext("2d"), picture = document.createElement("canvas"), shade = document.createElement("canvas");
  picture.width = Wd;
  picture.height = H;
  const pix = new ImageData(Wd, H);
  for (let i = 0; i < H * Wd; i++) {
    for (let c = 0; c < 3; c++) pix.data[4 * i + c] = Math.round(255 * img.a[3 * i + c]);
    pix.data[4 * i + 3] = 255;
  }
  picture.getContext("2d").putImageData(pix, 0, 0);
  shade.width = w;
  shade.height = h;
  const set = stepper(root, T, (t) => (W.spec.positions ? `position (${Math.floor(t / w)}, ${t % w})` : `word ${t}: ${W.spec.rows[t]}`), (t) => {
    words.forEach((e, i) => e.classList.toggle("attnc-now", i === t));
    const m = maps.a.subarray(t * h * w, (t + 1) * h * w), top = maxOf(m), dark = new ImageData(w, h);
    for (let i = 0; i < h * w; i++) dark.data[4 * i + 3] = Math.round(255 * 0.85 * (1 - (top > 0 ? m[i] / top : 0)));
    shade.getContext("2d").putImageData(dark, 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(picture, 0, 0, Wd * zoom, H * zoom);
    ctx.imageSmoothingEnabled = true; // the map's cells blend into light, not blocks
    ctx.drawImage(shade, 0, 0, Wd * zoom, H * zoom);
    if (W.spec.positions) {
      const [cx, cy] = [((t % w) + 0.5) * (Wd / w) * zoom, (Math.floor(t / w) + 0.5) * (H / h) * zoom];
      ctx.strokeStyle = "#f0f";
      ctx.lineWidth = 2;
      ctx.strokeRect(cx - 5, cy - 5, 10, 10);
    }
  });
  words.forEach((e, i) => e.addEventListener("click", () => set(i)));
  if (W.spec.positions)
    canvas.addEventListener("click", (e) => {
      const box = canvas.getBoundingClientRect();
      const r = Math.floor(((e.clientY - box.top) / box.height) * h), c = Math.floor(((e.clientX - box.left) / box.width) * w);
      set(Math.min(h - 1, Math.max(0, r)) * w + Math.min(w - 1, Math.max(0, c)));
    });
  root.prepend(root.lastChild);
  set(0);
}

// ------------------------------------------------------------------ entry points

const VIEWS = {
  head: headView, model: modelView, matrix: matrixView,
  alignment: alignmentView, ntm: ntmView, pointer: pointerView, image: imageView,
};

function mount(el, spec, data) {
  el.replaceChildren();
  el.classList.add("attnc-viz");
  VIEWS[spec.kind](el, new Weights(spec, floats(data)));
}

// The standalone page: the spec and the base64 weights in <script> elements.
function mountPage(doc) {
  const spec = JSON.parse(doc.getElementById("attnc-spec").textContent);
  mount(doc.getElementById("attnc-view"), spec, doc.getElementById("attnc-data").textContent);
}

// anywidget: the spec and the weights are the widget's traitlets.
function render({ model, el }) {
  const draw = () => mount(el, model.get("spec"), model.get("data"));
  draw();
  model.on("change:spec", draw);
  model.on("change:data", draw);
  return () => {
    model.off("change:spec", draw);
    model.off("change:data", draw);
  };
}

export default { render };
