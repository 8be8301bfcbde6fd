"""attnc.viz's saved pages in a real browser: Debian's chromium, headless,
driven by selenium through chromedriver (.ci/run installs both packages).

Each page must load with no request leaving it (the browser records every
request it sends, and blocks any to the network) and no console error;
then the test works it as a user would (selects a layer and heads, hovers
a token, clicks a thumbnail, zooms a 4,096-token matrix) and reads the
page's state back from its DOM, comparing with the weights computed here.
Screenshots must not be blank (their pixels vary).
"""

import io
import json
import re
import shutil

import numpy as np
import pytest
from selenium import webdriver
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select, WebDriverWait

import attnc.models
import attnc.viz as viz

NETWORK = ["http://*", "https://*", "ws://*", "wss://*", "ftp://*"]


def start_chromium(width: int) -> webdriver.Chrome:
    """Debian's chromium, headless, width x 900, logging the console and the
    network (tests/test_viz_jupyter.py starts one too)."""
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not driver_path:
        pytest.fail(
            "the browser tests need Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in [
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},900",
    ]:
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver_path))


@pytest.fixture(scope="module")
def browser():
    driver = start_chromium(1000)
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.setBlockedURLs", {"urls": NETWORK})
    yield driver
    driver.quit()


def console_problems(driver):
    """The console's warnings and errors since the last look."""
    return [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]


def open_page(driver, path):
    """Load a page: (the URLs it requested, those the browser blocked, its
    console's warnings and errors)."""
    driver.get_log("performance"), driver.get_log("browser")  # forget what came before
    driver.get(path.as_uri())
    events = [json.loads(e["message"])["message"] for e in driver.get_log("performance")]
    sent = {
        m["params"]["requestId"]: m["params"]["request"]["url"]
        for m in events
        if m["method"] == "Network.requestWillBeSent"
    }
    failed = [m["params"] for m in events if m["method"] == "Network.loadingFailed"]
    blocked = [sent[f["requestId"]] for f in failed if f.get("blockedReason")]
    return list(sent.values()), blocked, console_problems(driver)


def open_offline(driver, path):
    requests, _, problems = open_page(driver, path)
    assert requests == [path.as_uri()], f"the page requested {requests}"
    assert problems == [], problems


def assert_not_blank(driver, path):
    from PIL import Image

    driver.save_screenshot(str(path))
    rgb = np.asarray(Image.open(io.BytesIO(path.read_bytes())).convert("RGB"), np.int64)
    pixels = (rgb[..., 0] << 16 | rgb[..., 1] << 8 | rgb[..., 2]).ravel()
    colours, counts = np.unique(pixels, return_counts=True)
    drawn = 1 - counts.max() / len(pixels)  # the pixels not of the background's colour
    assert drawn > 0.002 and len(colours) > 20, f"{path.name} is blank ({drawn:.2%} drawn, {len(colours)} colours)"


def test_the_checks_see_a_request_and_a_console_error(browser, tmp_path):
    """The two checks every page passes can fail: a page that fetches an
    image and logs an error is caught by both (and its request is blocked)."""
    page = tmp_path / "bad.html"
    page.write_text('<img src="http://example.invalid/x.png"><script>console.error("broken")</script>')
    requests, blocked, problems = open_page(browser, page)
    assert requests == [page.as_uri(), "http://example.invalid/x.png"]
    assert blocked == ["http://example.invalid/x.png"]
    assert [e["message"].split(" ", 2)[-1] for e in problems] == ['"broken"']


def lines(driver):
    """The head view's drawn lines as {(head, row, col): opacity} (the page
    keeps them on its lines canvas, one entry a stroke)."""
    found = driver.execute_script("return document.querySelector('canvas.attnc-lines').attncLines")
    return {(h, i, j): w for h, i, j, w in found}


def expected_lines(w, heads, rows=None, cols=None, min_weight=0.01):
    """{(head, row, col): weight} of the lines a head view draws for (H, L, S) weights w."""
    H, L, S = w.shape
    return {
        (h, i, j): float(w[h, i, j])
        for h in heads
        for i in (range(L) if rows is None else rows)
        for j in (range(S) if cols is None else cols)
        if w[h, i, j] >= min_weight
    }


def assert_lines(driver, expected):
    got = lines(driver)
    assert got.keys() == expected.keys()
    np.testing.assert_allclose([got[k] for k in expected], list(expected.values()), rtol=1e-6)


def test_head_view_layer_and_heads_selected_and_a_token_hovered(browser, tmp_path):
    rng = np.random.default_rng(0)
    layers = [rng.dirichlet(np.full(7, 0.3), (1, 4, 7)).astype(np.float32) for _ in range(3)]
    tokens = ["[CLS]", "the", "cat", "</script>", "on", "the", "mat"]
    viz.head_view(layers, tokens).save(tmp_path / "head.html")
    open_offline(browser, tmp_path / "head.html")
    root = browser.find_element(By.ID, "attnc-view")
    assert [t.text for t in root.find_elements(By.CSS_SELECTOR, '.attnc-token[data-side="col"] text')] == tokens
    assert_lines(browser, expected_lines(layers[0][0], range(4)))

    Select(root.find_element(By.CSS_SELECTOR, 'select[data-role="layer"]')).select_by_visible_text("2")
    heads = root.find_elements(By.CSS_SELECTOR, ".attnc-head")
    ActionChains(browser).double_click(heads[1]).perform()  # head 1 alone
    heads[3].click()  # and head 3
    assert (root.get_attribute("data-layer"), root.get_attribute("data-heads")) == ("2", "1,3")
    w = layers[2][0]
    assert_lines(browser, expected_lines(w, [1, 3]))

    ActionChains(browser).move_to_element(
        root.find_element(By.CSS_SELECTOR, '[data-side="row"][data-index="4"]')
    ).perform()
    assert_lines(browser, expected_lines(w, [1, 3], rows=[4]))
    # and on the canvas: at its right edge, ink at exactly the keys row 4 sends a line to
    ink = browser.execute_script(
        "const c = document.querySelector('canvas.attnc-lines');"
        "const column = c.getContext('2d').getImageData(c.width - 1, 0, 1, c.height).data;"
        "return [...Array(7).keys()].map(j => column[4 * (j * 18 + 9) + 3]);"
    )
    assert [a > 0 for a in ink] == [bool((w[[1, 3], 4, j] >= 0.01).any()) for j in range(7)], ink
    shaded = values(browser, '.attnc-token[data-side="col"]', "data-weight")
    np.testing.assert_allclose(shaded, w[[1, 3], 4].max(0), rtol=1e-6)  # the keys shaded by their weight
    active = root.find_elements(By.CSS_SELECTOR, ".attnc-token.attnc-active")
    assert [(a.get_attribute("data-side"), a.get_attribute("data-index")) for a in active] == [("row", "4")]
    assert_not_blank(browser, tmp_path / "head_hover.png")

    ActionChains(browser).move_to_element(
        root.find_element(By.CSS_SELECTOR, '[data-side="col"][data-index="2"]')
    ).perform()
    assert_lines(browser, expected_lines(w, [1, 3], cols=[2]))
    ActionChains(browser).move_to_element(heads[0]).perform()  # off the tokens: every line again
    assert_lines(browser, expected_lines(w, [1, 3]))
    assert console_problems(browser) == []


def test_model_view_opens_a_thumbnail_and_cross_attention_is_labelled(browser, tmp_path):
    rng = np.random.default_rng(1)
    src, tgt = ["ich", "bin", "ein", "Berliner"], ["<s>", "I", "am"]
    weights = {
        "encoder": [rng.dirichlet(np.ones(4), (1, 3, 4)) for _ in range(2)],
        "decoder_cross": [rng.dirichlet(np.full(4, 0.5), (1, 3, 3)) for _ in range(2)],
    }
    viz.model_view(weights, src, target_tokens=tgt).save(tmp_path / "model.html")
    open_offline(browser, tmp_path / "model.html")
    root = browser.find_element(By.ID, "attnc-view")
    assert len(root.find_elements(By.CSS_SELECTOR, "canvas.attnc-thumb")) == 2 * 3
    Select(root.find_element(By.CSS_SELECTOR, 'select[data-role="attention"]')).select_by_visible_text("decoder_cross")
    assert_not_blank(browser, tmp_path / "model_grid.png")

    root.find_element(By.CSS_SELECTOR, 'canvas.attnc-thumb[data-layer="1"][data-head="2"]').click()
    assert [root.get_attribute(k) for k in ("data-attention", "data-layer", "data-heads")] == ["1", "1", "2"]
    assert [t.text for t in root.find_elements(By.CSS_SELECTOR, '[data-side="row"] text')] == tgt
    assert [t.text for t in root.find_elements(By.CSS_SELECTOR, '[data-side="col"] text')] == src
    assert_lines(browser, expected_lines(weights["decoder_cross"][1][0], [2]))
    assert_not_blank(browser, tmp_path / "model_open.png")
    root.find_element(By.CSS_SELECTOR, 'button[data-role="back"]').click()
    assert len(root.find_elements(By.CSS_SELECTOR, "canvas.attnc-thumb")) == 2 * 3
    assert console_problems(browser) == []


# One wheel event on the matrix and the next animation frame, timed in the page.
ZOOM = """
const done = arguments[arguments.length - 1], [x, y, deltaY] = [arguments[0], arguments[1], arguments[2]];
const c = document.querySelector("canvas.attnc-matrix"), box = c.getBoundingClientRect();
const t0 = performance.now();
const at = {clientX: box.left + x, clientY: box.top + y};
c.dispatchEvent(new WheelEvent("wheel", {deltaY, ...at, bubbles: true, cancelable: true}));
requestAnimationFrame(() => done([performance.now() - t0, {...c.dataset}]));
"""
# The readout with the pointer at each of the plot's points [(x, y), ...].
HOVER = """
const c = document.querySelector("canvas.attnc-matrix"), box = c.getBoundingClientRect();
return arguments[0].map(([x, y]) => {
  c.dispatchEvent(new MouseEvent("mousemove", {clientX: box.left + 96 + x, clientY: box.top + 96 + y, bubbles: true}));
  return document.querySelector('[data-role="readout"]').textContent;
});
"""
MARGIN = 96  # viz.js's MARGIN: the plot's offset in the canvas (as HOVER adds it)
POOLED = re.compile(r"rows (\d+)–(\d+), cols (\d+)–(\d+): (max|mean) (\S+) \(zoom in for single cells\)")


def long_attention(n):
    """(1, n, n) float32 rows on the simplex: a local band, a few global columns, noise."""
    rng = np.random.default_rng(2)
    w = rng.random((n, n), np.float32) * 0.02
    i = np.arange(n)
    for d in range(-3, 4):
        w[i, (i + d) % n] += 1.0 / (1 + abs(d))
    w[:, [0, n // 3, n // 2]] += 0.5
    return (w / w.sum(1, keepdims=True))[None]


def test_matrix_view_zooms_a_4096_token_input_within_a_second(browser, tmp_path):
    n = 4096
    w = long_attention(n)
    page = tmp_path / "matrix.html"
    viz.matrix_view(w, [f"tok{k}" for k in range(n)]).save(page)
    print(f"matrix view of {n} tokens: {page.stat().st_size / 2**20:.1f} MiB")
    open_offline(browser, page)
    canvas = browser.find_element(By.CSS_SELECTOR, "canvas.attnc-matrix")
    state = {k: canvas.get_attribute(f"data-{k}") for k in ("level", "scale")}
    assert state == {"level": "3", "scale": str(640 / n)}  # 8 x 8 cells a pixel: level 3 of the pyramid

    # Zoomed out, the readout is the pyramid's max (then mean) over the 8 x 8
    # block under the pointer: at points over the plot, on the band and on a
    # global column (col 2048 at x = 320), and at the edges.
    points = [(x + 0.5, y + 0.5) for x in (1, 37, 320, 321, 500, 638) for y in (1, 81, 320, 411, 638)]
    for pool, reduce in (("max", np.max), ("mean", np.mean)):
        Select(browser.find_element(By.CSS_SELECTOR, 'select[data-role="pool"]')).select_by_visible_text(pool)
        for (x, y), text in zip(points, browser.execute_script(HOVER, points)):
            r0, r1, c0, c1, how, value = POOLED.fullmatch(text).groups()
            r0, r1, c0, c1 = int(r0), int(r1) + 1, int(c0), int(c1) + 1
            assert (r0 % 8, r1 - r0, c0 % 8, c1 - c0, how) == (0, 8, 0, 8, pool)
            assert abs(r0 + 4 - y / 0.15625) <= 10 and abs(c0 + 4 - x / 0.15625) <= 10  # (pixels round)
            np.testing.assert_allclose(float(value), reduce(w[0, r0:r1, c0:c1]), rtol=1e-5, err_msg=text)
    assert_not_blank(browser, tmp_path / "matrix_fit.png")

    # Zoom in about a point until single cells show, each step timed in the page.
    times, levels = [], []
    for _ in range(4):
        ms, data = browser.execute_async_script(ZOOM, MARGIN + 320, MARGIN + 320, -600)
        times.append(ms)
        levels.append(int(data["level"]))
    print(f"zoom steps (ms, wheel event to the next frame): {[round(t) for t in times]}")
    assert max(times) < 1000, times
    assert levels == sorted(levels, reverse=True) and levels[-1] == 0, levels
    scale, ox, oy = (float(canvas.get_attribute(f"data-{k}")) for k in ("scale", "ox", "oy"))
    assert scale > 9  # the cells hold their labels

    # Dragging pans: 100 pixels left and 50 up move the view 100 / scale cells right and 50 / scale down.
    ActionChains(browser).move_to_element(canvas).click_and_hold().move_by_offset(-100, -50).release().perform()
    moved = [float(canvas.get_attribute(f"data-{k}")) - v for k, v in (("ox", ox), ("oy", oy))]
    np.testing.assert_allclose(moved, [100 / scale, 50 / scale], rtol=1e-6)
    ox, oy = ox + moved[0], oy + moved[1]

    # Zoomed in, the readout is one cell's exact weight.
    x, y = 200.5, 100.5
    r, c = int(oy + y / scale), int(ox + x / scale)
    (text,) = browser.execute_script(HOVER, [(x, y)])
    assert text.startswith(f"tok{r} → tok{c}   w[{r}, {c}] = "), text
    np.testing.assert_allclose(float(text.rsplit("= ", 1)[1]), w[0, r, c], rtol=1e-5)
    assert_not_blank(browser, tmp_path / "matrix_zoomed.png")
    assert console_problems(browser) == []  # nothing went wrong on the way


def values(driver, selector, attribute):
    """An attribute of every element the selector finds, as floats."""
    script = f"return [...document.querySelectorAll('{selector}')].map(e => +e.getAttribute('{attribute}'))"
    return np.array(driver.execute_script(script))


def test_step_views_walk_through_a_run(browser, tmp_path):
    """The slider, its buttons and the arrow keys move the step; each panel
    then draws that step's values, read back here against the arrays."""
    rng = np.random.default_rng(3)
    root = lambda: browser.find_element(By.ID, "attnc-view")  # noqa: E731  (each page has its own)
    step = lambda: int(root().get_attribute("data-step"))  # noqa: E731

    w = rng.dirichlet(np.ones(6), 4).astype(np.float32)
    windows = np.array([[0, 3], [1, 4], [2, 5], [3, 6]])
    viz.alignment_view(w, list("abcdef"), ["w", "x", "y", "z"], windows=windows).save(tmp_path / "alignment.html")
    open_offline(browser, tmp_path / "alignment.html")
    for _ in range(3):
        root().find_element(By.CSS_SELECTOR, 'button[data-role="next"]').click()
    root().find_element(By.CSS_SELECTOR, 'button[data-role="prev"]').click()
    assert step() == 2
    np.testing.assert_allclose(values(browser, ".attnc-bar-rect", "data-value"), w[2], rtol=1e-6)
    assert [values(browser, ".attnc-window", k)[0] for k in ("data-start", "data-end")] == [2, 5]
    classes = [e.get_attribute("class") for e in root().find_elements(By.CSS_SELECTOR, ".attnc-word")]
    assert [c.split()[-1] for c in classes] == ["attnc-past", "attnc-past", "attnc-now", "attnc-future"]
    assert_not_blank(browser, tmp_path / "alignment.png")

    m = attnc.models.NTM(3, 2, controller_size=8, memory_slots=8, memory_width=5, seed=0)
    _, trace = m(rng.random((1, 6, 3)).astype(np.float32), return_trace=True)
    viz.ntm_view(trace).save(tmp_path / "ntm.html")
    open_offline(browser, tmp_path / "ntm.html")
    root().find_element(By.CSS_SELECTOR, 'input[data-role="step"]').send_keys(Keys.ARROW_RIGHT * 4)
    assert step() == 4
    np.testing.assert_allclose(
        values(browser, '[data-role="read-0"] rect[data-index]', "data-value"), trace.read_weights[0, 4, 0], rtol=1e-6
    )
    np.testing.assert_allclose(
        values(browser, '[data-role="write-0"] rect[data-index]', "data-value"), trace.write_weights[0, 4, 0], rtol=1e-6
    )
    assert_not_blank(browser, tmp_path / "ntm.png")

    net = attnc.models.PointerNet(2, 8, seed=0)
    pts = rng.random((1, 7, 2)).astype(np.float32)
    out = net.generate(pts, constraint="tour")
    viz.pointer_view(pts, out).save(tmp_path / "pointer.html")
    open_offline(browser, tmp_path / "pointer.html")
    root().find_element(By.CSS_SELECTOR, 'input[data-role="step"]').send_keys(Keys.ARROW_RIGHT * 3)
    np.testing.assert_allclose(values(browser, "circle", "data-p"), out.pointers[0, 3, :7], rtol=1e-6)
    path = browser.find_element(By.CSS_SELECTOR, ".attnc-path").get_attribute("data-path")
    assert path == ",".join(str(i) for i in out.indices[0, :4])
    assert_not_blank(browser, tmp_path / "pointer.png")

    image = np.zeros((32, 32, 3))
    image[8:24, 8:24, 0], image[..., 2] = 1, np.linspace(0, 1, 32)
    viz.image_view(image, rng.dirichlet(np.ones(16), 3).reshape(3, 4, 4), ["a", "red", "ball"]).save(
        tmp_path / "caption.html"
    )
    open_offline(browser, tmp_path / "caption.html")
    root().find_elements(By.CSS_SELECTOR, ".attnc-word")[2].click()
    assert step() == 2
    assert_not_blank(browser, tmp_path / "caption.png")
    viz.image_view(image, rng.dirichlet(np.ones(64), 64), grid=(8, 8)).save(tmp_path / "sagan.html")
    open_offline(browser, tmp_path / "sagan.html")
    canvas = root().find_element(By.CSS_SELECTOR, "canvas.attnc-image")
    size = canvas.size["width"]  # square: 32 x 32 pixels drawn at 11x
    ActionChains(browser).move_to_element_with_offset(
        canvas, -size // 2 + size * 5 // 8 + 3, -size // 2 + size * 2 // 8 + 3
    ).click().perform()
    assert step() == 2 * 8 + 5  # row 2, column 5 of the 8 x 8 grid
    assert_not_blank(browser, tmp_path / "sagan.png")
    assert console_problems(browser) == []


EMPTY = {
    "head": lambda: viz.head_view(np.zeros((2, 0, 0))),
    "model": lambda: viz.model_view(np.zeros((0, 3, 3))),
    "matrix": lambda: viz.matrix_view(np.zeros((1, 0, 5)), target_tokens=[]),
    "alignment": lambda: viz.alignment_view(np.zeros((0, 4))),
    "ntm": lambda: viz.ntm_view((np.zeros((0, 1, 4)), np.zeros((0, 1, 4)), np.zeros((0, 4, 3)))),
    "pointer": lambda: viz.pointer_view(np.zeros((3, 2)), np.zeros((0, 3))),
    "image": lambda: viz.image_view(np.zeros((4, 4)), np.zeros((0, 2, 2)), []),
}


def test_empty_views_open_without_error(browser, tmp_path):
    """Zero heads, tokens or steps: the page opens, draws nothing and logs no error."""
    for kind, make in EMPTY.items():
        make().save(tmp_path / f"{kind}.html")
        open_offline(browser, tmp_path / f"{kind}.html")
        assert browser.find_element(By.ID, "attnc-view").get_attribute("class") == "attnc-viz", kind


# anywidget's side of a view: the module imported as a notebook front end
# does (from a blob), render() called with a model holding the widget's
# traitlets, the weights a DataView into a larger buffer at an odd offset.
WIDGET_PAGE = """<!DOCTYPE html><html><head><style>{css}</style></head><body><div id="attnc-view"></div>
<script type="module">
const source = {js}, spec = {spec}, bytes = Uint8Array.from(atob("{payload}"), (c) => c.charCodeAt(0));
const buffer = new Uint8Array(bytes.length + 3);
buffer.set(bytes, 1);
const data = new DataView(buffer.buffer, 1, bytes.length);
const module = await import(URL.createObjectURL(new Blob([source], {{ type: "text/javascript" }})));
const handlers = {{}};
const model = {{ get: (k) => ({{ spec, data }})[k], on: (e, f) => (handlers[e] = f), off: (e) => delete handlers[e] }};
const cleanup = module.default.render({{ model, el: document.getElementById("attnc-view") }});
const subscribed = Object.keys(handlers);
cleanup();
window.widgetState = [subscribed, Object.keys(handlers)];
</script></body></html>"""


def test_the_widget_module_renders_the_widgets_traitlets(browser, tmp_path):
    import base64

    rng = np.random.default_rng(4)
    layers = [rng.dirichlet(np.full(5, 0.3), (1, 2, 5)).astype(np.float32) for _ in range(2)]
    widget = viz.head_view(layers, list("abcde")).widget()
    page = tmp_path / "widget.html"
    page.write_text(
        WIDGET_PAGE.format(
            css=widget._css,
            js=json.dumps(widget._esm),
            spec=json.dumps(widget.spec),
            payload=base64.b64encode(widget.data).decode(),
        )
    )
    requests, _, problems = open_page(browser, page)
    assert [u.split(":")[0] for u in requests] == ["file", "blob"] and problems == []
    WebDriverWait(browser, 5).until(lambda d: d.execute_script("return window.widgetState"))  # (top-level await)
    subscribed, left = browser.execute_script("return window.widgetState")
    assert (sorted(subscribed), left) == (["change:data", "change:spec"], [])  # render() redraws on changes
    assert_lines(browser, expected_lines(layers[0][0], [0, 1]))
