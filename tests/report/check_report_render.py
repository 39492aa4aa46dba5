#!/usr/bin/env python3
"""Renders `gpumem report`'s page in headless Chromium and checks what a person would see.

    check_report_render.py GPUMEM_CLI LOG WORKDIR [--html PAGE] [--resources pool,arena,binning]

Runs `GPUMEM_CLI report LOG --simulate -o WORKDIR/report.html` (or takes PAGE as it is with --html), then
Chromium three times:
- on a copy of the page with a script added at its end (WORKDIR/report-geometry.html; the page itself has
  none), --dump-dom: the script measures every chart's rendered text and bars (getBoundingClientRect) and
  writes what overlaps into the DOM: no label may cover a bar, nor another label (rotated labels are
  checked against bars only: their bounding boxes are not their shapes);
- --dump-dom on the page: it parses, the chart ids, the summary table and every resource name are in it;
- --screenshot at 1280x4000 into WORKDIR/report.png, which is decoded here (zlib only, no imaging library)
  and checked: its size, that it is not blank, and that pixels of each series' colour (read from the
  page's own stroke/fill attributes) are on it, so the charts were drawn.
The screenshot stays for a person to look at; its path is printed. With --geometry-only, only the first
check runs (on any page with charts: tests use it to show that an overlap is caught).

Exit status: 0 passed; 1 failed (the message says what); 77 no Chromium found (chromium, chromium-browser,
google-chrome), reported as skipped by ctest, unless GPUMEM_REQUIRE_CHROMIUM=1 makes that a failure too.
Standard library only.
"""

import argparse
import collections
import json
import os
import pathlib
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from html import unescape as html_unescape

WIDTH, HEIGHT = 1280, 4000
CHART_IDS = ("chart-over-time", "chart-fragmentation", "chart-sizes", "chart-latency")
SKIP = 77
# A series' colour "is on the page" when this many pixels are within COLOUR_TOLERANCE of it in every channel.
# Its swatches alone (the summary table's 11 x 11 px, a legend's 18 x 4 px) stay well under it; one line
# across a chart is about 1700 px; anti-aliased edges are not counted.
MIN_COLOUR_PIXELS = 500
COLOUR_TOLERANCE = 12
# Text, axes and charts: a rendered report has well over this share of pixels that are not (near) white.
MIN_INK_SHARE = 0.03


class CheckFailed(Exception):
    """A check failed; the message says which and why."""


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def run(command, what, timeout=180):
    """Runs `command`; returns its stdout, or raises CheckFailed with its output."""
    try:
        done = subprocess.run(command, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise CheckFailed(f"{what} did not finish in {timeout} s: {' '.join(map(str, command))}") from None
    except OSError as e:
        raise CheckFailed(f"{what} could not be started: {e}") from None
    if done.returncode != 0:
        raise CheckFailed(f"{what} failed with exit status {done.returncode}: {' '.join(map(str, command))}\n"
                          f"{done.stdout.decode(errors='replace')}{done.stderr.decode(errors='replace')}")
    return done.stdout


def chromium_command(chromium, profile, *options):
    # A profile of its own (a temporary directory): no state shared with other runs or a person's browser.
    return [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--no-first-run", "--disable-dev-shm-usage", f"--user-data-dir={profile}", *options]


# --- PNG decoding (RFC 2083): chunks, zlib, the five filter types; colour types 2 and 6 at 8 bits ---------

def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def unfilter(kind, line, prior, bpp):
    """Undoes one scanline's filter in place (`line` a bytearray, `prior` the decoded line above)."""
    n = len(line)
    if kind == 0:
        return
    if kind == 1:  # Sub
        for i in range(bpp, n):
            line[i] = (line[i] + line[i - bpp]) & 0xFF
    elif kind == 2:  # Up
        for i in range(n):
            line[i] = (line[i] + prior[i]) & 0xFF
    elif kind == 3:  # Average
        for i in range(n):
            left = line[i - bpp] if i >= bpp else 0
            line[i] = (line[i] + ((left + prior[i]) >> 1)) & 0xFF
    elif kind == 4:  # Paeth
        for i in range(n):
            left = line[i - bpp] if i >= bpp else 0
            upper_left = prior[i - bpp] if i >= bpp else 0
            line[i] = (line[i] + paeth(left, prior[i], upper_left)) & 0xFF
    else:
        raise CheckFailed(f"PNG: unknown filter type {kind}")


def decode_png(data):
    """Returns (width, height, rows), each row a bytes object of RGB triples."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise CheckFailed("PNG: bad signature")
    pos, header, idat = 8, None, bytearray()
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if len(body) != length:
            raise CheckFailed("PNG: truncated chunk")
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
        pos += 12 + length
    if header is None:
        raise CheckFailed("PNG: no IHDR")
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in (2, 6) or interlace != 0:
        raise CheckFailed(f"PNG: unsupported format (bit depth {depth}, colour type {colour}, interlace "
                          f"{interlace}); supported: 8-bit RGB or RGBA, not interlaced")
    bpp = 3 if colour == 2 else 4
    stride = width * bpp
    raw = zlib.decompress(bytes(idat))
    if len(raw) != height * (stride + 1):
        raise CheckFailed(f"PNG: {len(raw)} bytes of pixel data for {width}x{height}")
    rows, prior = [], bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        line = bytearray(raw[start + 1:start + 1 + stride])
        unfilter(raw[start], line, prior, bpp)
        prior = line
        if bpp == 4:  # a screenshot is opaque: drop alpha
            rgb = bytearray(width * 3)
            rgb[0::3], rgb[1::3], rgb[2::3] = line[0::4], line[1::4], line[2::4]
            rows.append(bytes(rgb))
        else:
            rows.append(bytes(line))
    return width, height, rows


def colour_histogram(rows):
    counts = collections.Counter()
    for row in rows:
        counts.update(zip(row[0::3], row[1::3], row[2::3]))
    return counts


def pixels_near(histogram, rgb, tolerance=COLOUR_TOLERANCE):
    return sum(n for c, n in histogram.items() if all(abs(c[i] - rgb[i]) <= tolerance for i in range(3)))


# --- the page ---------------------------------------------------------------------------------------------

def series_colours(html):
    """{series name: colour} from the page's lines, dots, bars and legend entries (data-series + stroke/fill)."""
    colours = {}
    for tag in re.findall(r"<(?:polyline|circle|rect)\b[^>]*>", html):
        name = re.search(r'data-series="([^"]*)"', tag)
        colour = re.search(r'(?:stroke|fill)="(#[0-9a-fA-F]{6})"', tag)
        if name and colour:
            colours.setdefault(name.group(1), colour.group(1).lower())
    for name, colour in re.findall(
            r'<g class="legend" data-series="([^"]*)">\s*<(?:line|rect)\b[^>]*?(?:stroke|fill)="(#[0-9a-fA-F]{6})"',
            html):
        colours.setdefault(name, colour.lower())
    return colours


# Added at the end of a copy of the page: measures what Chromium laid out and writes the overlaps into a
# <pre id="geometry-report"> as JSON. Boxes are in CSS pixels; touching edges (and overlaps under half a
# pixel: anti-aliasing) do not count.
GEOMETRY_SCRIPT = """<script>
(function () {
  function overlap(a, b) {
    var w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
    var h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
    return w > 0.5 && h > 0.5;
  }
  function describe(e) {
    var chart = e.closest('svg');
    var what = e.tagName === 'text' ? 'label "' + e.textContent + '"'
                                    : 'bar ' + (e.getAttribute('data-series') || '') + ' ' + (e.getAttribute('data-category') || '');
    return (chart ? chart.id : '?') + ': ' + what;
  }
  var problems = [], texts_checked = 0, bars_checked = 0;
  var charts = document.querySelectorAll('svg');
  for (var c = 0; c < charts.length; ++c) {
    var bars = [], texts = [];
    charts[c].querySelectorAll('rect.bar').forEach(function (r) {
      var box = r.getBoundingClientRect();
      if (box.width > 0 && box.height > 0.5) bars.push([r, box]);
    });
    charts[c].querySelectorAll('text').forEach(function (t) {
      var box = t.getBoundingClientRect();
      if (t.textContent.trim() !== '' && box.width > 0 && box.height > 0) texts.push([t, box]);
    });
    bars_checked += bars.length;
    texts_checked += texts.length;
    for (var i = 0; i < texts.length; ++i) {
      for (var j = 0; j < bars.length; ++j) {
        if (overlap(texts[i][1], bars[j][1])) problems.push(describe(texts[i][0]) + ' overlaps ' + describe(bars[j][0]));
      }
      var rotated = (texts[i][0].getAttribute('transform') || '').indexOf('rotate') >= 0;
      for (var k = i + 1; k < texts.length && !rotated; ++k) {
        if ((texts[k][0].getAttribute('transform') || '').indexOf('rotate') >= 0) continue;
        if (overlap(texts[i][1], texts[k][1])) problems.push(describe(texts[i][0]) + ' overlaps ' + describe(texts[k][0]));
      }
    }
  }
  var out = document.createElement('pre');
  out.id = 'geometry-report';
  out.textContent = JSON.stringify({charts: charts.length, texts: texts_checked, bars: bars_checked, problems: problems});
  document.body.appendChild(out);
})();
</script>"""


def check_geometry(page, workdir, chromium, profile):
    """Fails when a chart's label covers a bar or another label, as Chromium lays the page out."""
    html = page.read_text(encoding="utf-8")
    if "</body>" not in html:
        raise CheckFailed(f"{page} has no </body>")
    probe = workdir / "report-geometry.html"
    probe.write_text(html.replace("</body>", GEOMETRY_SCRIPT + "\n</body>", 1), encoding="utf-8")
    dom = run(chromium_command(chromium, profile, f"--window-size={WIDTH},{HEIGHT}", "--dump-dom", probe.as_uri()),
              "chromium --dump-dom (geometry)").decode("utf-8", errors="replace")
    found = re.search(r'<pre id="geometry-report">(.*?)</pre>', dom, re.S)
    if not found:
        raise CheckFailed("the geometry script wrote no report (did the page's scripts run?)")
    report = json.loads(html_unescape(found.group(1)))
    if report["charts"] == 0 or report["texts"] == 0:
        raise CheckFailed(f"the geometry script found nothing to measure: {report}")
    if report["problems"]:
        shown = "\n  ".join(report["problems"][:20])
        more = len(report["problems"]) - 20
        raise CheckFailed(f"{len(report['problems'])} overlaps in the rendered charts:\n  {shown}"
                          + (f"\n  ... and {more} more" if more > 0 else ""))
    print(f"check_report_render: geometry: {report['texts']} labels and {report['bars']} bars in "
          f"{report['charts']} charts, no overlap")


def check(args, chromium, profile):
    workdir = pathlib.Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    if args.html:
        page = pathlib.Path(args.html).resolve()
    else:
        page = workdir / "report.html"
        if page.exists():
            page.unlink()
        env_note = "" if os.environ.get("GPUMEM_BACKEND") else " (GPUMEM_BACKEND unset: set it to host)"
        run([args.cli, "report", args.log, "--simulate", "-o", str(page)], "gpumem report" + env_note)
    if not page.is_file():
        raise CheckFailed(f"no page at {page}")
    check_geometry(page, workdir, chromium, profile)
    if args.geometry_only:
        return
    html = page.read_text(encoding="utf-8")
    expected = [r for r in args.resources.split(",") if r]

    dom = run(chromium_command(chromium, profile, "--dump-dom", page.as_uri()), "chromium --dump-dom")
    dom = dom.decode("utf-8", errors="replace")
    missing = [f'id="{i}"' for i in (*CHART_IDS, "summary-table") if f'id="{i}"' not in dom]
    if missing:
        raise CheckFailed(f"the rendered DOM lacks {', '.join(missing)} ({len(dom)} characters dumped)")
    table = re.search(r'<table id="summary-table">.*?</table>', dom, re.S)
    if not table:
        raise CheckFailed("the rendered DOM has no complete summary table")
    for name in expected:
        if not re.search(rf">{re.escape(name)}</td>", table.group(0)):
            raise CheckFailed(f"resource {name!r} is not in the summary table")
        if f'data-series="{name}"' not in dom:
            raise CheckFailed(f"resource {name!r} is in no chart")

    screenshot = workdir / "report.png"
    if screenshot.exists():
        screenshot.unlink()
    run(chromium_command(chromium, profile, f"--window-size={WIDTH},{HEIGHT}", f"--screenshot={screenshot}",
                         page.as_uri()), "chromium --screenshot")
    if not screenshot.is_file():
        raise CheckFailed(f"chromium wrote no screenshot at {screenshot}")
    print(f"check_report_render: screenshot: {screenshot}")
    width, height, rows = decode_png(screenshot.read_bytes())
    if (width, height) != (WIDTH, HEIGHT):
        raise CheckFailed(f"the screenshot is {width}x{height}, expected {WIDTH}x{HEIGHT}")
    histogram = colour_histogram(rows)
    ink = sum(n for c, n in histogram.items() if min(c) < 235) / (width * height)
    if ink < MIN_INK_SHARE:
        raise CheckFailed(f"the screenshot is nearly blank: {ink:.2%} of its pixels are not white "
                          f"(expected at least {MIN_INK_SHARE:.0%})")

    colours = series_colours(html)
    for name in ["live", *expected]:
        if name not in colours:
            raise CheckFailed(f"the page draws no series {name!r} (series found: {', '.join(sorted(colours))})")
        hex_colour = colours[name]
        rgb = tuple(int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
        found = pixels_near(histogram, rgb)
        if found < MIN_COLOUR_PIXELS:
            raise CheckFailed(f"series {name!r} ({hex_colour}) shows on only {found} pixels of the screenshot "
                              f"(expected at least {MIN_COLOUR_PIXELS}): its chart was not drawn")
        print(f"check_report_render: {name} {hex_colour}: {found} pixels")
    print(f"check_report_render: {ink:.1%} of the page inked; {len(expected)} resources; passed")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cli", help="the gpumem command-line tool")
    parser.add_argument("log", help="the allocation log to report on")
    parser.add_argument("workdir", help="where the page and the screenshot go (kept for a person to look at)")
    parser.add_argument("--html", help="check this page instead of running `gpumem report`")
    parser.add_argument("--geometry-only", action="store_true",
                        help="check only that no label overlaps a bar or another label")
    parser.add_argument("--resources", default="pool,arena,binning",
                        help="the resources the page must show (default: those --simulate replays)")
    args = parser.parse_args()

    chromium = find_chromium()
    if chromium is None:
        required = os.environ.get("GPUMEM_REQUIRE_CHROMIUM") == "1"
        print("check_report_render: no chromium, chromium-browser or google-chrome on PATH"
              + ("; GPUMEM_REQUIRE_CHROMIUM=1, so that is a failure" if required else "; skipped"),
              file=sys.stderr)
        return 1 if required else SKIP
    try:
        with tempfile.TemporaryDirectory(prefix="gpumem-chromium-", ignore_cleanup_errors=True) as profile:
            check(args, chromium, profile)
    except CheckFailed as e:
        print(f"check_report_render: FAILED: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
