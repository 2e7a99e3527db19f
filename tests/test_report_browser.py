"""The report of the digits example's training program, opened in a real browser (headless
Chromium, scripts on): every collective of `f.stats()` is in the table with the same bytes,
a collective's link leads to its op inside the folded loop, the loop unfolds, and a screenshot
is taken.

Needs Chromium and playwright: `apt-get install -y chromium` (Debian/Ubuntu's package) and
`pip install ".[test]"` (playwright); the test skips, saying so, where either is absent."""
import importlib.util
import pathlib
import shutil

import pytest

import strategax as sx

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
INSTALL = ("needs headless Chromium and playwright: install them with `apt-get install -y chromium` and "
           "`pip install playwright` (the test extra)")
try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover - depends on the machine
    sync_playwright = None

pytestmark = pytest.mark.skipif(CHROMIUM is None or sync_playwright is None, reason=INSTALL)

_path = pathlib.Path(__file__).parents[1] / "examples" / "digits.py"
_spec = importlib.util.spec_from_file_location("digits_example_report", _path)
digits = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(digits)


def digits_report(path: pathlib.Path):
    """The digits example's train_steps (its step in an on-device loop) and its report page."""
    strategy = sx.MirroredStrategy()
    (x, y), _ = digits.load_data()
    *_, train_steps = digits.make_training(strategy)
    iterator = iter(strategy.experimental_distribute_dataset(digits.batches(x, y)))
    train_steps.report(iterator, path=path)
    return train_steps.stats(iterator)


def test_the_digits_report_in_a_browser(tmp_path):
    # Intent: the page works as a user clicks through it: the collective table holds f.stats()'s
    # collectives with their bytes (the gradients' bytes by the model's own shapes), a
    # collective's link opens the folded loop around its op and shows it, and the loop unfolds
    # and folds by a click; a screenshot is taken.
    page_path = tmp_path / "digits.html"
    stats = digits_report(page_path)
    params = digits.init_params()
    gradient_bytes = sum(v.nbytes for v in params.values())
    assert stats.collectives[0].payload_bytes == gradient_bytes + 2 * 4  # + the loss's sum and count

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900}, java_script_enabled=True)
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("request", lambda r: errors.append(f"network: {r.url}") if not r.url.startswith("file:") else None)
        page.goto(page_path.as_uri())

        rows = page.locator("tr.collective")
        assert rows.count() == stats.count
        for k, c in enumerate(stats.collectives):
            row = rows.nth(k)
            assert row.locator("td").nth(1).inner_text() == c.op
            assert int(row.locator("td.tensor-bytes").inner_text().replace(",", "")) == c.payload_bytes
            assert int(row.locator("td.bytes-moved").inner_text().replace(",", "")) == c.bytes_moved

        loop = page.locator('#ir details.region[data-op="jax.while"]')
        assert loop.count() == 1 and not loop.evaluate("d => d.open")  # folded at first
        row0 = rows.nth(0)
        target_id = row0.locator("td a").get_attribute("href").lstrip("#")
        op = page.locator(f'[id="{target_id}"]')
        assert not op.is_visible()  # inside the folded loop
        row0.locator("td a").click()
        page.wait_for_function(f"document.getElementById('{target_id}').classList.contains('target')")
        assert op.is_visible() and loop.evaluate("d => d.open")  # the script unfolded the loop
        assert stats.collectives[0].op in op.inner_text()
        assert "collective #0" in op.inner_text()

        loop.locator("summary").first.click()  # fold, then unfold by hand
        assert not loop.evaluate("d => d.open") and not op.is_visible()
        loop.locator("summary").first.click()
        assert loop.evaluate("d => d.open") and op.is_visible()
        shot = tmp_path / "report.png"
        page.screenshot(path=str(shot))
        browser.close()
    assert not errors, errors
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
