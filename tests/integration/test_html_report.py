"""simtrain report: the HTML page, loaded in a real headless browser (Debian's chromium), shows the
title, the step time, every figure and the tables; untrusted spec text is escaped, not run."""

from __future__ import annotations

import html
import re
import shutil
import subprocess

import pytest

import simtrain as st
from simtrain.cli import main
from simtrain.report.html import html_report
from simtrain.report.text import fmt_seconds

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
JOB = ["--model", "gpt2", "--hardware", "dgx-h100", "--nodes", "1", "--pp", "2", "--seq-len", "256",
       "--global-batch-size", "8", "--micro-batch-size", "1"]


def _dom(path) -> str:
    """The DOM chromium builds from the file (what the page shows, after parsing)."""
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (CI installs it: apt-get install chromium; see .ci/run)")
    proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                           path.resolve().as_uri()], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", fragment))


def test_report_page_in_a_browser(tmp_path, capsys):
    assert main(["report", *JOB, "--out", str(tmp_path)]) == 0
    page = tmp_path / "report.html"
    assert capsys.readouterr().out.strip() == f"wrote {page}"
    dom = _dom(page)
    cfg = st.TrainConfig(global_batch_size=8, micro_batch_size=1, seq_len=256, pp=2)
    r = st.estimate(st.load_model("gpt2"), st.load_cluster("dgx-h100", nodes=1), cfg)
    assert "<title>simtrain report: gpt2 on dgx-h100</title>" in dom
    headline = _text(re.search(r'<table id="headline">.*?</table>', dom, re.S).group(0))
    assert f"step time {fmt_seconds(r.step_time_s)}" in " ".join(headline.split())
    # breakdown, per-stage memory, roofline: three figures, each an inline PNG
    assert len(re.findall(r'<img alt="[^"]+" src="data:image/png;base64,', dom)) == 3
    assert re.search(r"<tr><td>compute</td><td class=\"num\">[^<]+</td>", dom)
    assert re.search(r"<td>device\.peak_flops_per_s\.bf16</td><td>989 TFLOP/s</td><td>NV-H100-DS", dom)
    assert 'id="config"' in dom and "<td>pp</td><td>2</td>" in dom


def test_simulated_report_adds_the_gantt(tmp_path):
    assert main(["report", *JOB, "--out", str(tmp_path), "--simulate"]) == 0
    dom = _dom(tmp_path / "report.html")
    assert "pipeline timeline of the simulated step" in dom
    assert len(re.findall(r"src=\"data:image/png;base64,", dom)) == 4


def test_untrusted_text_is_escaped(tmp_path):
    cfg = st.TrainConfig(global_batch_size=8, micro_batch_size=1, seq_len=256)
    r = st.estimate(st.load_model("gpt2"), st.Cluster.single(st.load_device("h100-sxm5-80gb")), cfg)
    import dataclasses
    evil = dataclasses.replace(r, model_name="<script>document.title='owned'</script>", warnings=("<b>x</b>",))
    text = html_report(evil)
    assert "<script>" not in text and "&lt;script&gt;" in text and "&lt;b&gt;x&lt;/b&gt;" in text
    page = tmp_path / "evil.html"
    page.write_text(text)
    dom = _dom(page)
    # the browser shows the name as text: no <script> element, the title is the literal name
    assert "<script>" not in dom
    assert "<title>simtrain report: &lt;script&gt;document.title='owned'&lt;/script&gt; on" in dom
