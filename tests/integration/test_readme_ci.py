"""README.md opens with the two commands, and .ci/run runs the README's test command verbatim."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bash_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, flags=re.S)]


def test_readme_starts_with_run_and_test_commands():
    blocks = _bash_blocks((ROOT / "README.md").read_text())
    run, test = blocks[0], blocks[1]
    assert run.endswith("&& simtrain") and "pip install torch==2.13.0" in run
    assert "pytest" in test and test.index("torch==2.13.0") < test.index("pip install -e")


def test_ci_runs_the_readme_test_command():
    test = _bash_blocks((ROOT / "README.md").read_text())[1]
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert test in ci_lines
