"""The documentation site builds in strict mode and renders: mkdocs builds it into a scratch
directory, a local HTTP server serves it, and headless Chromium loads getting-started and one
guide, takes a screenshot of each into build/docs-shots/ and dumps the DOM. A page counts as
rendered when the server answered it and every stylesheet and script it asked for with 200,
its DOM has the page's title, the site's navigation and the page's heading, and the
screenshot is not blank. Chromium comes from `make docs-sysdeps` (apt); without it, or
without mkdocs (`make docs-deps`), the test skips and says which."""
from __future__ import annotations

import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "build" / "docs-shots"
# (page, its title: the nav label, its first heading)
PAGES = [("getting-started.html", "Getting started", "Getting started"),
         ("train.html", "TieredAdamW, Trainer, DeepSpeed", "Training offload")]
BROWSER = next((b for b in ("chromium", "chromium-browser", "google-chrome")
                if shutil.which(b)), None)


class _Recorder(http.server.SimpleHTTPRequestHandler):
    """Serves the site and records (path, status) of every request."""
    seen: list[tuple[str, int]] = []

    def log_request(self, code="-", size="-"):
        self.seen.append((self.path, int(code)))

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    pytest.importorskip("mkdocs", reason="mkdocs is not installed: make docs-deps")
    pytest.importorskip("mkdocstrings", reason="mkdocstrings is not installed: make docs-deps")
    out = tmp_path_factory.mktemp("site")
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert r.returncode == 0, f"mkdocs build --strict failed:\n{r.stderr[-4000:]}"
    return out


@pytest.fixture(scope="module")
def served(site):
    handler = lambda *a, **k: _Recorder(*a, directory=str(site), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join(timeout=10)


def chromium(*args: str) -> subprocess.CompletedProcess:
    argv = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-dev-shm-usage", "--window-size=1280,900", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=90)


def not_blank(png: Path) -> bool:
    import matplotlib.image as mpimg
    pixels = mpimg.imread(png)
    return pixels.shape[0] >= 800 and float(pixels[..., :3].std()) > 0.05


@pytest.mark.slow  # a mkdocs build and two Chromium starts: about 20 s
@pytest.mark.skipif(BROWSER is None, reason="no Chromium: make docs-sysdeps installs it (apt)")
@pytest.mark.parametrize("page,title,heading", PAGES)
def test_the_page_renders_in_a_browser(served, page, title, heading):
    SHOTS.mkdir(parents=True, exist_ok=True)
    shot = SHOTS / page.replace(".html", ".png")
    shot.unlink(missing_ok=True)
    _Recorder.seen.clear()
    r = chromium(f"--screenshot={shot}", f"{served}/{page}")
    assert shot.exists(), f"no screenshot of {page}:\n{r.stderr[-2000:]}"
    dom = chromium("--dump-dom", f"{served}/{page}").stdout
    assert (f"/{page}", 200) in _Recorder.seen, _Recorder.seen
    failed = [(p, c) for p, c in _Recorder.seen if c != 200 and p.endswith((".css", ".js", ".html"))]
    assert failed == [], f"{page} asked for what the site lacks: {failed}"
    assert f"<title>{title} - cxlkit</title>" in dom, dom[:500]
    assert 'class="md-nav' in dom and "Getting started" in dom and "Benchmarks" in dom
    assert re.search(rf"<h1[^>]*>{re.escape(heading)}", dom), f"no heading {heading!r}"
    assert "404 - Not found" not in dom
    assert not_blank(shot), f"{shot}: the screenshot is blank"
