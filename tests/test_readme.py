"""The README's example test is real code: extract it and run it."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_readme_example_bounds_test_passes() -> None:
    [block] = [b for b in python_blocks() if "def test_executor_reaches_its_cap" in b]
    namespace: dict[str, object] = {}
    exec(compile(block, str(README), "exec"), namespace)
    test = namespace["test_executor_reaches_its_cap_exactly_and_never_exceeds_it"]
    assert callable(test)
    test()


def test_readme_opens_with_the_demo_and_the_test_command() -> None:
    text = README.read_text(encoding="utf-8")
    commands = re.findall(r"```sh\n(.*?)\n```", text, re.S)[:2]
    assert commands[0] == "python -m dagexec demo"
    assert "pip install" in commands[1] and "'.[test]'" in commands[1]
    assert commands[1].endswith("python -m pytest")
