"""attnc.viz's widget in a real JupyterLab: a Lab server (jupyterlab, a test
dependency) serves a notebook whose cell makes a head view; headless
chromium (Debian's chromium and chromium-driver, as for
tests/test_viz_browser.py) opens it, runs the cell as a user does (Shift +
Enter) and waits for anywidget to render attnc's script in the output;
then hovers a token and reads the drawn lines back against the weights.
Every request the page makes goes to the local server (no CDN), and the
console shows no error. About half a minute, most of it Lab starting.
"""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import nbformat
import numpy as np
import pytest
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait
from test_viz_browser import start_chromium

import attnc

# one layer (B, H, L, S) = (1, 2, 3, 3)
WEIGHTS = [[[[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]], [[0.1, 0.1, 0.8], [0.3, 0.4, 0.3], [0.6, 0.2, 0.2]]]]
CELL = f"import numpy as np, attnc.viz\nattnc.viz.head_view([np.array({WEIGHTS})], ['the', 'cat', 'sat'])"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on a free local port, its root holding view.ipynb
    (one cell: CELL); its kernel imports this checkout's attnc."""
    root = tmp_path_factory.mktemp("lab")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(CELL)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, root / "view.ipynb")
    port = free_port()
    package_parent = os.path.dirname(os.path.dirname(attnc.__file__))
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([package_parent, os.environ.get("PYTHONPATH", "")]),
        JUPYTER_CONFIG_DIR=str(root / ".config"),  # none of the user's settings or workspaces
        JUPYTER_RUNTIME_DIR=str(root / ".runtime"),
        JUPYTERLAB_WORKSPACES_DIR=str(root / ".workspaces"),
    )
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1"]
    cmd += [f"--port={port}", "--IdentityProvider.token=", f"--ServerApp.root_dir={root}", "--LabApp.news_url="]
    with open(root / "server.log", "w") as log:
        server = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(url + "/api/status", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("JupyterLab did not start:\n" + (root / "server.log").read_text()[-3000:])
                time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        server.wait(30)


@pytest.fixture(scope="module")
def chromium():
    driver = start_chromium(1200)  # no network blocking: Lab itself is served over http
    yield driver
    driver.quit()


def test_a_head_view_renders_and_answers_in_jupyterlab(lab, chromium, tmp_path):
    d = chromium
    d.get(lab + "/lab/tree/view.ipynb")
    wait = WebDriverWait(d, 120)
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".jp-Notebook .jp-Cell .jp-InputPrompt"))
    wait.until(lambda d: "Idle" in d.find_element(By.ID, "jp-main-statusbar").text)  # the kernel is up
    d.find_element(By.CSS_SELECTOR, ".jp-Cell .jp-InputPrompt").click()
    ActionChains(d).key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(Keys.SHIFT).perform()
    rendered, failed = ".jp-OutputArea canvas.attnc-lines", '.jp-OutputArea [data-mime-type$="error"]'
    try:
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, f"{rendered}, {failed}"))
    except TimeoutException:
        d.save_screenshot(str(tmp_path / "lab.png"))
        raise AssertionError(f"no output in time (screenshot {tmp_path / 'lab.png'})") from None
    out = d.find_element(By.CSS_SELECTOR, ".jp-OutputArea")
    assert not out.find_elements(By.CSS_SELECTOR, failed[len(".jp-OutputArea ") :]), out.text
    assert [t.text for t in out.find_elements(By.CSS_SELECTOR, '.attnc-token[data-side="col"] text')] == [
        "the",
        "cat",
        "sat",
    ]
    w = np.array(WEIGHTS)[0]  # (H, L, S)

    def lines():
        found = d.execute_script("return document.querySelector('.jp-OutputArea canvas.attnc-lines').attncLines")
        return {(h, i, j): weight for h, i, j, weight in found}

    def expected(rows):
        return {(h, i, j): w[h, i, j] for h in range(2) for i in rows for j in range(3) if w[h, i, j] >= 0.01}

    got = lines()
    assert got.keys() == expected(range(3)).keys()
    ActionChains(d).move_to_element(out.find_element(By.CSS_SELECTOR, '[data-side="row"][data-index="2"]')).perform()
    got, want = lines(), expected([2])
    assert got.keys() == want.keys()
    np.testing.assert_allclose([got[k] for k in want], list(want.values()), rtol=1e-6)

    events = [json.loads(e["message"])["message"] for e in d.get_log("performance")]
    urls = {m["params"]["request"]["url"] for m in events if m["method"] == "Network.requestWillBeSent"}
    away = sorted(u for u in urls if not u.startswith((lab, "data:", "blob:")))
    assert away == [], f"requests beyond the local server: {away}"
    errors = [e["message"] for e in d.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == [], errors
