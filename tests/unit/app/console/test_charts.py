"""The SVG bar chart: scaled to its largest value, escaped, with a text alternative."""

from __future__ import annotations

import re

from app.console.charts import HEIGHT, PAD_BOTTOM, PAD_TOP, Bar, bars


def _heights(svg: str) -> list[float]:
    return [float(h) for h in re.findall(r'<rect class="bar"[^>]* height="([0-9.]+)"', svg)]


def test_bars_scale_to_the_largest_value_and_keep_their_order() -> None:
    svg = str(bars([Bar("a", 1, "a: 1"), Bar("b", 4, "b: 4"), Bar("c", 0, "c: 0")],
                   caption="Runs"))
    assert _heights(svg) == [(HEIGHT - PAD_TOP - PAD_BOTTOM) / 4, HEIGHT - PAD_TOP - PAD_BOTTOM,
                             0.0]
    assert svg.count("<title>") == 3 and 'role="img"' in svg and 'aria-label="Runs"' in svg
    assert "<desc>Runs: 3 bars, total 5, highest 4 on b</desc>" in svg


def test_an_empty_or_all_zero_chart_draws_no_height_and_says_so() -> None:
    assert _heights(str(bars([Bar("d", 0, "d")] * 3, caption="Cost", unit="usd"))) == [0.0] * 3
    assert "<desc>Cost: 0 bars, total $0.0000</desc>" in str(bars([], caption="Cost", unit="usd"))


def test_labels_and_titles_are_escaped() -> None:
    svg = str(bars([Bar("<b>", 1, '"><script>x</script>')], caption='<img src=x onerror=1>'))
    assert "<script>" not in svg and "<b>" not in svg and "<img" not in svg
    assert "&lt;script&gt;" in svg
