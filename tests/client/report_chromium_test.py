#!/usr/bin/env python3
"""`ppctl report` in a browser: a real job, its page rendered by headless Chromium.

Runs `ppctl up` (ppcoord and 2 ppworker on loopback) on a 40-step job that evaluates every 10
steps, takes the report path it prints, then has Debian's `chromium` render the page twice:
a screenshot (--out/report.png, kept for a look) and the DOM after layout (--dump-dom). Checks
that the screenshot is a PNG of the window's size, that every curve's <polyline> holds one point
per recorded step that has the value (40 for loss, learning rate, tokens/s and bubble; 4 for eval
loss) and says so in data-points, that both timelines of the last traced step are drawn, and that
Chromium logged no console or script error. Exit 77 (ctest: skipped) only when chromium is not
installed (scripts/setup.sh installs it). A page with a throwing script first shows that such
errors do reach the log this test reads. Every wait is bounded; a process that outlives its
bound is killed with its whole process group.
"""
import argparse
import html.parser
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile

STEPS, EVAL_EVERY = 40, 10
WINDOW = (1000, 2400)
SPEC = {
    "name": "report <test> & co",  # the page must escape it
    "model": {"vocabSize": 256, "seqLen": 32, "dModel": 32, "nHeads": 2, "nLayers": 4},
    "parallel": {"pipeline": 2, "schedule": "1f1b"},
    "train": {"steps": STEPS, "microbatches": 4, "microbatchSize": 4, "lr": 0.01,
              "warmupSteps": 5, "decay": "cosine", "minLr": 0.001, "gradClip": 1.0, "seed": 1},
    "data": {"format": "generated", "generatedTokens": 65536, "generatedSeed": 3},
    "checkpoint": {"everySteps": 20, "keep": 2},
    "eval": {"everySteps": EVAL_EVERY, "batches": 1, "holdoutFraction": 0.1},
}
# Each curve's points: one per recorded step with the value (client/report_html.h).
EXPECTED_POINTS = {"loss": STEPS, "eval loss": STEPS // EVAL_EVERY, "learning rate": STEPS,
                   "tokens/s": STEPS, "measured bubble": STEPS}


def run(argv, timeout, **kwargs):
    """argv in a session of its own; on timeout its whole process group is killed."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        sys.exit(f"FAIL: {argv[0]} ran past {timeout} s\n--- stdout\n{out}\n--- stderr\n{err}")
    return proc.returncode, out, err


def chromium(binary, profile, url, *flags):
    # --no-sandbox: CI containers run as root; a profile of its own: parallel runs do not share.
    return run([binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                "--enable-logging=stderr", "--v=0", f"--user-data-dir={profile}",
                f"--window-size={WINDOW[0]},{WINDOW[1]}", *flags, url], timeout=60)


class Polylines(html.parser.HTMLParser):
    """The polylines, timelines and scripts of a DOM."""

    def __init__(self):
        super().__init__()
        self.series, self.svg_ids, self.actions, self.scripts = {}, [], 0, 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "polyline" and "data-series" in a:
            self.series[a["data-series"]] = (len(a.get("points", "").split()),
                                             int(a.get("data-points", -1)))
        elif tag == "svg" and "id" in a:
            self.svg_ids.append(a["id"])
        elif tag == "rect" and a.get("class") == "action":
            self.actions += 1
        elif tag == "script":
            self.scripts += 1


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit(f"FAIL: {path} is not a PNG")
    return struct.unpack(">II", head[16:24])


def console_lines(log):
    """Console messages in Chromium's --enable-logging=stderr log ("...:INFO:CONSOLE:1] ...").
    The page has no script, so any is a failure; Chromium logs console.error at INFO too."""
    return [line for line in log.splitlines() if "Uncaught" in line or ":CONSOLE" in line]


def check_log_shows_errors(browser, tmp):
    """The console check is not vacuous: a page whose script throws shows in the log."""
    bad = os.path.join(tmp, "bad.html")
    with open(bad, "w") as f:
        f.write("<html><body><script>notDefined();</script></body></html>")
    _, _, log = chromium(browser, f"{tmp}/profile0", "file://" + bad, "--dump-dom")
    if not any("notDefined" in line for line in console_lines(log)):
        sys.exit(f"FAIL: a script error does not show in chromium's log:\n{log}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ppctl", required=True)
    parser.add_argument("--out", required=True, help="folder for the screenshot and the page")
    args = parser.parse_args()
    browser = shutil.which("chromium")
    if browser is None:
        print("SKIP: no chromium (scripts/setup.sh installs it)")
        return 77
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="report-chromium-") as tmp:
        check_log_shows_errors(browser, tmp)
        spec = os.path.join(tmp, "job.json")
        with open(spec, "w") as f:
            json.dump(SPEC, f)
        code, out, err = run([args.ppctl, "up", "--workers=2", f"--job={spec}",
                              f"--data_dir={tmp}/up"], timeout=240)
        found = re.search(r"^report: (.+)$", out, re.M)
        if code != 0 or not found:
            sys.exit(f"FAIL: ppctl up exit {code}, report path printed: {bool(found)}\n"
                     f"--- stdout\n{out}\n--- stderr\n{err}")
        page = os.path.join(args.out, "report.html")
        shutil.copyfile(found.group(1), page)
        url = "file://" + os.path.abspath(page)
        shot = os.path.join(args.out, "report.png")
        if os.path.exists(shot):
            os.remove(shot)
        code, _, shot_log = chromium(browser, f"{tmp}/profile1", url, f"--screenshot={shot}")
        if code != 0 or not os.path.exists(shot):
            sys.exit(f"FAIL: chromium --screenshot exit {code}\n{shot_log}")
        if png_size(shot) != WINDOW:
            sys.exit(f"FAIL: screenshot is {png_size(shot)}, want {WINDOW}")
        code, dom, dom_log = chromium(browser, f"{tmp}/profile2", url, "--dump-dom")
        if code != 0 or "</html>" not in dom:
            sys.exit(f"FAIL: chromium --dump-dom exit {code}\n{dom_log}")
    return check_dom(dom, console_lines(shot_log + dom_log))


def check_dom(dom, errors):
    parsed = Polylines()
    parsed.feed(dom)
    problems = [f"console: {line}" for line in errors]
    for name, want in EXPECTED_POINTS.items():
        got, said = parsed.series.get(name, (None, None))
        if got != want or said != want:
            problems.append(f"series {name!r}: {got} points (data-points {said}), want {want}")
    for svg in ("timeline-measured", "timeline-simulated"):
        if svg not in parsed.svg_ids:
            problems.append(f"no <svg id={svg}>")
    if parsed.actions == 0:
        problems.append("the timelines draw no action")
    if parsed.scripts:
        problems.append(f"{parsed.scripts} <script> elements (the name was not escaped?)")
    if "report &lt;test&gt; &amp; co" not in dom:
        problems.append("the job's name is not shown escaped")
    for p in problems:
        print("FAIL:", p)
    if not problems:
        print(f"ok: {len(parsed.series)} curves {parsed.series}, {parsed.actions} timeline bars")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
