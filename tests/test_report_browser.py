"""report.html in a real browser (headless Chromium): every image loads, nothing is logged
as an error. Skipped where no Chromium is installed (scripts/test.sh installs it where the
machine allows)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fixtures_records import make_meta, synthetic_records

from reports.browser import check_page, find_browser
from reports.build import build_report
from workbench.store import ResultsStore

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(find_browser() is None, reason="no Chromium installed"),
]


def _config(rate: float) -> dict:
    return {
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": rate}},
        "hardware": {"gpu": "h100-sxm", "replicas": 4, "tensor_parallel": 1},
        "slo": {"ttft_ms": 300.0, "tpot_ms": 40.0},
    }


def test_every_image_loads_and_nothing_is_logged(tmp_path: Path) -> None:
    with ResultsStore.open(":memory:") as store:
        for i, rate in enumerate((1.0, 2.0, 4.0)):  # a rate sweep: its figure too
            meta = make_meta(f"sweep-{i}", scenario_name="sweep", config=_config(rate))
            store.write_run(meta, synthetic_records(400, 800, 800, seed=i))
        html = build_report(store, None, tmp_path)
    expected = len(re.findall(r"<img ", html.read_text()))
    check = check_page(html, tmp_path / "shot.png")
    assert expected >= 8 and len(check.images) == expected  # sweep, 3 CDFs, bars, 3 step plots
    assert check.broken_images == []
    assert all(img["width"] > 1000 for img in check.images)  # high-DPI PNGs
    assert check.errors == []
    assert (tmp_path / "shot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_check_sees_broken_images_and_errors(tmp_path: Path) -> None:
    page = tmp_path / "bad.html"
    page.write_text(
        '<!DOCTYPE html><html><body><img alt="corrupt" src="data:image/png;base64,AAAA">'
        '<img alt="missing" src="missing.png"><script>console.error("boom")</script>'
        "</body></html>"
    )
    check = check_page(page)
    assert check.broken_images == ["corrupt", "missing"]
    assert any("boom" in error for error in check.errors)
    assert any("missing.png" in error for error in check.errors)
